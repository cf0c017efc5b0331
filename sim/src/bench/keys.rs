//! The keys a run draws from, and each worker's own generator for drawing them.

use rand::rngs::SmallRng;
use rand::Rng as _;

use crate::load::stream_rng;

/// A worker's key generator. SmallRng rather than the sim's StdRng: it is
/// drawn once per check on the generator's hot path, and nothing here needs
/// StdRng's strength or a sequence that stays the same across rand releases.
pub type WorkerRng = SmallRng;

/// Worker `i`'s generator: streams differ between workers and, through
/// `seed`, between runs.
pub fn worker_rng(seed: u64, i: usize) -> WorkerRng {
    stream_rng(seed, i as u64)
}

pub struct Keys(Vec<String>);

impl Keys {
    pub fn new(n: usize) -> Keys {
        Keys((0..n).map(|i| format!("key-{i:06}")).collect())
    }

    /// These keys; at least one.
    pub fn from_vec(keys: Vec<String>) -> Keys {
        assert!(!keys.is_empty(), "a key to pick");
        Keys(keys)
    }

    /// One key, uniformly at random.
    pub fn pick(&self, rng: &mut WorkerRng) -> &str {
        &self.0[rng.random_range(0..self.0.len())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_reach_every_key_and_workers_draw_apart() {
        let keys = Keys::new(4);
        let mut rng = worker_rng(1, 0);
        let mut seen: Vec<&str> = (0..200).map(|_| keys.pick(&mut rng)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(
            seen,
            ["key-000000", "key-000001", "key-000002", "key-000003"]
        );
        let draws = |i| {
            let mut rng = worker_rng(1, i);
            (0..16).map(|_| keys.pick(&mut rng)).collect::<Vec<_>>()
        };
        assert_ne!(draws(0), draws(1));
    }
}
