//! Counter keys: which counter a check touches, and the part that places it.

use std::fmt;
use std::sync::Arc;

use compact_str::CompactString;

/// One counter: a rule applied to one caller (a client id or an IP).
///
/// Displayed as `{cust_42}:charges-per-client`, a Redis Cluster hash tag
/// layout: only the text inside the braces is hashed onto the ring, so every
/// counter of one caller lives on one owner.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CounterKey {
    pub rule: Arc<str>,
    pub hash_part: CompactString,
}

impl CounterKey {
    pub fn new(rule: Arc<str>, hash_part: impl Into<CompactString>) -> Self {
        CounterKey {
            rule,
            hash_part: hash_part.into(),
        }
    }

    /// The text the ring hashes to choose this counter's owner.
    pub fn hash_part(&self) -> &str {
        &self.hash_part
    }
}

impl fmt::Display for CounterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{}}}:{}", self.hash_part, self.rule)
    }
}

/// The hashed part of a key in the braced layout, as Redis Cluster reads a
/// hash tag: the text between the first `{` and the next `}`, or the whole
/// key when there is no non-empty tag.
pub fn hash_part(key: &str) -> &str {
    if let Some(open) = key.find('{') {
        if let Some(len) = key[open + 1..].find('}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_braces_the_hash_part() {
        let k = CounterKey::new(Arc::from("charges-per-client"), "cust_42");
        assert_eq!(k.to_string(), "{cust_42}:charges-per-client");
        assert_eq!(hash_part(&k.to_string()), "cust_42");
    }

    #[test]
    fn hash_part_follows_redis_hash_tag_rules() {
        assert_eq!(hash_part("{a}:x"), "a");
        assert_eq!(hash_part("rl:{cust}:api:99"), "cust");
        assert_eq!(hash_part("no-tag"), "no-tag");
        assert_eq!(hash_part("{}:x"), "{}:x");
        assert_eq!(hash_part("{open"), "{open");
    }
}
