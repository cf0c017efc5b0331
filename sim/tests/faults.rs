//! Faults on a real cluster: a SIGKILLed owner, one restarted at once, a member joining, and a fault the machine cannot run.

mod common;

use common::{one_at_a_time, only, sim};
use weir_sim::score::RunResult;

/// At the node's defaults (two copies of every counter), a SIGKILLed
/// owner costs at most 1% of the keys' limits: its replica holder stands
/// in and then takes over with the counts it was sent.
#[test]
fn owner_over_admission_after_a_kill_at_the_defaults_is_at_most_one_percent() {
    let _one = one_at_a_time();
    let runs = owner_fault("owner-kill", "kill", "5", "12s");
    let r = injected(&runs, "kill");
    let f = r.fault.as_ref().expect("fault report");
    let detected = f
        .detected_after_s
        .expect("survivors never saw the node down");
    assert!(detected < 15.0, "detection took {detected:.1}s");
    at_most_one_percent_over(r, "kill");
}

/// At the node's defaults, an owner SIGKILLed and started again at once
/// with its id and ports (no member declares it down) costs at most 1% of
/// the keys' limits: its replica holders hand the new process their
/// copies. Kept as the old process's, its keys began fresh windows: 9.0%
/// over.
#[test]
fn owner_over_admission_after_an_immediate_restart_at_the_defaults_is_at_most_one_percent() {
    let _one = one_at_a_time();
    let runs = owner_fault("owner-restart", "restart", "5", "12s");
    let r = injected(&runs, "restart");
    at_most_one_percent_over(r, "restart");
}

/// At the node's defaults, a member joining (node 5 leaves, then starts
/// again seeded by node 1 alone, so the others learn of it a gossip round
/// or two apart) costs at most 1% of the keys' limits: the old owners
/// hand its keys' counts to it, and checks a peer still sends them go on
/// to it.
#[test]
fn owner_over_admission_after_a_join_at_the_defaults_is_at_most_one_percent() {
    let _one = one_at_a_time();
    let runs = owner_fault("owner-join", "join", "5", "12s");
    let r = injected(&runs, "join");
    at_most_one_percent_over(r, "join");
}

/// The sim's `fault` workload on an owner cluster of `nodes` at the
/// defaults, injecting `fault`, for `duration`.
fn owner_fault(name: &str, fault: &str, nodes: &str, duration: &str) -> Vec<RunResult> {
    let args = [
        "fault",
        "--fault",
        fault,
        "--strategy",
        "owner",
        "--nodes",
        nodes,
        "--duration",
        duration,
    ];
    sim(name, &args)
}

/// The run of `fault` in `runs`, which the sim injected without an error.
fn injected<'a>(runs: &'a [RunResult], fault: &str) -> &'a RunResult {
    let r = only(runs, "fault", fault);
    let f = r.fault.as_ref().expect("fault report");
    assert!(f.skipped.is_none() && f.error.is_none(), "{f:?}");
    r
}

fn at_most_one_percent_over(r: &RunResult, fault: &str) {
    let b = r.fault_bound.as_ref().expect("fault bound");
    println!("{fault}: over {:.2}%, {b:?}", r.over_pct);
    assert!(
        r.over_pct <= 1.0,
        "{:.2}% over after the {fault}: {b:?}",
        r.over_pct
    );
    assert_eq!(b.keys_over_held, 0, "{b:?}");
}

/// At the node's defaults, with every core spinning beside the nodes and
/// each node in turn stopped for 40 ms: every key admits exactly what the
/// reference does. Slow is not dead.
#[test]
fn owner_is_exact_with_the_cpu_busy_and_nodes_stalling() {
    let _one = one_at_a_time();
    let runs = owner_fault("owner-busy", "busy", "3", "8s");
    let r = only(&runs, "fault", "busy");
    let f = r.fault.as_ref().expect("fault report");
    assert!(f.error.is_none() && f.stalls > 0 && f.hogs > 0, "{f:?}");
    println!(
        "busy: {} stalls, admitted {} of {}",
        f.stalls, r.admitted, r.reference_admitted
    );
    assert_eq!(r.over_pct, 0.0, "over-admitted while busy: {r:?}");
}

/// Needs root and `ip` (network namespaces), as CI has: without them it
/// fails naming what is missing, rather than passing as a skip.
#[test]
fn partition_in_network_namespaces_is_detected_and_heals() {
    let _one = one_at_a_time();
    if let Some(why) = weir_sim::netns::unavailable() {
        panic!("this test needs network namespaces: {why}");
    }
    let runs = owner_fault("partition", "partition", "3", "8s");
    let r = only(&runs, "fault", "partition");
    let f = r.fault.as_ref().expect("fault report");
    assert!(f.skipped.is_none() && f.error.is_none(), "{f:?}");
    assert!(
        f.detected_after_s.is_some(),
        "the cut node was never seen down: {f:?}"
    );
    // Seen down about 3 s after the cut, whole again about 1 s after the
    // heal (3.3-4.4 s from the cut in every run measured, busy or not); a
    // rejoined node that kept its stale suspicions took up to 33 s.
    let healed = f.recovered_after_s.expect("the cluster never healed");
    assert!(
        healed < 15.0,
        "whole again only {healed:.1}s after the cut: {f:?}"
    );
}
