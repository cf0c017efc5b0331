//! What a cluster does with a rule's hot keys: the relief valves of docs/cluster.md ("Hot keys") as a per-rule choice.

use std::fmt;
use std::sync::Arc;

use super::Rule;
use crate::algorithm::{AlgorithmKind, Policy};

/// Most sub-counters a sharded rule may have.
pub const MAX_SHARDS: u32 = 64;
/// Sub-counters of `hot = "shard"` when `shards` is not given.
pub const DEFAULT_SHARDS: u32 = 8;

/// How the owner strategy treats a hot key of a rule. Other strategies
/// decide every key on the gateway and ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hot {
    /// Every check goes to the key's owner.
    Off,
    /// Once a key is hot, its owner leases slices of the remaining budget
    /// to the gateways sending it, which decide from them locally. The
    /// default for the counting algorithms.
    Lease,
    /// k sub-counters of L/k (summing to L), each on the owner of its own
    /// key, each check to one at random: "shard the counter".
    Shard(u32),
    /// Every gateway decides alone against L/N: a dedicated
    /// whale tier, for keys whose traffic really spreads over every node.
    Local,
}

impl Hot {
    /// What a rule does when it does not say: lease for the counting
    /// algorithms; nothing for the sliding log, which is exact and kept for
    /// small limits, nor for a leaky bucket that schedules (a
    /// `queue`), whose delays only its owner can space.
    pub fn default_for(algorithm: AlgorithmKind, queue: Option<u64>) -> Hot {
        if leasable(algorithm, queue) {
            Hot::Lease
        } else {
            Hot::Off
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Hot::Off => "off",
            Hot::Lease => "lease",
            Hot::Shard(_) => "shard",
            Hot::Local => "local",
        }
    }

    /// Parses the `hot` field with the `shards` one (None: not given).
    pub fn parse(
        hot: Option<&str>,
        shards: Option<u64>,
        algorithm: AlgorithmKind,
        queue: Option<u64>,
    ) -> Result<Hot, (&'static str, String)> {
        let hot = match hot {
            None => Hot::default_for(algorithm, queue),
            Some("off") => Hot::Off,
            Some("lease") if !leasable(algorithm, queue) => {
                return Err((
                    "hot",
                    "only counting limits are leased (not a sliding_window_log, which is exact, \
                     nor a leaky bucket with a queue, whose delays its owner spaces); use \
                     \"off\", \"shard\" or \"local\""
                        .into(),
                ))
            }
            Some("lease") => Hot::Lease,
            Some("shard") => Hot::Shard(DEFAULT_SHARDS),
            Some("local") => Hot::Local,
            Some(other) => {
                return Err((
                    "hot",
                    format!("must be \"off\", \"lease\", \"shard\" or \"local\", got \"{other}\""),
                ))
            }
        };
        match (hot, shards) {
            (h, None) => Ok(h),
            (Hot::Shard(_), Some(k)) if (2..=u64::from(MAX_SHARDS)).contains(&k) => {
                Ok(Hot::Shard(k as u32))
            }
            (Hot::Shard(_), Some(k)) => Err((
                "shards",
                format!("must be between 2 and {MAX_SHARDS}, got {k}"),
            )),
            (_, Some(_)) => Err(("shards", "needs hot = \"shard\"".into())),
        }
    }
}

impl fmt::Display for Hot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn leasable(algorithm: AlgorithmKind, queue: Option<u64>) -> bool {
    match algorithm {
        AlgorithmKind::SlidingWindowLog => false,
        AlgorithmKind::LeakyBucket => queue.unwrap_or(0) == 0,
        _ => true,
    }
}

/// Shard `i` of `k` of a budget `v`: the parts differ by at most one and
/// sum to `v` exactly, so the sub-counters together never admit more than
/// the rule.
pub fn part(v: u64, k: u32, i: u32) -> u64 {
    let (k, i) = (u128::from(k), u128::from(i));
    let v = u128::from(v);
    ((i + 1) * v / k - i * v / k) as u64
}

/// The name of sub-counter `i` of rule `name`. `#` is not allowed in rule
/// names, so it never meets a rule of the file.
pub fn shard_name(name: &str, i: u32) -> String {
    format!("{name}#{i}")
}

/// The sub-counter rules of a sharded rule, each with its part of the
/// limit (and burst); none for any other. Parsing refuses more shards
/// than the limit (or burst), so no part is 0; one would still become 1,
/// since a shard that can never admit would refuse every check sent to it.
pub fn shards_of(rule: &Rule) -> Vec<Rule> {
    let Hot::Shard(k) = rule.hot else {
        return Vec::new();
    };
    (0..k)
        .map(|i| {
            let mut r = rule.clone();
            r.name = Arc::from(shard_name(&rule.name, i));
            r.limit = part(rule.limit, k, i).max(1);
            r.burst = rule.burst.map(|b| part(b, k, i).max(1));
            r.hot = Hot::Off;
            r.shard_of = Some(rule.name.clone());
            r.policy = Policy::new(r.algorithm, r.limit, r.window, r.burst, r.queue)
                .expect("a part of a valid rule is valid");
            r
        })
        .collect()
}
