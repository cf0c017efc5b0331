//! Gossip datagrams sealed with ChaCha20-Poly1305 under keys derived from the cluster secrets, each counter taken once, so an observer learns nothing of the members and can neither forge nor replay a datagram.
//!
//! A sealed datagram is
//!
//! ```text
//! version (1) | session (16) | counter (8, BE) | unix ms (8, BE) | ciphertext | tag (16)
//! ```
//!
//! with the first 33 bytes authenticated as associated data. Each sender
//! draws a random session id when it starts and seals under a key of its
//! own, HKDF of the secret with the label `GOSSIP_SEAL` and the session id
//! (`crate::keys`); the nonce is its counter, which goes up by one per
//! datagram. So no (key, nonce) pair is ever used twice: two senders share
//! no key unless they drew the same 128-bit session id, and one sender never
//! reuses a counter. A random 96-bit nonce under one shared key would be
//! safe only up to about 2^32 datagrams cluster-wide, which a large ring
//! gossips within a year.
//!
//! A receiver refuses a datagram that no accepted secret opens, one stamped
//! more than `FRESHNESS_MS` from its clock (a capture replayed after its
//! sender's session is forgotten), and one whose counter it already took
//! from that session (`replay_window`). Sealing uses one secret; opening
//! tries every accepted one, which is how a secret is rotated without a
//! split ring (docs/security.md).

use std::collections::HashMap;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};

use super::replay_window::ReplayWindow;
use crate::keys::{self, FRESHNESS_MS};

const VERSION: u8 = 1;
pub const SESSION_LEN: usize = 16;
const HEADER_LEN: usize = 1 + SESSION_LEN + 8 + 8;
const AEAD_TAG_LEN: usize = 16;

/// Bytes sealing adds to a datagram: the header and the AEAD tag.
pub const OVERHEAD: usize = HEADER_LEN + AEAD_TAG_LEN;

/// Senders remembered at once. A session is one sender's life (a restart
/// draws a new one), so a ring of a few hundred members with restarts
/// stays far below; past it the one heard from longest ago is forgotten,
/// and its replays are then refused only once stale.
const SESSIONS_MAX: usize = 4_096;

/// A sender's session id: random, drawn once per sender.
pub type Session = [u8; SESSION_LEN];

/// Why a datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Not sealed, sealed under no accepted secret, or altered.
    Unopened,
    /// Opened, but stamped outside the freshness window.
    Stale,
    /// Opened and fresh, and its counter already taken (or too far behind).
    Replayed,
}

fn key_for(secret: &[u8], session: &Session) -> Option<LessSafeKey> {
    let bytes = keys::derive_for(secret, keys::GOSSIP_SEAL, session)?;
    let key = UnboundKey::new(&CHACHA20_POLY1305, &bytes).ok()?;
    Some(LessSafeKey::new(key))
}

/// The 96-bit nonce of counter `n`: four zero bytes and `n`.
fn nonce(n: u64) -> Nonce {
    let mut bytes = [0u8; NONCE_LEN];
    bytes[NONCE_LEN - 8..].copy_from_slice(&n.to_be_bytes());
    Nonce::assume_unique_for_key(bytes)
}

/// Seals this node's datagrams under one secret.
pub struct Sealer {
    key: LessSafeKey,
    session: Session,
    /// The next datagram's counter: 2^64 datagrams are never sent.
    next: u64,
}

impl Sealer {
    /// None for an empty secret, which would protect nothing.
    pub fn new(secret: &[u8], session: Session) -> Option<Sealer> {
        Some(Sealer {
            key: key_for(secret, &session)?,
            session,
            next: 0,
        })
    }

    /// Writes `payload` sealed, stamped `now_ms`, into `out` (cleared first).
    pub fn seal_into(&mut self, out: &mut Vec<u8>, payload: &[u8], now_ms: u64) {
        let n = self.next;
        self.next += 1;
        out.clear();
        out.push(VERSION);
        out.extend_from_slice(&self.session);
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(&now_ms.to_be_bytes());
        out.extend_from_slice(payload);
        let (header, body) = out.split_at_mut(HEADER_LEN);
        let tag = self
            .key
            .seal_in_place_separate_tag(nonce(n), Aad::from(&*header), body)
            .expect("a gossip datagram is far below ChaCha20's length limit");
        out.extend_from_slice(tag.as_ref());
    }
}

/// What is known of one sender.
struct Heard {
    key: LessSafeKey,
    window: ReplayWindow,
    /// The stamp of its latest datagram taken: who to forget first.
    last_ms: u64,
}

/// Opens datagrams sealed under any accepted secret.
pub struct Opener {
    secrets: Vec<Vec<u8>>,
    heard: HashMap<Session, Heard>,
    /// The ciphertext as received, to try the next secret on after one
    /// failed (a failed open leaves its buffer unspecified).
    scratch: Vec<u8>,
}

impl Opener {
    /// None without a secret, or with an empty one.
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a [u8]>) -> Option<Opener> {
        let secrets: Vec<Vec<u8>> = secrets.into_iter().map(<[u8]>::to_vec).collect();
        if secrets.is_empty() || secrets.iter().any(Vec::is_empty) {
            return None;
        }
        Some(Opener {
            secrets,
            heard: HashMap::new(),
            scratch: Vec::new(),
        })
    }

    /// The payload of a sealed, fresh datagram whose counter is new,
    /// opened in place. Nothing is remembered of a datagram refused.
    pub fn open<'a>(&mut self, datagram: &'a mut [u8], now_ms: u64) -> Result<&'a [u8], Dropped> {
        if datagram.len() < OVERHEAD || datagram[0] != VERSION {
            return Err(Dropped::Unopened);
        }
        let (header, body) = datagram.split_at_mut(HEADER_LEN);
        let header: &[u8] = header;
        let session: Session = header[1..1 + SESSION_LEN].try_into().expect("16 bytes");
        let n = u64::from_be_bytes(header[17..25].try_into().expect("8 bytes"));
        let at = u64::from_be_bytes(header[25..33].try_into().expect("8 bytes"));
        if let Some(heard) = self.heard.get(&session) {
            if !heard.window.allows(n) {
                // Checked before opening: a replay costs no decryption.
                return Err(Dropped::Replayed);
            }
            let plain = heard
                .key
                .open_in_place(nonce(n), Aad::from(header), body)
                .map_err(|_| Dropped::Unopened)?;
            if !keys::fresh(at, now_ms) {
                return Err(Dropped::Stale);
            }
            let heard = self.heard.get_mut(&session).expect("looked up above");
            heard.window.take(n);
            heard.last_ms = heard.last_ms.max(at);
            return Ok(plain);
        }
        let key = self.first_key_opening(&session, n, header, body)?;
        if !keys::fresh(at, now_ms) {
            return Err(Dropped::Stale);
        }
        let mut window = ReplayWindow::default();
        window.take(n);
        self.remember(
            session,
            Heard {
                key,
                window,
                last_ms: at,
            },
            now_ms,
        );
        Ok(&body[..body.len() - AEAD_TAG_LEN])
    }

    /// A new sender: the key of the first accepted secret that opens its
    /// datagram, which `body` then holds opened.
    fn first_key_opening(
        &mut self,
        session: &Session,
        n: u64,
        header: &[u8],
        body: &mut [u8],
    ) -> Result<LessSafeKey, Dropped> {
        self.scratch.clear();
        self.scratch.extend_from_slice(body);
        for (i, secret) in self.secrets.iter().enumerate() {
            if i > 0 {
                body.copy_from_slice(&self.scratch);
            }
            let key = key_for(secret, session).ok_or(Dropped::Unopened)?;
            if key.open_in_place(nonce(n), Aad::from(header), body).is_ok() {
                return Ok(key);
            }
        }
        Err(Dropped::Unopened)
    }

    /// Keeps `heard`, forgetting senders silent past the freshness window
    /// (their replays are stale now) and, when still full, the one heard
    /// from longest ago.
    fn remember(&mut self, session: Session, heard: Heard, now_ms: u64) {
        if self.heard.len() >= SESSIONS_MAX {
            let oldest = now_ms.saturating_sub(FRESHNESS_MS);
            self.heard.retain(|_, h| h.last_ms >= oldest);
        }
        if self.heard.len() >= SESSIONS_MAX {
            let quietest = self
                .heard
                .iter()
                .min_by_key(|(_, h)| h.last_ms)
                .map(|(s, _)| *s);
            if let Some(s) = quietest {
                self.heard.remove(&s);
            }
        }
        self.heard.insert(session, heard);
    }
}

/// This node's gossip keys: one secret seals, every accepted one opens.
pub struct Keyring {
    pub sealer: Sealer,
    pub opener: Opener,
}

impl Keyring {
    /// None when a secret is empty.
    pub fn new(seal: &[u8], accept: &[Vec<u8>], session: Session) -> Option<Keyring> {
        Some(Keyring {
            sealer: Sealer::new(seal, session)?,
            opener: Opener::new(std::iter::once(seal).chain(accept.iter().map(Vec::as_slice)))?,
        })
    }
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.write_str("Keyring(..)")
    }
}

#[cfg(test)]
mod tests;
