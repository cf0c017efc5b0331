//! The sidecar example as shipped: `examples/sidecar/run.sh --check` starts the node and the service, drives the per-client limit through the service, and stops both.

use std::path::Path;
use std::process::Command;

#[test]
fn the_sidecar_script_checks_the_limit_and_its_headers_through_the_service() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("sidecar/run.sh");
    // The debug profile the tests were built with: the script's own build
    // of both binaries is then a link at most.
    let out = Command::new("sh")
        .arg(&script)
        .arg("--check")
        .env("PROFILE", "dev")
        .output()
        .expect("sh runs the script");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "{} --check failed ({}):\n{stdout}\n{stderr}",
        script.display(),
        out.status
    );
    assert!(
        stdout.contains("10 x 200 then 429"),
        "the check reports what it saw: {stdout}"
    );
}
