//! A decided check's JSON body, written by hand. Through serde_json, which
//! escapes every string byte by byte, an admitted `POST /v1/check` took
//! 23,572 instructions in process and a denied one 26,487; written here,
//! 22,924 and 23,713 (`CALL=http bench/pipeline-count.sh`). The fields and
//! their order are those the serde structs gave.

use http::StatusCode;

use crate::check::CheckResponse;

pub(super) struct DecisionBody<'a> {
    pub allowed: bool,
    pub limit: u64,
    pub remaining: u64,
    pub retry_after_ms: u64,
    pub reset_at: u64,
    pub rule: &'a str,
    /// Ceiling, as with every wait shown: sending early would be refused.
    pub delay_ms: Option<u64>,
}

impl<'a> DecisionBody<'a> {
    pub fn of(r: &CheckResponse, rule: &'a str) -> Self {
        DecisionBody {
            allowed: r.allowed,
            limit: r.limit,
            remaining: r.remaining,
            retry_after_ms: r.retry_after_ms(),
            reset_at: r.reset_at_ms,
            rule,
            delay_ms: (!r.delay.is_zero()).then(|| r.delay_ms()),
        }
    }

    /// `{"allowed":..,"limit":..,"remaining":..,"retry_after_ms":..,"reset_at":..,"rule":".."}`,
    /// with `delay_ms` when there is one.
    pub fn json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(160);
        out.push(b'{');
        self.push_fields(&mut out);
        out
    }

    /// The 429's RFC 9457 problem, whose extension members are the decision.
    pub fn problem_json(&self, status: StatusCode) -> Vec<u8> {
        let mut out = Vec::with_capacity(320);
        out.extend_from_slice(
            br#"{"type":"urn:weir:problem:rate-limited","title":"Too Many Requests","status":"#,
        );
        push_number(&mut out, u64::from(status.as_u16()));
        out.extend_from_slice(br#","detail":"over the limit of rule \""#);
        push_escaped(&mut out, self.rule);
        out.extend_from_slice(br#"\"","#);
        self.push_fields(&mut out);
        out
    }

    /// The decision's members and the closing brace.
    fn push_fields(&self, out: &mut Vec<u8>) {
        let allowed: &[u8] = if self.allowed { b"true" } else { b"false" };
        out.extend_from_slice(br#""allowed":"#);
        out.extend_from_slice(allowed);
        for (name, n) in [
            (&br#","limit":"#[..], self.limit),
            (br#","remaining":"#, self.remaining),
            (br#","retry_after_ms":"#, self.retry_after_ms),
            (br#","reset_at":"#, self.reset_at),
        ] {
            out.extend_from_slice(name);
            push_number(out, n);
        }
        out.extend_from_slice(br#","rule":""#);
        push_escaped(out, self.rule);
        out.push(b'"');
        if let Some(ms) = self.delay_ms {
            out.extend_from_slice(br#","delay_ms":"#);
            push_number(out, ms);
        }
        out.push(b'}');
    }
}

fn push_number(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// `s` as the inside of a JSON string (RFC 8259): `"`, `\` and the
/// control characters escaped, everything else as it is. Rule names are
/// restricted to characters that need none; escaping keeps the body valid
/// JSON whatever a name holds.
fn push_escaped(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            0..=0x1f => b'u',
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        start = i + 1;
        out.extend_from_slice(&[b'\\', short]);
        if short == b'u' {
            out.extend_from_slice(&[
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
        }
    }
    out.extend_from_slice(&bytes[start..]);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{json, Value};

    use super::*;

    fn body(
        rule: &str,
        allowed: bool,
        numbers: [u64; 4],
        delay_ms: Option<u64>,
    ) -> DecisionBody<'_> {
        DecisionBody {
            allowed,
            limit: numbers[0],
            remaining: numbers[1],
            retry_after_ms: numbers[2],
            reset_at: numbers[3],
            rule,
            delay_ms,
        }
    }

    fn decision(b: &DecisionBody<'_>) -> Value {
        let mut v = json!({
            "allowed": b.allowed,
            "limit": b.limit,
            "remaining": b.remaining,
            "retry_after_ms": b.retry_after_ms,
            "reset_at": b.reset_at,
            "rule": b.rule,
        });
        if let Some(ms) = b.delay_ms {
            v["delay_ms"] = json!(ms);
        }
        v
    }

    #[test]
    fn the_fields_come_in_the_documented_order() {
        let b = body(
            "per-client",
            true,
            [100, 7, 0, 1_738_368_060_000],
            Some(250),
        );
        assert_eq!(
            String::from_utf8(b.json()).unwrap(),
            r#"{"allowed":true,"limit":100,"remaining":7,"retry_after_ms":0,"reset_at":1738368060000,"rule":"per-client","delay_ms":250}"#
        );
    }

    #[test]
    fn every_control_character_quote_and_backslash_is_escaped() {
        let mut out = Vec::new();
        push_escaped(&mut out, "a\"b\\c\n\r\t\u{8}\u{c}\u{1}\u{1f}\u{7f}é");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            // DEL is not a control character to JSON: it goes out as it is.
            "a\\\"b\\\\c\\n\\r\\t\\b\\f\\u0001\\u001f\u{7f}é"
        );
    }

    proptest! {
        // Any rule name and any numbers read back as exactly what was
        // written, as a plain answer and inside the problem.
        #[test]
        fn both_bodies_read_back_as_written(
            rule in any::<String>(),
            allowed in any::<bool>(),
            numbers in any::<[u64; 4]>(),
            delay_ms in any::<Option<u64>>(),
        ) {
            let b = body(&rule, allowed, numbers, delay_ms);
            let plain: Value = serde_json::from_slice(&b.json()).expect("valid JSON");
            prop_assert_eq!(&plain, &decision(&b));

            let problem: Value = serde_json::from_slice(&b.problem_json(StatusCode::TOO_MANY_REQUESTS))
                .expect("valid JSON");
            let mut expected = decision(&b);
            expected["type"] = json!("urn:weir:problem:rate-limited");
            expected["title"] = json!("Too Many Requests");
            expected["status"] = json!(429);
            expected["detail"] = json!(format!("over the limit of rule \"{rule}\""));
            prop_assert_eq!(problem, expected);
        }
    }
}
