//! The index and the tie check against their plain definitions: every pair of rules compared, every rule weighed.

use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::rules::RuleSet;

/// Two rules tie when some request meets both at the same precedence: the
/// definition, pair by pair.
fn tie_pairwise(rules: &[Arc<Rule>]) -> bool {
    rules.iter().enumerate().any(|(j, b)| {
        rules[..j].iter().any(|a| {
            a.by == b.by
                && a.shadow == b.shadow
                && score(a) == score(b)
                && a.client == b.client
                && a.tier == b.tier
                && match (&a.route, &b.route) {
                    (Some(x), Some(y)) => x.overlaps(y),
                    _ => true,
                }
        })
    })
}

/// The winners by weighing every rule: (position, counter key) in slot order.
fn select_by_scan<'s>(rules: &[Arc<Rule>], s: &Subject<'s>) -> Vec<(usize, &'s str)> {
    let mut best: Best = [None; 4];
    for (i, r) in rules.iter().enumerate() {
        if r.shard_of.is_some() || !matches(r, s) {
            continue;
        }
        let slot = &mut best[usize::from(r.by == By::Ip) + 2 * usize::from(r.shadow)];
        if slot.is_none_or(|(sc, _)| score(r) > sc) {
            *slot = Some((score(r), i));
        }
    }
    best.iter()
        .zip([false, true, false, true])
        .filter_map(|(slot, on_ip)| {
            let value = if on_ip { s.ip } else { Some(s.key) };
            Some((slot.as_ref()?.1, value?))
        })
        .collect()
}

const ROUTES: [Option<&str>; 8] = [
    None,
    Some("GET /a"),
    Some("GET /b"),
    Some("GET /*"),
    Some("* /a"),
    Some("GET /a*"),
    Some("*"),
    Some("GET /*a"),
];

fn rule_json(
    i: usize,
    tier: Option<&str>,
    client: Option<&str>,
    route: Option<&str>,
    ip: bool,
    shadow: bool,
) -> String {
    let mut f = vec![
        format!("\"name\":\"r{i}\""),
        "\"algorithm\":\"fixed_window\"".into(),
        "\"limit\":5".into(),
        "\"window\":\"1s\"".into(),
        format!("\"by\":\"{}\"", if ip { "ip" } else { "client" }),
        format!("\"shadow\":{shadow}"),
    ];
    for (k, v) in [("tier", tier), ("client", client), ("route", route)] {
        if let Some(v) = v {
            f.push(format!("\"{k}\":\"{v}\""));
        }
    }
    format!("{{{}}}", f.join(","))
}

type Drawn = (
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
    bool,
    bool,
);

fn arb_rule() -> impl Strategy<Value = Drawn> {
    (
        prop::sample::select(vec![None, Some("free"), Some("pro")]),
        prop::sample::select(vec![None, Some("c1"), Some("c2")]),
        prop::sample::select(ROUTES.to_vec()),
        any::<bool>(),
        prop::bool::weighted(0.2),
    )
}

fn build(drawn: &[Drawn]) -> (Vec<Arc<Rule>>, Result<RuleSet, crate::rules::RulesError>) {
    let list: Vec<String> = drawn
        .iter()
        .enumerate()
        .map(|(i, (t, c, r, ip, sh))| rule_json(i, *t, *c, *r, *ip, *sh))
        .collect();
    let body = format!("{{\"rules\":[{}]}}", list.join(","));
    let rules: Vec<Rule> = crate::rules::parse::set_rules_for_tests(&body);
    let arcs = rules.iter().cloned().map(Arc::new).collect();
    (arcs, RuleSet::new(0, rules))
}

proptest! {
    /// The grouped tie check refuses exactly the sets the pairwise one does.
    #[test]
    fn the_tie_check_refuses_what_comparing_every_pair_refuses(drawn in prop::collection::vec(arb_rule(), 1..12)) {
        let (rules, set) = build(&drawn);
        prop_assert_eq!(set.is_err(), tie_pairwise(&rules), "{:?}", set.err());
    }

    /// The index selects what weighing every rule selects.
    #[test]
    fn the_index_selects_what_a_scan_of_every_rule_selects(
        drawn in prop::collection::vec(arb_rule(), 1..12),
        key in prop::sample::select(vec!["c1", "c2", "c3"]),
        route in prop::sample::select(vec!["GET /a", "GET /b", "POST /a", "GET /ba", "GET /"]),
        tier in prop::sample::select(vec![None, Some("free"), Some("pro"), Some("gold")]),
        ip in prop::sample::select(vec![None, Some("10.0.0.1")]),
    ) {
        let (_, set) = build(&drawn);
        let Ok(set) = set else { return Ok(()) };
        let s = Subject { key, route, tier, ip };
        let sel = set.select(&s);
        let indexed: Vec<(usize, &str)> = sel.iter().map(|w| (w.rule, w.hash_part)).collect();
        prop_assert_eq!(indexed, select_by_scan(set.rules(), &s));
    }
}

/// A set of one rule per tenant route, a wildcard per tier among them.
fn tenants(n: usize) -> RuleSet {
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "[[rule]]\nname = \"t{i}\"\nroute = \"GET /t/{i}\"\nalgorithm = \"fixed_window\"\nlimit = {}\nwindow = \"60s\"\n",
            i + 1
        ));
    }
    text.push_str("[[rule]]\nname = \"free-any\"\ntier = \"free\"\nroute = \"GET /t/*\"\nalgorithm = \"fixed_window\"\nlimit = 7\nwindow = \"60s\"\n");
    RuleSet::from_toml(&text).unwrap()
}

#[test]
fn a_tenant_route_among_thousands_selects_its_own_rule() {
    let set = tenants(5_000);
    let sel = |route, tier| {
        let s = Subject {
            key: "k",
            route,
            tier,
            ip: None,
        };
        set.select(&s)
            .iter()
            .map(|w| set.rules()[w.rule].name.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(sel("GET /t/4321", None), ["t4321"]);
    assert_eq!(
        sel("GET /t/4321", Some("free")),
        ["free-any"],
        "tier+route outranks route alone"
    );
    assert_eq!(sel("GET /t/4321", Some("pro")), ["t4321"]);
    assert!(sel("GET /t/50000", None).is_empty());
    assert_eq!(set.get("t17").map(|(_, r)| r.limit), Some(18));
}

#[test]
fn a_tie_among_thousands_is_found_and_named() {
    let mut text = String::new();
    for i in 0..3_000 {
        text.push_str(&format!(
            "[[rule]]\nname = \"t{i}\"\nroute = \"GET /t/{i}/*\"\nalgorithm = \"fixed_window\"\nlimit = 1\nwindow = \"60s\"\n"
        ));
    }
    text.push_str("[[rule]]\nname = \"late\"\nroute = \"GET /t/1234/*\"\nalgorithm = \"fixed_window\"\nlimit = 1\nwindow = \"60s\"\n");
    let err = RuleSet::from_toml(&text).unwrap_err();
    let e = err.rule_error().expect("a rule error");
    assert_eq!((e.rule.as_str(), e.field.as_str()), ("late", "route"));
    assert!(e.reason.contains("\"t1234\""), "{}", e.reason);
}
