//! Moving counters to their new owner when the ring changes or a node leaves.
//!
//! The receiver merges what it gets into what it has (weir-core `absorb`),
//! and a merge adds spent budgets, so a handoff never grants a fresh budget:
//! a key that has used 15 of 20 stays at 15 or more on its new owner.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use prost::Message;
use weir_core::{CounterSnapshot, Limiter, State};
use weir_proto::weir::v1::{CounterState, HandoffRequest};

use super::status::bump;
use super::Net;

/// Bytes of counter state per Handoff call: well under the message ceiling,
/// so a large handoff is several calls rather than one refused one.
const CHUNK_BYTES: usize = 1 << 20;
const HANDOFF_DEADLINE: Duration = Duration::from_secs(2);

fn encode(snap: &CounterSnapshot) -> Option<CounterState> {
    match postcard::to_allocvec(&snap.state) {
        Ok(state) => Some(CounterState {
            rule: snap.rule.clone(),
            key: snap.hash_part.clone(),
            state,
        }),
        Err(e) => {
            tracing::error!(rule = %snap.rule, error = %e, "cannot encode a counter for handoff");
            None
        }
    }
}

fn decode(c: CounterState) -> Option<CounterSnapshot> {
    let state: State = postcard::from_bytes(&c.state).ok()?;
    Some(CounterSnapshot {
        rule: c.rule,
        hash_part: c.key,
        state,
    })
}

/// Folds received counters into `limiter`; returns how many were taken.
/// Counters of rules this node does not know (or that changed algorithm)
/// are dropped: their budget cannot be expressed here.
pub(crate) fn absorb(limiter: &Limiter, counters: Vec<CounterState>) -> u32 {
    let mut accepted = 0;
    for c in counters {
        match decode(c) {
            Some(snap) => accepted += u32::from(limiter.absorb(snap)),
            None => tracing::warn!("dropped a handed-over counter that does not decode"),
        }
    }
    accepted
}

/// A destination: node id and gRPC address.
pub(crate) type Dest = (String, SocketAddr);

/// Sends every snapshot to the owner `owner_of` names. Returns the ones
/// that could not be delivered (owner unknown or not answering).
pub(crate) async fn hand_over(
    net: &Net,
    snaps: Vec<CounterSnapshot>,
    owner_of: impl Fn(&str) -> Option<Dest>,
) -> Vec<CounterSnapshot> {
    let mut by_owner: HashMap<Dest, Vec<CounterSnapshot>> = HashMap::new();
    let mut undelivered = Vec::new();
    for snap in snaps {
        match owner_of(&snap.hash_part) {
            Some(dest) => by_owner.entry(dest).or_default().push(snap),
            None => undelivered.push(snap),
        }
    }
    let sends = by_owner
        .into_iter()
        .map(|(dest, snaps)| async move { send_to(net, &dest, snaps).await });
    for failed in futures::future::join_all(sends).await {
        undelivered.extend(failed);
    }
    undelivered
}

/// Sends `snaps` to one owner in chunks; returns those not delivered.
async fn send_to(net: &Net, dest: &Dest, snaps: Vec<CounterSnapshot>) -> Vec<CounterSnapshot> {
    let (id, addr) = dest;
    let mut failed = Vec::new();
    let mut chunk: Vec<(CounterSnapshot, CounterState)> = Vec::new();
    let mut bytes = 0;
    let mut snaps = snaps.into_iter().peekable();
    while let Some(snap) = snaps.next() {
        if let Some(wire) = encode(&snap) {
            bytes += wire.state.len() + wire.key.len() + wire.rule.len();
            chunk.push((snap, wire));
        }
        if bytes < CHUNK_BYTES && snaps.peek().is_some() {
            continue;
        }
        let (originals, counters): (Vec<_>, Vec<_>) =
            std::mem::take(&mut chunk).into_iter().unzip();
        bytes = 0;
        if counters.is_empty() {
            continue;
        }
        let n = counters.len() as u64;
        let req = HandoffRequest {
            counters,
            from_node: net.me.clone(),
        };
        let encoded = req.encoded_len() as u64;
        match net.peers.handoff(id, *addr, req, HANDOFF_DEADLINE).await {
            Ok(_) => {
                bump(&net.stats.handoffs_sent, 1);
                bump(&net.stats.handoff_bytes, encoded);
                bump(&net.stats.keys_moved_out, n);
            }
            Err(e) => {
                tracing::warn!(owner = %id, counters = n, error = %e, "handoff failed");
                failed.extend(originals);
            }
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use weir_core::{FakeClock, LimiterConfig, RuleSet};

    #[test]
    fn a_handed_over_counter_keeps_its_spent_budget() {
        let rules = RuleSet::from_toml(
            "[[rule]]\nname = \"r\"\nalgorithm = \"sliding_window_log\"\nlimit = 5\nwindow = \"60s\"\n",
        )
        .unwrap();
        let clock = Arc::new(FakeClock::at_secs(1000.0));
        let old = Limiter::new(rules.clone(), clock.clone(), LimiterConfig::default());
        let new = Limiter::new(rules, clock, LimiterConfig::default());
        for _ in 0..3 {
            assert!(old.consume("r", "k", 1, old.now()).unwrap().allowed);
        }
        // The new owner already admitted one on a fresh counter.
        assert!(new.consume("r", "k", 1, new.now()).unwrap().allowed);
        let wire: Vec<_> = old
            .take_unless(|_| false)
            .iter()
            .filter_map(encode)
            .collect();
        assert_eq!(absorb(&new, wire), 1);
        let d = new.consume("r", "k", 1, new.now()).unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, 0, "3 + 1 + this one = 5");
        assert!(!new.consume("r", "k", 1, new.now()).unwrap().allowed);
    }

    #[test]
    fn counters_of_unknown_rules_and_garbage_are_dropped() {
        let clock = Arc::new(FakeClock::at_secs(1000.0));
        let l = Limiter::new(RuleSet::empty(), clock, LimiterConfig::default());
        let garbage = CounterState {
            rule: "r".into(),
            key: "k".into(),
            state: vec![0xff, 0xff, 0xff],
        };
        assert_eq!(absorb(&l, vec![garbage]), 0);
    }
}
