//! Everything the sim started, cleaned up however it stops: drop, panic or Ctrl-C.

use std::collections::BTreeSet;
use std::sync::Mutex;

use crate::signal::{self, Signal};

// A Cluster kills its own children on drop (which also runs on panic).
// Ctrl-C ends the process without unwinding, so every child and network
// namespace is also listed here for the signal handler.
static PIDS: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());
/// `ip` argument lists that undo what the sim set up, run in reverse order.
static UNDO: Mutex<Vec<Vec<String>>> = Mutex::new(Vec::new());

pub fn track(pid: u32) {
    PIDS.lock().unwrap_or_else(|e| e.into_inner()).insert(pid);
}

pub fn untrack(pid: u32) {
    PIDS.lock().unwrap_or_else(|e| e.into_inner()).remove(&pid);
}

/// Registers an `ip` command that removes something the sim created.
pub fn on_exit_ip(args: Vec<String>) {
    UNDO.lock().unwrap_or_else(|e| e.into_inner()).push(args);
}

pub fn forget_ip(args: &[String]) {
    UNDO.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|a| a != args);
}

/// Kills every tracked child and undoes every network change. Safe to call
/// twice.
pub fn cleanup_all() {
    let pids: Vec<u32> = std::mem::take(&mut *PIDS.lock().unwrap_or_else(|e| e.into_inner()))
        .into_iter()
        .collect();
    for pid in pids {
        // A stopped process cannot die until it is continued.
        let _ = signal::send(pid, Signal::Cont);
        let _ = signal::send(pid, Signal::Kill);
    }
    let undo = std::mem::take(&mut *UNDO.lock().unwrap_or_else(|e| e.into_inner()));
    for args in undo.into_iter().rev() {
        let _ = std::process::Command::new("ip")
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Cleans up and exits 130 on Ctrl-C or SIGTERM.
pub fn install_signal_handler() {
    tokio::spawn(async {
        let Ok(stopped) = signal::stop_requested() else {
            return;
        };
        stopped.await;
        eprintln!("\nweir-sim: interrupted; stopping the nodes it started");
        cleanup_all();
        std::process::exit(130);
    });
}
