//! The strategies' predicted numbers (docs/cluster.md), measured on real `weir serve` clusters: divide, gossip, owner.

mod common;

use common::{figure, one_at_a_time, only, sim};
use weir_sim::workloads::{single_connection, spread};

/// Owner is exact because one counter decides; the fallback is not. A
/// generous owner deadline keeps two shared cores' scheduling hiccups from
/// sending checks to the fallback, so these pin the strategy, not the machine.
const PATIENT_OWNER: &str = "250ms";

#[test]
fn divide_under_single_connection_admits_about_l_over_n() {
    let _one = one_at_a_time();
    let n = 5;
    let runs = sim(
        "divide-single",
        &["single-connection", "--strategy", "divide", "--nodes", "5"],
    );
    let r = only(&runs, "single-connection", "");
    // Each client's traffic meets one node, which enforces L/N alone:
    // 50/5 = 10 of the 50 the reference admits, a 5x under-admission.
    let per_client = figure(r, "admitted_per_client_x_limit");
    let reference = figure(r, "admitted_per_client_x_limit_reference");
    assert!(
        (0.15..=0.25).contains(&per_client),
        "divide admitted {per_client:.2}xL per client; L/N = {:.2}xL",
        1.0 / n as f64
    );
    assert!((reference - 1.0).abs() < 1e-9, "reference {reference:.2}xL");
    let under = reference / per_client;
    assert!(
        (4.0..=6.0).contains(&under),
        "under-admission {under:.1}x, expected about N = {n}"
    );
}

/// Admitted per key (mean, max) in a synchronized burst under gossip.
fn gossip_burst(sync: &str, n: usize) -> (f64, f64) {
    let nodes = n.to_string();
    let runs = sim(
        "gossip-burst",
        &[
            "burst",
            "--strategy",
            "gossip",
            "--nodes",
            &nodes,
            "--sync-interval",
            sync,
        ],
    );
    let r = only(&runs, "burst", "");
    (
        figure(r, "admitted_per_key_x_limit"),
        figure(r, "admitted_per_key_x_limit_max"),
    )
}

#[test]
fn gossip_burst_admits_well_above_l_never_above_n_l_and_halving_sync_keeps_it() {
    let _one = one_at_a_time();
    let n = 4;
    // Every node sees 2L for one key within a few ms, before any sync
    // lands: each admits up to L on its own, and no more, since
    // 2 x N x L were sent and only N x L may pass.
    let (mean, max) = gossip_burst("200ms", n);
    assert!(
        mean >= 2.0,
        "gossip admitted {mean:.2}xL per key; expected well above L"
    );
    assert!(
        max <= n as f64,
        "gossip admitted {max:.2}xL for one key, above N x L"
    );
    // N x L has no sync interval in it: halving the interval leaves the
    // burst just as far above L.
    let (half_mean, half_max) = gossip_burst("100ms", n);
    assert!(
        half_mean >= 2.0,
        "with half the sync interval gossip admitted {half_mean:.2}xL per key"
    );
    assert!(half_max <= n as f64, "{half_max:.2}xL is above N x L");
    assert!(
        half_mean >= 0.6 * mean,
        "halving the sync interval cut the burst from {mean:.2}xL to {half_mean:.2}xL"
    );
}

/// Every client admitted exactly L, as the reference did, with nothing
/// decided on the fallback.
fn assert_exact(r: &weir_sim::score::RunResult, limit: u64, clients: usize) {
    assert_eq!(
        r.peer.stat("fallback_decisions"),
        0.0,
        "checks went to the fallback"
    );
    assert_eq!(r.keys.len(), clients, "one key per client");
    for k in &r.keys {
        assert_eq!(
            k.admitted, limit,
            "{} admitted {} of {} sent; L = {limit}",
            k.key, k.admitted, k.sent
        );
        assert_eq!(k.reference, limit, "reference for {}", k.key);
    }
}

#[test]
fn owner_admits_exactly_l_under_spread() {
    let _one = one_at_a_time();
    let runs = sim(
        "owner-spread",
        &[
            "spread",
            "--strategy",
            "owner",
            "--nodes",
            "3",
            "--owner-deadline",
            PATIENT_OWNER,
        ],
    );
    assert_exact(only(&runs, "spread", ""), spread::LIMIT, 5);
}

#[test]
fn owner_admits_exactly_l_under_single_connection() {
    let _one = one_at_a_time();
    let runs = sim(
        "owner-single",
        &[
            "single-connection",
            "--strategy",
            "owner",
            "--nodes",
            "3",
            "--owner-deadline",
            PATIENT_OWNER,
        ],
    );
    assert_exact(
        only(&runs, "single-connection", ""),
        single_connection::LIMIT,
        3,
    );
}
