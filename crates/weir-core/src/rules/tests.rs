//! Rules files: every bad rule refused by name and field; precedence as docs/configuration.md states it.

use std::time::Duration;

use super::*;

const GOOD: &str = r#"
version = 7

[[rule]]
name      = "charges-per-client"
tier      = "free"
client    = "cust_42"
route     = "POST /v1/charges"
by        = "client"
algorithm = "sliding_window_counter"
limit     = 100
window    = "60s"
shadow    = false

[[rule]]
name      = "burst"
algorithm = "token_bucket"
limit     = 100
window    = "1m"
burst     = 20
"#;

#[test]
fn parses_the_design_example() {
    let set = RuleSet::from_toml(GOOD).unwrap();
    assert_eq!(set.version(), 7);
    let r = &set.rules()[0];
    assert_eq!(&*r.name, "charges-per-client");
    assert_eq!(r.window, Duration::from_secs(60));
    assert_eq!(r.by, By::Client);
    assert_eq!(set.rules()[1].burst, Some(20));
}

fn one_rule(fields: &str) -> String {
    format!("[[rule]]\nname = \"r1\"\n{fields}\n")
}

fn refused(text: &str) -> RuleError {
    match RuleSet::from_toml(text) {
        Err(RulesError::Rule(e)) => e,
        other => panic!("expected a rule error for {text:?}, got {other:?}"),
    }
}

#[test]
fn each_bad_field_is_refused_by_rule_and_field() {
    let base = "algorithm = \"fixed_window\"\nlimit = 10\nwindow = \"60s\"";
    let cases = [
        (
            "algorithm = \"magic\"\nlimit = 10\nwindow = \"60s\"",
            "algorithm",
        ),
        (
            "algorithm = \"fixed_window\"\nlimit = 0\nwindow = \"60s\"",
            "limit",
        ),
        (
            "algorithm = \"fixed_window\"\nlimit = -5\nwindow = \"60s\"",
            "limit",
        ),
        (
            "algorithm = \"fixed_window\"\nlimit = nan\nwindow = \"60s\"",
            "limit",
        ),
        (
            "algorithm = \"fixed_window\"\nlimit = inf\nwindow = \"60s\"",
            "limit",
        ),
        (
            "algorithm = \"fixed_window\"\nlimit = 1.5\nwindow = \"60s\"",
            "limit",
        ),
        (
            "algorithm = \"fixed_window\"\nlimit = \"10\"\nwindow = \"60s\"",
            "limit",
        ),
        (
            "algorithm = \"fixed_window\"\nlimit = 10\nwindow = \"0s\"",
            "window",
        ),
        (
            "algorithm = \"fixed_window\"\nlimit = 10\nwindow = \"soon\"",
            "window",
        ),
        (
            "algorithm = \"fixed_window\"\nlimit = 10\nwindow = -5",
            "window",
        ),
        (
            "algorithm = \"fixed_window\"\nlimit = 10\nwindow = nan",
            "window",
        ),
        (
            "algorithm = \"fixed_window\"\nlimit = 10\nwindow = -inf",
            "window",
        ),
        (
            "algorithm = \"token_bucket\"\nlimit = 10\nwindow = \"60s\"\nburst = 0",
            "burst",
        ),
        (
            "algorithm = \"fixed_window\"\nlimit = 10\nwindow = \"60s\"\nburst = 3",
            "burst",
        ),
        (
            "algorithm = \"fixed_window\"\nlimit = 10\nwindow = \"60s\"\nby = \"cookie\"",
            "by",
        ),
        (
            "algorithm = \"fixed_window\"\nlimit = 10\nwindow = \"60s\"\nshadow = \"yes\"",
            "shadow",
        ),
        (
            "algorithm = \"fixed_window\"\nlimit = 10\nwindow = \"60s\"\nlimt = 3",
            "limt",
        ),
        ("algorithm = \"fixed_window\"\nwindow = \"60s\"", "limit"),
        ("limit = 10\nwindow = \"60s\"", "algorithm"),
        (&format!("{base}\nroute = \"\""), "route"),
    ];
    for (fields, field) in cases {
        let e = refused(&one_rule(fields));
        assert_eq!(
            (e.rule.as_str(), e.field.as_str()),
            ("r1", field),
            "{fields}: {e}"
        );
    }
}

#[test]
fn a_nameless_rule_is_named_by_position() {
    let e = refused("[[rule]]\nname = \"ok\"\nalgorithm = \"fixed_window\"\nlimit = 1\nwindow = \"1s\"\n[[rule]]\nalgorithm = \"fixed_window\"\nlimit = 1\nwindow = \"1s\"");
    assert_eq!((e.rule.as_str(), e.field.as_str()), ("#2", "name"));
}

#[test]
fn duplicate_names_and_ties_refuse_the_whole_set() {
    let r = "algorithm = \"fixed_window\"\nlimit = 1\nwindow = \"1s\"";
    let dup =
        format!("[[rule]]\nname = \"a\"\n{r}\n[[rule]]\nname = \"a\"\n{r}\nroute = \"GET /x\"");
    assert_eq!(refused(&dup).field, "name");
    let tie = format!(
        "[[rule]]\nname = \"a\"\n{r}\nroute = \"GET /a/*\"\n[[rule]]\nname = \"b\"\n{r}\nroute = \"GET /*/b\""
    );
    let e = refused(&tie);
    assert_eq!((e.rule.as_str(), e.field.as_str()), ("b", "route"));
    // Same shape, different method: no request meets both, so no tie.
    let ok = format!(
        "[[rule]]\nname = \"a\"\n{r}\nroute = \"GET /a/*\"\n[[rule]]\nname = \"b\"\n{r}\nroute = \"PUT /*/b\""
    );
    assert!(RuleSet::from_toml(&ok).is_ok());
}

#[test]
fn unknown_top_level_keys_and_syntax_errors_are_refused() {
    assert_eq!(refused("rules = 3").field, "rules");
    assert!(matches!(
        RuleSet::from_toml("[[rule]\nname="),
        Err(RulesError::Syntax { .. })
    ));
}

const LADDER: &str = r#"
[[rule]]
name = "global"
algorithm = "fixed_window"
limit = 1000
window = "60s"
[[rule]]
name = "route-any"
route = "GET /v1/*"
algorithm = "fixed_window"
limit = 900
window = "60s"
[[rule]]
name = "route-exact"
route = "GET /v1/users"
algorithm = "fixed_window"
limit = 800
window = "60s"
[[rule]]
name = "tier"
tier = "free"
algorithm = "fixed_window"
limit = 700
window = "60s"
[[rule]]
name = "tier-route"
tier = "free"
route = "GET /v1/*"
algorithm = "fixed_window"
limit = 600
window = "60s"
[[rule]]
name = "client"
client = "c1"
algorithm = "fixed_window"
limit = 500
window = "60s"
[[rule]]
name = "client-route"
client = "c1"
route = "GET /v1/*"
algorithm = "fixed_window"
limit = 400
window = "60s"
[[rule]]
name = "per-ip"
by = "ip"
algorithm = "fixed_window"
limit = 300
window = "60s"
"#;

fn winners(
    set: &RuleSet,
    key: &str,
    route: &str,
    tier: Option<&str>,
    ip: Option<&str>,
) -> Vec<String> {
    set.select(&Subject {
        key,
        route,
        tier,
        ip,
    })
    .iter()
    .map(|s| set.rules()[s.rule].name.to_string())
    .collect()
}

#[test]
fn the_most_specific_rule_of_each_dimension_wins() {
    let set = RuleSet::from_toml(LADDER).unwrap();
    let w = |key, route, tier| winners(&set, key, route, tier, None)[0].clone();
    assert_eq!(w("c1", "GET /v1/x", Some("free")), "client-route");
    assert_eq!(w("c1", "POST /x", Some("free")), "client");
    assert_eq!(w("c2", "GET /v1/x", Some("free")), "tier-route");
    assert_eq!(w("c2", "POST /x", Some("free")), "tier");
    assert_eq!(w("c2", "GET /v1/x", None), "route-any");
    assert_eq!(
        w("c2", "GET /v1/users", None),
        "route-exact",
        "exact beats wildcard"
    );
    assert_eq!(w("c2", "POST /x", None), "global");
    // The IP dimension applies only when the request carries an IP.
    assert_eq!(winners(&set, "c2", "POST /x", None, None).len(), 1);
    assert_eq!(
        winners(&set, "c2", "POST /x", None, Some("203.0.113.9")),
        ["global", "per-ip"]
    );
}

/// Guard: each winner is keyed on its own attribute, in the order client,
/// IP, client shadow, IP shadow, and an IP rule applies to nobody without
/// an IP (a selection holds the key and the IP once, its winners naming
/// which).
#[test]
fn each_winner_is_keyed_on_its_own_attribute_in_slot_order() {
    // Listed in the reverse of slot order, so the order is the selection's.
    let rule = |name: &str, fields: &str| {
        format!(
            "[[rule]]\nname = \"{name}\"\n{fields}algorithm = \"fixed_window\"\nlimit = 1\nwindow = \"60s\"\n"
        )
    };
    let set = RuleSet::from_toml(
        &[
            rule("ip-dark", "by = \"ip\"\nshadow = true\n"),
            rule("client-dark", "shadow = true\n"),
            rule("ip", "by = \"ip\"\n"),
            rule("client", ""),
        ]
        .concat(),
    )
    .unwrap();
    let keyed = |ip| {
        let s = Subject {
            key: "alice",
            route: "GET /x",
            tier: None,
            ip,
        };
        set.select(&s)
            .iter()
            .map(|w| {
                (
                    set.rules()[w.rule].name.to_string(),
                    w.hash_part.to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    let pair = |rule: &str, part: &str| (rule.to_string(), part.to_string());
    assert_eq!(
        keyed(Some("10.0.0.1")),
        [
            pair("client", "alice"),
            pair("ip", "10.0.0.1"),
            pair("client-dark", "alice"),
            pair("ip-dark", "10.0.0.1"),
        ]
    );
    assert_eq!(
        keyed(None),
        [pair("client", "alice"), pair("client-dark", "alice")]
    );
}

#[test]
fn a_memo_shared_across_requests_selects_what_each_alone_selects() {
    let set = RuleSet::from_toml(LADDER).unwrap();
    let ip = Some("203.0.113.9");
    // Each request differs from the one before in one attribute, so a
    // memo that ignored it would answer with the previous winners.
    let subjects = [
        ("c2", "GET /v1/x", Some("free"), None),
        ("c2", "GET /v1/x", Some("free"), None),
        ("c2", "POST /x", Some("free"), None),
        ("c2", "POST /x", None, None),
        ("c2", "POST /x", None, ip),
        ("c1", "POST /x", None, ip),
        ("c1", "GET /v1/x", None, ip),
        ("c2", "GET /v1/x", None, ip),
        ("c2", "GET /v1/users", None, ip),
        ("c2", "GET /v1/users", Some("free"), ip),
        ("c2", "GET /v1/users", Some("pro"), ip),
    ];
    let mut memo = SelectMemo::default();
    for (key, route, tier, ip) in subjects {
        let s = Subject {
            key,
            route,
            tier,
            ip,
        };
        assert_eq!(set.select_with(&s, &mut memo), set.select(&s), "{s:?}");
    }
}

#[test]
fn a_longer_pattern_beats_a_shorter_one() {
    let set = RuleSet::from_toml(
        "[[rule]]\nname = \"short\"\nroute = \"GET *\"\nalgorithm = \"fixed_window\"\nlimit = 1\nwindow = \"1s\"\n\
         [[rule]]\nname = \"long\"\nroute = \"GET /v1/*\"\nalgorithm = \"fixed_window\"\nlimit = 1\nwindow = \"1s\"",
    )
    .unwrap();
    assert_eq!(winners(&set, "k", "GET /v1/a", None, None), ["long"]);
    assert_eq!(winners(&set, "k", "GET /v2/a", None, None), ["short"]);
}

#[test]
fn json_rules_take_the_path_tier_and_round_trip() {
    let body = r#"{"rules":[{"name":"p","algorithm":"token_bucket","limit":10,"window":"90s","burst":3}]}"#;
    let rules = RuleSet::parse_tier_json(Some("pro"), body).unwrap();
    assert_eq!(rules[0].tier.as_deref(), Some("pro"));
    let set = RuleSet::new(1, rules).unwrap();
    let back = RuleSet::from_json(&set.to_json().to_string()).unwrap();
    assert_eq!(back.rules()[0].as_ref(), set.rules()[0].as_ref());
    let wrong = r#"{"rules":[{"name":"p","tier":"free","algorithm":"token_bucket","limit":10,"window":"90s"}]}"#;
    let e = RuleSet::parse_tier_json(Some("pro"), wrong).unwrap_err();
    assert_eq!(e.rule_error().unwrap().field, "tier");
    let e = RuleSet::parse_tier_json(None, r#"{"rules":[],"extra":1}"#).unwrap_err();
    assert_eq!(e.rule_error().unwrap().field, "extra");
}

#[test]
fn replacing_a_tier_keeps_the_other_tiers() {
    let set = RuleSet::from_toml(LADDER).unwrap();
    let new = RuleSet::parse_tier_json(
        Some("free"),
        r#"{"rules":[{"name":"free-only","algorithm":"fixed_window","limit":5,"window":"1s"}]}"#,
    )
    .unwrap();
    let next = set.with_tier(Some("free"), new, 2).unwrap();
    let names: Vec<_> = next
        .tier(Some("free"))
        .map(|r| r.name.to_string())
        .collect();
    assert_eq!(names, ["free-only"]);
    assert_eq!(next.rules().len(), set.rules().len() - 2 + 1);
}

#[test]
fn divided_rules_keep_at_least_one() {
    let set = RuleSet::from_toml(LADDER).unwrap();
    let r = set.get("global").unwrap().1;
    assert_eq!(r.divided(5).limit, 200);
    assert_eq!(r.divided(5000).limit, 1);
}

#[test]
fn a_path_tier_a_rule_could_not_hold_is_refused_naming_tier() {
    let body = r#"{"rules":[{"name":"r","algorithm":"fixed_window","limit":1,"window":"1m"}]}"#;
    let long = "t".repeat(65);
    for tier in ["", long.as_str(), "free\n", "a\u{7f}b"] {
        let e = RuleSet::parse_tier_json(Some(tier), body).unwrap_err();
        let re = e.rule_error().unwrap_or_else(|| panic!("{tier:?}: {e}"));
        assert_eq!(re.field, "tier", "{tier:?}");
    }
    let at_most = "t".repeat(64);
    let rules = RuleSet::parse_tier_json(Some(&at_most), body).unwrap();
    assert_eq!(rules[0].tier.as_deref(), Some(at_most.as_str()));
    assert!(RuleSet::parse_tier_json(None, body).is_ok());
}

#[test]
fn hot_defaults_to_lease_for_counting_algorithms_and_off_for_the_log() {
    let set = RuleSet::from_toml(
        r#"
[[rule]]
name = "counter"
algorithm = "sliding_window_counter"
limit = 10
window = "1m"

[[rule]]
name = "log"
client = "c"
algorithm = "sliding_window_log"
limit = 10
window = "1m"
"#,
    )
    .unwrap();
    assert_eq!(set.get("counter").unwrap().1.hot, Hot::Lease);
    assert_eq!(set.get("log").unwrap().1.hot, Hot::Off);
    // The default is not written back, so a listed set parses to itself.
    assert!(set.to_json()["rules"][0].get("hot").is_none());
}

#[test]
fn bad_hot_settings_are_refused_naming_the_field() {
    let rule = |extra: &str, algorithm: &str| {
        format!("[[rule]]\nname = \"r\"\nalgorithm = \"{algorithm}\"\nlimit = 10\nwindow = \"1m\"\n{extra}\n")
    };
    for (extra, algorithm, field) in [
        ("hot = \"lease\"", "sliding_window_log", "hot"),
        ("hot = \"always\"", "token_bucket", "hot"),
        ("shards = 4", "token_bucket", "shards"),
        ("hot = \"shard\"\nshards = 1", "token_bucket", "shards"),
        ("hot = \"shard\"\nshards = 65", "token_bucket", "shards"),
        // Parts of a limit (or burst) of 10 summing to 10 need at most 10.
        ("hot = \"shard\"\nshards = 11", "token_bucket", "shards"),
        (
            "hot = \"shard\"\nburst = 4\nshards = 5",
            "token_bucket",
            "shards",
        ),
    ] {
        let e = RuleSet::from_toml(&rule(extra, algorithm)).unwrap_err();
        let re = e.rule_error().unwrap_or_else(|| panic!("{extra}: {e}"));
        assert_eq!(re.field, field, "{extra}: {e}");
    }
}

#[test]
fn a_sharded_rule_has_sub_counters_that_sum_to_its_limit_and_are_never_selected() {
    let set = RuleSet::from_toml(
        r#"
[[rule]]
name = "whale"
algorithm = "fixed_window"
limit = 100
window = "1m"
hot = "shard"
shards = 8
"#,
    )
    .unwrap();
    let parts: Vec<u64> = (0..8)
        .map(|i| set.get(&format!("whale#{i}")).unwrap().1.limit)
        .collect();
    assert_eq!(parts.iter().sum::<u64>(), 100, "{parts:?}");
    assert!(parts.iter().all(|&p| p == 12 || p == 13), "{parts:?}");
    assert_eq!(set.rules().len(), 9);
    assert_eq!(set.written().count(), 1);
    assert_eq!(set.tier(None).count(), 1);
    // Selection only ever names the rule itself.
    let sel = set.select(&select::Subject {
        key: "anyone",
        route: "GET /",
        tier: None,
        ip: None,
    });
    assert_eq!(sel.len(), 1);
    // Written out and read back: the same set, sub-counters rebuilt once.
    let again = RuleSet::from_json(&set.to_json().to_string()).unwrap();
    assert_eq!(again.rules().len(), 9);
    let moved = set.with_tier(Some("t"), Vec::new(), 2).unwrap();
    assert_eq!(
        moved.rules().len(),
        9,
        "kept rules do not double their shards"
    );
}

#[test]
fn scope_is_regional_unless_a_rule_says_global_and_anything_else_is_refused_by_name() {
    let base = "algorithm = \"fixed_window\"\nlimit = 10\nwindow = \"1s\"";
    let set = RuleSet::from_toml(&one_rule(base)).unwrap();
    assert_eq!(set.rules()[0].scope, crate::rules::Scope::Regional);
    let global = one_rule(&format!("{base}\nscope = \"global\""));
    let set = RuleSet::from_toml(&global).unwrap();
    assert_eq!(set.rules()[0].scope, crate::rules::Scope::Global);
    let back = RuleSet::from_json(&set.to_json().to_string()).unwrap();
    assert_eq!(
        back.rules()[0].scope,
        crate::rules::Scope::Global,
        "survives the wire"
    );
    let e = refused(&one_rule(&format!("{base}\nscope = \"planet\"")));
    assert_eq!(e.field, "scope");
    assert!(e.reason.contains("\"planet\""), "{}", e.reason);
    let e = refused(&one_rule(&format!(
        "{base}\nscope = \"global\"\nhot = \"shard\""
    )));
    assert_eq!(e.field, "scope");
}

#[test]
fn a_selection_holds_the_key_and_the_ip_once_in_88_bytes() {
    // Moved whole several times per check of a batch: at 128 bytes each
    // move was a call to memcpy (docs/performance.md).
    assert_eq!(std::mem::size_of::<Selection>(), 88);
}

/// Guard: a file with no rules reads as an accident unless it says so.
#[test]
fn a_file_without_rules_is_empty_by_accident_unless_it_says_allow_empty() {
    assert!(RulesFile::parse("").unwrap().empty_by_accident());
    assert!(RulesFile::parse("version = 3\n")
        .unwrap()
        .empty_by_accident());
    assert!(!RulesFile::parse("allow_empty = true\n")
        .unwrap()
        .empty_by_accident());
    assert!(!RulesFile::parse(GOOD).unwrap().empty_by_accident());
    let e = refused("allow_empty = \"yes\"\n");
    assert_eq!(
        (e.rule.as_str(), e.field.as_str()),
        ("(rules file)", "allow_empty")
    );
}

/// Guard: a write that would empty a tier holding rules names the field,
/// unless the body says `allow_empty`; a tier already empty may be written empty.
#[test]
fn a_body_emptying_a_tier_is_refused_unless_it_says_allow_empty() {
    let set = RuleSet::from_toml(GOOD).unwrap();
    let body = RuleSet::parse_tier_body(Some("free"), r#"{"rules":[]}"#).unwrap();
    assert!(!body.allow_empty);
    let e = set
        .refuse_emptying(Some("free"), &body.rules, false)
        .unwrap_err();
    let e = e.rule_error().unwrap();
    assert_eq!(e.field, "rules");
    assert!(e.reason.contains("\"free\""), "{}", e.reason);
    let body =
        RuleSet::parse_tier_body(Some("free"), r#"{"rules":[],"allow_empty":true}"#).unwrap();
    assert!(body.allow_empty);
    assert!(set
        .refuse_emptying(Some("free"), &body.rules, body.allow_empty)
        .is_ok());
    assert!(
        set.refuse_emptying(Some("gold"), &[], false).is_ok(),
        "nothing to remove"
    );
    let bad =
        RuleSet::parse_tier_body(Some("free"), r#"{"rules":[],"allow_empty":1}"#).unwrap_err();
    assert_eq!(bad.rule_error().unwrap().field, "allow_empty");
}

/// A divided set (the fallback's, the divide strategy's) shares its set's
/// index instead of building a second one, and selects as it does: the
/// same rules at the same positions, sub-counters included, at 1/n.
#[test]
fn a_divided_set_shares_the_index_and_selects_the_same_rules() {
    let set = RuleSet::from_toml(
        r#"
[[rule]]
name = "api"
route = "/api/*"
algorithm = "token_bucket"
limit = 100
window = "60s"
hot = "shard"
shards = 4

[[rule]]
name = "vip"
client = "cust_42"
algorithm = "fixed_window"
limit = 30
window = "60s"
"#,
    )
    .unwrap();
    let divided = set.divided(3);
    assert!(Arc::ptr_eq(&set.compiled.index, &divided.compiled.index));
    assert_eq!(divided.rules().len(), set.rules().len());
    for (a, b) in set.rules().iter().zip(divided.rules()) {
        assert_eq!(a.name, b.name);
    }
    let subject = |key: &'static str| Subject {
        key,
        route: "/api/orders",
        tier: None,
        ip: None,
    };
    for key in ["cust_42", "someone"] {
        let picked = |s: &RuleSet| -> Vec<usize> {
            s.select(&subject(key)).iter().map(|x| x.rule).collect()
        };
        assert_eq!(picked(&set), picked(&divided));
    }
    assert_eq!(divided.get("vip").unwrap().1.limit, 10);
    let shard = shard_name("api", 1);
    assert_eq!(set.get(&shard).unwrap().0, divided.get(&shard).unwrap().0);
}
