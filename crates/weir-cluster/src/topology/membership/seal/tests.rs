use super::*;

const NOW: u64 = 1_800_000_000_000;
const PAYLOAD: &[u8] = b"member node-a at 10.0.0.7:7946";

fn session(byte: u8) -> Session {
    [byte; SESSION_LEN]
}

fn sealed(sealer: &mut Sealer, payload: &[u8], at: u64) -> Vec<u8> {
    let mut out = Vec::new();
    sealer.seal_into(&mut out, payload, at);
    out
}

fn opener(secrets: &[&[u8]]) -> Opener {
    Opener::new(secrets.iter().copied()).unwrap()
}

/// Opens a copy, so a test can offer the same bytes again.
fn open(o: &mut Opener, datagram: &[u8], now: u64) -> Result<Vec<u8>, Dropped> {
    let mut copy = datagram.to_vec();
    o.open(&mut copy, now).map(<[u8]>::to_vec)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn a_sealed_datagram_opens_with_its_secret_and_shows_nothing_of_the_payload() {
    let mut s = Sealer::new(b"s3cret", session(1)).unwrap();
    let d = sealed(&mut s, PAYLOAD, NOW);
    assert_eq!(d.len(), PAYLOAD.len() + OVERHEAD);
    for clear in [&b"node-a"[..], b"10.0.0.7", b"s3cret"] {
        assert!(!contains(&d, clear), "{:?} in the clear", clear);
    }
    assert_eq!(
        open(&mut opener(&[b"s3cret"]), &d, NOW),
        Ok(PAYLOAD.to_vec())
    );
}

#[test]
fn altered_foreign_short_and_unsealed_datagrams_do_not_open() {
    let mut s = Sealer::new(b"s3cret", session(1)).unwrap();
    let d = sealed(&mut s, PAYLOAD, NOW);
    assert_eq!(
        open(&mut opener(&[b"other"]), &d, NOW),
        Err(Dropped::Unopened),
        "another secret"
    );
    // Every byte counts: the version, the session, the counter and the
    // stamp (associated data), the ciphertext and the tag.
    for i in [0, 1, 17, 25, HEADER_LEN, d.len() - 1] {
        let mut altered = d.clone();
        altered[i] ^= 1;
        assert_eq!(
            open(&mut opener(&[b"s3cret"]), &altered, NOW),
            Err(Dropped::Unopened),
            "byte {i} altered"
        );
    }
    let mut o = opener(&[b"s3cret"]);
    assert_eq!(
        open(&mut o, &d[..OVERHEAD - 1], NOW),
        Err(Dropped::Unopened)
    );
    assert_eq!(open(&mut o, PAYLOAD, NOW), Err(Dropped::Unopened));
    assert!(Opener::new([&b""[..]]).is_none());
    assert!(Opener::new(std::iter::empty::<&[u8]>()).is_none());
    assert!(Sealer::new(b"", session(1)).is_none());
}

#[test]
fn a_datagram_is_taken_once() {
    let mut s = Sealer::new(b"s3cret", session(1)).unwrap();
    let mut o = opener(&[b"s3cret"]);
    let first = sealed(&mut s, PAYLOAD, NOW);
    let second = sealed(&mut s, PAYLOAD, NOW);
    assert!(open(&mut o, &first, NOW).is_ok());
    assert_eq!(open(&mut o, &first, NOW + 5), Err(Dropped::Replayed));
    assert!(open(&mut o, &second, NOW + 5).is_ok());
    assert_eq!(open(&mut o, &second, NOW + 6), Err(Dropped::Replayed));
}

/// Guard: the counter is taken only once the datagram opened, so a forged
/// datagram under a known session cannot burn the counter of a real one.
#[test]
fn a_datagram_that_fails_to_open_takes_no_counter() {
    let mut s = Sealer::new(b"s3cret", session(1)).unwrap();
    let mut o = opener(&[b"s3cret"]);
    assert!(open(&mut o, &sealed(&mut s, b"first", NOW), NOW).is_ok());
    let real = sealed(&mut s, PAYLOAD, NOW);
    let mut forged = real.clone();
    forged[HEADER_LEN] ^= 1;
    assert_eq!(open(&mut o, &forged, NOW), Err(Dropped::Unopened));
    assert_eq!(open(&mut o, &real, NOW), Ok(PAYLOAD.to_vec()));
}

#[test]
fn a_datagram_is_taken_only_while_fresh() {
    let mut s = Sealer::new(b"s3cret", session(1)).unwrap();
    let d = sealed(&mut s, PAYLOAD, NOW);
    // A node that never heard this sender, fifteen minutes on (the sender
    // long gone and forgotten), or with the capture from its future.
    let mut o = opener(&[b"s3cret"]);
    assert_eq!(open(&mut o, &d, NOW + 15 * 60_000), Err(Dropped::Stale));
    assert_eq!(
        open(&mut o, &d, NOW - FRESHNESS_MS - 1),
        Err(Dropped::Stale)
    );
    assert_eq!(open(&mut o, &d, NOW + FRESHNESS_MS), Ok(PAYLOAD.to_vec()));
    // A known sender's old datagram is stale too.
    let late = sealed(&mut s, PAYLOAD, NOW);
    assert_eq!(
        open(&mut o, &late, NOW + FRESHNESS_MS + 1),
        Err(Dropped::Stale)
    );
}

#[test]
fn no_nonce_is_used_twice_under_one_key() {
    let mut s = Sealer::new(b"s3cret", session(1)).unwrap();
    let a = sealed(&mut s, PAYLOAD, NOW);
    let b = sealed(&mut s, PAYLOAD, NOW);
    assert_ne!(a[17..25], b[17..25], "the counter moved");
    assert_ne!(a[HEADER_LEN..], b[HEADER_LEN..]);
    // Another sender on the same secret, at the same counter, seals under
    // another key.
    let mut t = Sealer::new(b"s3cret", session(2)).unwrap();
    let c = sealed(&mut t, PAYLOAD, NOW);
    assert_eq!(a[17..25], c[17..25]);
    assert_ne!(a[HEADER_LEN..], c[HEADER_LEN..]);
}

#[test]
fn every_accepted_secret_opens_and_only_the_first_seals() {
    let mut on_a = Keyring::new(b"A", &[], session(1)).unwrap();
    let mut a_accepting_b = Keyring::new(b"A", &[b"B".to_vec()], session(2)).unwrap();
    let mut b_accepting_a = Keyring::new(b"B", &[b"A".to_vec()], session(3)).unwrap();
    let mut on_b = Keyring::new(b"B", &[], session(4)).unwrap();
    let from = |k: &mut Keyring| {
        let mut out = Vec::new();
        k.sealer.seal_into(&mut out, PAYLOAD, NOW);
        out
    };
    let (a, ab, ba, b) = (
        from(&mut on_a),
        from(&mut a_accepting_b),
        from(&mut b_accepting_a),
        from(&mut on_b),
    );
    // Each step of a rotation opens what its neighbours seal.
    assert!(open(&mut a_accepting_b.opener, &a, NOW).is_ok());
    assert!(open(&mut a_accepting_b.opener, &ba, NOW).is_ok());
    assert!(open(&mut b_accepting_a.opener, &ab, NOW).is_ok());
    assert!(open(&mut b_accepting_a.opener, &b, NOW).is_ok());
    assert!(open(&mut on_b.opener, &ba, NOW).is_ok());
    // An accepted secret never seals: A accepting B still seals under A,
    // which a node on B alone does not open.
    assert_eq!(open(&mut on_b.opener, &ab, NOW), Err(Dropped::Unopened));
    assert_eq!(open(&mut on_a.opener, &ba, NOW), Err(Dropped::Unopened));
    assert!(Keyring::new(b"A", &[Vec::new()], session(5)).is_none());
}

#[test]
fn senders_remembered_are_bounded() {
    let mut o = opener(&[b"s3cret"]);
    for i in 0..(SESSIONS_MAX + 10) as u64 {
        let mut id = [0u8; SESSION_LEN];
        id[..8].copy_from_slice(&i.to_be_bytes());
        let mut s = Sealer::new(b"s3cret", id).unwrap();
        assert!(open(&mut o, &sealed(&mut s, PAYLOAD, NOW + i), NOW + i).is_ok());
    }
    assert_eq!(o.heard.len(), SESSIONS_MAX);
    let mut first = [0u8; SESSION_LEN];
    first[..8].copy_from_slice(&0u64.to_be_bytes());
    assert!(!o.heard.contains_key(&first), "the quietest was forgotten");
}
