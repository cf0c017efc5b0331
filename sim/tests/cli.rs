//! The `weir-sim` binary's own contract: help text and one-line errors.

use std::process::Command;

fn sim() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir-sim"))
}

#[test]
fn help_lists_every_scenario_and_fault() {
    let out = sim().arg("--help").output().expect("runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for name in [
        "steady",
        "boundary",
        "single-connection",
        "spread",
        "burst",
        "hot-key",
        "retry-storm",
        "kill",
        "pause",
        "restart",
        "rolling",
        "partition",
        "grpc+rls://",
    ] {
        assert!(text.contains(name), "--help does not mention {name}");
    }
}

#[test]
fn missing_weir_binary_is_one_line_naming_the_fix() {
    let out = sim()
        .args(["spread", "--weir-bin", "/nonexistent/weir", "--out"])
        .arg(env!("CARGO_TARGET_TMPDIR"))
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "stderr: {err}");
    assert!(err.contains("/nonexistent/weir"), "stderr: {err}");
}

#[test]
fn bad_target_is_refused_before_anything_starts() {
    let out = sim()
        .args(["spread", "--target", "ftp://x", "--out"])
        .arg(env!("CARGO_TARGET_TMPDIR"))
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("grpc+rls://"), "stderr: {err}");
}
