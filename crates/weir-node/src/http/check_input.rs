//! The `POST /v1/check` body, validated field by field so every refusal names its field.

use std::borrow::Cow;
use std::time::Duration;

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};
use weir_core::CheckRequest;

/// Integers above 2^53 do not survive a float round trip, so a float cost
/// past it cannot be trusted to be the number the client meant.
const MAX_EXACT_FLOAT: f64 = 9_007_199_254_740_992.0;

const FIELDS: [&str; 6] = ["key", "route", "cost", "tier", "ip", "max_delay_ms"];

/// The body as the fast path reads it: strings borrowed from the body
/// unless they contain escapes, and an integer cost. `null` reads as absent,
/// as in the checked path.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fast<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(borrow, default)]
    route: Option<Cow<'a, str>>,
    #[serde(default)]
    cost: Option<u64>,
    #[serde(borrow, default)]
    tier: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    ip: Option<Cow<'a, str>>,
    #[serde(default)]
    max_delay_ms: Option<u64>,
}

/// Reads a `POST /v1/check` body into a [`CheckRequest`].
pub struct CheckInput;

/// Why a body was refused: the field as the client wrote it, the label it is
/// counted under in metrics (bounded, so a client cannot mint label values),
/// and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    pub field: String,
    pub metric_field: &'static str,
    pub detail: String,
}

fn err(field: &'static str, detail: impl Into<String>) -> InputError {
    InputError {
        field: field.to_string(),
        metric_field: field,
        detail: detail.into(),
    }
}

impl CheckInput {
    /// A well-formed body is read by a derived struct in one pass. Anything
    /// that struct refuses, or that the rules below would refuse, is read
    /// again through `serde_json::Value` by [`CheckInput::parse_checked`],
    /// whose errors name the field: serde's own name a line and column, and
    /// a client fixing a 400 needs the field.
    pub fn parse(body: &[u8]) -> Result<CheckRequest, InputError> {
        // A derived struct would also read an array, in field order.
        let object = body.trim_ascii_start().starts_with(b"{");
        match serde_json::from_slice::<Fast<'_>>(body) {
            Ok(f) if object && !f.key.is_empty() && f.cost != Some(0) => Ok(CheckRequest {
                key: f.key.into_owned(),
                route: f.route.map(Cow::into_owned).unwrap_or_default(),
                cost: f.cost.unwrap_or(1),
                tier: f.tier.map(Cow::into_owned),
                ip: f.ip.map(Cow::into_owned),
                limit: None,
                max_delay: f.max_delay_ms.map(Duration::from_millis),
            }),
            _ => CheckInput::parse_checked(body),
        }
    }

    /// The field-by-field reading, for bodies the fast path refused.
    pub fn parse_checked(body: &[u8]) -> Result<CheckRequest, InputError> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| err("body", format!("the body is not valid JSON: {e}")))?;
        let Value::Object(obj) = value else {
            return Err(err(
                "body",
                "the body must be a JSON object like {\"key\":\"cust_42\"}",
            ));
        };
        // Unknown fields first: a misspelt "kye" is reported as itself, not
        // as a missing "key".
        if let Some(unknown) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(InputError {
                field: unknown.clone(),
                metric_field: "unknown_field",
                detail: format!(
                    "unknown field \"{unknown}\"; expected key, route, cost, tier, ip, max_delay_ms"
                ),
            });
        }
        // A field sent twice is refused, not read first- or last-wins:
        // JSON leaves which one counts to the reader, and a proxy in front
        // that read the other one would have checked a different key.
        if let Some(field) = first_repeated(body) {
            return Err(err(field, "is given more than once; send each field once"));
        }
        let key = match optional_str(&obj, "key")? {
            None => return Err(err("key", "is required")),
            Some("") => return Err(err("key", "must not be empty")),
            Some(k) => k.to_string(),
        };
        Ok(CheckRequest {
            key,
            route: optional_str(&obj, "route")?.unwrap_or("").to_string(),
            cost: cost(obj.get("cost"))?,
            tier: optional_str(&obj, "tier")?.map(str::to_string),
            ip: optional_str(&obj, "ip")?.map(str::to_string),
            limit: None,
            max_delay: max_delay(obj.get("max_delay_ms"))?,
        })
    }
}

/// The first known field an object names twice, read from a body already
/// known to be a JSON object of known fields (`serde_json::Value` keeps
/// the last of each name and cannot tell).
fn first_repeated(body: &[u8]) -> Option<&'static str> {
    struct Repeated(Option<&'static str>);

    impl<'de> Deserialize<'de> for Repeated {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_map(Repeated(None))
        }
    }

    impl<'de> Visitor<'de> for Repeated {
        type Value = Repeated;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Self, A::Error> {
            let mut seen = [false; FIELDS.len()];
            while let Some(name) = map.next_key::<String>()? {
                map.next_value::<IgnoredAny>()?;
                let Some(i) = FIELDS.iter().position(|f| *f == name) else {
                    continue;
                };
                if std::mem::replace(&mut seen[i], true) {
                    self.0.get_or_insert(FIELDS[i]);
                }
            }
            Ok(self)
        }
    }

    serde_json::from_slice::<Repeated>(body)
        .ok()
        .and_then(|r| r.0)
}

/// A string field; absent and `null` both mean "not given".
fn optional_str<'a>(
    obj: &'a Map<String, Value>,
    field: &'static str,
) -> Result<Option<&'a str>, InputError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(err(field, format!("must be a string, got {}", kind(other)))),
    }
}

/// Cost: absent means 1; otherwise a whole number from 1 to u64::MAX.
/// Zero, negatives, fractions, numbers past u64 and strings are refused
/// here, before anything is looked up, so a bad cost never moves a counter.
fn cost(v: Option<&Value>) -> Result<u64, InputError> {
    let n = match v {
        None | Some(Value::Null) => return Ok(1),
        Some(Value::Number(n)) => n,
        Some(other) => {
            return Err(err(
                "cost",
                format!("must be a positive whole number, got {}", kind(other)),
            ))
        }
    };
    if let Some(c) = n.as_u64() {
        return match c {
            0 => Err(err("cost", "must be at least 1, got 0")),
            c => Ok(c),
        };
    }
    if let Some(i) = n.as_i64() {
        return Err(err("cost", format!("must be at least 1, got {i}")));
    }
    let f = n.as_f64().unwrap_or(f64::NAN);
    // NaN fails every comparison, so it is named rather than slipping past `< 1`.
    if f.is_nan() || f < 1.0 {
        return Err(err("cost", format!("must be at least 1, got {n}")));
    }
    if f.fract() != 0.0 {
        return Err(err("cost", format!("must be a whole number, got {n}")));
    }
    if f > MAX_EXACT_FLOAT {
        return Err(err("cost", format!("is too large, got {n}")));
    }
    Ok(f as u64)
}

/// The longest the caller will wait before sending, in milliseconds:
/// absent or `null` for no bound, else a whole number from 0.
fn max_delay(v: Option<&Value>) -> Result<Option<Duration>, InputError> {
    let bad = |got: String| {
        err(
            "max_delay_ms",
            format!("must be a whole number of milliseconds from 0, got {got}"),
        )
    };
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(ms) => Ok(Some(Duration::from_millis(ms))),
            None => {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if f >= 0.0 && f.fract() == 0.0 && f <= MAX_EXACT_FLOAT {
                    Ok(Some(Duration::from_millis(f as u64)))
                } else {
                    Err(bad(n.to_string()))
                }
            }
        },
        Some(other) => Err(bad(kind(other).to_string())),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(body: &str) -> String {
        CheckInput::parse(body.as_bytes()).unwrap_err().field
    }

    #[test]
    fn full_body_parses_and_cost_defaults_to_one() {
        let c =
            CheckInput::parse(br#"{"key":"k","route":"GET /","tier":"free","ip":"::1"}"#).unwrap();
        assert_eq!(c.cost, 1);
        assert_eq!(c.route, "GET /");
        assert_eq!(c.tier.as_deref(), Some("free"));
        assert_eq!(c.ip.as_deref(), Some("::1"));
        assert_eq!(
            CheckInput::parse(br#"{"key":"k","cost":7}"#).unwrap().cost,
            7
        );
    }

    #[test]
    fn each_bad_cost_names_cost() {
        for bad in [
            "0",
            "-1",
            "1.5",
            "1e30",
            "18446744073709551616",
            "\"1\"",
            "true",
        ] {
            let body = format!(r#"{{"key":"k","cost":{bad}}}"#);
            assert_eq!(field_of(&body), "cost", "cost {bad}");
        }
    }

    #[test]
    fn whole_float_cost_within_exact_range_is_accepted() {
        assert_eq!(
            CheckInput::parse(br#"{"key":"k","cost":2.0}"#)
                .unwrap()
                .cost,
            2
        );
    }

    #[test]
    fn key_must_be_a_non_empty_string() {
        assert_eq!(field_of(r#"{"route":"x"}"#), "key");
        assert_eq!(field_of(r#"{"key":""}"#), "key");
        assert_eq!(field_of(r#"{"key":5}"#), "key");
        assert_eq!(field_of(r#"{"key":null}"#), "key");
    }

    #[test]
    fn unknown_field_is_named_and_counted_under_a_fixed_label() {
        let e = CheckInput::parse(br#"{"key":"k","kye":"x"}"#).unwrap_err();
        assert_eq!(e.field, "kye");
        assert_eq!(e.metric_field, "unknown_field");
    }

    #[test]
    fn non_object_and_malformed_bodies_name_body() {
        assert_eq!(field_of("{\"key\":"), "body");
        assert_eq!(field_of("[1,2]"), "body");
        assert_eq!(field_of(""), "body");
    }

    #[test]
    fn what_the_fast_path_refuses_is_read_field_by_field() {
        // Escapes are decoded whichever path reads them.
        let c = CheckInput::parse(br#"{"key":"c\u0041","route":null}"#).unwrap();
        assert_eq!((c.key.as_str(), c.route.as_str()), ("cA", ""));
        assert_eq!(field_of(r#"{"key":"k","cost":0}"#), "cost");
        assert_eq!(field_of(r#"["k"]"#), "body");
    }

    #[test]
    fn a_field_sent_twice_is_refused_naming_it() {
        for (body, field) in [
            (r#"{"key":"a","key":"b"}"#, "key"),
            (r#"{"key":"a","route":"r","cost":1,"route":"r"}"#, "route"),
            (r#"{"key":"a","cost":2,"cost":null}"#, "cost"),
            // An escaped name is the name it decodes to.
            (r#"{"key":"a","ti\u0065r":"x","tier":"y"}"#, "tier"),
            (r#"{"ip":"::1","key":"a","ip":"::1"}"#, "ip"),
        ] {
            let e = CheckInput::parse(body.as_bytes()).expect_err(body);
            assert_eq!((e.field.as_str(), e.metric_field), (field, field), "{body}");
            assert!(e.detail.contains("more than once"), "{}", e.detail);
        }
        // An unknown field is named first, as it is without a repeat.
        assert_eq!(field_of(r#"{"key":"a","key":"b","kye":1}"#), "kye");
    }

    #[test]
    fn max_delay_is_whole_milliseconds_from_zero() {
        let c = CheckInput::parse(br#"{"key":"k","max_delay_ms":250}"#).unwrap();
        assert_eq!(c.max_delay, Some(Duration::from_millis(250)));
        let c = CheckInput::parse(br#"{"key":"k","max_delay_ms":0}"#).unwrap();
        assert_eq!(c.max_delay, Some(Duration::ZERO), "0: a meter");
        let c = CheckInput::parse(br#"{"key":"k","max_delay_ms":null}"#).unwrap();
        assert_eq!(c.max_delay, None);
        for bad in ["-1", "1.5", "\"10\"", "1e300"] {
            let body = format!(r#"{{"key":"k","max_delay_ms":{bad}}}"#);
            assert_eq!(field_of(&body), "max_delay_ms", "{bad}");
        }
    }

    #[test]
    fn optional_strings_refuse_other_types() {
        assert_eq!(field_of(r#"{"key":"k","tier":3}"#), "tier");
        assert_eq!(field_of(r#"{"key":"k","ip":[]}"#), "ip");
        assert_eq!(field_of(r#"{"key":"k","route":{}}"#), "route");
    }
}
