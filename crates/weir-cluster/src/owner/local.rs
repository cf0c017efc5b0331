//! This node's own counters, guarded so that neither a graceful leave nor a ring change's sweep takes or copies them while a consume is under way.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::channel::oneshot;
use futures::future::{FutureExt, Shared};
use parking_lot::Mutex;
use weir_core::{CheckError, Decision, Limiter, Rule};

/// What happened to an op on this node's counters.
#[derive(Debug)]
pub enum Consumed {
    Decided(Result<Decision, CheckError>),
    /// This node is leaving; the key now belongs elsewhere.
    Moved,
}

/// In-flight marks, a slot per thread (threads share a slot past
/// [`SLOTS`]), each on its own cache line: a mark per check on one shared
/// count had both cores taking its line from each other on every check.
///
/// Still exact for the leave: every access is SeqCst, so a mark's
/// increment and its reading of `leaving` sit in one total order with the
/// leave's store of `leaving` and its reading of each slot. A mark that
/// read `leaving` false was counted before the store, so the leave reads
/// its slot after the increment and waits for the decrement; a mark
/// counted after the leave read its slot reads `leaving` true.
#[derive(Default)]
struct InFlight([Slot; SLOTS]);

const SLOTS: usize = 16;

#[derive(Default)]
#[repr(align(128))]
struct Slot(AtomicUsize);

impl InFlight {
    fn mine(&self) -> &AtomicUsize {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        thread_local! {
            static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SLOTS;
        }
        &self.0[INDEX.with(|i| *i)].0
    }
}

/// The counters this node owns, and the leave handshake around them.
pub struct Local {
    limiter: Arc<Limiter>,
    leaving: AtomicBool,
    /// Consumes under way; a leave waits for them before taking the
    /// counters, so none lands after the take, and a ring change's sweep
    /// before copying them ([`Local::quiesce`]).
    inflight: InFlight,
    /// Fires once a leaving node has handed its counters over; ops for its
    /// keys wait for it, so the new owner never decides a key before it
    /// holds the key's spent budget.
    handed_over: Shared<oneshot::Receiver<()>>,
    hand_over: Mutex<Option<oneshot::Sender<()>>>,
    /// A counter this node does not own was created here (a peer's ring
    /// was behind ours); the next sweep hands it to its owner.
    strays: AtomicBool,
    /// Ops a leaving node is sending on to their keys' new owners, late
    /// answers and their refunds included ([`Forwarding`]).
    forwards: AtomicUsize,
    forwarded: tokio::sync::Notify,
}

/// One op a leaving node sends on, counted until it is dropped: when the
/// op's answer, late or not, has been dealt with.
pub struct Forwarding(Arc<Local>);

impl Drop for Forwarding {
    fn drop(&mut self) {
        if self.0.forwards.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.forwarded.notify_waiters();
        }
    }
}

impl Local {
    pub fn new(limiter: Arc<Limiter>) -> Self {
        let (tx, rx) = oneshot::channel();
        Local {
            limiter,
            leaving: AtomicBool::new(false),
            inflight: InFlight::default(),
            handed_over: rx.shared(),
            hand_over: Mutex::new(Some(tx)),
            strays: AtomicBool::new(false),
            forwards: AtomicUsize::new(0),
            forwarded: tokio::sync::Notify::new(),
        }
    }

    /// Counts one op a leaving node sends on, until the guard drops.
    pub fn forwarding(self: &Arc<Self>) -> Forwarding {
        self.forwards.fetch_add(1, Ordering::AcqRel);
        Forwarding(self.clone())
    }

    /// Resolves once no op is being sent on.
    pub async fn until_forwarded(&self) {
        loop {
            // Created before the count is read: a drop in between wakes it.
            let done = self.forwarded.notified();
            if self.forwards.load(Ordering::Acquire) == 0 {
                return;
            }
            done.await;
        }
    }

    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    pub fn is_leaving(&self) -> bool {
        self.leaving.load(Ordering::SeqCst)
    }

    /// Runs `f` inside one in-flight mark, told whether a leave has begun.
    /// SeqCst on both sides (here and in [`Local::begin_leave`]): either the
    /// leave sees this work in flight and waits for it, or this sees the
    /// leave and decides nothing here.
    pub fn guarded<T>(&self, f: impl FnOnce(bool) -> T) -> T {
        // `f` does not await, so the mark is taken and dropped on one
        // thread, in that thread's slot.
        let slot = self.inflight.mine();
        slot.fetch_add(1, Ordering::SeqCst);
        let out = f(self.leaving.load(Ordering::SeqCst));
        slot.fetch_sub(1, Ordering::SeqCst);
        out
    }

    /// One op's decision on this node's counters, unless a leave has begun.
    pub fn consume(&self, rule: &str, hash_part: &str, cost: u64) -> Consumed {
        self.guarded(|leaving| {
            if leaving {
                return Consumed::Moved;
            }
            let now = self.limiter.now();
            Consumed::Decided(self.limiter.consume(rule, hash_part, cost, now))
        })
    }

    /// A limit the request carried (an Envoy override), decided here.
    pub fn consume_carried(&self, rule: &Rule, hash_part: &str, cost: u64) -> Consumed {
        self.guarded(|leaving| {
            if leaving {
                return Consumed::Moved;
            }
            Consumed::Decided(self.limiter.check_adhoc(rule, hash_part, cost))
        })
    }

    /// Records `cost` admitted elsewhere on a key this node owns; false
    /// when it could not be recorded (unknown rule, full store, leaving).
    pub fn charge(&self, rule: &str, hash_part: &str, cost: u64) -> bool {
        self.guarded(|leaving| !leaving && self.limiter.charge(rule, hash_part, cost).is_ok())
    }

    /// Notes that a counter this node does not own was created here.
    pub fn mark_stray(&self) {
        self.strays.store(true, Ordering::Relaxed);
    }

    /// Whether strays were noted since [`Self::take_strays`] last ran,
    /// leaving them for it.
    pub fn has_strays(&self) -> bool {
        self.strays.load(Ordering::Relaxed)
    }

    /// Whether strays were noted since the last call.
    pub fn take_strays(&self) -> bool {
        self.strays.swap(false, Ordering::Relaxed)
    }

    /// Starts a leave: from now on no consume lands here. Resolves once
    /// the consumes already under way have finished.
    pub async fn begin_leave(&self) {
        self.leaving.store(true, Ordering::SeqCst);
        self.quiesce().await;
    }

    /// Resolves once every mark taken before the call has been dropped:
    /// each slot is seen empty once (not all at one moment, which a busy
    /// node might never show). A leave waits here after its store of
    /// `leaving` (`InFlight`). A sweep after a ring change waits
    /// here before copying, and a check takes its mark before it reads
    /// the ring (`Gateway::placing`), all SeqCst (arc-swap's ring load and
    /// store are too): a check whose slot was seen empty reads the new
    /// ring, and one that read the old ring has decided before the copy.
    pub async fn quiesce(&self) {
        for slot in &self.inflight.0 {
            while slot.0.load(Ordering::SeqCst) > 0 {
                YieldNow(false).await;
            }
        }
    }

    /// The leave has handed every counter over (or given up trying).
    pub fn handed_over(&self) {
        if let Some(tx) = self.hand_over.lock().take() {
            let _ = tx.send(());
        }
    }

    /// Resolves once a leaving node's counters have been handed over.
    pub async fn until_handed_over(&self) {
        let _ = self.handed_over.clone().await;
    }
}

/// Gives the executor one turn, whatever the runtime.
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::{FakeClock, LimiterConfig, RuleSet};

    fn local() -> Local {
        let rules = RuleSet::from_toml(
            "[[rule]]\nname = \"r\"\nalgorithm = \"fixed_window\"\nlimit = 5\nwindow = \"60s\"\n",
        )
        .unwrap();
        let clock = Arc::new(FakeClock::at_secs(100.0));
        Local::new(Arc::new(Limiter::new(
            rules,
            clock,
            LimiterConfig::default(),
        )))
    }

    #[test]
    fn once_leaving_nothing_is_decided_here() {
        let l = local();
        assert!(matches!(l.consume("r", "k", 1), Consumed::Decided(Ok(d)) if d.allowed));
        futures::executor::block_on(l.begin_leave());
        assert!(matches!(l.consume("r", "k", 1), Consumed::Moved));
        let rule = Rule::carried("o", 1, std::time::Duration::from_secs(1)).unwrap();
        assert!(matches!(l.consume_carried(&rule, "k", 1), Consumed::Moved));
    }

    /// Guard: the leave reads every thread's slot, not its own.
    #[test]
    fn a_leave_waits_for_marks_taken_on_other_threads() {
        let l = Arc::new(local());
        let (entered_tx, entered) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let worker = {
            let l = l.clone();
            std::thread::spawn(move || {
                l.guarded(|leaving| {
                    entered_tx.send(()).unwrap();
                    released.recv().unwrap();
                    leaving
                })
            })
        };
        entered.recv().unwrap();
        let mut leave = Box::pin(l.begin_leave());
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        for _ in 0..10 {
            assert!(
                leave.as_mut().poll(&mut cx).is_pending(),
                "a mark is in flight on another thread"
            );
        }
        release.send(()).unwrap();
        assert!(
            !worker.join().unwrap(),
            "the mark was taken before the leave"
        );
        futures::executor::block_on(leave);
        let later = {
            let l = l.clone();
            std::thread::spawn(move || l.guarded(|leaving| leaving))
        };
        assert!(later.join().unwrap(), "a mark after the leave sees it");
    }

    #[test]
    fn ops_waiting_for_the_handover_resume_when_it_is_done() {
        let l = Arc::new(local());
        let waiting = {
            let l = l.clone();
            std::thread::spawn(move || futures::executor::block_on(l.until_handed_over()))
        };
        l.handed_over();
        waiting.join().expect("the waiter resumed");
        // Twice is harmless: the signal fires once.
        l.handed_over();
    }
}
