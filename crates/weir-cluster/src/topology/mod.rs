//! Who is in the cluster and who owns what: membership, the ring built from it, seeds, and rule-set convergence.

pub mod arrivals;
pub mod membership;
pub mod ring;
pub mod routing;
pub mod rules_sync;
pub mod rules_wire;
pub mod seeds;
pub mod tier_writes;
