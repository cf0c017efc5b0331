//! What a membership task is told: who this node is, whom to announce to, the secret and foca's timings.

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use super::{MembershipError, NodeIdentity, SEAL_OVERHEAD};

/// Everything [`Membership::start`](super::Membership::start) needs.
#[derive(Clone)]
pub struct MembershipConfig {
    /// This node. A gossip port of 0 (or an unspecified IP) is filled in from
    /// the bound socket, so tests can bind `127.0.0.1:0`.
    pub identity: NodeIdentity,
    /// Gossip addresses to announce to until some peer answers.
    pub seeds: Vec<SocketAddr>,
    /// Shared cluster secret; when set every datagram is sealed under it.
    pub secret: Option<Vec<u8>>,
    /// Secrets also accepted to open datagrams, never used to seal: the
    /// other side of a rotation (docs/security.md). Ignored without `secret`.
    pub accept: Vec<Vec<u8>>,
    /// Without a secret: take gossip from anyone (true) or from no one
    /// (false, the default: a node alone). Ignored with a secret.
    pub insecure_open: bool,
    pub foca: foca::Config,
    /// How often to re-announce to the seeds while this node knows no peer.
    pub announce_interval: Duration,
}

impl std::fmt::Debug for MembershipConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MembershipConfig")
            .field("identity", &self.identity)
            .field("seeds", &self.seeds)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("accept", &self.accept.len())
            .field("insecure_open", &self.insecure_open)
            .field("foca", &self.foca)
            .field("announce_interval", &self.announce_interval)
            .finish()
    }
}

impl MembershipConfig {
    /// Production defaults: [`MembershipConfig::lan_foca_config`], re-announce every second.
    pub fn new(identity: NodeIdentity, seeds: Vec<SocketAddr>) -> Self {
        MembershipConfig {
            identity,
            seeds,
            secret: None,
            accept: Vec::new(),
            insecure_open: false,
            foca: Self::lan_foca_config(),
            announce_interval: Duration::from_secs(1),
        }
    }

    /// Same as [`MembershipConfig::new`] with [`MembershipConfig::fast_foca_config`]
    /// timings, for tests on loopback.
    pub fn fast(identity: NodeIdentity, seeds: Vec<SocketAddr>) -> Self {
        MembershipConfig {
            foca: Self::fast_foca_config(),
            announce_interval: Duration::from_millis(200),
            ..Self::new(identity, seeds)
        }
    }

    pub fn with_secret(mut self, secret: impl Into<Vec<u8>>) -> Self {
        self.secret = Some(secret.into());
        self
    }

    /// Also opens datagrams sealed under `secret` (a rotation's other side).
    pub fn accepting(mut self, secret: impl Into<Vec<u8>>) -> Self {
        self.accept.push(secret.into());
        self
    }

    /// Without a secret, takes gossip from anyone who can reach the socket:
    /// anyone can then join and own keys. For tests and isolated networks.
    pub fn insecure_open(mut self) -> Self {
        self.insecure_open = true;
        self
    }

    /// foca's LAN profile with shorter probing: a crashed node is suspected
    /// after one missed probe (0.5 s) and declared down 2 s later, so the
    /// cluster notices a crash in roughly 3 s instead of foca's 6-7 s.
    /// Down members are remembered for 15 minutes (shown as "down"); since
    /// identities renew, that does not delay a restart's rejoin.
    pub fn lan_foca_config() -> foca::Config {
        foca::Config {
            probe_period: Duration::from_millis(500),
            probe_rtt: Duration::from_millis(150),
            suspect_to_down_after: Duration::from_secs(2),
            remove_down_after: Some(Duration::from_secs(15 * 60)),
            periodic_announce: Some(foca::PeriodicParams {
                frequency: Duration::from_secs(10),
                num_members: NonZeroUsize::MIN,
            }),
            // After a partition heals, each side holds the other as down and
            // neither probes it; this announce is what finds it again (the
            // reply tells the announcer it was declared down, so it renews
            // and rejoins). Every 3 s heals a partition in seconds, for two
            // datagrams per interval.
            periodic_announce_to_down_members: Some(foca::PeriodicParams {
                frequency: Duration::from_secs(3),
                num_members: NonZeroUsize::new(2).expect("non-zero"),
            }),
            ..foca::Config::new_lan(NonZeroU32::new(32).expect("non-zero"))
        }
    }

    /// Aggressive timings for loopback tests: probe every 250 ms, down 1 s
    /// after suspicion. Too twitchy for a real network.
    pub fn fast_foca_config() -> foca::Config {
        foca::Config {
            probe_period: Duration::from_millis(250),
            probe_rtt: Duration::from_millis(100),
            suspect_to_down_after: Duration::from_secs(1),
            remove_down_after: Some(Duration::from_secs(60)),
            periodic_announce: Some(foca::PeriodicParams {
                frequency: Duration::from_secs(2),
                num_members: NonZeroUsize::MIN,
            }),
            periodic_announce_to_down_members: Some(foca::PeriodicParams {
                frequency: Duration::from_secs(1),
                num_members: NonZeroUsize::new(2).expect("non-zero"),
            }),
            periodic_gossip: Some(foca::PeriodicParams {
                frequency: Duration::from_millis(100),
                num_members: NonZeroUsize::new(3).expect("non-zero"),
            }),
            ..foca::Config::new_lan(NonZeroU32::new(8).expect("non-zero"))
        }
    }

    pub(super) fn validate(&self) -> Result<(), MembershipError> {
        let c = &self.foca;
        if c.probe_period.is_zero() || c.probe_rtt.is_zero() || c.suspect_to_down_after.is_zero() {
            return Err(MembershipError::Config(
                "probe_period, probe_rtt and suspect_to_down_after must be non-zero",
            ));
        }
        if c.probe_rtt >= c.probe_period {
            return Err(MembershipError::Config(
                "probe_rtt must be smaller than probe_period",
            ));
        }
        if self.announce_interval.is_zero() {
            return Err(MembershipError::Config(
                "announce_interval must be non-zero",
            ));
        }
        if matches!(&self.secret, Some(s) if s.is_empty()) {
            return Err(MembershipError::Config("cluster secret must not be empty"));
        }
        if self.accept.iter().any(Vec::is_empty) {
            return Err(MembershipError::Config(
                "an accepted cluster secret must not be empty",
            ));
        }
        if self.secret.is_some() && c.max_packet_size.get() <= SEAL_OVERHEAD + 64 {
            return Err(MembershipError::Config("max_packet_size too small"));
        }
        Ok(())
    }
}
