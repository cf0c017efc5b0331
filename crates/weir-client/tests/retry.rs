//! The retry discipline's guards: budget arithmetic, jitter ranges and uniformity, one retrying layer.

use std::cell::{Cell, RefCell};
use std::future::{ready, Ready};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use weir_client::retry::{
    full_jitter, honor_retry_after, retry, server_jitter, Attempt, BudgetError, Classify,
    RetryBudget, RetryPolicy, Stop,
};

fn rng() -> StdRng {
    StdRng::seed_from_u64(0x5eed)
}

fn grants(budget: &RetryBudget, attempts: usize) -> usize {
    (0..attempts).filter(|_| budget.try_retry()).count()
}

// ---- RetryBudget: its guards, exercised ----

#[test]
fn outage_budget_spends_only_its_seed() {
    // Nothing refills during an outage: 10 retries and no more (the 1.0001x case).
    let budget = RetryBudget::new(0.1, 10.0).unwrap();
    assert_eq!(grants(&budget, 100), 10);
}

#[test]
fn ten_successes_at_ratio_one_fund_ten_retries() {
    let budget = RetryBudget::new(1.0, 0.0).unwrap();
    for _ in 0..10 {
        budget.record_success();
    }
    assert_eq!(grants(&budget, 100), 10);
}

#[test]
fn ten_successes_at_ratio_a_tenth_fund_exactly_one_retry() {
    // In f64, 0.1 summed ten times is 0.9999999999999999 and would refuse.
    let budget = RetryBudget::new(0.1, 0.0).unwrap();
    for _ in 0..10 {
        budget.record_success();
    }
    assert_eq!(grants(&budget, 100), 1);
}

#[test]
fn balance_never_goes_negative_and_fractions_do_not_buy_a_retry() {
    let budget = RetryBudget::new(0.5, 2.0).unwrap();
    assert_eq!(grants(&budget, 5), 2);
    assert_eq!(budget.balance(), 0.0);
    budget.record_success();
    assert!(!budget.try_retry(), "half a token must not buy a retry");
    assert_eq!(budget.balance(), 0.5, "a refused retry spends nothing");
}

#[test]
fn zero_ratio_is_allowed_and_never_refills() {
    let budget = RetryBudget::new(0.0, 1.0).unwrap();
    for _ in 0..1000 {
        budget.record_success();
    }
    assert_eq!(grants(&budget, 10), 1);
}

#[test]
fn max_caps_what_a_quiet_period_can_bank() {
    let budget = RetryBudget::new(1.0, 50.0).unwrap().with_max(5.0).unwrap();
    assert_eq!(budget.balance(), 5.0, "the seed is clamped too");
    for _ in 0..1000 {
        budget.record_success();
    }
    assert_eq!(grants(&budget, 100), 5);
}

#[test]
fn nan_infinite_and_negative_parameters_are_refused_naming_the_field() {
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.1] {
        assert!(matches!(
            RetryBudget::new(bad, 10.0),
            Err(BudgetError::Invalid { field: "ratio", .. })
        ));
        assert!(matches!(
            RetryBudget::new(0.1, bad),
            Err(BudgetError::Invalid { field: "seed", .. })
        ));
        assert!(matches!(
            RetryBudget::new(0.1, 10.0).unwrap().with_max(bad),
            Err(BudgetError::Invalid { field: "max", .. })
        ));
    }
    let err = RetryBudget::new(-1.0, 0.0).unwrap_err();
    assert!(err.to_string().contains("ratio"), "{err}");
}

#[test]
fn default_budget_is_the_seeds_ratio_and_seed() {
    let budget = RetryBudget::default();
    assert_eq!(budget.balance(), 10.0);
    assert_eq!(grants(&budget, 100), 10);
    for _ in 0..10 {
        budget.record_success();
    }
    assert_eq!(grants(&budget, 100), 1);
}

#[test]
fn budget_is_shared_across_threads_without_overspending() {
    let budget = Arc::new(RetryBudget::new(0.0, 1000.0).unwrap());
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let budget = Arc::clone(&budget);
            std::thread::spawn(move || grants(&budget, 500))
        })
        .collect();
    let granted: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(granted, 1000);
    assert_eq!(budget.balance(), 0.0);
}

// ---- jitter: ranges ----

const DRAWS: usize = 20_000;
const BINS: usize = 10;
/// Chi-square critical value for 9 degrees of freedom at p = 0.001. A
/// uniform sample exceeds it one time in a thousand; the seed is fixed, so
/// the outcome is reproducible.
const CHI2_CRITICAL_9DF_P001: f64 = 27.877;

/// Pearson's chi-square of `fractions` (each in [0, 1)) against a uniform
/// spread over `BINS` equal bins.
fn chi_square(fractions: impl IntoIterator<Item = f64>) -> f64 {
    let mut counts = [0usize; BINS];
    let mut n = 0usize;
    for f in fractions {
        assert!((0.0..1.0).contains(&f), "fraction {f} outside [0, 1)");
        counts[(f * BINS as f64) as usize] += 1;
        n += 1;
    }
    let expected = n as f64 / BINS as f64;
    counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum()
}

#[test]
fn chi_square_rejects_a_constant_delay() {
    // A constant delay (sleeping exactly Retry-After) is the herd; the
    // uniformity checks below would be vacuous if it passed.
    let constant = chi_square(std::iter::repeat_n(0.999, DRAWS));
    assert!(constant > CHI2_CRITICAL_9DF_P001, "{constant}");
    let half_spread = chi_square((0..DRAWS).map(|i| 0.5 + 0.5 * i as f64 / DRAWS as f64));
    assert!(half_spread > CHI2_CRITICAL_9DF_P001, "{half_spread}");
}

#[test]
fn full_jitter_stays_below_the_capped_exponential() {
    let (base, cap) = (Duration::from_millis(500), Duration::from_secs(30));
    let mut rng = rng();
    for attempt in 0..12 {
        let ceiling = cap.min(base * 2u32.pow(attempt));
        for _ in 0..1000 {
            assert!(full_jitter(attempt, base, cap, &mut rng) < ceiling);
        }
    }
}

#[test]
fn full_jitter_saturates_for_huge_attempts() {
    let mut rng = rng();
    let cap = Duration::from_secs(30);
    for attempt in [31, 32, 63, 64, 127, 128, u32::MAX] {
        assert!(full_jitter(attempt, Duration::from_millis(500), cap, &mut rng) < cap);
        assert!(full_jitter(attempt, Duration::MAX, Duration::MAX, &mut rng) < Duration::MAX);
    }
    // A 1 ns base doubled 40 times is ~18 minutes: still below an hour's cap,
    // so the exponential, not the cap, bounds it.
    let ceiling = Duration::from_nanos(1 << 40);
    for _ in 0..1000 {
        let wait = full_jitter(
            40,
            Duration::from_nanos(1),
            Duration::from_secs(3600),
            &mut rng,
        );
        assert!(wait < ceiling);
    }
    assert_eq!(
        full_jitter(7, Duration::ZERO, cap, &mut rng),
        Duration::ZERO
    );
}

#[test]
fn full_jitter_is_uniform_over_its_interval() {
    let (base, cap) = (Duration::from_millis(500), Duration::from_secs(30));
    let ceiling = Duration::from_secs(4); // attempt 3: 0.5 s x 8
    let mut rng = rng();
    let stat = chi_square(
        (0..DRAWS)
            .map(|_| full_jitter(3, base, cap, &mut rng).as_secs_f64() / ceiling.as_secs_f64()),
    );
    assert!(stat < CHI2_CRITICAL_9DF_P001, "chi-square {stat}");
}

#[test]
fn honor_retry_after_never_sleeps_the_full_value() {
    let mut rng = rng();
    let one_ns = Duration::from_nanos(1);
    for _ in 0..1000 {
        assert_eq!(honor_retry_after(one_ns, &mut rng), Duration::ZERO);
    }
    assert_eq!(honor_retry_after(Duration::ZERO, &mut rng), Duration::ZERO);
    let retry_after = Duration::from_secs(6);
    for _ in 0..DRAWS {
        assert!(honor_retry_after(retry_after, &mut rng) < retry_after);
    }
}

#[test]
fn honor_retry_after_is_uniform_over_the_interval() {
    let retry_after = Duration::from_secs(1);
    let mut rng = rng();
    let stat =
        chi_square((0..DRAWS).map(|_| honor_retry_after(retry_after, &mut rng).as_secs_f64()));
    assert!(stat < CHI2_CRITICAL_9DF_P001, "chi-square {stat}");
}

#[test]
fn server_jitter_spreads_over_base_to_twice_base() {
    let base = Duration::from_secs(1);
    let mut rng = rng();
    let draws: Vec<Duration> = (0..DRAWS).map(|_| server_jitter(base, &mut rng)).collect();
    assert!(draws.iter().all(|d| (base..base * 2).contains(d)));
    let stat = chi_square(
        draws
            .iter()
            .map(|d| (*d - base).as_secs_f64() / base.as_secs_f64()),
    );
    assert!(stat < CHI2_CRITICAL_9DF_P001, "chi-square {stat}");
    assert_eq!(server_jitter(Duration::ZERO, &mut rng), Duration::ZERO);
    assert!(server_jitter(Duration::MAX, &mut rng) == Duration::MAX);
}

// ---- the retry helper ----

#[derive(Debug, Clone, Copy, PartialEq)]
enum Reply {
    Ok,
    TooMany(Option<Duration>),
    Unavailable,
}

impl Classify for Reply {
    fn class(&self) -> Attempt {
        match *self {
            Reply::Ok => Attempt::Done,
            Reply::TooMany(retry_after) => Attempt::RateLimited { retry_after },
            Reply::Unavailable => Attempt::Transient,
        }
    }
}

/// Runs `retry` with `replies` served in order (the last repeats), recording every sleep.
async fn run(
    policy: &RetryPolicy,
    replies: &[Reply],
) -> (weir_client::retry::Outcome<Reply>, u32, Vec<Duration>) {
    let calls = Cell::new(0u32);
    let sleeps = RefCell::new(Vec::new());
    let mut rng = rng();
    let outcome = retry(
        policy,
        &mut rng,
        |wait| -> Ready<()> {
            sleeps.borrow_mut().push(wait);
            ready(())
        },
        || {
            let i = calls.get() as usize;
            // Fail, rather than hang, if a stop condition is lost.
            assert!(i < 1000, "retry never stopped");
            calls.set(calls.get() + 1);
            ready(replies[i.min(replies.len() - 1)])
        },
    )
    .await;
    (outcome, calls.get(), sleeps.into_inner())
}

const SIX_SECONDS: Option<Duration> = Some(Duration::from_secs(6));

fn policy(max_attempts: u32, designated: bool, budget: Option<&Arc<RetryBudget>>) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        base: Duration::from_millis(100),
        cap: Duration::from_secs(2),
        designated_retrier: designated,
        budget: budget.cloned(),
    }
}

#[tokio::test]
async fn non_designated_layer_passes_a_429_through_after_one_call() {
    let budget = Arc::new(RetryBudget::new(0.1, 10.0).unwrap());
    let (outcome, calls, sleeps) = run(
        &policy(3, false, Some(&budget)),
        &[Reply::TooMany(SIX_SECONDS)],
    )
    .await;
    assert_eq!(calls, 1, "3 layers x 3 retries = 27 requests");
    assert_eq!(outcome.value, Reply::TooMany(SIX_SECONDS));
    assert_eq!(outcome.stop, Stop::PassedThrough);
    assert!(sleeps.is_empty());
    assert_eq!(budget.balance(), 10.0, "a pass-through spends nothing");
}

#[tokio::test]
async fn designated_retrier_stops_when_the_budget_is_empty() {
    let budget = Arc::new(RetryBudget::new(0.0, 2.0).unwrap());
    let (outcome, calls, sleeps) = run(
        &policy(10, true, Some(&budget)),
        &[Reply::TooMany(SIX_SECONDS)],
    )
    .await;
    assert_eq!(
        calls, 3,
        "the first call plus the two retries the seed funds"
    );
    assert_eq!(outcome.attempts, 3);
    assert_eq!(outcome.stop, Stop::BudgetEmpty);
    assert_eq!(sleeps.len(), 2, "a refused retry does not sleep first");
    assert!(
        sleeps.iter().all(|&s| s < SIX_SECONDS.unwrap()),
        "{sleeps:?}"
    );
    assert_eq!(budget.balance(), 0.0);
}

#[tokio::test]
async fn retry_after_sleeps_are_jittered_below_the_servers_value() {
    let (outcome, calls, sleeps) =
        run(&policy(200, true, None), &[Reply::TooMany(SIX_SECONDS)]).await;
    assert_eq!((calls, outcome.stop), (200, Stop::AttemptsExhausted));
    assert_eq!(sleeps.len(), 199);
    assert!(
        sleeps.iter().all(|&s| s < SIX_SECONDS.unwrap()),
        "never exactly Retry-After"
    );
    let distinct: std::collections::HashSet<_> = sleeps.iter().collect();
    assert!(distinct.len() > 190, "sleeps must not be one shared value");
    // Retry-After, not the 2 s full-jitter cap, bounds these waits.
    assert!(sleeps.iter().any(|&s| s > Duration::from_secs(2)));
}

#[tokio::test]
async fn a_429_without_retry_after_falls_back_to_full_jitter() {
    let (_, calls, sleeps) = run(&policy(6, true, None), &[Reply::TooMany(None)]).await;
    assert_eq!(calls, 6);
    for (n, s) in sleeps.iter().enumerate() {
        assert!(*s < Duration::from_secs(2).min(Duration::from_millis(100) * 2u32.pow(n as u32)));
    }
}

#[tokio::test]
async fn transient_errors_are_retried_up_to_max_attempts() {
    let (outcome, calls, sleeps) = run(&policy(4, false, None), &[Reply::Unavailable]).await;
    assert_eq!(calls, 4);
    assert_eq!(outcome.stop, Stop::AttemptsExhausted);
    assert_eq!(outcome.value, Reply::Unavailable);
    let ceilings = [100, 200, 400].map(Duration::from_millis);
    assert_eq!(sleeps.len(), 3);
    assert!(
        sleeps.iter().zip(ceilings).all(|(s, c)| *s < c),
        "{sleeps:?}"
    );
}

#[tokio::test]
async fn zero_max_attempts_still_calls_once() {
    let (outcome, calls, _) = run(&policy(0, true, None), &[Reply::Unavailable]).await;
    assert_eq!((calls, outcome.stop), (1, Stop::AttemptsExhausted));
}

#[tokio::test]
async fn a_recovered_call_returns_the_success_and_funds_the_budget() {
    let budget = Arc::new(RetryBudget::new(1.0, 1.0).unwrap());
    let p = policy(5, true, Some(&budget));
    let (outcome, calls, _) = run(&p, &[Reply::Unavailable, Reply::Ok]).await;
    assert_eq!(
        (calls, outcome.value, outcome.stop),
        (2, Reply::Ok, Stop::Done)
    );
    assert_eq!(
        budget.balance(),
        1.0,
        "one token spent, one earned by the success"
    );

    // That earned token is what lets the next call retry once.
    let (outcome, calls, _) = run(&p, &[Reply::Unavailable]).await;
    assert_eq!((calls, outcome.stop), (2, Stop::BudgetEmpty));
}

#[tokio::test(start_paused = true)]
async fn retry_runs_on_tokio_time_without_waiting_for_real() {
    let start = tokio::time::Instant::now();
    let budget = Arc::new(RetryBudget::new(0.0, 3.0).unwrap());
    let calls = Cell::new(0u32);
    let outcome = retry(
        &policy(10, true, Some(&budget)),
        &mut rng(),
        tokio::time::sleep,
        || {
            calls.set(calls.get() + 1);
            ready(Reply::TooMany(SIX_SECONDS))
        },
    )
    .await;
    assert_eq!((calls.get(), outcome.stop), (4, Stop::BudgetEmpty));
    // Three jittered waits, each below 6 s: strictly less than 18 s of virtual time.
    assert!(
        start.elapsed() < Duration::from_secs(18),
        "{:?}",
        start.elapsed()
    );
}

// ---- http::Response classification ----

fn response(status: u16, retry_after: Option<&str>) -> http::Response<()> {
    let mut builder = http::Response::builder().status(status);
    if let Some(value) = retry_after {
        builder = builder.header(http::header::RETRY_AFTER, value);
    }
    builder.body(()).unwrap()
}

#[test]
fn http_responses_classify_by_status_and_retry_after_seconds() {
    assert_eq!(response(200, None).class(), Attempt::Done);
    assert_eq!(response(400, None).class(), Attempt::Done);
    for status in [502, 503, 504] {
        assert_eq!(response(status, None).class(), Attempt::Transient);
    }
    assert_eq!(response(500, None).class(), Attempt::Done);
    assert_eq!(
        response(429, Some("6")).class(),
        Attempt::RateLimited {
            retry_after: SIX_SECONDS
        }
    );
    // An HTTP-date is legal but weir sends seconds; it reads as absent.
    assert_eq!(
        response(429, Some("Sat, 01 Feb 2025 00:01:00 GMT")).class(),
        Attempt::RateLimited { retry_after: None }
    );
}
