//! Consistent-hash ring with virtual nodes over the live members (hashring 0.3).

use std::hash::{BuildHasher, Hash, Hasher};

use hashring::{DefaultHashBuilder, HashRing};

use crate::membership::NodeIdentity;

/// Virtual nodes per member. With 256, five members each get 20% +- ~2.5
/// points of the key space (measured in the tests); 128 roughly doubles the
/// spread, 512 buys little and doubles rebuild cost.
pub const DEFAULT_VNODES: usize = 256;

/// One point on the ring. Only `(node_id, index)` is hashed, so a point's
/// position depends on nothing but the member's id: not on addresses,
/// incarnation, or the order members were added.
#[derive(Debug, Clone)]
struct VNode {
    node_id: String,
    index: u32,
    /// Position of the member in `Ring::members`.
    member: usize,
}

impl Hash for VNode {
    // Explicit bytes rather than `#[derive(Hash)]`: std's integer hashing is
    // native-endian and width-dependent, and its str framing is not a
    // documented format. With explicit bytes the position is a function of
    // SipHash-2-4 (hashring's fixed-key SipHasher from the siphasher crate)
    // alone, identical on every process, platform and compiler version.
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.node_id.as_bytes());
        state.write(&[0xff]);
        state.write(&self.index.to_le_bytes());
    }
}

/// A key's hash part, hashed as its raw bytes (see `VNode::hash`).
struct KeyBytes<'a>(&'a str);

impl Hash for KeyBytes<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.0.as_bytes());
    }
}

/// The ring position of a hash part; exposed so tests and tools can check
/// that every process computes the same value.
pub fn key_position(hash_part: &str) -> u64 {
    DefaultHashBuilder.hash_one(KeyBytes(hash_part))
}

/// Maps hash parts to owners. Build a new one whenever the live set changes;
/// building is a single sort of `members x vnodes` points.
#[derive(Debug, Clone)]
pub struct Ring {
    members: Vec<NodeIdentity>,
    ring: HashRing<VNode>,
    vnodes: usize,
    /// Every point's position and member, in ring order: the walk past an
    /// owner to its replica holder.
    points: Vec<(u64, usize)>,
}

impl Ring {
    /// A ring over `members` with `vnodes` points each (0 is taken as 1).
    ///
    /// Members are sorted and deduplicated by id first (keeping the highest
    /// incarnation), so the result does not depend on input order, and a node
    /// briefly listed twice during a restart still counts once.
    pub fn new(members: &[NodeIdentity], vnodes: usize) -> Ring {
        let vnodes = vnodes.max(1);
        let mut members = members.to_vec();
        members.sort_by(|a, b| a.id.cmp(&b.id).then(b.incarnation.cmp(&a.incarnation)));
        members.dedup_by(|later, first| later.id == first.id);

        let mut vnodes_all = Vec::with_capacity(members.len() * vnodes);
        for (member, m) in members.iter().enumerate() {
            for index in 0..vnodes {
                vnodes_all.push(VNode {
                    node_id: m.id.clone(),
                    index: index as u32,
                    member,
                });
            }
        }
        let mut points: Vec<(u64, usize)> = vnodes_all
            .iter()
            .map(|v| (DefaultHashBuilder.hash_one(v), v.member))
            .collect();
        // Same order as the ring (stable sort of id-ordered points).
        points.sort_by_key(|p| p.0);
        let mut ring = HashRing::new();
        // One sort for all points; `add` would re-sort per point. The sort is
        // stable and points arrive in id order, so even a hash collision
        // resolves the same way everywhere.
        ring.batch_add(vnodes_all);
        Ring {
            members,
            ring,
            vnodes,
            points,
        }
    }

    /// A ring with [`DEFAULT_VNODES`] per member.
    pub fn with_default_vnodes(members: &[NodeIdentity]) -> Ring {
        Ring::new(members, DEFAULT_VNODES)
    }

    /// The owner of a hash part (the text inside a key's braces), or `None`
    /// for an empty ring. A binary search; nothing is cloned.
    pub fn owner(&self, hash_part: &str) -> Option<&NodeIdentity> {
        self.owner_index(hash_part).map(|i| &self.members[i])
    }

    /// The owner's position in [`Ring::members`].
    fn owner_index(&self, hash_part: &str) -> Option<usize> {
        // A lone member owns everything: skip hashing the key.
        if self.members.len() == 1 {
            return Some(0);
        }
        self.ring.get(&KeyBytes(hash_part)).map(|v| v.member)
    }

    /// Whether member `id` owns a hash part, as `owner_id(h) == Some(id)`
    /// but with `id` looked up once: a batch asks for every item, and
    /// comparing the ids' bytes per item was a memcmp call each. On an
    /// empty ring every hash part counts as owned (nothing else can take
    /// it).
    pub fn owned_by(&self, id: &str) -> impl Fn(&str) -> bool + '_ {
        let mine = self
            .members
            .binary_search_by(|m| m.id.as_str().cmp(id))
            .ok();
        move |hash_part| self.owner_index(hash_part).is_none_or(|o| Some(o) == mine)
    }

    /// The owner's node id.
    pub fn owner_id(&self, hash_part: &str) -> Option<&str> {
        self.owner(hash_part).map(|m| m.id.as_str())
    }

    /// The first of `k0`, `k1`, ... that member `id` owns: a test's key
    /// chosen by its owner.
    #[cfg(test)]
    pub(crate) fn first_key_of(&self, id: &str) -> String {
        (0..)
            .map(|i| format!("k{i}"))
            .find(|k| self.owner_id(k) == Some(id))
            .expect("a member owns some key")
    }

    /// Where a hash part's counter is copied: the next member clockwise
    /// after its owner, which is also who owns it once the owner is gone.
    /// None on a ring of one.
    pub fn replica_of(&self, hash_part: &str) -> Option<&NodeIdentity> {
        let owner = self.owner(hash_part)?;
        if self.members.len() < 2 {
            return None;
        }
        let at = key_position(hash_part);
        let start = self.points.partition_point(|p| p.0 < at);
        let n = self.points.len();
        (0..n)
            .map(|i| &self.members[self.points[(start + i) % n].1])
            .find(|m| m.id != owner.id)
    }

    /// Members on the ring, sorted by id, one per id.
    pub fn members(&self) -> &[NodeIdentity] {
        &self.members
    }

    /// Its members that `before` lacks: new ones, and new processes of
    /// members (the same id with another boot).
    pub fn taken_in<'a>(&'a self, before: &'a Ring) -> impl Iterator<Item = &'a NodeIdentity> {
        self.members.iter().filter(move |m| {
            !before
                .members
                .iter()
                .any(|b| b.id == m.id && b.boot == m.boot)
        })
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn vnodes(&self) -> usize {
        self.vnodes
    }

    /// Each member's exact fraction of the hash space, from arc lengths:
    /// a point owns the arc from its predecessor (exclusive) to itself.
    /// Sorted by id; the fractions sum to 1 (for a non-empty ring).
    pub fn shares(&self) -> Vec<(String, f64)> {
        let points = &self.points;
        let mut arcs = vec![0u128; self.members.len()];
        if let Some(&(last, _)) = points.last() {
            let mut prev = last;
            for &(pos, member) in points.iter() {
                // Wrapping: the first point owns the arc that crosses zero.
                // A single point owns the whole circle (2^64).
                let arc = match pos.wrapping_sub(prev) {
                    0 if points.len() == 1 => 1u128 << 64,
                    d => d as u128,
                };
                arcs[member] += arc;
                prev = pos;
            }
        }
        let total = 2f64.powi(64);
        self.members
            .iter()
            .zip(arcs)
            .map(|(m, arc)| (m.id.clone(), arc as f64 / total))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_position_is_stable() {
        // SipHash-2-4 with zero keys over the raw bytes. If this changes,
        // nodes built from different versions would disagree on owners.
        assert_eq!(key_position(""), 0x1e92_4b9d_7377_00d7);
        assert_eq!(key_position("cust_42"), key_position("cust_42"));
    }

    fn node(id: &str) -> NodeIdentity {
        let addr = "127.0.0.1:1".parse().unwrap();
        NodeIdentity::new(id, addr, addr)
    }

    #[test]
    fn owned_by_agrees_with_the_owners_id() {
        let keys: Vec<String> = (0..500).map(|i| format!("k{i}")).collect();
        for ids in [&["a"][..], &["c", "a", "b"], &["b", "a", "a"]] {
            let members: Vec<NodeIdentity> = ids.iter().map(|id| node(id)).collect();
            let ring = Ring::new(&members, 16);
            for asker in ["a", "b", "c", "z"] {
                let owned = ring.owned_by(asker);
                for k in &keys {
                    assert_eq!(
                        owned(k),
                        ring.owner_id(k) == Some(asker),
                        "{ids:?} {asker} {k}"
                    );
                }
            }
        }
        let empty = Ring::new(&[], 16);
        assert!(
            empty.owned_by("a")("k"),
            "an empty ring leaves every key to the asker"
        );
    }
}
