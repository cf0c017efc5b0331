//! The `RateLimitResponse` for a request's verdicts written as bytes, the
//! bytes prost writes for [`super::to_response`]'s message, without the
//! message: no `String` per rule name, header name and value to build,
//! measure, encode and drop.

use weir_core::{CheckResponse, Verdict};
use weir_proto::write;

use super::{code, each_header, overall, rate, until_reset};

/// What [`super::to_response`] answers, encoded.
pub fn response(verdicts: &[Verdict], wait: impl FnOnce(&CheckResponse) -> Option<u64>) -> Vec<u8> {
    // A status is some 40 bytes, the headers about 120.
    let mut out = Vec::with_capacity(160 + 48 * verdicts.len());
    write::uint(&mut out, 1, overall(verdicts) as u64);
    for v in verdicts {
        write::message(&mut out, 2, |out| status(out, v));
    }
    each_header(verdicts, wait, |key, value| {
        write::message(&mut out, 3, |out| {
            write::bytes(out, 1, key.as_bytes());
            write::bytes(out, 2, value.as_bytes());
        });
    });
    out
}

/// A `DescriptorStatus`'s fields, as [`super::status`] sets them.
fn status(out: &mut Vec<u8>, v: &Verdict) {
    write::uint(out, 1, code(v) as u64);
    let Some(a) = v.binding() else {
        return;
    };
    let (per_unit, unit) = rate(a.rule.limit, a.rule.window);
    write::message(out, 2, |out| {
        write::uint(out, 1, u64::from(per_unit));
        write::uint(out, 2, unit as u64);
        write::bytes(out, 3, a.rule.name.as_bytes());
    });
    let remaining = u32::try_from(a.decision.remaining).unwrap_or(u32::MAX);
    write::uint(out, 3, u64::from(remaining));
    let (seconds, nanos) = until_reset(a);
    // Both are never negative (a reset is never in the past): plain varints.
    write::message(out, 4, |out| {
        write::uint(out, 1, seconds as u64);
        write::uint(out, 2, nanos as u64);
    });
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use proptest::prelude::*;
    use weir_core::{Applied, Decision, Rule, Verdict};
    use weir_proto::prost::Message;

    use super::super::to_response;
    use super::*;

    /// A limit some rule applied: a window of whole units or not, a name
    /// long enough at times to need a two-byte length.
    fn applied() -> impl Strategy<Value = Applied> {
        let name = prop_oneof!["[a-z:-]{1,20}", "[a-z]{120,300}"];
        let window = prop_oneof![
            Just(Duration::from_secs(60)),
            Just(Duration::from_secs(86_400)),
            (1u64..10_000_000).prop_map(Duration::from_millis),
        ];
        let numbers = (
            any::<u64>(),
            0u64..1 << 45,
            0u64..1 << 62,
            0u64..100_000_000,
        );
        (
            name,
            1u64..1_000_000_000_000,
            window,
            any::<bool>(),
            any::<bool>(),
            numbers,
        )
            .prop_map(
                |(name, limit, window, allowed, shadow, (remaining, reset_at, at, wait_ms))| {
                    let mut rule = Rule::carried(&name, limit, window).expect("a valid rule");
                    rule.shadow = shadow;
                    Applied {
                        rule: Arc::new(rule),
                        hash_part: "k".into(),
                        decision: Decision {
                            allowed,
                            limit,
                            remaining,
                            retry_after: Duration::from_millis(wait_ms),
                            reset_at,
                            delay: Duration::ZERO,
                            at,
                        },
                    }
                },
            )
    }

    /// A descriptor's verdict: unlimited, or one to three limits applied.
    fn verdict() -> impl Strategy<Value = Verdict> {
        (any::<bool>(), prop::collection::vec(applied(), 0..=3))
            .prop_map(|(allowed, applied)| Verdict { allowed, applied })
    }

    proptest! {
        #[test]
        fn the_bytes_are_prosts_for_the_same_verdicts(
            verdicts in prop::collection::vec(verdict(), 1..=4),
            jitter in prop::option::of(0u64..1 << 40),
        ) {
            let wait = |_: &CheckResponse| jitter;
            let ours = response(&verdicts, wait);
            let theirs = to_response(&verdicts, wait).encode_to_vec();
            prop_assert_eq!(ours, theirs);
        }
    }
}
