//! Global limits across regions: the home region's allocator hands each region a share of a key's limit per window, and each region's holder enforces it.
//!
//! This is the hot-key lease (`owner::lease`) one level up. A gateway's
//! lease is a slice of a key's remaining budget that its owner counts as
//! spent until it comes back; a region's allocation is a slice of a global
//! key's limit that its home region counts as held until the region
//! releases it or its window ends. Both sides of both protocols keep the
//! same promise: the slices never sum to more than what the lender has, so
//! lending can refuse wrongly but never admit too much. What differs is
//! the distance: a lease is asked for on the check path (0.5 ms away); an
//! allocation cannot be (75-150 ms away), so regions report on a timer
//! ([`RegionConfig::round`]) and always hold their next window's share
//! before it starts.
//!
//! The parts, all pure (time is a `Nanos` argument, the network a trait):
//! - [`share`]: how a window's limit is divided by demand (proportional with a floor);
//! - [`allocator`]: the home region's books per key, window and region;
//! - [`holder`]: a region's side: what it may admit per key and window, its reports, its fallback;
//! - [`home`]: which region is a key's home.
//! - [`arrivals`]: when a key last came to this node as its home allocator.
//!
//! The gRPC edge is [`crate::net::regions`]; the bounds are written up in
//! `docs/regions.md`.

pub mod allocator;
pub mod arrivals;
pub mod holder;
pub mod home;
pub mod share;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use compact_str::CompactString;
use weir_core::Nanos;

/// How a node takes part in global limits; the layers above embed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionConfig {
    /// This node's region.
    pub name: String,
    /// Nodes of other regions (their gRPC address), optionally named
    /// `REGION=HOST:PORT`; unnamed ones are asked their region.
    pub peers: Vec<String>,
    /// How often a region reports its use and demand to each home region.
    pub round: Duration,
}

impl RegionConfig {
    pub const DEFAULT_ROUND: Duration = Duration::from_millis(250);

    pub fn new(name: impl Into<String>) -> Self {
        RegionConfig {
            name: name.into(),
            peers: Vec::new(),
            round: Self::DEFAULT_ROUND,
        }
    }

    /// How long the home goes unheard before it counts a region as having
    /// fallen back (and holds its static share for it): three rounds, so one
    /// late or lost report is not a cut.
    pub fn silent_after(&self) -> Nanos {
        3 * nanos(self.round)
    }

    /// How long a region goes without an answer from a key's home before it
    /// takes its static share: the home's silence plus one whole window. By
    /// then the home has counted the region as fallen back for at least a
    /// window, and every window it allocated before noticing has ended, so
    /// the static share is never on top of budget already lent to others.
    pub fn fallback_after(&self, window: Nanos) -> Nanos {
        self.silent_after().saturating_add(window)
    }
}

pub(crate) fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Which (rule, key) an allocation is for.
pub type KeyId = (Arc<str>, CompactString);

/// A region's account of one key for one window, sent to the key's home
/// every round. Totals only grow within a window, so reports arriving out
/// of order or twice change nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub rule: Arc<str>,
    pub key: CompactString,
    pub region: Arc<str>,
    /// The node that holds the region's allocation (the key's owner in the
    /// region); another node of the region takes over only once it is silent.
    pub holder: Arc<str>,
    /// Epoch-aligned window index (`now / window`).
    pub window: u64,
    /// Units admitted in the window.
    pub used: u64,
    /// Every unit the home granted this window that the region has seen.
    pub received: u64,
    /// Every unit the region has given back this window.
    pub released: u64,
    /// What the region enforces for the window now.
    pub allocation: u64,
    /// The region decides the window on its static share: the home holds
    /// at least that for it.
    pub fallback: bool,
    /// Units asked for (admitted or not) over the last round: the demand
    /// the next division is weighted by.
    pub demand: u64,
    /// The region stops using the key: the home forgets it.
    pub retire: bool,
    /// The home's time (`Grant::at`) of the last answer for this key the
    /// region received; 0: none yet. The home reserves the region's static
    /// share from this, not from when it last heard the region: a report
    /// can arrive and its answer be lost.
    pub answered: Nanos,
}

/// The home's answer to a [`Report`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub rule: Arc<str>,
    pub key: CompactString,
    pub window: u64,
    /// Every unit granted to the region this window (a total, not a delta).
    pub granted: u64,
    /// The region's share at current demand; it gives back what it holds above it.
    pub target: u64,
    /// The home's clock when it answered.
    pub at: Nanos,
}
