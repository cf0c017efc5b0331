//! A global key's home region: a hash of the key over the sorted region names, the same on every node that knows the same regions.

use std::hash::Hasher;

/// The home of `key` among `regions` (any order; None when empty).
pub fn home<'a>(key: &str, regions: &[&'a str]) -> Option<&'a str> {
    let mut sorted: Vec<&str> = regions.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    sorted.get(index(key, sorted.len())).copied()
}

/// Where the home of `key` is among `n` regions sorted and deduplicated (0
/// when `n` is 0): [`home`] without the sorting, for the check path, whose
/// region list is sorted once.
pub fn index(key: &str, n: usize) -> usize {
    // A fixed hash (FNV-1a), not the std one: every build and every node
    // must agree on it.
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    h.write(key.as_bytes());
    h.finish().checked_rem(n as u64).unwrap_or(0) as usize
}

struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_home_is_the_same_whatever_order_the_regions_are_listed_in() {
        let a = ["us-east", "eu", "us-west"];
        let b = ["eu", "us-west", "us-east", "eu"];
        let mut used = std::collections::HashSet::new();
        for i in 0..200 {
            let k = format!("cust_{i}");
            assert_eq!(home(&k, &a), home(&k, &b));
            used.insert(home(&k, &a).unwrap());
        }
        assert_eq!(used.len(), 3, "keys spread over every region");
        assert_eq!(home("k", &[]), None);
        let mut sorted = a;
        sorted.sort_unstable();
        for i in 0..200 {
            let k = format!("cust_{i}");
            assert_eq!(Some(sorted[index(&k, sorted.len())]), home(&k, &a));
        }
    }
}
