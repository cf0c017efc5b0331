//! Where the membership driver runs: a task on the caller's runtime, or an OS thread with a current-thread runtime of its own.
//!
//! SWIM takes a member that answers its probes late for a dead one. On the
//! node's shared runtime the driver waited behind checks and rule work:
//! with 100,000 rules, a probe of a node rewriting its rules took up to
//! 816 ms, and a member was declared down. On a thread of its own, its
//! socket and timers are polled whatever the node's workers are doing, and
//! the kernel, not the node's scheduler, shares the cores out.
//!
//! The in-memory transport of tests and the simulator keeps the task: the
//! simulator steps every member on one thread under a paused clock.

use std::io;
use std::net::UdpSocket as StdUdpSocket;
use std::sync::Arc;
use std::thread;

use tokio::sync::oneshot;
use tokio::task::{AbortHandle, JoinHandle};

use super::datagrams::{Datagrams, UdpDatagrams};
use super::MakeDriver;

/// The thread's name as `ps -T` and `/proc/<pid>/task/*/comm` show it
/// (Linux keeps 15 bytes of it).
pub const GOSSIP_THREAD: &str = "weir-gossip";

/// A started driver, and how it is stopped.
pub(super) enum Running {
    /// A task on the runtime that started it.
    Task(JoinHandle<()>),
    /// A task alone on the runtime of its own thread; the thread ends with it.
    Thread {
        task: AbortHandle,
        thread: thread::JoinHandle<()>,
    },
}

impl Running {
    /// Starts the driver as a task on the current runtime.
    pub(super) fn task(datagrams: Arc<dyn Datagrams>, make: MakeDriver) -> Running {
        let driver = make(datagrams);
        Running::Task(tokio::spawn(async move { tell(driver.run().await) }))
    }

    /// Starts the driver over `socket` on a thread of its own.
    pub(super) fn on_own_thread(socket: StdUdpSocket, make: MakeDriver) -> io::Result<Running> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        // A tokio socket is served by the runtime it is registered with,
        // so it is registered with the one that will poll it.
        let datagrams: Arc<dyn Datagrams> = {
            let _in = rt.enter();
            Arc::new(UdpDatagrams::from_std(socket)?)
        };
        let task = rt.spawn(make(datagrams).run());
        let abort = task.abort_handle();
        let thread = thread::Builder::new()
            .name(GOSSIP_THREAD.into())
            .spawn(move || {
                // Returns once the driver has left or was aborted.
                let left = rt.block_on(task).ok().flatten();
                // Its timers and socket go with the runtime, before a
                // graceful leave's caller hears that it is done.
                drop(rt);
                tell(left);
            })?;
        Ok(Running::Thread {
            task: abort,
            thread,
        })
    }

    /// Whether the driver has not ended yet (its thread, if it has one,
    /// ends right after it).
    pub(super) fn is_running(&self) -> bool {
        match self {
            Running::Task(task) => !task.is_finished(),
            Running::Thread { task, .. } => !task.is_finished(),
        }
    }

    /// Ends the driver at once, as a crash would; its thread ends with it.
    pub(super) fn abort(&self) {
        match self {
            Running::Task(task) => task.abort(),
            Running::Thread { task, .. } => task.abort(),
        }
    }

    /// Ends the driver and, on a thread of its own, waits for that thread:
    /// the handle's owner knows the socket is closed and no thread is left
    /// behind once this returns. The wait is one poll of the driver (an
    /// aborted task only has its future dropped), never a probe or a send.
    pub(super) fn stop(self) {
        self.abort();
        if let Running::Thread { thread, .. } = self {
            // The driver holds no handle to itself, so this never runs on
            // its own thread; a panicked driver has nothing more to tell.
            let _ = thread.join();
        }
    }

    /// Lets the driver run on until it ends by itself (after a leave's
    /// goodbye); a thread of its own ends with it.
    pub(super) fn detach(self) {
        drop(self);
    }
}

/// Tells a graceful leave's caller that the driver has ended.
fn tell(left: Option<oneshot::Sender<()>>) {
    if let Some(caller) = left {
        let _ = caller.send(());
    }
}
