//! How long a connection may hold its slot: until its HTTP/2 start (preface and SETTINGS) is late, until it has sat with no request for the idle timeout (the head timeout on HTTP/1), or until its requests in flight have stalled for the stall timeout.
//!
//! An HTTP/2 client can hold a connection open forever by answering pings
//! and sending nothing, and a raw socket that sends the 24-byte preface
//! and stops used to count as having started. So every connection is
//! watched from its reads: the client's first frame, SETTINGS, must follow
//! the preface within the head timeout, and a connection that has not
//! started a request for the idle timeout (none in flight) reads as closed,
//! which ends it and frees its slot. So does one whose requests in flight
//! have not moved (none ended) for the stall timeout: a client can open a
//! request, never send its body, and answer pings forever. Requests are
//! counted by the servers (`Activity::begin`), whatever the protocol.
//!
//! An HTTP/1 request begins once its head has been read, so on HTTP/1 the
//! time with none in flight is the time its next head takes to come: the
//! head timeout bounds it, from when the connection opened or its last
//! request ended (as a kept-alive connection waits for its next request).
//! That is the HTTP/1 server's head timeout, kept here instead of by a
//! timer the server resets on every request.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::Timeouts;

/// `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n` (RFC 9113 section 3.4).
pub const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// A frame header: 24-bit length, type, flags, stream id (RFC 9113 4.1).
const FRAME_HEADER: usize = 9;
const SETTINGS: u8 = 0x4;

/// Requests under way on one connection, how many have ended, and when
/// the last one in flight ended.
pub struct Activity {
    opened: Instant,
    /// Milliseconds from `opened` to when the last request in flight ended
    /// (or to the connection's HTTP/2 start).
    last_ms: AtomicU64,
    /// Requests in flight in the low half, requests ended (wrapping) in the
    /// high half: one word, so a request's end is still one atomic.
    requests: AtomicU64,
}

const IN_FLIGHT: u64 = 0xFFFF_FFFF;
const ENDED_SHIFT: u32 = 32;

impl Activity {
    fn new() -> Self {
        Activity {
            opened: Instant::now(),
            last_ms: AtomicU64::new(0),
            requests: AtomicU64::new(0),
        }
    }

    /// Requests in flight, and how many have ended (wrapping).
    fn requests(&self, order: Ordering) -> (u64, u32) {
        let r = self.requests.load(order);
        (r & IN_FLIGHT, (r >> ENDED_SHIFT) as u32)
    }

    fn touch(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// A request began; it counts as in flight until the guard drops.
    /// Nothing is timed here: while a request is in flight the connection
    /// has no idle deadline, and the last one to end sets it.
    pub fn begin(self: &Arc<Self>) -> Busy {
        self.requests.fetch_add(1, Ordering::Relaxed);
        Busy(self.clone())
    }

    fn last(&self) -> Instant {
        self.opened + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// A request in flight on a connection.
pub struct Busy(Arc<Activity>);

impl Drop for Busy {
    /// The last request in flight notes the time before it stops counting,
    /// so the watch never sees none in flight with an older time; the
    /// others end without reading the clock (a profile of RLS requests put
    /// the node's clock reads, two of them here, at 1% of its CPU).
    fn drop(&mut self) {
        let a = &self.0;
        let mut r = a.requests.load(Ordering::Relaxed);
        loop {
            if r & IN_FLIGHT == 1 {
                a.touch();
            }
            // One fewer in flight, one more ended: the low half's borrow
            // is the high half's carry.
            let next = r.wrapping_add((1 << ENDED_SHIFT) - 1);
            match a
                .requests
                .compare_exchange_weak(r, next, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => r = now,
            }
        }
    }
}

/// How far the client's HTTP/2 start has come.
enum Start {
    /// The first bytes, up to the preface and the first frame's header.
    Head {
        seen: [u8; 24 + FRAME_HEADER],
        n: usize,
    },
    /// The preface and a SETTINGS header arrived; this much of its payload is due.
    Settings { due: usize },
    /// Started (or not HTTP/2: then HTTP/1, held to the head timeout
    /// whenever no request is in flight).
    Done,
}

/// The timing rules of one connection, checked on every read.
pub struct Watch {
    activity: Arc<Activity>,
    head_timeout: Duration,
    idle_timeout: Duration,
    stall_timeout: Duration,
    /// How many requests had ended when the timer last found some in
    /// flight; None when it found none.
    in_flight_at: Option<u32>,
    start: Start,
    timer: Pin<Box<Sleep>>,
    /// The waker the timer last took, while the timer is armed with it.
    armed: Option<Waker>,
    expired: bool,
}

impl Watch {
    pub fn new(timeouts: Timeouts) -> Self {
        let activity = Arc::new(Activity::new());
        let first = activity.opened + timeouts.head;
        Watch {
            activity,
            head_timeout: timeouts.head,
            idle_timeout: timeouts.idle,
            stall_timeout: timeouts.stall,
            in_flight_at: None,
            start: Start::Head {
                seen: [0; 24 + FRAME_HEADER],
                n: 0,
            },
            timer: Box::pin(tokio::time::sleep_until(first)),
            armed: None,
            expired: false,
        }
    }

    pub fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }

    /// When the connection is to be closed if nothing changes; None while
    /// a request is in flight.
    fn deadline(&self) -> Option<Instant> {
        match self.start {
            Start::Head { .. } | Start::Settings { .. } => {
                Some(self.activity.opened + self.head_timeout)
            }
            // Acquire: pairs with the last request's release, so its time
            // is seen whenever its end is.
            Start::Done if self.activity.requests(Ordering::Acquire).0 > 0 => None,
            Start::Done => Some(self.activity.last() + self.idle_timeout),
        }
    }

    /// True once the connection must read as closed. Registers the waker
    /// for the next deadline otherwise.
    pub fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        if self.expired {
            return true;
        }
        // Most reads find the timer armed for this task and not yet fired.
        // Since it was armed, requests can only have moved the deadline
        // later (see below), and the start, which may move it earlier,
        // disarms it; so there is nothing to look at. Polling the timer
        // instead registered the waker again on every read (1% of the
        // node's samples in a perf profile of RLS requests). The one
        // exception: a timer armed for a stall look, one stall timeout
        // on, is later than the idle deadline the last request's end sets
        // when the idle timeout is the shorter one.
        // It is moved then only when that deadline is the earlier one, so
        // a busy HTTP/1 connection (its idle timeout the head timeout, under
        // the stall timeout) mostly reads two words here too.
        if !self.timer.is_elapsed() && self.armed.as_ref().is_some_and(|w| w.will_wake(cx.waker()))
        {
            let stall_look_may_be_late =
                self.in_flight_at.is_some() && self.stall_timeout > self.idle_timeout;
            if !stall_look_may_be_late {
                return false;
            }
            match self.deadline() {
                Some(at) if at < self.timer.deadline() => {}
                _ => return false,
            }
        }
        // The timer is moved only to an earlier deadline. Each request
        // pushes the idle deadline later, and resetting a tokio timer takes
        // the timer wheel's lock: on every read of every connection that
        // was a lock shared by all of them. A timer left early fires, finds
        // the deadline moved on and is set again, once per idle timeout.
        if let Some(at) = self.deadline() {
            if at < self.timer.deadline() {
                self.timer.as_mut().reset(at);
            }
        }
        loop {
            match self.timer.as_mut().poll(cx) {
                Poll::Pending => {
                    self.armed = Some(cx.waker().clone());
                    return false;
                }
                Poll::Ready(()) => {
                    let now = Instant::now();
                    let at = match self.deadline() {
                        Some(d) if d <= now => {
                            self.expired = true;
                            tracing::debug!("connection idle or slow to start; closing");
                            return true;
                        }
                        // The deadline moved on while the timer ran.
                        Some(d) => {
                            self.in_flight_at = None;
                            d
                        }
                        // Requests are in flight. If none has ended since
                        // the timer last found some in flight, they are
                        // stuck: a request whose body never comes holds
                        // the connection's slot, whatever else it sends.
                        None => {
                            let ended = self.activity.requests(Ordering::Acquire).1;
                            if self.in_flight_at == Some(ended) {
                                self.expired = true;
                                tracing::debug!("requests in flight made no progress; closing");
                                return true;
                            }
                            self.in_flight_at = Some(ended);
                            now + self.stall_timeout
                        }
                    };
                    self.timer.as_mut().reset(at);
                }
            }
        }
    }

    /// The idle deadline replaces the head deadline, and may be the
    /// earlier one: the armed timer is to be looked at again.
    fn started(&mut self) {
        self.start = Start::Done;
        self.activity.touch();
        self.armed = None;
    }

    /// Follows the client's first bytes through its HTTP/2 start.
    pub fn saw(&mut self, mut bytes: &[u8]) {
        loop {
            match &mut self.start {
                Start::Done => return,
                Start::Head { seen, n } => {
                    let take = bytes.len().min(seen.len() - *n);
                    seen[*n..*n + take].copy_from_slice(&bytes[..take]);
                    *n += take;
                    bytes = &bytes[take..];
                    let upto = (*n).min(24);
                    if seen[..upto] != H2_PREFACE[..upto] {
                        // HTTP/1: with no request in flight, the next
                        // head is due within the head timeout; the first
                        // from the open, not from its first bytes (a
                        // client trickling it would get twice as long).
                        self.idle_timeout = self.idle_timeout.min(self.head_timeout);
                        self.start = Start::Done;
                        self.armed = None;
                        return;
                    }
                    if *n < seen.len() {
                        return;
                    }
                    let f = &seen[24..];
                    let len = usize::from(f[0]) << 16 | usize::from(f[1]) << 8 | usize::from(f[2]);
                    if f[3] != SETTINGS {
                        // A protocol error the HTTP/2 server answers; the
                        // head deadline stays, so it cannot hold the slot.
                        return;
                    }
                    self.start = Start::Settings { due: len };
                }
                Start::Settings { due } => {
                    *due -= bytes.len().min(*due);
                    if *due > 0 {
                        return;
                    }
                    self.started();
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    fn settings(len: usize) -> Vec<u8> {
        let mut f = H2_PREFACE.to_vec();
        f.extend_from_slice(&[
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            SETTINGS,
            0,
            0,
            0,
            0,
            0,
        ]);
        f.extend(std::iter::repeat_n(0u8, len));
        f
    }

    /// Head and idle timeouts in seconds; a 10 s stall timeout.
    fn secs(head: u64, idle: u64) -> Timeouts {
        Timeouts {
            head: Duration::from_secs(head),
            idle: Duration::from_secs(idle),
            stall: Duration::from_secs(10),
        }
    }

    /// The timeouts a node starts with, as the tests at the defaults
    /// name them: 10 s head, 60 s idle, 20 s stall.
    fn defaults() -> Timeouts {
        let t = crate::config::InputLimits::default().timeouts();
        let s = Duration::from_secs;
        assert_eq!((t.head, t.idle, t.stall), (s(10), s(60), s(20)));
        t
    }

    /// A watch on a connection whose HTTP/2 start has arrived.
    fn started(timeouts: Timeouts) -> Watch {
        let mut w = Watch::new(timeouts);
        w.saw(&settings(0));
        w
    }

    fn noop() -> Context<'static> {
        Context::from_waker(futures::task::noop_waker_ref())
    }

    #[tokio::test(start_paused = true)]
    async fn the_preface_alone_does_not_start_a_connection() {
        let mut w = Watch::new(secs(2, 60));
        w.saw(H2_PREFACE);
        tokio::time::advance(Duration::from_millis(2_001)).await;
        assert!(
            w.expired(&mut noop()),
            "no SETTINGS within the head timeout"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_started_connection_lives_while_requests_come_and_closes_when_idle() {
        let mut w = Watch::new(secs(2, 60));
        let bytes = settings(12);
        // In pieces, as TCP may deliver them.
        w.saw(&bytes[..10]);
        w.saw(&bytes[10..30]);
        w.saw(&bytes[30..]);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(!w.expired(&mut noop()));
        let busy = w.activity().begin();
        tokio::time::advance(Duration::from_secs(120)).await;
        assert!(!w.expired(&mut noop()), "a request in flight is never idle");
        drop(busy);
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(!w.expired(&mut noop()));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(w.expired(&mut noop()), "sixty seconds with no request");
    }

    /// Guard: the idle deadline runs from the end of the last request in
    /// flight, which notes the time; one ending while another is still in
    /// flight notes nothing and closes nothing.
    #[tokio::test(start_paused = true)]
    async fn the_idle_time_counts_from_the_last_request_to_end() {
        let mut w = started(secs(2, 60));
        let a = w.activity().begin();
        let b = w.activity().begin();
        tokio::time::advance(Duration::from_secs(30)).await;
        drop(a);
        tokio::time::advance(Duration::from_secs(40)).await;
        assert!(!w.expired(&mut noop()), "b is still in flight");
        drop(b);
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(!w.expired(&mut noop()), "b ended 59 s ago");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(w.expired(&mut noop()), "b ended 61 s ago");
    }

    /// Guard: requests in flight that none of them ends (a body that never
    /// comes) close the connection, though it is never idle.
    #[tokio::test(start_paused = true)]
    async fn requests_that_never_end_close_the_connection() {
        let mut w = started(secs(2, 60));
        let _stuck = w.activity().begin();
        // The idle timer finds it in flight, then one stall timeout on,
        // finds nothing ended.
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(!w.expired(&mut noop()), "in flight, first look");
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(!w.expired(&mut noop()));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(w.expired(&mut noop()), "nothing ended in 10 s");
    }

    /// The same at the defaults a node starts with: a request that never
    /// ends is found between one stall timeout (twice the body timeout)
    /// and the idle timeout plus one stall timeout after it began.
    #[tokio::test(start_paused = true)]
    async fn at_the_defaults_a_stuck_request_closes_its_connection_within_80_s() {
        let t = defaults();
        let mut w = started(t);
        assert!(!w.expired(&mut noop()));
        let _stuck = w.activity().begin();
        closes_between(&mut w, t.stall, t.idle + t.stall).await;
    }

    /// Advances paused time a second at a time until `w` expires, which
    /// must be between `from` and `to` on.
    async fn closes_between(w: &mut Watch, from: Duration, to: Duration) {
        let mut waited = Duration::ZERO;
        while !w.expired(&mut noop()) {
            assert!(waited <= to, "still open after {waited:?}");
            tokio::time::advance(Duration::from_secs(1)).await;
            waited += Duration::from_secs(1);
        }
        assert!(waited >= from, "closed after {waited:?}");
    }

    /// Guard: with an idle timeout shorter than the stall timeout, the
    /// last request's end while the timer waits for a stall look still
    /// closes the connection one idle timeout later, not at that look.
    #[tokio::test(start_paused = true)]
    async fn an_idle_timeout_shorter_than_the_stall_one_holds_after_a_request() {
        let mut w = started(secs(2, 3));
        assert!(!w.expired(&mut noop()));
        let busy = w.activity().begin();
        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(!w.expired(&mut noop()), "in flight: a stall look 10 s on");
        drop(busy);
        assert!(!w.expired(&mut noop()), "ended just now");
        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(w.expired(&mut noop()), "idle 4 s of a 3 s timeout");
    }

    /// A connection with a request in flight throughout stays open while
    /// other requests keep ending.
    #[tokio::test(start_paused = true)]
    async fn a_long_request_beside_others_that_end_is_not_stuck() {
        let mut w = started(secs(2, 60));
        let _long = w.activity().begin();
        for _ in 0..30 {
            drop(w.activity().begin());
            tokio::time::advance(Duration::from_secs(5)).await;
            assert!(!w.expired(&mut noop()));
        }
    }

    /// The ended count rides above the in-flight count in one word.
    #[test]
    fn ends_are_counted_beside_the_requests_in_flight() {
        let a = Arc::new(Activity::new());
        let (x, y) = (a.begin(), a.begin());
        assert_eq!(a.requests(Ordering::Relaxed), (2, 0));
        drop(x);
        assert_eq!(a.requests(Ordering::Relaxed), (1, 1));
        drop(y);
        drop(a.begin());
        assert_eq!(a.requests(Ordering::Relaxed), (0, 3));
    }

    /// Counts its wakes.
    struct Count(AtomicUsize);

    impl futures::task::ArcWake for Count {
        fn wake_by_ref(me: &Arc<Self>) {
            me.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn counting() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), futures::task::waker(count))
    }

    /// Guard: a read that skips the timer must still leave it armed with
    /// the waker of the task reading now, or an idle connection whose task
    /// changed waker is never woken to close.
    #[tokio::test(start_paused = true)]
    async fn the_timer_wakes_the_task_that_read_last() {
        let mut w = started(secs(2, 60));
        let (first, first_waker) = counting();
        let (second, second_waker) = counting();
        assert!(!w.expired(&mut Context::from_waker(&first_waker)));
        assert!(!w.expired(&mut Context::from_waker(&second_waker)));
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(
            second.0.load(Ordering::Relaxed),
            1,
            "the idle deadline wakes the last reader"
        );
        assert_eq!(first.0.load(Ordering::Relaxed), 0);
        assert!(w.expired(&mut Context::from_waker(&second_waker)));
    }

    /// Guard: an idle timeout shorter than the head timeout takes effect
    /// from the start, though the timer was armed for the head deadline.
    #[tokio::test(start_paused = true)]
    async fn an_idle_deadline_earlier_than_the_head_one_is_kept() {
        let mut w = Watch::new(secs(10, 2));
        assert!(!w.expired(&mut noop()), "armed for the head deadline");
        w.saw(&settings(0));
        assert!(!w.expired(&mut noop()));
        tokio::time::advance(Duration::from_secs(3)).await;
        assert!(w.expired(&mut noop()), "idle for 3 s of a 2 s timeout");
    }

    /// Guard: an HTTP/1 head that does not complete (no request begins)
    /// ends the connection at the head timeout, not the idle one.
    #[tokio::test(start_paused = true)]
    async fn a_slow_http1_head_is_held_to_the_head_timeout() {
        let mut w = Watch::new(secs(2, 60));
        tokio::time::advance(Duration::from_millis(1_500)).await;
        assert!(!w.expired(&mut noop()));
        // Its first bytes late: the head is still due 2 s from the open.
        w.saw(b"GET / HTTP/1.1\r\n");
        tokio::time::advance(Duration::from_millis(400)).await;
        assert!(!w.expired(&mut noop()));
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(w.expired(&mut noop()), "no head within 2 s");
    }

    /// At the defaults a node starts with: a kept-alive HTTP/1 connection
    /// left idle closes one head timeout (10 s) after its last request,
    /// not one idle timeout (60 s); and a request in flight that never
    /// ends (its body's 408 lost) still closes it within a head timeout
    /// and a stall timeout, never before a stall timeout.
    #[tokio::test(start_paused = true)]
    async fn at_the_defaults_an_http1_connection_keeps_the_head_and_stall_timeouts() {
        let t = defaults();
        let mut idle = Watch::new(t);
        idle.saw(b"GET / HTTP/1.1\r\n");
        drop(idle.activity().begin());
        tokio::time::advance(Duration::from_millis(9_900)).await;
        assert!(!idle.expired(&mut noop()));
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(idle.expired(&mut noop()), "idle 10.1 s after its request");

        let mut stuck = Watch::new(t);
        stuck.saw(b"POST /v1/check HTTP/1.1\r\n");
        let _stuck = stuck.activity().begin();
        closes_between(&mut stuck, t.stall, t.head + t.stall).await;
    }

    /// Guard: between HTTP/1 requests the next head is due within the head
    /// timeout of the last one's end; a request in flight is never idle.
    #[tokio::test(start_paused = true)]
    async fn a_kept_alive_http1_connection_waits_one_head_timeout_for_its_next_request() {
        let mut w = Watch::new(secs(2, 60));
        w.saw(b"POST /v1/check HTTP/1.1\r\n");
        let busy = w.activity().begin();
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(!w.expired(&mut noop()), "in flight");
        drop(busy);
        tokio::time::advance(Duration::from_millis(1_900)).await;
        assert!(!w.expired(&mut noop()), "ended 1.9 s ago");
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(w.expired(&mut noop()), "no next head within 2 s");
    }
}
