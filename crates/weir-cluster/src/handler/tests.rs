//! Every message a peer can send, generated at random and handed to a real node's handler: no panic, no hang, and nothing taken that breaks an invariant (a key past the ceiling, a count that wraps, a version past the bound, a node that stops deciding).

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use weir_core::{CheckRequest, Limiter, LimiterConfig, RuleSet, State, MAX_RULES_VERSION};
use weir_proto::weir::v1::{
    CarriedLimit, CountDelta, CounterOp, CounterState, DecideRequest, HandoffRequest,
    ReplicateRequest, RuleSet as WireRuleSet, SyncRequest, TierRules,
};

use crate::cluster::Cluster;
use crate::config::{ClusterConfig, StrategyKind};
use crate::memory::MemoryNet;
use crate::strategy::gossip::GossipStrategy;

/// Every algorithm, each as a rule a peer may name.
const RULES: &str = r#"
[[rule]]
name = "tb"
client = "tb"
algorithm = "token_bucket"
limit = 5
window = "60s"

[[rule]]
name = "lb"
client = "lb"
algorithm = "leaky_bucket"
limit = 5
window = "60s"
queue = 3

[[rule]]
name = "fw"
client = "fw"
algorithm = "fixed_window"
limit = 5
window = "60s"

[[rule]]
name = "log"
client = "log"
algorithm = "sliding_window_log"
limit = 5
window = "60s"

[[rule]]
name = "sc"
algorithm = "sliding_window_counter"
limit = 5
window = "60s"
"#;
const RULE_NAMES: [&str; 6] = ["tb", "lb", "fw", "log", "sc", "unknown"];
const MAX_KEYS: usize = 8;
/// Longer than anything a handler may take on a handful of items.
const HANG: Duration = Duration::from_secs(10);

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

struct One {
    rt: tokio::runtime::Runtime,
    cluster: Cluster,
    limiter: Arc<Limiter>,
    _net: MemoryNet,
}

/// A node alone on the in-memory network, deciding by `strategy`, under
/// paused time: a hang shows as the timeout firing, and a test can move
/// the node's clock windows ahead in no real time.
fn node(strategy: StrategyKind) -> One {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let net = {
        let _in = rt.enter();
        MemoryNet::new()
    };
    let limiter = Arc::new(Limiter::new(
        RuleSet::from_toml(RULES).unwrap(),
        net.clock(),
        LimiterConfig {
            max_keys_per_rule: MAX_KEYS,
        },
    ));
    let config = ClusterConfig {
        strategy,
        ..ClusterConfig::default()
    };
    let cluster = rt
        .block_on(net.start("node", config, limiter.clone()))
        .unwrap();
    One {
        rt,
        cluster,
        limiter,
        _net: net,
    }
}

impl One {
    fn within<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        self.rt
            .block_on(async { tokio::time::timeout(HANG, f).await })
            .expect("the handler answered instead of hanging")
    }

    /// The node still decides, and within bounds: a fresh key of every
    /// rule admits, and no table holds more than its ceiling.
    fn still_sound(&self) {
        for (name, held) in self.limiter.keys_per_rule() {
            assert!(held <= MAX_KEYS, "{name} holds {held} keys");
        }
        for rule in ["tb", "lb", "fw", "log", "sc"] {
            if let Ok(v) = self.limiter.check(&CheckRequest::new(rule, "GET /")) {
                for a in &v.applied {
                    assert!(
                        a.decision.remaining <= a.decision.limit,
                        "{}: remaining {} over limit {}",
                        a.rule.name,
                        a.decision.remaining,
                        a.decision.limit
                    );
                }
            }
        }
        assert!(self.limiter.rules().version() <= MAX_RULES_VERSION);
    }
}

fn rule_name() -> impl Strategy<Value = String> {
    prop::sample::select(RULE_NAMES.to_vec()).prop_map(str::to_string)
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec!["tb", "lb", "fw", "log", "sc", "k"]).prop_map(str::to_string),
        ".{0,300}",
    ]
}

fn op() -> impl Strategy<Value = CounterOp> {
    (
        rule_name(),
        key(),
        prop_oneof![Just(1u64), any::<u64>()],
        0i32..4,
        any::<u64>(),
        prop::option::of((any::<u64>(), any::<u64>())),
        prop::sample::select(vec!["", "node", "ghost"]),
        any::<bool>(),
        any::<u64>(),
        prop_oneof![Just(0u64), any::<u64>()],
        any::<u64>(),
    )
        .prop_map(
            |(
                rule,
                key,
                cost,
                kind,
                at,
                carried,
                stand_in_for,
                asked_back,
                asker_boot,
                expires_at,
                checks,
            )| {
                CounterOp {
                    rule,
                    key,
                    cost,
                    kind,
                    at,
                    carried: carried.map(|(limit, window_ns)| CarriedLimit { limit, window_ns }),
                    stand_in_for: stand_in_for.to_string(),
                    sent_on: false,
                    asked_back,
                    asker_boot,
                    expires_at,
                    checks,
                    traceparent: String::new(),
                }
            },
        )
}

/// A state of any algorithm with any field values, encoded as peers send it.
fn state_bytes() -> impl Strategy<Value = Vec<u8>> {
    let n = any::<u64>;
    let json = prop_oneof![
        (any::<f64>(), n())
            .prop_map(|(t, ts)| serde_json::json!({"TokenBucket": {"tokens": t, "ts": ts}})),
        (n(), n())
            .prop_map(|(tat, last)| serde_json::json!({"LeakyBucket": {"tat": tat, "last": last}})),
        (n(), n()).prop_map(
            |(idx, count)| serde_json::json!({"FixedWindow": {"idx": idx, "count": count}})
        ),
        (prop::collection::vec((n(), any::<u32>()), 0..8), n())
            .prop_map(|(e, used)| serde_json::json!({"SlidingLog": {"entries": e, "used": used}})),
        (n(), n(), n()).prop_map(
            |(h, p, c)| serde_json::json!({"SlidingCounter": {"high": h, "prev": p, "curr": c}})
        ),
    ];
    prop_oneof![
        json.prop_map(|j| {
            let s: State = serde_json::from_value(j).unwrap();
            postcard::to_allocvec(&s).unwrap()
        }),
        prop::collection::vec(any::<u8>(), 0..64),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn decide_with_any_ops_answers_each_and_leaves_the_node_sound(
        ops in prop::collection::vec(op(), 0..12),
    ) {
        let n = node(StrategyKind::Owner);
        let handler = n.cluster.handler().clone();
        let count = ops.len();
        let req = DecideRequest { ops, rules_version: 0, from_node: "peer".into() };
        let answer = n.within(handler.decide(req));
        prop_assert_eq!(answer.results.len(), count);
        n.still_sound();
    }

    #[test]
    fn handed_over_states_are_checked_and_capped(
        counters in prop::collection::vec((rule_name(), key(), state_bytes()), 0..24),
        carried in prop::collection::vec(prop::option::of((any::<u64>(), prop_oneof![Just(60_000_000_000u64), any::<u64>()])), 24),
        boot in any::<u64>(),
        at in any::<u64>(),
    ) {
        let n = node(StrategyKind::Owner);
        let handler = n.cluster.handler().clone();
        // Some of them as carried limits' counters, with any limit and window.
        let counters: Vec<CounterState> = counters
            .into_iter()
            .zip(carried)
            .map(|((rule, key, state), carried)| CounterState {
                rule,
                key,
                state,
                carried: carried.map(|(limit, window_ns)| CarriedLimit { limit, window_ns }),
            })
            .collect();
        let sent: Vec<(String, String)> = counters
            .iter()
            .filter(|c| c.carried.is_none())
            .map(|c: &CounterState| (c.rule.clone(), c.key.clone()))
            .collect();
        let req = HandoffRequest {
            counters,
            from_node: "peer".into(),
            boot,
            at,
            ..Default::default()
        };
        let _ = n.within(handler.handoff(req));
        // Every state taken decides like one this node made: within bounds
        // now, and free again once three windows have passed. A state that
        // claimed a far-future time would hold its key for good.
        let in_runtime = n.rt.enter();
        for (rule, key) in &sent {
            if let Ok(d) = n.limiter.consume(rule, key, 1, n.limiter.now()) {
                prop_assert!(d.remaining <= d.limit);
            }
        }
        drop(in_runtime);
        prop_assert!(n.limiter.adhoc_keys() <= MAX_KEYS, "carried keys past the ceiling");
        n.rt.block_on(tokio::time::advance(Duration::from_secs(180)));
        // The node's clock is the runtime's paused one: read it from inside.
        let _in = n.rt.enter();
        for (rule, key) in &sent {
            if key.is_empty() || rule == "unknown" {
                continue;
            }
            let d = n.limiter.consume(rule, key, 1, n.limiter.now());
            prop_assert!(d.as_ref().is_ok_and(|d| d.allowed), "{rule}/{key:?}: {d:?}");
        }
        n.still_sound();
    }

    #[test]
    fn replicated_states_are_checked_and_capped(
        states in prop::collection::vec((rule_name(), key(), state_bytes()), 0..24),
        at in any::<u64>(),
    ) {
        let n = node(StrategyKind::Owner);
        let handler = n.cluster.handler().clone();
        let states = states
            .into_iter()
            .map(|(rule, key, state)| CounterState { rule, key, state, carried: None })
            .collect();
        // From a member (the node itself is the only one on its ring).
        let req = ReplicateRequest { from_node: "node".into(), states, boot: 1, at };
        let taken = n.within(async { handler.replicate(req) }).accepted as usize;
        prop_assert!(taken <= 5 * MAX_KEYS, "{taken} copies past the ceiling");
        n.still_sound();
    }

    #[test]
    fn sync_counts_hold_no_more_than_the_cap_whatever_is_sent(
        deltas in prop::collection::vec((rule_name(), key(), any::<u64>(), any::<u64>()), 0..64),
        from in prop::sample::select(vec!["node", "stranger"]),
    ) {
        let n = node(StrategyKind::Gossip);
        let handler = n.cluster.handler().clone();
        let deltas = deltas
            .into_iter()
            .map(|(rule, key, window, count)| CountDelta { rule, key, window, count })
            .collect();
        let req = SyncRequest { from_node: from.into(), deltas };
        let _ = n.within(async { handler.sync_counts(req) });
        let gossip = n
            .cluster
            .strategy()
            .as_any()
            .downcast_ref::<GossipStrategy>()
            .expect("a gossip node");
        // Nobody else is on this ring: nothing is taken from anyone.
        prop_assert_eq!(gossip.heard_keys(), 0);
        n.still_sound();
    }

    #[test]
    fn pushed_rule_sets_never_pass_the_version_bound(
        version in prop_oneof![any::<u64>(), Just(u64::MAX), Just(MAX_RULES_VERSION)],
        json in prop_oneof![
            Just(r#"{"rules":[]}"#.to_string()),
            Just(r#"{"rules":[{"name":"x","algorithm":"fixed_window","limit":3,"window":"1s"}]}"#.to_string()),
            ".{0,80}",
        ],
        apart in any::<bool>(),
    ) {
        let n = node(StrategyKind::Owner);
        let handler = n.cluster.handler().clone();
        // A tier's write, at the set's version or apart from it.
        let tier_version = if apart { version / 2 } else { version };
        let tier = TierRules { tier: None, version: tier_version, origin: "peer".into(), rules_json: json, edit: None };
        let wire = WireRuleSet { version, tiers: vec![tier] };
        let _ = n.within(async { handler.push_rules(wire).await });
        n.still_sound();
        // A write after any push still lands, or is refused: it never wraps.
        let written = n.cluster.write_rules(|cur| cur.with_tier(None, Vec::new(), cur.next_version()?));
        if let Ok(set) = written {
            prop_assert!(set.version() <= MAX_RULES_VERSION && set.version() > 0);
        }
    }
}

/// A member's counts are taken for the current and previous window of a
/// known rule only, and no more keys than the cap; a window of 2^63 (which
/// never expired) and an unknown rule are refused.
#[test]
fn gossip_counts_from_a_member_are_limited_to_two_windows_known_rules_and_the_cap() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let net = MemoryNet::new();
        let config = |seeds: Vec<String>| ClusterConfig {
            strategy: StrategyKind::Gossip,
            secret: Some("gossip-test".into()),
            gossip_profile: crate::config::GossipProfile::Fast,
            seeds,
            ..ClusterConfig::default()
        };
        let limiter = || {
            Arc::new(Limiter::new(
                RuleSet::from_toml(RULES).unwrap(),
                net.clock(),
                LimiterConfig {
                    max_keys_per_rule: MAX_KEYS,
                },
            ))
        };
        let a = net.start("a", config(Vec::new()), limiter()).await.unwrap();
        let seed = a.identity().gossip.to_string();
        let _b = net.start("b", config(vec![seed]), limiter()).await.unwrap();
        while a.ring().len() < 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let now = a.limiter().now();
        let window = now / 60_000_000_000;
        let delta = |rule: &str, key: String, window: u64| CountDelta {
            rule: rule.into(),
            key,
            window,
            count: 1,
        };
        let mut deltas = vec![
            delta("sc", "current".into(), window),
            delta("sc", "previous".into(), window - 1),
            delta("sc", "older".into(), window - 2),
            delta("sc", "never-expires".into(), 1 << 63),
            delta("unknown", "k".into(), window),
        ];
        // Five rules at MAX_KEYS each: anything past that is refused.
        deltas.extend((0..100).map(|i| delta("sc", format!("k{i}"), window)));
        let req = SyncRequest {
            from_node: "b".into(),
            deltas,
        };
        let taken = a.handler().sync_counts(req).unwrap().applied as usize;
        let cap = MAX_KEYS * 5;
        assert_eq!(taken, cap, "two windows of a known rule, up to the cap");
        let gossip = a
            .strategy()
            .as_any()
            .downcast_ref::<GossipStrategy>()
            .unwrap();
        assert_eq!(gossip.heard_keys(), cap);
        assert_eq!(gossip.heard("sc", "current"), 1);
        assert_eq!(gossip.heard("sc", "never-expires"), 0);
        assert_eq!(a.stats().sync_refused, 105 - cap as u64);
        // Not from a member of the ring: nothing at all.
        let stranger = SyncRequest {
            from_node: "stranger".into(),
            deltas: vec![delta("sc", "x".into(), window)],
        };
        assert!(a.handler().sync_counts(stranger).is_err());
    });
}

/// A counter of rule `fw` for `key`, `count` spent in its first window.
fn fixed_window(key: &str, count: u64) -> CounterState {
    let state = serde_json::json!({"FixedWindow": {"idx": 0, "count": count}});
    CounterState {
        carried: None,
        rule: "fw".into(),
        key: key.into(),
        state: postcard::to_allocvec(&serde_json::from_value::<State>(state).unwrap()).unwrap(),
    }
}

/// Copies are taken only from a member of the ring: a stranger holding
/// the secret but not gossiping cannot plant counts to be promoted, nor a
/// process of a member the ring does not list (a restart it has not heard
/// of yet).
#[test]
fn copies_from_a_node_that_is_not_a_member_are_refused() {
    let n = node(StrategyKind::Owner);
    let handler = n.cluster.handler().clone();
    let boot = n.cluster.identity().boot;
    let from = |node: &str, boot| ReplicateRequest {
        from_node: node.into(),
        states: vec![fixed_window("k", 3)],
        boot,
        at: 0,
    };
    let accepted = |req| n.within(async { handler.replicate(req) }).accepted;
    assert_eq!(accepted(from("stranger", boot)), 0);
    assert_eq!(accepted(from("node", boot ^ 1)), 0, "another process");
    assert_eq!(accepted(from("node", boot)), 1);
}

/// Guard: a handoff call's answer says the receiver asks the sender
/// about the keys the sender would own without it only while it waits
/// for the sender's word and trusts it: not once it gave up waiting, nor
/// while it suspects the sender. Said otherwise, the sender decided those
/// keys' checks itself beside a receiver deciding them on its own count.
#[test]
fn a_handoff_answer_says_whether_the_receiver_asks_the_sender() {
    use crate::topology::membership::NodeIdentity;
    use crate::topology::ring::Ring;
    let n = node(StrategyKind::Owner);
    let handler = n.cluster.handler().clone();
    let me = n.cluster.identity();
    let old = NodeIdentity {
        incarnation: me.incarnation - 1,
        ..NodeIdentity::new("old", me.gossip, me.grpc)
    };
    let before = Ring::with_default_vnodes(std::slice::from_ref(&me));
    let after = Ring::with_default_vnodes(&[me.clone(), old]);
    let owner = &handler.owner;
    owner
        .routing
        .arrivals()
        .ring_changed(&me.id, &before, &after);
    let asks = |key: &str| {
        let req = HandoffRequest {
            counters: vec![fixed_window(key, 1)],
            from_node: "old".into(),
            ..HandoffRequest::default()
        };
        n.within(handler.handoff(req)).unwrap().asks_sender
    };
    assert!(asks("a"), "waits for old's word");
    owner.breakers.suspect(&["old".to_string()]);
    assert!(!asks("b"), "suspects old");
    owner.breakers.suspect(&[]);
    assert!(asks("c"), "trusts old again");
    owner.routing.arrivals().give_up("old");
    assert!(!asks("d"), "gave up waiting");
}
