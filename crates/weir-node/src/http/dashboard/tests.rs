//! The dashboard's document from members' replies, without a network.

use weir_cluster::link::PeerFailure;
use weir_cluster::membership::MemberState;
use weir_cluster::summary::{MemberSummary, Reply};
use weir_cluster::MemberStatus;
use weir_core::RuleSet;
use weir_proto::weir::v1::{
    ActivitySecond, Breaker, BreakerState, Breakers, FallbackSummary, HotKey, HotKeys, NodeSummary,
    RuleActivity,
};

use super::document;

fn status(id: &str, state: MemberState, share: f64) -> MemberStatus {
    MemberStatus {
        id: id.into(),
        gossip: "127.0.0.1:7946".parse().unwrap(),
        grpc: "127.0.0.1:8081".parse().unwrap(),
        state,
        ring_share: share,
        breaker: "closed",
    }
}

fn second(t: u64, rule: &str, allowed: u64, denied: u64, fallback: u64) -> ActivitySecond {
    ActivitySecond {
        unix_s: t,
        rules: vec![RuleActivity {
            rule: rule.into(),
            allowed,
            denied,
            shadow_denied: 0,
        }],
        fallback_decisions: fallback,
        deny_cache_hits: 0,
        replica_decisions: None,
    }
}

fn summary(node: &str, activity: Vec<ActivitySecond>) -> NodeSummary {
    NodeSummary {
        node: node.into(),
        strategy: "owner".into(),
        rules_version: 4,
        fallback: Some(FallbackSummary {
            active: true,
            owners: vec!["c".into()],
            entered_total: 1,
        }),
        activity,
        ..NodeSummary::default()
    }
}

fn rules() -> RuleSet {
    RuleSet::from_toml(
        "[[rule]]\nname = \"per-client\"\nalgorithm = \"fixed_window\"\nlimit = 5\nwindow = \"60s\"\n",
    )
    .unwrap()
}

#[test]
fn activity_adds_up_the_members_that_answered_second_by_second() {
    let replies = vec![
        MemberSummary {
            member: status("a", MemberState::Alive, 0.5),
            reply: Reply::Answered(summary(
                "a",
                vec![
                    second(10, "per-client", 3, 1, 0),
                    second(11, "per-client", 1, 0, 2),
                ],
            )),
        },
        MemberSummary {
            member: status("b", MemberState::Alive, 0.5),
            reply: Reply::Answered(summary("b", vec![second(11, "per-client", 2, 5, 1)])),
        },
        MemberSummary {
            member: status("c", MemberState::Suspect, 0.0),
            reply: Reply::NoAnswer(PeerFailure::Timeout(super::PEER_DEADLINE)),
        },
        MemberSummary {
            member: status("d", MemberState::Down, 0.0),
            reply: Reply::Down,
        },
    ];
    let doc = document("a", "owner", &rules(), &replies);
    let activity = doc["activity"].as_array().unwrap();
    assert_eq!(activity.len(), 2);
    assert_eq!(activity[0]["t"], 10);
    assert_eq!(
        activity[0]["rules"]["per-client"],
        serde_json::json!([3, 1, 0])
    );
    assert_eq!(
        activity[1]["rules"]["per-client"],
        serde_json::json!([3, 5, 0])
    );
    assert_eq!(activity[1]["fallback_decisions"], 3);
    assert!(activity[1].get("replica_decisions").is_none());

    let members = doc["members"].as_array().unwrap();
    assert_eq!(members[0]["self"], true);
    assert_eq!(members[0]["reply"], "answered");
    assert_eq!(members[0]["summary"]["fallback"]["owners"][0], "c");
    assert_eq!(members[2]["reply"], "no_answer");
    assert!(members[2]["error"].as_str().unwrap().contains("400ms"));
    assert!(members[2]["summary"].is_null());
    assert_eq!(members[3]["reply"], "down");
    assert_eq!(doc["rules"]["rules"][0]["name"], "per-client");
}

#[test]
fn figures_a_member_does_not_keep_are_absent_not_zero() {
    let plain = summary("a", vec![]);
    let mut full = summary("b", vec![]);
    full.replica_decisions = Some(7);
    full.breakers = Some(Breakers {
        owners: vec![Breaker {
            owner: "c".into(),
            state: BreakerState::HalfOpen as i32,
        }],
    });
    full.hot_keys = Some(HotKeys {
        keys: vec![HotKey {
            rule: "per-client".into(),
            key: "cust_42".into(),
            checks: 900,
        }],
    });
    let replies = vec![
        MemberSummary {
            member: status("a", MemberState::Alive, 0.5),
            reply: Reply::Answered(plain),
        },
        MemberSummary {
            member: status("b", MemberState::Alive, 0.5),
            reply: Reply::Answered(full),
        },
    ];
    let doc = document("a", "owner", &rules(), &replies);
    let a = &doc["members"][0]["summary"];
    for absent in ["replica_decisions", "breakers", "hot_keys"] {
        assert!(
            a.get(absent).is_none(),
            "{absent} shown for a node without it"
        );
    }
    let b = &doc["members"][1]["summary"];
    assert_eq!(b["replica_decisions"], 7);
    assert_eq!(b["breakers"][0]["state"], "half_open");
    assert_eq!(b["hot_keys"][0]["key"], "cust_42");
}
