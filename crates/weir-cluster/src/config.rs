//! Every cluster tunable and its default, in one place: the node's configuration embeds [`ClusterConfig`] and its CLI help reads these values.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Which strategy decides checks (`--strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StrategyKind {
    /// Forward each check to the key's owner; exact at steady state.
    #[default]
    Owner,
    /// Count locally, broadcast deltas every sync interval.
    Gossip,
    /// Enforce limit/N alone, N = live members.
    Divide,
}

impl StrategyKind {
    pub const ALL: [StrategyKind; 3] = [
        StrategyKind::Owner,
        StrategyKind::Gossip,
        StrategyKind::Divide,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StrategyKind::Owner => "owner",
            StrategyKind::Gossip => "gossip",
            StrategyKind::Divide => "divide",
        }
    }
}

/// What a node does when a key's owner does not answer (`--on-owner-failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OwnerFailure {
    /// Decide locally with each rule sized limit/N (N = live members).
    #[default]
    Local,
    /// Admit.
    Open,
    /// Refuse with 503 (never 429: the caller is not over its limit).
    Closed,
}

impl OwnerFailure {
    pub const ALL: [OwnerFailure; 3] = [
        OwnerFailure::Local,
        OwnerFailure::Open,
        OwnerFailure::Closed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OwnerFailure::Local => "local",
            OwnerFailure::Open => "open",
            OwnerFailure::Closed => "closed",
        }
    }
}

macro_rules! named_enum {
    ($t:ty, $what:literal) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                <$t>::ALL
                    .into_iter()
                    .find(|k| k.as_str() == s)
                    .ok_or_else(|| format!("unknown {} {s:?}", $what))
            }
        }
    };
}

named_enum!(StrategyKind, "strategy");
named_enum!(OwnerFailure, "owner-failure policy");

/// How quickly membership notices a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GossipProfile {
    /// LAN timings: a crash is noticed in ~3-4 s.
    #[default]
    Lan,
    /// ~1.3-1.8 s; for loopback tests.
    Fast,
}

/// Batching of counter ops to one owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchConfig {
    /// Most ops in one Decide call; 1 turns batching off.
    pub max_items: usize,
    /// How long the first op of a batch waits for company. Zero: only what
    /// is already queued goes along.
    pub linger: Duration,
    /// Decide calls in flight per owner at once.
    pub max_in_flight: usize,
    /// Ops queued per owner before new ones are refused (and decided by the
    /// owner-failure policy): a stalled owner must not grow memory.
    pub queue: usize,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_items: 256,
            linger: Duration::ZERO,
            max_in_flight: 4,
            queue: 16_384,
        }
    }
}

impl BatchConfig {
    /// One op per call with up to `max_in_flight` calls at once: the
    /// no-batching baseline the benchmark compares against.
    pub fn unbatched(max_in_flight: usize) -> Self {
        BatchConfig {
            max_items: 1,
            max_in_flight,
            ..BatchConfig::default()
        }
    }
}

/// How N nodes decide as one limiter. Everything here has a default; a
/// node's address and identity are given to [`crate::Cluster::start`].
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    pub strategy: StrategyKind,
    /// Gossip strategy: how often counts go to every peer.
    pub sync_interval: Duration,
    /// How long a gateway waits for an owner's answer before applying
    /// `on_owner_failure`. One LAN hop is ~0.5 ms and a batch of
    /// 256 ops adds well under a millisecond, so the default 5 ms is ~10x the
    /// expected answer: an owner that has not answered by then has spent
    /// the check's whole latency budget (5 ms).
    pub owner_deadline: Duration,
    pub on_owner_failure: OwnerFailure,
    pub batch: BatchConfig,
    pub gossip_profile: GossipProfile,
    /// Nodes to join through (`host:port` of their gossip sockets). Names
    /// that do not resolve at start are retried for a few seconds, then
    /// again every `reseed_interval` while this node knows no peer: a DNS
    /// record that appears late would otherwise leave it a cluster of one.
    pub seeds: Vec<String>,
    pub reseed_interval: Duration,
    /// Shared secret: gossip is sealed under it and every peer call
    /// carries a token derived from it.
    pub secret: Option<String>,
    /// Secrets also accepted, never used to seal or sign
    /// (`--cluster-secret-accept`): gossip sealed and tokens made under any
    /// of them are taken, so a ring rotates its secret in rolling restarts
    /// (docs/security.md).
    pub secret_accept: Vec<String>,
    /// Anti-entropy: how often each node pulls the rule set from one random peer.
    pub rules_sync_interval: Duration,
    /// While an owner is in fallback, how often one check probes it.
    pub fallback_probe: Duration,
    /// Graceful leave (`--leave-timeout`): the bound on handing every
    /// counter over and waiting for peers to drop this node. Counters not
    /// handed over by then cost what a crash costs.
    pub leave_timeout: Duration,
    /// How long a node given seeds waits for one of them to answer before
    /// it takes itself for its cluster's first member (`--join-timeout`);
    /// its checks wait meanwhile and `/readyz` says it is joining. None:
    /// five announce intervals of the gossip profile (5 s on the LAN one).
    pub join_timeout: Option<Duration>,
    /// Denials cached at most (distinct hash parts).
    pub deny_cache_keys: usize,
    /// Copies of every counter in all (`--replicas`): 2 streams each
    /// owner's changes to the next member on the ring, which stands in for
    /// an unreachable owner and takes over a dead one with its counts; 1
    /// keeps a single copy, lost with its owner.
    pub replicas: usize,
    /// Without a secret, take gossip and peer calls from anyone who can
    /// reach the ports (`--insecure-open-cluster`): anyone can then join
    /// the ring, own keys and replace the rules. Off, a node without a
    /// secret takes neither and stays a cluster of one.
    pub insecure_open: bool,
    /// Forwarded checks go to their owners over gRPC only, not on direct
    /// connections (`--peer-grpc-only`). Off, each owner that takes direct
    /// connections (`net::direct`) gets its Decide calls on one, and every
    /// other peer call stays on gRPC.
    pub grpc_only: bool,
    /// Checks per second at its owner from which a key is hot, and leased
    /// to the gateways sending it (`--hot-key-rate`).
    pub hot_key_rate: u64,
    /// Most checks per second one node admits without their owner, over
    /// every key (`--fallback-cap`; 0: no cap).
    pub fallback_cap: u64,
    /// This node's region and the other regions' nodes (`--region`,
    /// `--region-peers`): rules with `scope = "global"` then hold across
    /// every region. None: one region, every rule regional.
    pub region: Option<crate::regions::RegionConfig>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            strategy: StrategyKind::Owner,
            sync_interval: Duration::from_millis(100),
            owner_deadline: Duration::from_millis(5),
            on_owner_failure: OwnerFailure::Local,
            batch: BatchConfig::default(),
            gossip_profile: GossipProfile::Lan,
            seeds: Vec::new(),
            reseed_interval: Duration::from_secs(5),
            secret: None,
            secret_accept: Vec::new(),
            rules_sync_interval: Duration::from_secs(5),
            fallback_probe: Duration::from_millis(200),
            // Half a million counters took 3.3-3.4 s to hand over on the
            // 2-vCPU host (docs/cluster.md, "Graceful leave"), so at that
            // rate about three times as many fit; with the drain timeout it
            // stays inside every deploy file's stop timeout.
            leave_timeout: Duration::from_secs(10),
            join_timeout: None,
            deny_cache_keys: 100_000,
            replicas: 2,
            insecure_open: false,
            grpc_only: false,
            hot_key_rate: 100,
            // The fail-open local bucket: one node's share of 100,000 req/s over 20 nodes.
            fallback_cap: 5_000,
            region: None,
        }
    }
}

impl ClusterConfig {
    /// The cluster secret, then every accepted one: what opens gossip and
    /// what a peer token may be made under.
    pub(crate) fn secrets(&self) -> impl Iterator<Item = &str> {
        self.secret
            .iter()
            .chain(&self.secret_accept)
            .map(String::as_str)
    }

    /// Why this configuration cannot run, naming the setting.
    pub fn validate(&self) -> Result<(), &'static str> {
        if self.owner_deadline.is_zero() {
            return Err("owner_deadline must be longer than zero");
        }
        if self.join_timeout.is_some_and(|t| t.is_zero()) {
            return Err("join_timeout must be longer than zero");
        }
        if self.sync_interval.is_zero() {
            return Err("sync_interval must be longer than zero");
        }
        if !(1..=2).contains(&self.replicas) {
            return Err("replicas must be 1 or 2 (copies of each counter in all)");
        }
        if self.hot_key_rate == 0 {
            return Err("hot_key_rate must be at least 1 check per second");
        }
        if self.secret.as_deref() == Some("") {
            return Err("cluster secret must not be empty");
        }
        if self.secret.is_some() && self.insecure_open {
            return Err("a cluster with a secret cannot also be open to anyone");
        }
        if self.secret_accept.iter().any(String::is_empty) {
            return Err("an accepted cluster secret must not be empty");
        }
        if !self.secret_accept.is_empty() && self.secret.is_none() {
            return Err("accepted cluster secrets need a cluster secret to seal and sign with");
        }
        if let Some(r) = &self.region {
            if r.name.is_empty() {
                return Err("region name must not be empty");
            }
            if self.strategy != StrategyKind::Owner {
                return Err("regions need the owner strategy: a region's share of a global key is held by the key's owner");
            }
            if r.round.is_zero() {
                return Err("region round must be longer than zero");
            }
        }
        if !self.seeds.is_empty() && self.secret.is_none() && !self.insecure_open {
            return Err("seeds without a secret: a node without one takes no gossip");
        }
        Ok(())
    }
}

impl fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("strategy", &self.strategy)
            .field("sync_interval", &self.sync_interval)
            .field("owner_deadline", &self.owner_deadline)
            .field("on_owner_failure", &self.on_owner_failure)
            .field("batch", &self.batch)
            .field("gossip_profile", &self.gossip_profile)
            .field("seeds", &self.seeds)
            .field("reseed_interval", &self.reseed_interval)
            // Never print key material.
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("secret_accept", &self.secret_accept.len())
            .field("rules_sync_interval", &self.rules_sync_interval)
            .field("fallback_probe", &self.fallback_probe)
            .field("leave_timeout", &self.leave_timeout)
            .field("join_timeout", &self.join_timeout)
            .field("deny_cache_keys", &self.deny_cache_keys)
            .field("replicas", &self.replicas)
            .field("insecure_open", &self.insecure_open)
            .field("grpc_only", &self.grpc_only)
            .field("hot_key_rate", &self.hot_key_rate)
            .field("fallback_cap", &self.fallback_cap)
            .finish()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_region_needs_a_name_and_the_owner_strategy() {
        let mut c = ClusterConfig {
            region: Some(crate::regions::RegionConfig::new("eu")),
            ..ClusterConfig::default()
        };
        assert_eq!(c.validate(), Ok(()));
        c.strategy = StrategyKind::Gossip;
        assert!(c.validate().unwrap_err().contains("owner strategy"));
        c.strategy = StrategyKind::Owner;
        c.region = Some(crate::regions::RegionConfig::new(""));
        assert!(c.validate().unwrap_err().contains("region name"));
    }

    use super::*;

    #[test]
    fn names_read_back_and_unknown_ones_are_named() {
        for k in StrategyKind::ALL {
            assert_eq!(k.as_str().parse::<StrategyKind>(), Ok(k));
        }
        for p in OwnerFailure::ALL {
            assert_eq!(p.to_string().parse::<OwnerFailure>(), Ok(p));
        }
        assert_eq!(
            "redis".parse::<StrategyKind>(),
            Err("unknown strategy \"redis\"".to_string())
        );
    }

    #[test]
    fn a_zero_deadline_or_an_empty_secret_is_refused() {
        assert_eq!(ClusterConfig::default().validate(), Ok(()));
        let zero = ClusterConfig {
            owner_deadline: Duration::ZERO,
            ..ClusterConfig::default()
        };
        assert!(zero.validate().unwrap_err().contains("owner_deadline"));
        let empty = ClusterConfig {
            secret: Some(String::new()),
            ..ClusterConfig::default()
        };
        assert!(empty.validate().unwrap_err().contains("secret"));
        let shown = format!(
            "{:?}",
            ClusterConfig {
                secret: Some("hunter2".into()),
                secret_accept: vec!["hunter3".into()],
                ..ClusterConfig::default()
            }
        );
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(!shown.contains("hunter3"), "{shown}");
    }

    #[test]
    fn an_accepted_secret_is_neither_empty_nor_alone() {
        let rotating = ClusterConfig {
            secret: Some("new".into()),
            secret_accept: vec!["old".into()],
            ..ClusterConfig::default()
        };
        assert_eq!(rotating.validate(), Ok(()));
        assert_eq!(rotating.secrets().collect::<Vec<_>>(), ["new", "old"]);
        let empty = ClusterConfig {
            secret_accept: vec![String::new()],
            ..rotating.clone()
        };
        assert!(empty.validate().unwrap_err().contains("accepted"));
        let alone = ClusterConfig {
            secret: None,
            ..rotating
        };
        assert!(alone
            .validate()
            .unwrap_err()
            .contains("need a cluster secret"));
    }
}
