//! Which of one sender's datagram counters were already taken: a sliding window, as IPsec and WireGuard keep, so a replay is refused without remembering every datagram.

/// Counters this far below the highest one taken are refused unseen: one
/// sender's counter runs over every destination, so a receiver sees only
/// some of them, and a datagram overtaken by 128 later ones is late enough
/// for SWIM to have sent its news again.
pub const WINDOW: u64 = 128;

/// The counters taken from one sender.
#[derive(Debug, Clone, Default)]
pub struct ReplayWindow {
    /// The highest counter taken; None before the first.
    top: Option<u64>,
    /// Bit `i` set: counter `top - i` was taken.
    taken: u128,
}

impl ReplayWindow {
    /// Whether `n` may be taken: above every counter taken so far, or
    /// within the window and not taken yet. Changes nothing, so a
    /// datagram that later fails to open leaves no mark.
    pub fn allows(&self, n: u64) -> bool {
        match self.top {
            None => true,
            Some(top) if n > top => true,
            Some(top) => {
                let back = top - n;
                back < WINDOW && self.taken >> back & 1 == 0
            }
        }
    }

    /// Records `n` as taken (call after [`ReplayWindow::allows`] and the
    /// datagram opened).
    pub fn take(&mut self, n: u64) {
        match self.top {
            Some(top) if n <= top => {
                let back = top - n;
                if back < WINDOW {
                    self.taken |= 1 << back;
                }
            }
            Some(top) => {
                let shift = n - top;
                self.taken = if shift >= WINDOW {
                    0
                } else {
                    self.taken << shift
                };
                self.taken |= 1;
                self.top = Some(n);
            }
            None => {
                self.taken = 1;
                self.top = Some(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(ns: &[u64]) -> ReplayWindow {
        let mut w = ReplayWindow::default();
        for &n in ns {
            assert!(w.allows(n), "{n} refused");
            w.take(n);
        }
        w
    }

    #[test]
    fn each_counter_is_taken_once_in_any_order_within_the_window() {
        let w = taken(&[5, 3, 9, 4, 0]);
        for n in [0, 3, 4, 5, 9] {
            assert!(!w.allows(n), "{n} taken twice");
        }
        for n in [1, 2, 6, 7, 8, 10, u64::MAX] {
            assert!(w.allows(n), "{n} never taken");
        }
    }

    #[test]
    fn a_counter_below_the_window_is_refused_even_unseen() {
        let w = taken(&[1_000]);
        assert!(w.allows(1_000 - WINDOW + 1));
        assert!(!w.allows(1_000 - WINDOW));
        assert!(!w.allows(0));
    }

    #[test]
    fn sliding_forward_keeps_what_is_still_inside_and_drops_the_rest() {
        let w = taken(&[10, 20, 10 + WINDOW]);
        // 20 is still inside the window of the new top; 10 has slid out
        // and is refused as too old rather than remembered.
        assert!(!w.allows(20));
        assert!(!w.allows(10));
        let far = taken(&[10, 10 + 10 * WINDOW]);
        assert!(!far.allows(10 + 10 * WINDOW));
        assert!(far.allows(10 + 10 * WINDOW - 1));
    }

    #[test]
    fn asking_does_not_take() {
        let w = ReplayWindow::default();
        assert!(w.allows(7));
        assert!(w.allows(7));
    }
}
