//! The limiter end to end in one process: all-or-nothing, shadow, guards.

use std::sync::Arc;
use std::time::Duration;

use weir_core::{
    CheckError, CheckRequest, Clock, FakeClock, InputField, Limiter, LimiterConfig, Placed,
    RuleSet, Unavailable,
};

const RULES: &str = r#"
[[rule]]
name = "per-client"
algorithm = "sliding_window_log"
limit = 5
window = "60s"

[[rule]]
name = "per-ip"
by = "ip"
algorithm = "fixed_window"
limit = 3
window = "60s"

[[rule]]
name = "dark"
client = "shadowed"
algorithm = "fixed_window"
limit = 1
window = "60s"
shadow = true
"#;

fn limiter() -> (Limiter, Arc<FakeClock>) {
    let clock = Arc::new(FakeClock::at_secs(6_000.0));
    let rules = RuleSet::from_toml(RULES).unwrap();
    (
        Limiter::new(rules, clock.clone(), LimiterConfig::default()),
        clock,
    )
}

fn req(key: &str, ip: Option<&str>) -> CheckRequest {
    CheckRequest {
        ip: ip.map(str::to_string),
        ..CheckRequest::new(key, "GET /")
    }
}

fn remaining(l: &Limiter, key: &str) -> u64 {
    let v = l.check(&req(key, None)).unwrap();
    v.binding().unwrap().decision.remaining
}

#[test]
fn a_limit_that_denies_consumes_nothing_from_the_others() {
    let (l, _) = limiter();
    // Three clients behind one IP spend the IP's 3.
    for c in ["a", "b", "c"] {
        assert!(l.check(&req(c, Some("198.51.100.7"))).unwrap().allowed);
    }
    let v = l.check(&req("d", Some("198.51.100.7"))).unwrap();
    assert!(!v.allowed);
    assert_eq!(&*v.binding().unwrap().rule.name, "per-ip");
    // d's own per-client budget was refunded: its next check sees 4 left of 5.
    assert_eq!(remaining(&l, "d"), 4);
}

#[test]
fn a_client_denial_leaves_the_ip_budget_alone() {
    let (l, _) = limiter();
    for _ in 0..5 {
        assert!(l.check(&req("busy", None)).unwrap().allowed);
    }
    assert!(!l.check(&req("busy", Some("192.0.2.1"))).unwrap().allowed);
    // The IP still has all 3.
    for c in ["x", "y", "z"] {
        assert!(l.check(&req(c, Some("192.0.2.1"))).unwrap().allowed, "{c}");
    }
}

#[test]
fn shadow_rules_count_but_never_deny() {
    let (l, _) = limiter();
    let first = l.check(&req("shadowed", None)).unwrap();
    assert!(first.allowed && first.shadow_denials().count() == 0);
    let second = l.check(&req("shadowed", None)).unwrap();
    assert!(second.allowed);
    assert_eq!(second.shadow_denials().count(), 1);
    assert_eq!(&*second.binding().unwrap().rule.name, "per-client");
}

#[test]
fn ipv6_spellings_share_one_counter() {
    let (l, _) = limiter();
    for ip in ["2001:db8::1", "2001:0db8:0:0:0:0:0:1", "2001:DB8::1"] {
        assert!(l.check(&req("k", Some(ip))).unwrap().allowed);
    }
    assert!(!l.check(&req("k2", Some("2001:db8::1"))).unwrap().allowed);
}

#[test]
fn ipv4_is_kept_as_sent_because_only_canonical_spellings_parse() {
    // The limiter keys IPv4 counters on the text as sent; that is sound only
    // while every other spelling of an address is refused.
    let (l, _) = limiter();
    for alias in ["010.0.0.1", "10.1", "10.0.0.1 ", "0x0a.0.0.1"] {
        assert!(
            matches!(
                l.check(&req("k", Some(alias))),
                Err(CheckError::Invalid {
                    field: InputField::Ip,
                    ..
                })
            ),
            "{alias} was accepted"
        );
    }
    for c in ["a", "b", "c"] {
        assert!(l.check(&req(c, Some("10.0.0.1"))).unwrap().allowed);
    }
    assert!(!l.check(&req("d", Some("10.0.0.1"))).unwrap().allowed);
}

#[test]
fn bad_input_is_refused_and_moves_nothing() {
    let (l, _) = limiter();
    let long = "k".repeat(257);
    let cases: Vec<(CheckRequest, InputField)> = vec![
        (CheckRequest::new("k", "GET /").cost(0), InputField::Cost),
        (CheckRequest::new("", "GET /"), InputField::Key),
        (CheckRequest::new(&long, "GET /"), InputField::Key),
        (CheckRequest::new("k\n", "GET /"), InputField::Key),
        (req("k", Some("not-an-ip")), InputField::Ip),
    ];
    for (r, field) in cases {
        match l.check(&r) {
            Err(CheckError::Invalid { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
    let e = l
        .check(&CheckRequest::new("k", "GET /").cost(6))
        .unwrap_err();
    assert!(
        matches!(e, CheckError::CostExceedsLimit { max: 5, .. }),
        "{e}"
    );
    assert_eq!(l.keys(), 0, "no refused request created a key");
    assert_eq!(remaining(&l, "k"), 4);
}

#[test]
fn requests_no_rule_matches_are_unlimited() {
    let l = Limiter::new(
        RuleSet::empty(),
        Arc::new(FakeClock::new(0)),
        LimiterConfig::default(),
    );
    let v = l
        .check(&CheckRequest::new("anyone", "GET /").cost(1_000_000))
        .unwrap();
    assert!(v.allowed && v.binding().is_none());
}

#[test]
fn unchanged_rules_keep_their_counters_across_a_reload() {
    let (l, _) = limiter();
    for _ in 0..5 {
        l.check(&req("k", None)).unwrap();
    }
    let mut next = RuleSet::from_toml(RULES).unwrap().rules().to_vec();
    next.retain(|r| &*r.name != "per-ip");
    let set = RuleSet::new(2, next.iter().map(|r| (**r).clone()).collect()).unwrap();
    l.install(set);
    assert!(
        !l.check(&req("k", None)).unwrap().allowed,
        "spend survived the reload"
    );
}

#[test]
fn the_budget_returns_with_the_clock() {
    let (l, clock) = limiter();
    for _ in 0..5 {
        l.check(&req("k", None)).unwrap();
    }
    let denied = l.check(&req("k", None)).unwrap();
    let wait = denied.binding().unwrap().decision.retry_after;
    assert_eq!(wait, Duration::from_secs(60));
    clock.advance(wait);
    assert!(l.check(&req("k", None)).unwrap().allowed);
    clock.advance(Duration::from_secs(120));
    assert!(l.sweep() >= 1);
}

#[test]
fn carried_limits_of_many_values_share_one_ceiling_and_never_lock_each_other_out() {
    // Once each distinct carried limit took one of 256 tables; 256 yearly
    // overrides then refused every later override for up to two years.
    let clock = Arc::new(FakeClock::at_secs(6_000.0));
    let l = Limiter::new(
        RuleSet::empty(),
        clock.clone(),
        LimiterConfig {
            max_keys_per_rule: 1_000,
        },
    );
    let year = Duration::from_secs(365 * 24 * 3600);
    let yearly = |n: u64| weir_core::Rule::carried(&format!("override:{n}-per-year"), n, year);
    for n in 1..=400 {
        assert!(l.check_adhoc(&yearly(n).unwrap(), "k", 1).unwrap().allowed);
    }
    assert_eq!(l.adhoc_keys(), 400);
}

#[test]
fn carried_limits_are_refused_only_when_every_held_key_is_live() {
    let clock = Arc::new(FakeClock::at_secs(6_000.0));
    let l = Limiter::new(
        RuleSet::empty(),
        clock.clone(),
        LimiterConfig {
            max_keys_per_rule: 3,
        },
    );
    let per_sec = weir_core::Rule::carried("override:5-per-second", 5, Duration::from_secs(1));
    let per_min = weir_core::Rule::carried("override:5-per-minute", 5, Duration::from_secs(60));
    let (per_sec, per_min) = (per_sec.unwrap(), per_min.unwrap());
    // One ceiling over every carried limit: three keys in all, not per limit.
    l.check_adhoc(&per_sec, "a", 1).unwrap();
    l.check_adhoc(&per_min, "b", 1).unwrap();
    l.check_adhoc(&per_min, "c", 1).unwrap();
    assert!(matches!(
        l.check_adhoc(&per_sec, "d", 1),
        Err(CheckError::Unavailable(Unavailable::CarriedFull {
            max_keys: 3
        }))
    ));
    assert_eq!(l.store_counts().refused_full, 1);
    // Two seconds on, "a" is at rest: the next new key takes its room with
    // no sweep run by anyone, and nothing live was dropped.
    clock.advance(Duration::from_secs(2));
    assert!(l.check_adhoc(&per_sec, "d", 1).unwrap().allowed);
    assert_eq!(l.store_counts().dropped_at_rest, 1);
    assert_eq!(
        l.check_adhoc(&per_min, "b", 1).unwrap().remaining,
        3,
        "b kept its spend"
    );
}

#[test]
fn a_check_placed_partly_elsewhere_consumes_nothing_and_hands_back_its_selection() {
    let (l, _) = limiter();
    let ip = "198.51.100.9";
    let placed = l
        .check_placed(&req("here", Some(ip)), |_, hash_part| hash_part == "here")
        .unwrap();
    let Placed::Elsewhere(rules, sel) = placed else {
        panic!("the IP's limit is placed elsewhere: {placed:?}");
    };
    let names: Vec<&str> = sel.iter().map(|s| &*rules.rules()[s.rule].name).collect();
    assert_eq!(names, ["per-client", "per-ip"]);
    // Nothing was spent on either limit.
    assert_eq!(remaining(&l, "here"), 4);
    let all_here = l
        .check_placed(&req("there", Some(ip)), |_, _| true)
        .unwrap();
    let Placed::Decided(v) = all_here else {
        panic!("every limit is here: {all_here:?}");
    };
    assert!(v.allowed);
    assert_eq!(v.applied.len(), 2);
    assert_eq!(v.applied[1].decision.remaining, 2, "the IP's 3, one spent");
}

#[test]
fn a_resized_limit_keeps_what_callers_spent_for_counting_algorithms_only() {
    let rules = |limit: u64| {
        RuleSet::from_toml(&format!(
            r#"
            [[rule]]
            name = "counted"
            client = "c"
            algorithm = "sliding_window_counter"
            limit = {limit}
            window = "60s"

            [[rule]]
            name = "bucket"
            client = "b"
            algorithm = "token_bucket"
            limit = {limit}
            window = "60s"
            "#
        ))
        .unwrap()
    };
    let clock = Arc::new(FakeClock::at_secs(6_000.0));
    let l = Limiter::new(rules(10), clock.clone(), LimiterConfig::default());
    for key in ["c", "b"] {
        for _ in 0..6 {
            assert!(l.check(&req(key, None)).unwrap().allowed);
        }
    }
    // Halved: the counter's caller has spent 6 of the new 5, the bucket's
    // caller gets a fresh bucket (its state is relative to the old capacity).
    l.install_resized(rules(5));
    assert!(!l.check(&req("c", None)).unwrap().allowed);
    assert!(l.check(&req("b", None)).unwrap().allowed);
    // Doubled: 6 spent of 20 leaves 14.
    l.install_resized(rules(20));
    assert_eq!(remaining(&l, "c"), 13);
    // A plain install of a changed rule starts it fresh.
    l.install(rules(10));
    assert_eq!(remaining(&l, "c"), 9);
}

/// Two carried limits of one name with different values (a divided
/// override after the member count changed, or two overrides a peer sent)
/// once deadlocked the thread on the adhoc map's own shard lock.
#[test]
fn a_carried_rule_whose_limit_changed_is_decided_not_deadlocked() {
    let l = Arc::new(Limiter::new(
        RuleSet::empty(),
        Arc::new(FakeClock::at_secs(6_000.0)),
        LimiterConfig::default(),
    ));
    let (done, finished) = std::sync::mpsc::channel();
    let worker = l.clone();
    std::thread::spawn(move || {
        let five = weir_core::Rule::carried("o@local", 5, Duration::from_secs(60)).unwrap();
        let six = weir_core::Rule::carried("o@local", 6, Duration::from_secs(60)).unwrap();
        let first = worker.check_adhoc(&five, "k", 1).unwrap();
        let second = worker.check_adhoc(&six, "k", 1).unwrap();
        let _ = done.send((first.remaining, second.remaining));
    });
    let remaining = finished
        .recv_timeout(Duration::from_secs(10))
        .expect("the second check returned instead of hanging");
    assert_eq!(
        remaining,
        (4, 4),
        "the resized limit keeps what the caller spent"
    );
}

/// A region's share as a gate: `room` units, what was taken and given back.
#[derive(Default)]
struct Share {
    room: std::sync::Mutex<u64>,
}

impl weir_core::Gate for Share {
    fn take(&self, _: &weir_core::Rule, _: &str, cost: u64, _: u64) -> Result<(), Duration> {
        let mut room = self.room.lock().unwrap();
        if *room < cost {
            return Err(Duration::from_millis(250));
        }
        *room -= cost;
        Ok(())
    }
    fn give_back(&self, _: &weir_core::Rule, _: &str, _: u64, cost: u64) {
        *self.room.lock().unwrap() += cost;
    }
}

const GLOBAL: &str = r#"
[[rule]]
name = "global"
algorithm = "fixed_window"
limit = 3
window = "60s"
scope = "global"

[[rule]]
name = "per-ip"
by = "ip"
algorithm = "fixed_window"
limit = 1
window = "60s"
"#;

/// A limiter of [`GLOBAL`] and a share with `room` units, not yet set as
/// its gate.
fn global(room: u64) -> (Limiter, Arc<Share>) {
    let clock = Arc::new(FakeClock::at_secs(6_000.0));
    let l = Limiter::new(
        RuleSet::from_toml(GLOBAL).unwrap(),
        clock,
        LimiterConfig::default(),
    );
    let share = Arc::new(Share::default());
    *share.room.lock().unwrap() = room;
    (l, share)
}

/// A check of key "k" from `ip`, which both of [`GLOBAL`]'s rules meet.
fn from_ip(ip: &str) -> CheckRequest {
    CheckRequest {
        ip: Some(ip.into()),
        ..CheckRequest::new("k", "GET /")
    }
}

#[test]
fn a_global_rule_admits_only_what_both_its_share_and_its_counter_admit() {
    let (l, share) = global(2);
    assert!(l.set_gate(share.clone()));
    assert!(l.check(&from_ip("10.0.0.1")).unwrap().allowed);
    assert_eq!(*share.room.lock().unwrap(), 1);
    // Refused by the other limit: the share's unit comes back.
    assert!(!l.check(&from_ip("10.0.0.1")).unwrap().allowed);
    assert_eq!(*share.room.lock().unwrap(), 1, "given back");
    assert!(l.check(&from_ip("10.0.0.2")).unwrap().allowed);
    // The share is spent: refused though the counter (3) has room.
    let v = l.check(&from_ip("10.0.0.3")).unwrap();
    assert!(!v.allowed);
    assert_eq!(
        v.applied[0].decision.retry_after,
        Duration::from_millis(250)
    );
    assert_eq!(
        l.remaining("global", "k"),
        Some(1),
        "the counter was not spent"
    );
    // An owner's single op goes through the share too, and its refund.
    *share.room.lock().unwrap() = 5;
    let d = l.consume("global", "k", 1, 6_000_000_000_000).unwrap();
    assert!(d.allowed);
    assert_eq!(*share.room.lock().unwrap(), 4);
    l.refund("global", "k", d.at, 1);
    assert_eq!(*share.room.lock().unwrap(), 5);
    // The counter refuses (3 spent): the share gets its unit back.
    l.consume("global", "k", 1, 6_000_000_000_000).unwrap();
    let d = l.consume("global", "k", 1, 6_000_000_000_000).unwrap();
    assert!(!d.allowed);
    assert_eq!(
        *share.room.lock().unwrap(),
        4,
        "given back on a counter refusal"
    );
}

#[test]
fn a_check_placed_at_an_instant_is_decided_at_that_instant_not_the_clocks() {
    let (l, clock) = limiter();
    let ip = Some("203.0.113.4");
    for c in ["a", "b", "c"] {
        assert!(l.check(&req(c, ip)).unwrap().allowed);
    }
    // The IP's fixed window is spent at the clock's instant, but a batch
    // stamped a window later is decided in that window.
    let later = clock.now() + Duration::from_secs(60).as_nanos() as u64;
    let at = |key: &str, now| match l.check_placed_at(&req(key, ip), now, |_, _| true) {
        Ok(Placed::Decided(v)) => v.allowed,
        other => panic!("every limit is here: {other:?}"),
    };
    assert!(!at("d", clock.now()), "the window the clock is in is spent");
    assert!(at("e", later), "the next window is not");
}

/// A batch is decided in order from one snapshot: each request sees what
/// the ones before it spent, and one whose limit is placed elsewhere comes
/// back undecided, consuming nothing.
#[test]
fn a_batch_is_placed_and_decided_in_order() {
    let (l, clock) = limiter();
    let ip = Some("203.0.113.9");
    let batch: Vec<CheckRequest> = ["a", "elsewhere", "b", "c", "d"]
        .iter()
        .map(|k| req(k, ip))
        .collect();
    let here = |_: &weir_core::Rule, hash_part: &str| !hash_part.contains("elsewhere");
    let out: Vec<Option<bool>> = l
        .check_placed_all_at(&batch, clock.now(), here)
        .into_iter()
        .map(|p| match p.unwrap() {
            Placed::Decided(v) => Some(v.allowed),
            Placed::Elsewhere(..) => None,
        })
        .collect();
    // per-ip allows 3 a minute; "elsewhere" spent none of them.
    assert_eq!(out, [Some(true), None, Some(true), Some(true), Some(false)]);
}

/// Guard: a batch trusts an item's route and tier only when an earlier
/// item with the same ones passed validation. Each item here differs from
/// the one before in its route or its tier, valid or not, so a batch that
/// trusted a route whatever its tier (or the reverse), or trusted one that
/// had failed, would let a bad item through.
#[test]
fn a_batch_refuses_a_bad_route_or_tier_as_a_lone_check_does() {
    let (l, clock) = limiter();
    let item = |route: &str, tier: Option<&str>| {
        let r = CheckRequest::new("k", route);
        match tier {
            Some(t) => r.tier(t),
            None => r,
        }
    };
    let batch = [
        item("GET /a", None),
        item("GET /a", Some("gold")),
        item("GET /a", Some("go\u{1}ld")),
        item("GET /a", Some("go\u{1}ld")),
        item("GET /a", Some("gold")),
        item("GET /a\u{7f}", Some("gold")),
        item("GET /a\u{7f}", Some("gold")),
        item("GET /a", Some("gold")),
        item(&"/".repeat(1025), Some("gold")),
        item("GET /a", None),
    ];
    let field = |r: Result<(), CheckError>| r.err().and_then(|e| e.field());
    let alone: Vec<_> = batch
        .iter()
        .map(|r| field(r.validate().map(drop)))
        .collect();
    assert_eq!(
        alone.iter().filter(|f| f.is_some()).count(),
        5,
        "the bad items: {alone:?}"
    );
    let batched: Vec<_> = l
        .check_placed_all_at(&batch, clock.now(), |_, _| true)
        .into_iter()
        .map(|p| field(p.map(drop)))
        .collect();
    assert_eq!(batched, alone);
}

/// Guard: a limiter made behind another's gate (a node's copies of its
/// peers' counters) takes a global rule's share from that gate, even one
/// set after the copy was made, while keeping counters of its own.
#[test]
fn a_limiter_behind_anothers_gate_takes_its_share_set_later_and_counts_apart() {
    let (main, share) = global(1);
    let copy = Limiter::behind_gate_of(&main);
    assert!(main.set_gate(share.clone()));
    assert!(copy.check(&from_ip("10.0.0.1")).unwrap().allowed);
    assert_eq!(*share.room.lock().unwrap(), 0, "the copy took main's share");
    assert!(
        !copy.check(&from_ip("10.0.0.2")).unwrap().allowed,
        "share spent"
    );
    // The counters are the copy's own: main's are untouched.
    *share.room.lock().unwrap() = 1;
    let v = main.check(&from_ip("10.0.0.3")).unwrap();
    assert!(v.allowed);
    assert_eq!(v.applied[0].decision.remaining, 2);
}
