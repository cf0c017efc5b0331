//! The numbers of docs/algorithms.md, pinned. Each test fails if its guard or formula is removed.

use std::time::Duration;

use proptest::prelude::*;
use rand::{Rng, SeedableRng};

use super::*;
use crate::clock::NANOS_PER_SEC;

pub(super) const SEC: u64 = NANOS_PER_SEC;
pub(super) const MS: u64 = 1_000_000;

fn policy(kind: AlgorithmKind, limit: u64, window_s: u64) -> Policy {
    Policy::new(kind, limit, Duration::from_secs(window_s), None, None).unwrap()
}

/// Like `policy`, but a leaky bucket gets burst = limit so every algorithm
/// can hold `limit` at one instant.
pub(super) fn policy_full(kind: AlgorithmKind, limit: u64, window_s: u64) -> Policy {
    let burst = (kind == AlgorithmKind::LeakyBucket).then_some(limit);
    Policy::new(kind, limit, Duration::from_secs(window_s), burst, None).unwrap()
}

/// Runs `n` requests of cost 1 at `now`; returns how many were admitted.
pub(super) fn burst(p: &Policy, s: &mut State, now: Nanos, n: usize) -> usize {
    (0..n)
        .filter(|_| p.decide(s, now, 1).unwrap().allowed)
        .count()
}

// --- token bucket ---

#[test]
fn token_bucket_admits_capacity_at_once_then_denies() {
    // The limiter still limits: C = 3, r = 1/s, four calls at one instant.
    let p = Policy::new(
        AlgorithmKind::TokenBucket,
        1,
        Duration::from_secs(1),
        Some(3),
        None,
    )
    .unwrap();
    let mut s = p.fresh();
    let got: Vec<bool> = (0..4)
        .map(|_| p.decide(&mut s, 0, 1).unwrap().allowed)
        .collect();
    assert_eq!(got, [true, true, true, false]);
}

#[test]
fn token_bucket_admits_100_at_once_and_200_within_60s() {
    // C = 100, r = 100/60 s: A(60) = C + r*60 = 200.
    let p = policy(AlgorithmKind::TokenBucket, 100, 60);
    let mut s = p.fresh();
    let t0 = 1_000 * SEC;
    assert_eq!(burst(&p, &mut s, t0, 150), 100);
    let mut admitted = 100;
    // One request every 10 ms for the next 60 s.
    for i in 1..=6000u64 {
        if p.decide(&mut s, t0 + i * 10 * MS, 1).unwrap().allowed {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 200);
}

#[test]
fn token_bucket_retry_after_is_time_to_the_missing_token() {
    let p = policy(AlgorithmKind::TokenBucket, 100, 60);
    let mut s = p.fresh();
    burst(&p, &mut s, 0, 100);
    let d = p.decide(&mut s, 0, 1).unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Duration::from_millis(600));
    assert!(p.decide(&mut s, 599 * MS, 1).unwrap().allowed.eq(&false));
    assert!(p.decide(&mut s, 600 * MS, 1).unwrap().allowed);
}

#[test]
fn token_bucket_backwards_clock_hands_out_nothing() {
    let p = policy(AlgorithmKind::TokenBucket, 100, 60);
    let mut s = p.fresh();
    let t = 500 * SEC;
    burst(&p, &mut s, t, 100);
    assert_eq!(burst(&p, &mut s, t - 60 * SEC, 10), 0);
    assert_eq!(burst(&p, &mut s, t, 10), 0);
}

// --- leaky bucket / GCRA ---

#[test]
fn gcra_rejects_early_arrivals_with_exact_retry() {
    let p = policy(AlgorithmKind::LeakyBucket, 1, 1);
    let mut s = p.fresh();
    let t = 100 * SEC;
    assert!(p.decide(&mut s, t, 1).unwrap().allowed);
    let early = p.decide(&mut s, t + 500 * MS, 1).unwrap();
    assert!(!early.allowed);
    assert_eq!(early.retry_after, Duration::from_millis(500));
    assert!(p.decide(&mut s, t + SEC, 1).unwrap().allowed);
}

#[test]
fn gcra_burst_allows_that_many_at_once() {
    let p = Policy::new(
        AlgorithmKind::LeakyBucket,
        10,
        Duration::from_secs(10),
        Some(5),
        None,
    )
    .unwrap();
    let mut s = p.fresh();
    assert_eq!(burst(&p, &mut s, 50 * SEC, 20), 5);
}

#[test]
fn scheduling_leaky_bucket_delays_within_queue_then_refuses() {
    // T = 1 s, queue 2: the 2nd and 3rd wait 1 s and 2 s, the 4th is refused.
    let p = Policy::new(
        AlgorithmKind::LeakyBucket,
        1,
        Duration::from_secs(1),
        None,
        Some(2),
    )
    .unwrap();
    let mut s = p.fresh();
    let t = 10 * SEC;
    let delays: Vec<_> = (0..3).map(|_| p.decide(&mut s, t, 1).unwrap()).collect();
    assert!(delays.iter().all(|d| d.allowed));
    assert_eq!(
        delays.iter().map(|d| d.delay.as_secs()).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    let fourth = p.decide(&mut s, t, 1).unwrap();
    assert!(!fourth.allowed);
    assert_eq!(fourth.retry_after, Duration::from_secs(1));
}

proptest! {
    /// The meter's promise: admitted requests, sent at now + delay, are never
    /// closer than one emission interval (burst 1), whatever the arrivals.
    #[test]
    fn scheduling_leaky_bucket_output_never_exceeds_rate(
        gaps in prop::collection::vec(0u64..3_000, 1..200),
        queue in 1u64..20,
    ) {
        let p = Policy::new(AlgorithmKind::LeakyBucket, 10, Duration::from_secs(10), None, Some(queue)).unwrap();
        let mut s = p.fresh();
        let mut now = 1_000 * SEC;
        let mut sends = Vec::new();
        for g in gaps {
            now += g * MS;
            let d = p.decide(&mut s, now, 1).unwrap();
            if d.allowed {
                prop_assert!(d.delay <= Duration::from_secs(queue));
                sends.push(now + d.delay.as_nanos() as u64);
            }
        }
        sends.sort_unstable();
        for w in sends.windows(2) {
            prop_assert!(w[1] - w[0] >= SEC, "sends {} ns apart", w[1] - w[0]);
        }
    }
}

proptest! {
    /// Refunds keep the promise too: an admission refunded after others
    /// were scheduled behind it gives nothing back, so the sends that
    /// remain are still one interval apart (a refund once moved `tat` under
    /// the later ones and handed their slots out twice).
    #[test]
    fn scheduling_leaky_bucket_refunds_never_break_the_spacing(
        steps in prop::collection::vec((0u64..3_000, any::<bool>(), any::<prop::sample::Index>()), 1..200),
    ) {
        let p = Policy::new(AlgorithmKind::LeakyBucket, 10, Duration::from_secs(10), None, Some(8)).unwrap();
        let mut s = p.fresh();
        let mut now = 1_000 * SEC;
        let mut sends: Vec<(Nanos, Nanos)> = Vec::new();
        for (gap, refund, which) in steps {
            now += gap * MS;
            if refund && !sends.is_empty() {
                let (at, _) = sends.remove(which.index(sends.len()));
                p.refund(&mut s, at, 1);
                continue;
            }
            let d = p.decide(&mut s, now, 1).unwrap();
            if d.allowed {
                sends.push((d.at, now + d.delay.as_nanos() as u64));
            }
        }
        let mut times: Vec<Nanos> = sends.iter().map(|&(_, t)| t).collect();
        times.sort_unstable();
        for w in times.windows(2) {
            prop_assert!(w[1] - w[0] >= SEC, "sends {} ns apart", w[1] - w[0]);
        }
    }
}

// --- fixed window ---

#[test]
fn fixed_window_admits_ten_inside_400ms_across_a_boundary() {
    // L = 5 per minute: 5 at 12:00:59.700, 5 at 12:01:00.100.
    let p = policy(AlgorithmKind::FixedWindow, 5, 60);
    let mut s = p.fresh();
    let noon = 1_738_368_000 * SEC; // a minute boundary
    let a = noon + 59 * SEC + 700 * MS;
    let b = noon + 60 * SEC + 100 * MS;
    assert_eq!(burst(&p, &mut s, a, 5) + burst(&p, &mut s, b, 5), 10);
    assert_eq!(burst(&p, &mut s, b, 1), 0, "the new window is full too");
    let d = p.decide(&mut s, b, 1).unwrap();
    assert_eq!(d.retry_after, Duration::from_millis(59_900));
}

#[test]
fn fixed_window_is_aligned_to_the_epoch() {
    let p = policy(AlgorithmKind::FixedWindow, 1, 60);
    let mut s = p.fresh();
    let d = p.decide(&mut s, 120 * SEC + 5 * SEC, 1).unwrap();
    assert_eq!(d.reset_at, 180_000, "window [120 s, 180 s) ends at 180 s");
}

// --- sliding window log ---

#[test]
fn sliding_log_retry_after_is_exact() {
    let p = policy(AlgorithmKind::SlidingWindowLog, 3, 60);
    let mut s = p.fresh();
    let t = 1_000 * SEC;
    for i in 0..3 {
        assert!(p.decide(&mut s, t + i * SEC, 1).unwrap().allowed);
    }
    let d = p.decide(&mut s, t + 10 * SEC, 1).unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Duration::from_secs(50), "oldest + W - now");
    assert!(!p.decide(&mut s, t + 60 * SEC - 1, 1).unwrap().allowed);
    assert!(p.decide(&mut s, t + 60 * SEC, 1).unwrap().allowed);
}

#[test]
fn sliding_log_never_holds_more_than_limit_entries() {
    let p = policy(AlgorithmKind::SlidingWindowLog, 5, 60);
    let mut s = p.fresh();
    burst(&p, &mut s, 10 * SEC, 50_000);
    let State::SlidingLog(log) = &s else {
        unreachable!()
    };
    assert_eq!(log.len(), 5, "rejections are not logged");
}

proptest! {
    /// Exactness: no interval of length W ever holds more than L admitted.
    #[test]
    fn sliding_log_never_admits_more_than_limit_in_any_window(
        arrivals in prop::collection::vec((0u64..2_000, 1u64..4), 1..300),
        limit in 3u64..20,
    ) {
        let w = 10 * SEC;
        let p = Policy::new(AlgorithmKind::SlidingWindowLog, limit, Duration::from_secs(10), None, None).unwrap();
        let mut s = p.fresh();
        let mut now = 1_000 * SEC;
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        for (gap, cost) in arrivals {
            now += gap * MS;
            if p.decide(&mut s, now, cost.min(limit)).unwrap().allowed {
                admitted.push((now, cost.min(limit)));
            }
        }
        for &(t, _) in &admitted {
            let in_window: u64 = admitted.iter().filter(|&&(u, _)| u + w > t && u <= t).map(|&(_, c)| c).sum();
            prop_assert!(in_window <= limit, "{} admitted in the window ending {}", in_window, t);
        }
    }
}

// --- sliding window counter ---

fn counter_state(p: &Policy, high: Nanos, prev: u64, curr: u64) -> State {
    let Policy::SlidingCounter(_) = p else {
        unreachable!()
    };
    State::SlidingCounter(SlidingCounterState { high, prev, curr })
}

#[test]
fn sliding_counter_estimates_107_5_denies_and_says_6_seconds() {
    // p = 90, c = 40, f = 0.25 at L = 100, W = 60 s.
    let p = policy(AlgorithmKind::SlidingWindowCounter, 100, 60);
    let Policy::SlidingCounter(alg) = p else {
        unreachable!()
    };
    let window_start = 1_000 * 60 * SEC;
    let now = window_start + 15 * SEC;
    let mut s = counter_state(&p, window_start + SEC, 90, 40);
    let State::SlidingCounter(st) = &s else {
        unreachable!()
    };
    assert!((alg.estimate_at(st, now) - 107.5).abs() < 1e-9);
    let d = p.decide(&mut s, now, 1).unwrap();
    assert!(!d.allowed);
    // (1 - 59/90 - 0.25) * 60 s = 5.666 s, shown as 6.
    let secs = d.retry_after.as_secs_f64();
    assert!((secs - 5.6667).abs() < 1e-3, "retry after {secs}");
    assert_eq!(d.retry_after_secs(), 6);
    // Waiting exactly that long admits; a millisecond less does not.
    let mut early = s.clone();
    assert!(
        !p.decide(&mut early, now + d.retry_after.as_nanos() as u64 - MS, 1)
            .unwrap()
            .allowed
    );
    assert!(
        p.decide(&mut s, now + d.retry_after.as_nanos() as u64, 1)
            .unwrap()
            .allowed
    );
}

#[test]
fn sliding_counter_never_resets_on_backwards_clock() {
    // 300 requests 10 ms apart at L = 100, NTP steps back two
    // minutes, 300 more. Without the clamp this admits 200.
    let p = policy(AlgorithmKind::SlidingWindowCounter, 100, 60);
    let mut s = p.fresh();
    let mut t = 1_000 * SEC;
    let mut admitted = 0;
    for _ in 0..300 {
        admitted += usize::from(p.decide(&mut s, t, 1).unwrap().allowed);
        t += 10 * MS;
    }
    assert_eq!(admitted, 100);
    t -= 120 * SEC;
    for _ in 0..300 {
        admitted += usize::from(p.decide(&mut s, t, 1).unwrap().allowed);
        t += 10 * MS;
    }
    assert_eq!(admitted, 100, "admitted in one real minute at L = 100");
    // Two clear windows later the budget is genuinely back.
    assert!(p.decide(&mut s, 1_240 * SEC, 1).unwrap().allowed);
}

#[test]
fn sliding_counter_gap_of_two_windows_drops_prev() {
    let p = policy(AlgorithmKind::SlidingWindowCounter, 10, 60);
    let mut s = p.fresh();
    let t = 6_000 * SEC;
    assert_eq!(burst(&p, &mut s, t, 10), 10);
    // One window later: prev = 10 still counts; two later: it is gone.
    assert_eq!(burst(&p, &mut s, t + 60 * SEC, 10), 0);
    assert_eq!(burst(&p, &mut s, t + 180 * SEC, 10), 10);
}

/// Exponential inter-arrival times at `rate` per ns, over [start, end).
fn poisson_arrivals(rng: &mut impl Rng, start: Nanos, end: Nanos, rate: f64) -> Vec<Nanos> {
    let mut out = Vec::new();
    let mut t = start as f64;
    loop {
        t += -(1.0 - rng.random::<f64>()).ln() / rate;
        if t >= end as f64 {
            return out;
        }
        out.push(t as Nanos);
    }
}

#[test]
fn sliding_counter_error_is_unbiased_with_binomial_spread() {
    // Poisson traffic at L per window; query at f = 0.5. Error = estimate -
    // true trailing count; expected: mean 0, std sqrt(L f (1-f)) = 5.
    let (l, w) = (100u64, 60 * SEC);
    let p = policy(AlgorithmKind::SlidingWindowCounter, 1_000_000, 60);
    let Policy::SlidingCounter(alg) = p else {
        unreachable!()
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let trials = 3000;
    let mut errors = Vec::with_capacity(trials);
    for i in 0..trials as u64 {
        let start = (10 + 3 * i) * w;
        let query = start + w + w / 2;
        let arrivals = poisson_arrivals(&mut rng, start, query, l as f64 / w as f64);
        let mut s = p.fresh();
        for &a in &arrivals {
            p.decide(&mut s, a, 1).unwrap();
        }
        let truth = arrivals.iter().filter(|&&a| a + w > query).count() as f64;
        let State::SlidingCounter(st) = &s else {
            unreachable!()
        };
        errors.push(alg.estimate_at(st, query) - truth);
    }
    let mean = errors.iter().sum::<f64>() / trials as f64;
    let var = errors.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / trials as f64;
    let expected = (l as f64 * 0.5 * 0.5).sqrt();
    assert!(mean.abs() < 0.5, "mean error {mean}");
    assert!(
        (var.sqrt() - expected).abs() < 0.5,
        "std {} vs {expected}",
        var.sqrt()
    );
}

// --- guards ---

#[test]
fn policy_refuses_parameters_that_would_not_limit() {
    let d = Duration::from_secs(60);
    let cases = [
        (AlgorithmKind::TokenBucket, 0, d, None, None, "limit"),
        (
            AlgorithmKind::TokenBucket,
            10,
            Duration::ZERO,
            None,
            None,
            "window",
        ),
        (AlgorithmKind::TokenBucket, 10, d, Some(0), None, "burst"),
        (AlgorithmKind::FixedWindow, 10, d, Some(5), None, "burst"),
        (AlgorithmKind::TokenBucket, 10, d, None, Some(1), "queue"),
        (
            AlgorithmKind::SlidingWindowLog,
            MAX_LOG_LIMIT + 1,
            d,
            None,
            None,
            "limit",
        ),
        (
            AlgorithmKind::LeakyBucket,
            10,
            Duration::from_nanos(5),
            None,
            None,
            "limit",
        ),
        (
            AlgorithmKind::FixedWindow,
            MAX_LIMIT + 1,
            d,
            None,
            None,
            "limit",
        ),
        (
            AlgorithmKind::FixedWindow,
            1,
            MAX_WINDOW + d,
            None,
            None,
            "window",
        ),
    ];
    for (kind, limit, window, burst, queue, field) in cases {
        let e = Policy::new(kind, limit, window, burst, queue).unwrap_err();
        assert_eq!(e.field, field, "{kind} limit={limit}");
    }
}

// --- refunds, idleness and merges: what the store and the cluster rely on ---

#[test]
fn refund_restores_exactly_what_was_taken() {
    for kind in AlgorithmKind::ALL {
        let p = policy_full(kind, 5, 60);
        let mut s = p.fresh();
        let t = 7_000 * SEC;
        burst(&p, &mut s, t, 4);
        let before = s.clone();
        // A nanosecond after the burst: refunds go to an admission told
        // apart from the others by its time (the leaky bucket's rule).
        let t = t + 1;
        let d = p.decide(&mut s, t, 1).unwrap();
        assert!(d.allowed, "{kind}");
        let mut undone = s.clone();
        match (&p, &mut undone) {
            (Policy::TokenBucket(a), State::TokenBucket(x)) => a.refund(x, d.at, 1),
            (Policy::LeakyBucket(a), State::LeakyBucket(x)) => a.refund(x, d.at, 1),
            (Policy::FixedWindow(a), State::FixedWindow(x)) => a.refund(x, d.at, 1),
            (Policy::SlidingLog(a), State::SlidingLog(x)) => a.refund(x, d.at, 1),
            (Policy::SlidingCounter(a), State::SlidingCounter(x)) => a.refund(x, d.at, 1),
            _ => unreachable!(),
        }
        let again = p.decide(&mut undone, t, 1).unwrap();
        let first = p.decide(&mut before.clone(), t, 1).unwrap();
        assert_eq!(again.allowed, first.allowed, "{kind}");
        assert_eq!(again.remaining, first.remaining, "{kind}");
    }
}

#[test]
fn a_sliding_log_refund_returns_what_a_charge_left_of_its_entry() {
    let log = SlidingLog {
        limit: 10,
        window: 60 * SEC,
    };
    let t = 7_000 * SEC;
    let mut s = log.fresh();
    let d = log.decide(&mut s, t, 4);
    assert!(d.allowed);
    // Admitted elsewhere meanwhile: 13 units in the window, so the oldest
    // entry is cut from 4 to the 1 that fits.
    log.charge(&mut s, t + SEC, 9);
    assert_eq!(log.decide(&mut s.clone(), t + SEC, 1).remaining, 0);
    // The admission of 4 is undone: its 1 unit left goes, the charge stays.
    log.refund(&mut s, d.at, 4);
    assert_eq!(s.len(), 1);
    let after = log.decide(&mut s, t + SEC, 1);
    assert!(after.allowed);
    assert_eq!(after.remaining, 0);
    // A refund matches its own admission's time, not any cut entry.
    let mut s = log.fresh();
    log.decide(&mut s, t, 4);
    log.charge(&mut s, t + SEC, 9);
    log.refund(&mut s, t + 1, 4);
    assert_eq!(s.len(), 2);
}

fn idle(p: &Policy, s: &State, now: Nanos) -> bool {
    match (p, s) {
        (Policy::TokenBucket(a), State::TokenBucket(x)) => a.is_idle(x, now),
        (Policy::LeakyBucket(a), State::LeakyBucket(x)) => a.is_idle(x, now),
        (Policy::FixedWindow(a), State::FixedWindow(x)) => a.is_idle(x, now),
        (Policy::SlidingLog(a), State::SlidingLog(x)) => a.is_idle(x, now),
        (Policy::SlidingCounter(a), State::SlidingCounter(x)) => a.is_idle(x, now),
        _ => unreachable!(),
    }
}

#[test]
fn idle_exactly_when_state_is_as_good_as_fresh() {
    let t = 60_000 * SEC; // a window boundary for W = 60 s
                          // (kind, still busy at, idle at): each kind's TTL.
    let cases = [
        (AlgorithmKind::TokenBucket, t + 59 * SEC, t + 60 * SEC), // C / r
        (AlgorithmKind::LeakyBucket, t + 59 * SEC, t + 60 * SEC),
        (AlgorithmKind::FixedWindow, t + 59 * SEC, t + 60 * SEC),
        (AlgorithmKind::SlidingWindowLog, t + 59 * SEC, t + 60 * SEC),
        (
            AlgorithmKind::SlidingWindowCounter,
            t + 119 * SEC,
            t + 120 * SEC,
        ), // 2 windows
    ];
    for (kind, busy, free) in cases {
        let p = policy(kind, 1, 60);
        let mut s = p.fresh();
        assert!(p.decide(&mut s, t, 1).unwrap().allowed);
        assert!(!idle(&p, &s, busy), "{kind} idle too early");
        assert!(idle(&p, &s, free), "{kind} not idle after its TTL");
    }
}

#[test]
fn merge_adds_spent_budgets() {
    for kind in AlgorithmKind::ALL {
        let p = policy_full(kind, 10, 60);
        let t = 9_000 * SEC;
        let (mut a, mut b) = (p.fresh(), p.fresh());
        burst(&p, &mut a, t, 4);
        burst(&p, &mut b, t, 5);
        let mut merged = a.clone();
        assert!(p.merge(&mut merged, b, t));
        assert_eq!(burst(&p, &mut merged, t, 10), 1, "{kind}: 10 - 4 - 5 left");
    }
}

#[test]
fn a_charge_counts_what_was_admitted_elsewhere() {
    for kind in AlgorithmKind::ALL {
        let p = policy_full(kind, 10, 60);
        let t = 9_000 * SEC;
        let mut s = p.fresh();
        burst(&p, &mut s, t, 4);
        assert!(p.charge(&mut s, t, 5));
        assert_eq!(burst(&p, &mut s, t, 10), 1, "{kind}: 10 - 4 - 5 charged");
        // A charge past the limit leaves the state full, never wrapped.
        assert!(p.charge(&mut s, t, 50));
        assert_eq!(
            burst(&p, &mut s, t, 10),
            0,
            "{kind}: full after an over-charge"
        );
    }
}

#[test]
fn since_is_what_was_spent_after_the_base_and_nothing_of_it() {
    for kind in AlgorithmKind::ALL {
        let p = policy_full(kind, 10, 60);
        let t = 9_000 * SEC;
        let mut s = p.fresh();
        burst(&p, &mut s, t, 4);
        let base = s.clone();
        burst(&p, &mut s, t + MS, 3);
        let delta = p.since(&s, &base, t + MS).expect("same algorithm");
        // Handed to a node that holds the base already, the delta brings it
        // to 7 spent, not 11.
        let mut owner = base.clone();
        assert!(p.merge(&mut owner, delta, t + MS));
        assert_eq!(burst(&p, &mut owner, t + MS, 10), 3, "{kind}: 10 - 4 - 3");
    }
}

/// A later count need not descend from the base: an owner's count holds
/// its own entries for admissions its copy was charged with only when a
/// gateway reported them, at the copy's time. What the later count holds
/// past the base is still what was spent since.
#[test]
fn since_counts_past_a_base_that_is_not_an_ancestor() {
    for kind in AlgorithmKind::ALL {
        let p = policy_full(kind, 10, 60);
        let t = 9_000 * SEC;
        let mut owner = p.fresh();
        burst(&p, &mut owner, t, 4);
        let mut copy = owner.clone();
        // The owner admits two; one is reported and charged to the copy
        // at the same instant.
        burst(&p, &mut owner, t + 2 * MS, 2);
        assert!(p.charge(&mut copy, t + 2 * MS, 1));
        let delta = p.since(&owner, &copy, t + 2 * MS).expect("same algorithm");
        let mut merged = copy.clone();
        assert!(p.merge(&mut merged, delta, t + 2 * MS));
        assert_eq!(burst(&p, &mut merged, t + 2 * MS, 10), 4, "{kind}: 10 - 6");
    }
}

/// Admissions that aged out of the window are in neither count: the base's
/// old ones are not taken off what the later count spent since.
#[test]
fn since_ignores_what_aged_out_of_the_window() {
    let p = policy_full(AlgorithmKind::SlidingWindowLog, 10, 60);
    let t = 9_000 * SEC;
    let mut s = p.fresh();
    burst(&p, &mut s, t, 6);
    let base = s.clone();
    burst(&p, &mut s, t + 61 * SEC, 3);
    assert_eq!(fresh_handed_since(&p, &s, &base, t + 61 * SEC), 7, "10 - 3");
}

/// How many of ten a fresh count admits at `now`, handed what `later`
/// spent since `base`.
fn fresh_handed_since(p: &Policy, later: &State, base: &State, now: Nanos) -> usize {
    let delta = p.since(later, base, now).expect("same algorithm");
    let mut fresh = p.fresh();
    assert!(p.merge(&mut fresh, delta, now));
    burst(p, &mut fresh, now, 10)
}

/// A full log charged past its limit drops its oldest entries, the base's
/// among them: it holds as many as the base and still spent since. What it
/// holds after the base's newest entry is handed on, or the node holding the
/// base would admit those units a second time.
#[test]
fn since_counts_what_a_full_log_was_charged_past_its_base() {
    let p = policy_full(AlgorithmKind::SlidingWindowLog, 10, 60);
    let t = 9_000 * SEC;
    let mut base = p.fresh();
    burst(&p, &mut base, t, 10);
    let mut s = base.clone();
    assert!(p.charge(&mut s, t + MS, 3));
    assert_eq!(fresh_handed_since(&p, &s, &base, t + MS), 7, "10 - 3");
}

proptest! {
    /// What a holder of the base admits, once handed what a later count spent
    /// since, is never more than the later count admits, at any time after:
    /// whatever the later count decided and was charged, past its limit too.
    #[test]
    fn since_hands_over_all_a_later_log_will_still_hold(
        before in prop::collection::vec((0u64..20_000, 1u64..4), 0..30),
        after in prop::collection::vec((0u64..20_000, 1u64..4, any::<bool>()), 0..30),
    ) {
        for kind in AlgorithmKind::ALL {
            let p = policy_full(kind, 10, 60);
            let mut now = 9_000 * SEC;
            let mut base = p.fresh();
            for &(gap, cost) in &before {
                now += gap * MS;
                p.decide(&mut base, now, cost).unwrap();
            }
            let mut s = base.clone();
            for &(gap, cost, charged) in &after {
                now += gap * MS;
                if charged {
                    prop_assert!(p.charge(&mut s, now, cost));
                } else {
                    p.decide(&mut s, now, cost).unwrap();
                }
            }
            let delta = p.since(&s, &base, now).expect("same algorithm");
            let mut merged = base.clone();
            prop_assert!(p.merge(&mut merged, delta, now));
            for k in 0..=8 {
                let t = now + k * 60 * SEC / 8;
                let holder = burst(&p, &mut merged.clone(), t, 20);
                let later = burst(&p, &mut s.clone(), t, 20);
                prop_assert!(holder <= later, "{kind} at +{k}/8 W: the holder admits {holder}, the later count {later}");
            }
        }
    }
}
