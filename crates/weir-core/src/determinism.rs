//! Where weir's random numbers, hash seeds and wall-clock readings come from: the OS and the system clock in a node, one seed and a virtual clock on a thread that the deterministic simulator has claimed.
//!
//! The simulator runs whole members on one thread under tokio's paused
//! clock; for a seed to replay bit for bit, nothing they do may draw from
//! the OS or read the real time, and no map may iterate in an order a
//! per-process hash seed chose. Every draw goes through [`with_rng`],
//! every wall-clock reading through [`unix_ms`], every map's hasher is a
//! [`HashState`], and [`Deterministic::enter`] points all three at the
//! seed and the virtual clock for as long as its guard lives on that
//! thread.

use std::cell::RefCell;
use std::hash::BuildHasher;
use std::sync::Arc;

use foldhash::fast::{FoldHasher, SeedableRandomState};
use foldhash::SharedSeed;
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

use crate::clock::{Clock, NANOS_PER_SEC};

thread_local! {
    static SIM: RefCell<Option<SimSource>> = const { RefCell::new(None) };
}

struct SimSource {
    rng: SmallRng,
    wall: Arc<dyn Clock>,
}

/// Runs `f` with this thread's generator: the seeded one while a
/// [`Deterministic`] guard lives here, else the OS-seeded thread rng.
pub fn with_rng<T>(f: impl FnOnce(&mut dyn RngCore) -> T) -> T {
    // Taken out for the call: `f` may itself draw (nested draws are fine,
    // they see the OS rng only if no guard is set).
    let seeded = SIM.with(|s| s.borrow_mut().as_mut().map(|s| s.rng.next_u64()));
    match seeded {
        Some(seed) => {
            // One fresh generator per draw site call, derived from the
            // thread's sequence: `f` never holds the thread-local borrow.
            let mut rng = SmallRng::seed_from_u64(seed);
            f(&mut rng)
        }
        None => f(&mut rand::rng()),
    }
}

/// The hasher of every map whose keys come from outside (clients, peers):
/// seeded per map from the OS, so no one can aim keys at one bucket; seeded
/// from the run's seed on a simulated thread, so maps iterate the same
/// way every time the seed runs.
#[derive(Clone, Debug)]
pub struct HashState(SeedableRandomState);

impl Default for HashState {
    fn default() -> Self {
        let seeded = SIM.with(|s| s.borrow_mut().as_mut().map(|s| s.rng.next_u64()));
        HashState(match seeded {
            Some(seed) => SeedableRandomState::with_seed(seed, SharedSeed::global_fixed()),
            None => SeedableRandomState::random(),
        })
    }
}

impl BuildHasher for HashState {
    type Hasher = FoldHasher<'static>;

    fn build_hasher(&self) -> Self::Hasher {
        self.0.build_hasher()
    }
}

/// A `HashMap` on [`HashState`]: made with `default()`, not `new()`.
pub type HashMap<K, V> = std::collections::HashMap<K, V, HashState>;
/// A `HashSet` on [`HashState`].
pub type HashSet<T> = std::collections::HashSet<T, HashState>;

/// Whether this thread runs a simulated cluster: work that would go to
/// another thread (tokio's blocking pool) runs in place instead, since a
/// thread's timing is the one thing no seed decides.
pub fn simulated() -> bool {
    SIM.with(|s| s.borrow().is_some())
}

/// Wall-clock unix milliseconds: the virtual clock's while a guard lives
/// on this thread, else the system's.
pub fn unix_ms() -> u64 {
    let virtual_ms = SIM.with(|s| {
        s.borrow()
            .as_ref()
            .map(|s| s.wall.now() / (NANOS_PER_SEC / 1000))
    });
    virtual_ms.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    })
}

/// This thread draws from `seed` and reads `wall` while the guard lives.
#[must_use = "the thread is deterministic only while the guard lives"]
pub struct Deterministic {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Deterministic {
    /// Claims this thread for one simulated run.
    pub fn enter(seed: u64, wall: Arc<dyn Clock>) -> Deterministic {
        SIM.with(|s| {
            *s.borrow_mut() = Some(SimSource {
                rng: SmallRng::seed_from_u64(seed),
                wall,
            })
        });
        Deterministic {
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for Deterministic {
    fn drop(&mut self) {
        SIM.with(|s| *s.borrow_mut() = None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use rand::Rng;

    fn draws() -> Vec<u64> {
        (0..8).map(|_| with_rng(|r| r.random::<u64>())).collect()
    }

    #[test]
    fn a_seed_gives_the_same_draws_and_another_seed_others() {
        let clock: Arc<dyn Clock> = Arc::new(FakeClock::new(0));
        let first = {
            let _g = Deterministic::enter(7, clock.clone());
            draws()
        };
        let again = {
            let _g = Deterministic::enter(7, clock.clone());
            draws()
        };
        let other = {
            let _g = Deterministic::enter(8, clock);
            draws()
        };
        assert_eq!(first, again);
        assert_ne!(first, other);
    }

    #[test]
    fn maps_made_under_one_seed_iterate_in_one_order() {
        let clock: Arc<dyn Clock> = Arc::new(FakeClock::new(0));
        let order = |seed| {
            let _g = Deterministic::enter(seed, clock.clone());
            let m: std::collections::HashMap<u32, (), HashState> =
                (0..64).map(|i| (i, ())).collect();
            m.keys().copied().collect::<Vec<_>>()
        };
        assert_eq!(order(3), order(3));
        let unseeded = |_| {
            let m: std::collections::HashMap<u32, (), HashState> =
                (0..64).map(|i| (i, ())).collect();
            m.keys().copied().collect::<Vec<_>>()
        };
        assert_ne!(
            unseeded(()),
            unseeded(()),
            "each map seeded apart outside a run"
        );
    }

    #[test]
    fn the_wall_clock_is_the_virtual_one_only_while_the_guard_lives() {
        let clock = Arc::new(FakeClock::new(5 * NANOS_PER_SEC));
        {
            let _g = Deterministic::enter(1, clock.clone());
            assert_eq!(unix_ms(), 5_000);
        }
        assert!(unix_ms() > 1_700_000_000_000, "the system's clock again");
    }
}
