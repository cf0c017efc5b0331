//! Signals to child nodes (kill, stop, continue, terminate), dying with the sim, and being told to stop; with bench/machine.rs's sysconf, the crate's only unsafe code.

use std::future::Future;
use std::io;
use std::process::Command;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Kill,
    Term,
    Stop,
    Cont,
}

impl Signal {
    fn raw(self) -> libc::c_int {
        match self {
            Signal::Kill => libc::SIGKILL,
            Signal::Term => libc::SIGTERM,
            Signal::Stop => libc::SIGSTOP,
            Signal::Cont => libc::SIGCONT,
        }
    }
}

/// Sends `sig` to one process by id.
#[allow(unsafe_code)]
pub fn send(pid: u32, sig: Signal) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    // pid > 0 always (it came from a spawned Child), so this never signals
    // a process group.
    let rc = unsafe { libc::kill(pid, sig.raw()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes the child receive SIGKILL when the sim dies, even by SIGKILL,
/// which no drop guard or signal handler can see.
#[allow(unsafe_code)]
pub fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec and only calls
    // prctl(2), which is async-signal-safe and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Resolves at the first SIGINT or SIGTERM this process gets after the
/// call. The handlers are in place when it returns, so whatever the caller
/// prints next is a sign that the process can be stopped cleanly. Needs a
/// tokio runtime.
pub fn stop_requested() -> io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    })
}
