//! The home region's books for its global keys: what each region holds of each window's limit, and the grants that re-divide it by demand.
//!
//! The invariant, per key and window: the sum over regions of what the
//! home counts as held never exceeds the limit L, and no region can admit
//! more than the home counts it as holding. A region holds
//! - its floor ([`share::floor`]), which it may use without asking;
//! - plus every unit granted to it for the window, minus every unit it has
//!   said it gave back (it gives back first, then says so, so the home's
//!   count is never below the region's);
//! - and at least its static share L/regions when it says it has fallen
//!   back for the window, and its static share L/regions for every window that starts
//!   more than [`RegionConfig::fallback_after`] after its last report: it
//!   may have fallen back for those.
//!
//! A grant is made only from budget no region holds. So a re-division never
//! takes budget from under a region: what a region gives up reaches others
//! only after the region has given it up, or when its window ends.
//!
//! The books live with the key's owner in the home region and are not
//! copied anywhere, so a new owner (the old one left or died, or this node
//! restarted) starts without them while regions still hold what the old
//! owner granted. It rebuilds them from the regions' reports: each says
//! every unit it received for the window, and the books count a region as
//! holding at least that. Until every region has had three rounds to
//! report ([`RegionConfig::silent_after`] from the key's arrival), it
//! grants nothing for the windows the old owner may have lent, since a
//! region that has not reported yet may hold any of the limit.

use std::sync::Arc;

use dashmap::DashMap;
use weir_core::Nanos;

use super::share;
use super::{nanos, Grant, KeyId, RegionConfig, Report};

/// A window's books for one region.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Books {
    window: u64,
    granted: u64,
    released: u64,
    /// The region said it decides the window on its static share.
    fallback: bool,
}

#[derive(Debug, Clone, Default)]
struct RegionBooks {
    /// The node holding the region's allocation (its owner of the key).
    holder: Option<Arc<str>>,
    /// What earlier holders still held when another node took over, by
    /// window: counted until those windows end, since an old holder that is
    /// only cut off (not dead) may still use it.
    orphaned: Vec<(u64, u64)>,
    /// None: never heard of for this key, or retired: it may use its floor.
    heard: Option<Nanos>,
    /// When the current holder was first heard: its first answer is later.
    first_heard: Option<Nanos>,
    /// The latest answer it says it received (home time).
    echoed: Nanos,
    /// Units it asked for over its last round.
    demand: u64,
    /// The current and next window.
    windows: Vec<Books>,
}

#[derive(Debug, Clone)]
struct KeyBooks {
    regions: Vec<RegionBooks>,
    /// When the key last came to this node from another owner, or this
    /// node started: another owner's grants may still be held from then.
    arrived: Nanos,
}

impl KeyBooks {
    /// Whether window `w` may still be lent elsewhere at `now`: the key
    /// arrived less than three rounds ago, and the owner before may have
    /// granted `w` (it lent the window it was in and the next).
    fn settling(&self, w: u64, b: Budget, now: Nanos, quiet: Nanos) -> bool {
        now < self.arrived.saturating_add(quiet) && w <= self.arrived / b.window.max(1) + 1
    }
}

/// A global rule's figures as the allocator needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub limit: u64,
    pub window: Nanos,
}

/// The books of every global key this node is the home allocator for.
pub struct Allocator {
    config: RegionConfig,
    /// Every region's name, sorted; indexes the books.
    regions: Vec<Arc<str>>,
    keys: DashMap<KeyId, KeyBooks, weir_core::determinism::HashState>,
}

/// What the allocator shows for one key and region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub region: Arc<str>,
    pub window: u64,
    pub held: u64,
    pub silent: bool,
}

impl Allocator {
    /// `regions`: every region's name, this one's among them.
    pub fn new(config: RegionConfig, regions: &[Arc<str>]) -> Self {
        let mut regions = regions.to_vec();
        regions.sort();
        regions.dedup();
        Allocator {
            config,
            regions,
            keys: DashMap::default(),
        }
    }

    pub fn regions(&self) -> &[Arc<str>] {
        &self.regions
    }

    fn silent(&self, r: &RegionBooks, now: Nanos) -> bool {
        r.heard
            .is_some_and(|h| now.saturating_sub(h) > self.config.silent_after())
    }

    /// What the home counts region `r` as holding of window `w`.
    fn held(&self, r: &RegionBooks, w: u64, b: Budget) -> u64 {
        let orphaned: u64 = r
            .orphaned
            .iter()
            .filter(|(x, _)| *x == w)
            .map(|(_, units)| units)
            .sum();
        self.lent(r, w, b) + orphaned
    }

    /// What the region's current holder may admit of window `w`.
    fn lent(&self, r: &RegionBooks, w: u64, b: Budget) -> u64 {
        let n = self.regions.len();
        let floor = share::floor(b.limit, n);
        let books = r.windows.iter().find(|x| x.window == w);
        let lent = books.map_or(floor, |x| (floor + x.granted).saturating_sub(x.released));
        if books.is_some_and(|x| x.fallback) || self.may_fall_back(r, w, b) {
            lent.max(b.limit / n as u64)
        } else {
            lent
        }
    }

    /// Whether region `r` may decide window `w` on its static share: it
    /// does when its last answer from here is older than
    /// [`RegionConfig::fallback_after`] at the window's start. So every
    /// window that starts more than that after the last answer the region
    /// is known to have received is held at the static share at least,
    /// from before any of it is granted to anyone: no window is ever lent
    /// to others and fallen back on.
    fn may_fall_back(&self, r: &RegionBooks, w: u64, b: Budget) -> bool {
        // The region's last answer is no earlier than the latest one it
        // echoed, nor than its first report here: counting from either is
        // never later than the region counts.
        r.first_heard.is_some_and(|first| {
            let answered = first.max(r.echoed);
            w.saturating_mul(b.window)
                > answered.saturating_add(self.config.fallback_after(b.window))
        })
    }

    /// Takes a region's report and answers with its grant for the report's
    /// window. None: the region or window is not one this home allocates
    /// (unknown region, a window already over, or more than one ahead), or
    /// the region retired the key. `arrived`: when the key last came to
    /// this node from another owner of it, or this node started, whichever
    /// is later (see the module's notes on a new owner).
    pub fn report(&self, rep: &Report, b: Budget, now: Nanos, arrived: Nanos) -> Option<Grant> {
        let me = self.regions.iter().position(|r| *r == rep.region)?;
        let window = b.window.max(1);
        let current = now / window;
        let id: KeyId = (rep.rule.clone(), rep.key.clone());
        let floor = share::floor(b.limit, self.regions.len());
        if rep.retire {
            if let Some(mut k) = self.keys.get_mut(&id) {
                let r = &mut k.regions[me];
                if r.holder.as_ref().is_none_or(|h| *h == rep.holder) {
                    *r = RegionBooks {
                        orphaned: std::mem::take(&mut r.orphaned),
                        ..RegionBooks::default()
                    };
                }
            }
            return None;
        }
        if rep.window < current || rep.window > current + 1 {
            return None;
        }
        let n = self.regions.len();
        let mut k = self.keys.entry(id).or_insert_with(|| KeyBooks {
            regions: vec![RegionBooks::default(); n],
            arrived,
        });
        k.arrived = k.arrived.max(arrived);
        {
            let silent = self.silent(&k.regions[me], now);
            let r = &mut k.regions[me];
            r.orphaned.retain(|(w, _)| *w >= current);
            match &r.holder {
                // A second node of the region (the ring there moved the key)
                // gets nothing while the first still reports: both might
                // admit from one allocation otherwise. It has its floor.
                Some(h) if *h != rep.holder && !silent => {
                    return Some(Grant {
                        rule: rep.rule.clone(),
                        key: rep.key.clone(),
                        window: rep.window,
                        granted: 0,
                        target: floor,
                        at: now,
                    });
                }
                Some(h) if *h != rep.holder => {
                    let held: Vec<(u64, u64)> = r
                        .windows
                        .iter()
                        .map(|x| (x.window, self.lent(r, x.window, b)))
                        .collect();
                    r.orphaned.extend(held);
                    r.windows.clear();
                    r.holder = Some(rep.holder.clone());
                    r.first_heard = None;
                    r.echoed = 0;
                }
                Some(_) => {}
                None => r.holder = Some(rep.holder.clone()),
            }
            r.heard = Some(now);
            r.first_heard.get_or_insert(now);
            r.echoed = r.echoed.max(rep.answered);
            r.demand = rep.demand;
            r.windows.retain(|x| x.window >= current);
            let books = match r.windows.iter().position(|x| x.window == rep.window) {
                Some(i) => &mut r.windows[i],
                None => {
                    r.windows.push(Books {
                        window: rep.window,
                        ..Books::default()
                    });
                    r.windows.last_mut().expect("just pushed")
                }
            };
            // Totals only grow: a late or repeated report changes nothing.
            // What the region received counts as granted: only a new
            // owner of the key has granted less than that.
            books.granted = books.granted.max(rep.received);
            books.released = books.released.max(rep.released);
            books.fallback |= rep.fallback;
        }
        let target = self.target(&k.regions, me, b, now);
        let others: u64 = k
            .regions
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != me)
            .map(|(_, r)| self.held(r, rep.window, b))
            .sum();
        let mine = self.held(&k.regions[me], rep.window, b);
        let room = if k.settling(rep.window, b, now, self.config.silent_after()) {
            0
        } else {
            b.limit.saturating_sub(others.saturating_add(mine))
        };
        let grant = target.saturating_sub(mine).min(room);
        let books = k.regions[me]
            .windows
            .iter_mut()
            .find(|x| x.window == rep.window)
            .expect("kept above");
        books.granted += grant;
        Some(Grant {
            rule: rep.rule.clone(),
            key: rep.key.clone(),
            window: rep.window,
            granted: books.granted,
            target,
            at: now,
        })
    }

    /// Region `me`'s share at current demand: proportional with a floor
    /// ([`share::share`]), and no more than twice what its last round's
    /// demand comes to over a window, so that budget a region does not use
    /// stays free for a region whose demand grows.
    fn target(&self, regions: &[RegionBooks], me: usize, b: Budget, now: Nanos) -> u64 {
        let w = now / b.window.max(1);
        let demands: Vec<u64> = regions
            .iter()
            .map(|r| {
                if self.silent(r, now) || self.may_fall_back(r, w + 1, b) {
                    0
                } else {
                    r.demand
                }
            })
            .collect();
        let share = share::share(b.limit, &demands, me);
        let rounds = (b.window / nanos(self.config.round).max(1)).max(1);
        let floor = share::floor(b.limit, self.regions.len());
        let wanted = regions[me]
            .demand
            .saturating_mul(rounds)
            .saturating_mul(2)
            .max(floor);
        share.min(wanted)
    }

    /// What every region holds of `key`'s current window, as counted here.
    pub fn held_by(&self, rule: &str, key: &str, b: Budget, now: Nanos) -> Vec<Held> {
        let w = now / b.window.max(1);
        let Some(k) = self
            .keys
            .get(&(Arc::<str>::from(rule), compact_str::CompactString::new(key)))
        else {
            return Vec::new();
        };
        self.regions
            .iter()
            .zip(&k.regions)
            .map(|(name, r)| Held {
                region: name.clone(),
                window: w,
                held: self.held(r, w, b),
                silent: self.silent(r, now),
            })
            .collect()
    }

    /// Forgets keys no region has reported for `idle`: their windows are
    /// over and every region either retired them or has been counted at its
    /// static share for that long.
    pub fn sweep(&self, now: Nanos, idle: Nanos) {
        self.keys.retain(|_, k| {
            k.regions
                .iter()
                .any(|r| r.heard.is_some_and(|h| now.saturating_sub(h) <= idle))
        });
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}
