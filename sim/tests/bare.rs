//! `weir-bare` as a process: it leaves on SIGTERM by returning from main.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use weir_sim::signal::{self, Signal};

mod common;

#[test]
fn sigterm_ends_it_cleanly() {
    let mut bare = Command::new(env!("CARGO_BIN_EXE_weir-bare"))
        .args(["--raw-http", "127.0.0.1:0", "--max-secs", "120"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("weir-bare starts");
    // The first address line comes after the handlers are installed.
    let mut line = String::new();
    BufReader::new(bare.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("a line");
    assert!(line.contains("127.0.0.1"), "unexpected first line: {line}");

    signal::send(bare.id(), Signal::Term).expect("SIGTERM sent");
    let status = common::exited_within(&mut bare, Duration::from_secs(30))
        .expect("weir-bare still running 30 s after SIGTERM");
    // Killed by the signal's default action it would have no exit code:
    // a profiling build would lose its profile.
    assert_eq!(status.code(), Some(0), "{status}");
}
