//! Shared by the sim's tests: the release `weir-sim` and `weir` binaries, one run at a time, results read back from JSON.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use weir_sim::score::RunResult;

/// Longest one `weir-sim` invocation may take, clusters included.
pub const RUN_DEADLINE: Duration = Duration::from_secs(90);

/// Release builds of `weir-sim` and `weir`: the load generator and the
/// nodes share two cores, and a debug build of either smears a burst over
/// more than a sync interval. `WEIR_SIM_BIN` and `WEIR_BIN` override.
fn binaries() -> &'static (PathBuf, PathBuf) {
    static BINS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BINS.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target"));
        let given = (
            std::env::var_os("WEIR_SIM_BIN").map(PathBuf::from),
            std::env::var_os("WEIR_BIN").map(PathBuf::from),
        );
        if let (Some(sim), Some(weir)) = given {
            return (sim, weir);
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(&root)
            .args([
                "build",
                "-q",
                "--release",
                "-p",
                "weir-sim",
                "-p",
                "weir-node",
            ])
            .args(["--bin", "weir-sim", "--bin", "weir"])
            .status()
            .expect("cargo runs");
        assert!(
            status.success(),
            "cargo build --release -p weir-sim -p weir-node failed"
        );
        let rel = target.join("release");
        (rel.join("weir-sim"), rel.join("weir"))
    })
}

/// The release `weir` binary the sim's clusters run.
pub fn weir_bin() -> &'static PathBuf {
    &binaries().1
}

/// Clusters share two cores: one run at a time, so no test's latencies are
/// another's load.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn scratch(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "weir-sim-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The child's exit status once it exits, or None (and the child killed
/// and reaped) when it is still running after `deadline`.
pub fn exited_within(child: &mut Child, deadline: Duration) -> Option<ExitStatus> {
    let started = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return Some(s);
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `weir-sim ARGS` against real `weir serve` nodes and returns every
/// run it reports. The output directory (logs, JSON, plots) stays under
/// the target dir for a failed test to be read.
pub fn sim(name: &str, args: &[&str]) -> Vec<RunResult> {
    let (sim, weir) = binaries();
    let out = scratch(name);
    let mut child = Command::new(sim)
        .args(args)
        .arg("--weir-bin")
        .arg(weir)
        .arg("--out")
        .arg(&out)
        .arg("--quiet")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weir-sim starts");
    let Some(status) = exited_within(&mut child, RUN_DEADLINE) else {
        panic!(
            "weir-sim {args:?} ran over {RUN_DEADLINE:?}; see {}",
            out.display()
        );
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    let json = std::fs::read_to_string(out.join("results.json"))
        .unwrap_or_else(|_| panic!("weir-sim {args:?} wrote no results ({status}): {stderr}"));
    let doc: serde_json::Value = serde_json::from_str(&json).expect("results parse");
    let runs: Vec<RunResult> = serde_json::from_value(doc["runs"].clone()).expect("runs parse");
    for r in &runs {
        assert!(
            r.error.is_none(),
            "{} {}: {:?} (see {})",
            r.strategy,
            r.label(),
            r.error,
            out.display()
        );
        assert_eq!(
            r.failed,
            0,
            "{}: {} checks failed in transport",
            r.label(),
            r.failed
        );
        assert!(r.checks > 0, "{}: no checks were sent", r.label());
    }
    assert_index_shows_the_run(&out, &runs);
    runs
}

/// `index.html` beside the results names every workload that ran and
/// shows every plot the run wrote.
fn assert_index_shows_the_run(out: &std::path::Path, runs: &[RunResult]) {
    let index = std::fs::read_to_string(out.join("index.html"))
        .unwrap_or_else(|_| panic!("no index.html in {}", out.display()));
    for r in runs {
        assert!(
            index.contains(&format!("<h2>{}</h2>", r.workload)),
            "index.html does not name {}",
            r.workload
        );
    }
    for entry in std::fs::read_dir(out).expect("read the output dir") {
        let name = entry.expect("a dir entry").file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".svg") {
            assert!(
                index.contains(&format!("src=\"{name}\"")),
                "index.html does not show {name}"
            );
        }
    }
}

/// The one run of `workload` (and `variant`) in `runs`.
pub fn only<'a>(runs: &'a [RunResult], workload: &str, variant: &str) -> &'a RunResult {
    runs.iter()
        .find(|r| r.workload == workload && r.variant == variant)
        .unwrap_or_else(|| panic!("no {workload} ({variant}) run among {}", runs.len()))
}

pub fn figure(r: &RunResult, name: &str) -> f64 {
    r.figure(name)
        .unwrap_or_else(|| panic!("no figure {name} in {:?}", r.figures))
}
