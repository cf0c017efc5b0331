//! Forwarding cost on a 3-node loopback cluster (see docs/performance.md, "Forwarding").

fn main() {}
