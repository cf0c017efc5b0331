//! A region's side of global limits: what it may admit of each global key per window, the reports it sends home, and its fallback when home cannot be reached.
//!
//! A region may admit, in window w, its floor plus every unit its home
//! granted it for w minus what it gave back. It gives back before it says
//! so: when the home's target for it falls, and when its own demand no
//! longer needs what it holds (it keeps twice its last round's demand over
//! the rest of the window). It reports the current and the next window
//! every round, so the next window's share is held before it starts.
//!
//! When the key's home has not answered for
//! [`RegionConfig::fallback_after`], each window that starts after that
//! is decided against the static share L/regions instead (or what it
//! holds, if more); the window in force when the home went quiet keeps its
//! allocation until it ends. A key the home never answered for stays on
//! its floor: the home holds nothing more for a region it never heard.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use compact_str::CompactString;
use dashmap::DashMap;
use weir_core::Nanos;

use super::allocator::Budget;
use super::share;
use super::{nanos, Grant, KeyId, RegionConfig, Report};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Win {
    window: u64,
    used: u64,
    received: u64,
    released: u64,
    target: Option<u64>,
}

#[derive(Debug, Clone)]
struct Hold {
    home: Arc<str>,
    budget: Budget,
    /// The current and next window.
    windows: Vec<Win>,
    /// Units asked for since the last report.
    wanted: u64,
    last_active: Nanos,
    /// The home has answered for this key at least once.
    known: bool,
    /// The home's time of its last answer for this key, echoed in reports.
    answered: Nanos,
}

impl Hold {
    /// Window `w` as held now (nothing yet when it has no books).
    fn get(&self, w: u64) -> Win {
        self.windows
            .iter()
            .find(|x| x.window == w)
            .copied()
            .unwrap_or(Win {
                window: w,
                ..Win::default()
            })
    }

    fn win(&mut self, w: u64) -> &mut Win {
        match self.windows.iter().position(|x| x.window == w) {
            Some(i) => &mut self.windows[i],
            None => {
                self.windows.push(Win {
                    window: w,
                    ..Win::default()
                });
                self.windows.last_mut().expect("just pushed")
            }
        }
    }
}

/// How a region decides a global key now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Against the allocation its home made.
    Allocated,
    /// Against the static share L/regions: its home has not answered.
    Fallback,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Allocated => "allocated",
            Mode::Fallback => "fallback",
        }
    }
}

/// One key as the region holds it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyStatus {
    pub rule: Arc<str>,
    pub key: CompactString,
    pub home: Arc<str>,
    pub window: u64,
    pub allocation: u64,
    pub used: u64,
    /// What it holds of the next window already.
    pub next: u64,
    pub mode: Mode,
}

/// Every global key this node decides for its region.
pub struct Holder {
    config: RegionConfig,
    /// This node, as its reports name it.
    node: Arc<str>,
    regions: usize,
    keys: DashMap<KeyId, Hold, weir_core::determinism::HashState>,
    /// When each region last answered as a home (from `started`), read on
    /// every check: one atomic per region, no lock.
    answered: Box<[(Arc<str>, AtomicU64)]>,
    started: Nanos,
}

impl Holder {
    /// `regions`: every region sharing the global limits (the homes);
    /// `now`: start, counted as the homes' last answer so a region starting
    /// alone does not fall back at once.
    pub fn new(config: RegionConfig, node: &str, regions: &[Arc<str>], now: Nanos) -> Self {
        let mut homes = regions.to_vec();
        homes.sort();
        homes.dedup();
        Holder {
            config,
            node: node.into(),
            regions: homes.len().max(1),
            keys: DashMap::default(),
            answered: homes
                .into_iter()
                .map(|h| (h, AtomicU64::new(now)))
                .collect(),
            started: now,
        }
    }

    pub fn config(&self) -> &RegionConfig {
        &self.config
    }

    fn answered_at(&self, home: &str) -> Option<&AtomicU64> {
        self.answered
            .iter()
            .find(|(h, _)| &**h == home)
            .map(|(_, t)| t)
    }

    /// When `home` last answered (start when never; a home that is not
    /// one of the regions never does).
    fn last_answer(&self, home: &str) -> Nanos {
        self.answered_at(home)
            .map_or(self.started, |t| t.load(Ordering::Relaxed))
    }

    /// Whether window `w` of a key is decided on the static share.
    fn fallen_back(&self, h: &Hold, w: u64, last_answer: Nanos) -> bool {
        let start = w.saturating_mul(h.budget.window);
        h.known && start > last_answer.saturating_add(self.config.fallback_after(h.budget.window))
    }

    fn allocation(&self, h: &Hold, x: &Win, last_answer: Nanos) -> u64 {
        let floor = share::floor(h.budget.limit, self.regions);
        let lent = (floor + x.received).saturating_sub(x.released);
        if self.fallen_back(h, x.window, last_answer) {
            lent.max(h.budget.limit / self.regions as u64)
        } else {
            lent
        }
    }

    /// Takes `cost` of a global key homed in `home` at `now`: Ok when the
    /// region's allocation for the window has room, else how long until
    /// the next round or window might bring some. A refusal takes nothing.
    pub fn take(
        &self,
        (rule, key): (&Arc<str>, &str),
        home: &Arc<str>,
        budget: Budget,
        cost: u64,
        now: Nanos,
    ) -> Result<(), Duration> {
        let last = self.last_answer(home);
        let window = budget.window.max(1);
        let w = now / window;
        let mut h = self
            .keys
            .entry((rule.clone(), CompactString::new(key)))
            .or_insert_with(|| Hold {
                home: home.clone(),
                budget,
                windows: Vec::new(),
                wanted: 0,
                last_active: now,
                known: false,
                answered: 0,
            });
        h.budget = budget;
        h.wanted = h.wanted.saturating_add(cost);
        h.last_active = now;
        let x = *h.win(w);
        let allocation = self.allocation(&h, &x, last);
        if x.used.saturating_add(cost) <= allocation {
            h.win(w).used += cost;
            return Ok(());
        }
        let to_end = (w + 1).saturating_mul(window).saturating_sub(now);
        Err(Duration::from_nanos(to_end.min(nanos(self.config.round))))
    }

    /// Gives back `cost` taken at `at` (the check was refused by another of its limits).
    pub fn give_back(&self, rule: &Arc<str>, key: &str, at: Nanos, cost: u64) {
        if let Some(mut h) = self.keys.get_mut(&(rule.clone(), CompactString::new(key))) {
            let w = at / h.budget.window.max(1);
            if let Some(x) = h.windows.iter_mut().find(|x| x.window == w) {
                x.used = x.used.saturating_sub(cost);
            }
        }
    }

    /// This round's reports, by home region: the current and next window of
    /// every key in use, after giving back what the region no longer needs;
    /// a retirement for each key idle for two windows and eight rounds.
    pub fn reports(&self, now: Nanos) -> Vec<(Arc<str>, Report)> {
        let round = nanos(self.config.round).max(1);
        let mut out = Vec::new();
        self.keys.retain(|(rule, key), h| {
            let window = h.budget.window.max(1);
            let w = now / window;
            let idle = now.saturating_sub(h.last_active);
            if idle > 2 * window + 8 * round {
                out.push((
                    h.home.clone(),
                    Report {
                        rule: rule.clone(),
                        key: key.clone(),
                        region: self.config.name.as_str().into(),
                        holder: self.node.clone(),
                        window: w,
                        used: 0,
                        received: 0,
                        released: 0,
                        allocation: 0,
                        fallback: false,
                        demand: 0,
                        retire: true,
                        answered: h.answered,
                    },
                ));
                return false;
            }
            h.windows.retain(|x| x.window >= w);
            let demand = std::mem::take(&mut h.wanted);
            let last = self.last_answer(&h.home);
            for x in [w, w + 1] {
                let end = (x + 1).saturating_mul(window);
                let rounds_left = end.saturating_sub(now).div_ceil(round);
                let win = *h.win(x);
                // Twice the last round's demand over what is left of the
                // window: budget beyond that is given back for others.
                let need = win
                    .used
                    .saturating_add(demand.saturating_mul(rounds_left).saturating_mul(2));
                self.release(h, x, need);
                let win = *h.win(x);
                out.push((
                    h.home.clone(),
                    Report {
                        rule: rule.clone(),
                        key: key.clone(),
                        region: self.config.name.as_str().into(),
                        holder: self.node.clone(),
                        window: x,
                        used: win.used,
                        received: win.received,
                        released: win.released,
                        allocation: self.allocation(h, &win, last),
                        fallback: self.fallen_back(h, x, last),
                        demand,
                        retire: false,
                        answered: h.answered,
                    },
                ));
            }
            true
        });
        out
    }

    /// Gives back what window `w` holds above `keep` (never below its use
    /// or its floor).
    fn release(&self, h: &mut Hold, w: u64, keep: u64) {
        let floor = share::floor(h.budget.limit, self.regions);
        let x = h.win(w);
        let lent = (floor + x.received).saturating_sub(x.released);
        let keep = keep.max(x.used).max(floor);
        if lent > keep {
            x.released += lent - keep;
        }
    }

    /// Takes a grant from `home`, answered at `now`.
    pub fn granted(&self, home: &Arc<str>, g: &Grant, now: Nanos) {
        self.heard_from(home, now);
        let Some(mut h) = self.keys.get_mut(&(g.rule.clone(), g.key.clone())) else {
            return;
        };
        h.known = true;
        h.answered = h.answered.max(g.at);
        let current = now / h.budget.window.max(1);
        if g.window < current {
            return;
        }
        let x = h.win(g.window);
        x.received = x.received.max(g.granted);
        x.target = Some(g.target);
        let target = g.target;
        self.release(&mut h, g.window, target);
    }

    /// A home answered a round without grants (nothing of its keys is
    /// held here, or every report was stale): it is reachable.
    pub fn heard_from(&self, home: &Arc<str>, now: Nanos) {
        if let Some(t) = self.answered_at(home) {
            t.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// Every key held here, for its current window.
    pub fn status(&self, now: Nanos) -> Vec<KeyStatus> {
        let mut out = Vec::new();
        for e in self.keys.iter() {
            let h = e.value();
            let last = self.last_answer(&h.home);
            let w = now / h.budget.window.max(1);
            let (x, y) = (h.get(w), h.get(w + 1));
            out.push(KeyStatus {
                next: self.allocation(h, &y, last),
                rule: e.key().0.clone(),
                key: e.key().1.clone(),
                home: h.home.clone(),
                window: w,
                allocation: self.allocation(h, &x, last),
                used: x.used,
                mode: if self.fallen_back(h, w, last) {
                    Mode::Fallback
                } else {
                    Mode::Allocated
                },
            });
        }
        out
    }

    /// What the region may admit of window `w` of a key now (0 when it holds nothing).
    pub fn allocation_of(&self, rule: &Arc<str>, key: &str, w: u64) -> u64 {
        let Some(h) = self.keys.get(&(rule.clone(), CompactString::new(key))) else {
            return 0;
        };
        let last = self.last_answer(&h.home);
        self.allocation(&h, &h.get(w), last)
    }

    /// Homes that have not answered for `silent_after` (a cut, as this
    /// region sees it), with how long.
    pub fn unreachable_homes(&self, now: Nanos) -> Vec<(Arc<str>, Nanos)> {
        let mut homes: Vec<Arc<str>> = self.keys.iter().map(|e| e.home.clone()).collect();
        homes.sort();
        homes.dedup();
        homes
            .into_iter()
            .filter_map(|h| {
                let quiet = now.saturating_sub(self.last_answer(&h));
                (quiet > self.config.silent_after()).then_some((h, quiet))
            })
            .collect()
    }
}
