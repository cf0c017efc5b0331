//! Rules from JSON bodies, and every rule's fields validated one by one.
//!
//! Both formats (TOML files are read in `file.rs`) are read into one loose
//! field representation and checked by the same code, so a rule refused in
//! a file is refused through the API with the same words.

use std::time::Duration;

use super::{By, Hot, Rule, RuleError, RuleSet, RulesError, Scope, TierBody};
use crate::algorithm::{AlgorithmKind, Policy};
use crate::rules::RoutePattern;

const MAX_NAME_LEN: usize = 64;
const MAX_TEXT_LEN: usize = 256;
/// Integers above 2^53 would not survive a float round trip in JSON.
const MAX_EXACT_FLOAT: f64 = 9_007_199_254_740_992.0;

/// A rule field as either format delivers it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Field<'a> {
    Str(&'a str),
    Int(i64),
    Float(f64),
    Bool(bool),
    Other(&'static str),
}

fn json_field(v: &serde_json::Value) -> Field<'_> {
    match v {
        serde_json::Value::String(s) => Field::Str(s),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Field::Int(i),
            None => Field::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::Bool(b) => Field::Bool(*b),
        serde_json::Value::Null => Field::Other("null"),
        serde_json::Value::Array(_) => Field::Other("array"),
        serde_json::Value::Object(_) => Field::Other("object"),
    }
}

pub(super) fn top_level(field: &str, reason: &str) -> RulesError {
    RuleError {
        rule: "(rules file)".into(),
        field: field.into(),
        reason: reason.into(),
    }
    .into()
}

/// A problem with a JSON body as a whole (the config API or a peer's push).
fn body_level(field: &str, reason: &str) -> RulesError {
    RuleError {
        rule: "(request body)".into(),
        field: field.into(),
        reason: reason.into(),
    }
    .into()
}

pub(super) fn parse_version(f: Field<'_>) -> Result<u64, RulesError> {
    match f {
        Field::Int(i) if i >= 0 => Ok(i as u64),
        _ => Err(top_level("version", "must be a non-negative integer")),
    }
}

fn json_doc(body: &str) -> Result<serde_json::Map<String, serde_json::Value>, RulesError> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| RulesError::Syntax {
        format: "JSON",
        message: e.to_string(),
    })?;
    match v {
        serde_json::Value::Object(m) => Ok(m),
        _ => Err(body_level(
            "rules",
            "the body must be an object {\"rules\": [...]}",
        )),
    }
}

fn json_rules(
    doc: &serde_json::Map<String, serde_json::Value>,
    tier: Option<Option<&str>>,
) -> Result<Vec<Rule>, RulesError> {
    let Some(list) = doc.get("rules").and_then(|v| v.as_array()) else {
        return Err(body_level("rules", "must be an array of rules"));
    };
    let mut rules = Vec::with_capacity(list.len());
    for (i, r) in list.iter().enumerate() {
        let Some(obj) = r.as_object() else {
            return Err(body_level("rules", "each rule must be an object"));
        };
        let fields: Vec<_> = obj
            .iter()
            .map(|(k, v)| (k.as_str(), json_field(v)))
            .collect();
        rules.push(build(i + 1, &fields, tier)?);
    }
    Ok(rules)
}

pub(super) fn tier_from_json(tier: Option<&str>, body: &str) -> Result<TierBody, RulesError> {
    // The tier every rule will take, held to the bounds of a rule's own
    // `tier` field, so a set written here is one a rules file could hold
    // and a peer will accept.
    if let Some(t) = tier {
        text(Field::Str(t), MAX_NAME_LEN).map_err(|reason| body_level("tier", &reason))?;
    }
    let doc = json_doc(body)?;
    if let Some(k) = doc
        .keys()
        .find(|k| !matches!(k.as_str(), "rules" | "allow_empty"))
    {
        return Err(body_level(
            k,
            "unknown field; the body is {\"rules\": [...]} (and \"allow_empty\": true to empty a tier)",
        ));
    }
    let allow_empty = match doc.get("allow_empty") {
        None => false,
        Some(v) => v
            .as_bool()
            .ok_or_else(|| body_level("allow_empty", "must be true or false"))?,
    };
    Ok(TierBody {
        rules: json_rules(&doc, Some(tier))?,
        allow_empty,
    })
}

pub(super) fn set_from_json(body: &str) -> Result<RuleSet, RulesError> {
    let doc = json_doc(body)?;
    let version = match doc.get("version") {
        Some(v) => parse_version(json_field(v))?,
        None => 0,
    };
    RuleSet::new(version, json_rules(&doc, None)?)
}

/// Validates one rule. `forced_tier` is the config API's path tier: the rule
/// takes it, and a rule naming a different tier is refused.
pub(super) fn build(
    pos: usize,
    fields: &[(&str, Field<'_>)],
    forced_tier: Option<Option<&str>>,
) -> Result<Rule, RuleError> {
    let named = fields
        .iter()
        .find(|(k, _)| *k == "name")
        .and_then(|(_, v)| match v {
            Field::Str(s) if valid_name(s) => Some(*s),
            _ => None,
        });
    let label = named.map_or_else(|| format!("#{pos}"), str::to_string);
    let fail = |field: &str, reason: String| RuleError {
        rule: label.clone(),
        field: field.to_string(),
        reason,
    };

    let mut r = Draft::default();
    for &(key, v) in fields {
        match key {
            "name" => r.name = Some(text(v, MAX_NAME_LEN).map_err(|e| fail(key, e))?),
            "tier" => r.tier = Some(text(v, MAX_NAME_LEN).map_err(|e| fail(key, e))?),
            "client" => r.client = Some(text(v, MAX_TEXT_LEN).map_err(|e| fail(key, e))?),
            "route" => r.route = Some(text(v, MAX_TEXT_LEN).map_err(|e| fail(key, e))?),
            "by" => {
                r.by = match v {
                    Field::Str("client") => By::Client,
                    Field::Str("ip") => By::Ip,
                    _ => {
                        return Err(fail(
                            key,
                            format!("must be \"client\" or \"ip\", got {}", show(v)),
                        ))
                    }
                }
            }
            "algorithm" => {
                let name = match v {
                    Field::Str(s) => s.parse::<AlgorithmKind>().ok(),
                    _ => None,
                };
                r.algorithm = Some(name.ok_or_else(|| {
                    fail(
                        key,
                        format!(
                            "unknown algorithm {}; expected one of token_bucket, leaky_bucket, \
                             fixed_window, sliding_window_log, sliding_window_counter",
                            show(v)
                        ),
                    )
                })?)
            }
            "limit" => r.limit = Some(whole(v, 1).map_err(|e| fail(key, e))?),
            "burst" => r.burst = Some(whole(v, 1).map_err(|e| fail(key, e))?),
            "queue" => r.queue = Some(whole(v, 0).map_err(|e| fail(key, e))?),
            "window" => r.window = Some(duration(v).map_err(|e| fail(key, e))?),
            "hot" => r.hot = Some(text(v, MAX_NAME_LEN).map_err(|e| fail(key, e))?),
            "shards" => r.shards = Some(whole(v, 0).map_err(|e| fail(key, e))?),
            "scope" => {
                r.scope = match v {
                    Field::Str("regional") => Scope::Regional,
                    Field::Str("global") => Scope::Global,
                    _ => {
                        return Err(fail(
                            key,
                            format!("must be \"regional\" or \"global\", got {}", show(v)),
                        ))
                    }
                }
            }
            "shadow" => {
                r.shadow = match v {
                    Field::Bool(b) => b,
                    _ => return Err(fail(key, format!("must be true or false, got {}", show(v)))),
                }
            }
            _ => return Err(fail(key, "unknown field".into())),
        }
    }

    let name = r.name.ok_or_else(|| fail("name", "is required".into()))?;
    if !valid_name(&name) {
        return Err(fail(
            "name",
            "may hold only letters, digits, '-', '_', '.' and ':'".into(),
        ));
    }
    if let Some(path_tier) = forced_tier {
        if r.tier.is_some() && r.tier.as_deref() != path_tier {
            return Err(fail(
                "tier",
                "must match the tier in the path (or be left out)".into(),
            ));
        }
        r.tier = path_tier.map(str::to_string);
    }
    let algorithm = r
        .algorithm
        .ok_or_else(|| fail("algorithm", "is required".into()))?;
    let limit = r.limit.ok_or_else(|| fail("limit", "is required".into()))?;
    let window = r
        .window
        .ok_or_else(|| fail("window", "is required".into()))?;
    let policy = Policy::new(algorithm, limit, window, r.burst, r.queue)
        .map_err(|e| fail(e.field, e.reason))?;
    let hot = Hot::parse(r.hot.as_deref(), r.shards, algorithm, r.queue)
        .map_err(|(field, reason)| fail(field, reason))?;
    if let Hot::Shard(k) = hot {
        // Each sub-counter needs a part of at least 1, or the parts would
        // sum past the rule's limit (or burst).
        let least = limit.min(r.burst.unwrap_or(u64::MAX));
        if least < u64::from(k) {
            return Err(fail(
                "shards",
                format!("must be at most the limit (and burst), {least}, got {k}"),
            ));
        }
    }
    if r.scope == Scope::Global && matches!(hot, Hot::Shard(_) | Hot::Local) {
        // A global key's region share is held by its owner in the region;
        // sub-counters or per-gateway limits would each need a share.
        return Err(fail(
            "scope",
            "a global rule's keys are decided by their owners: hot may be \"off\" or \"lease\", \
             not \"shard\" or \"local\""
                .into(),
        ));
    }
    Ok(Rule {
        name: name.into(),
        tier: r.tier,
        client: r.client,
        route: r.route.as_deref().map(RoutePattern::new),
        by: r.by,
        algorithm,
        limit,
        window,
        burst: r.burst,
        queue: r.queue,
        shadow: r.shadow,
        hot,
        shard_of: None,
        scope: r.scope,
        policy,
        carried: false,
    })
}

#[derive(Default)]
struct Draft {
    name: Option<String>,
    tier: Option<String>,
    client: Option<String>,
    route: Option<String>,
    by: By,
    algorithm: Option<AlgorithmKind>,
    limit: Option<u64>,
    window: Option<Duration>,
    burst: Option<u64>,
    queue: Option<u64>,
    shadow: bool,
    hot: Option<String>,
    shards: Option<u64>,
    scope: Scope,
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME_LEN
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

fn show(v: Field<'_>) -> String {
    match v {
        Field::Str(s) => format!("\"{s}\""),
        Field::Int(i) => i.to_string(),
        Field::Float(f) if f.is_nan() => "NaN".into(),
        Field::Float(f) => f.to_string(),
        Field::Bool(b) => b.to_string(),
        Field::Other(k) => format!("a {k}"),
    }
}

fn text(v: Field<'_>, max: usize) -> Result<String, String> {
    match v {
        Field::Str("") => Err("must not be empty".into()),
        Field::Str(s) if s.len() > max => Err(format!("must be at most {max} bytes")),
        Field::Str(s) if s.chars().any(char::is_control) => {
            Err("must not contain control characters".into())
        }
        Field::Str(s) => Ok(s.to_string()),
        _ => Err(format!("must be a string, got {}", show(v))),
    }
}

/// A whole number >= `min`. Written `!(f >= min)` style on floats so that NaN,
/// which fails every comparison, is refused instead of slipping through
/// (`nan <= 0` is false).
fn whole(v: Field<'_>, min: u64) -> Result<u64, String> {
    let n = match v {
        Field::Int(i) => i128::from(i),
        Field::Float(f) if f.is_nan() => return Err("must be a number, got NaN".into()),
        Field::Float(f) if f.is_infinite() => return Err(format!("must be finite, got {f}")),
        Field::Float(f) if f.fract() != 0.0 => {
            return Err(format!("must be a whole number, got {f}"))
        }
        Field::Float(f) if f.abs() > MAX_EXACT_FLOAT => return Err(format!("is too large: {f}")),
        Field::Float(f) => f as i128,
        _ => return Err(format!("must be a whole number, got {}", show(v))),
    };
    if n < i128::from(min) {
        return Err(format!("must be at least {min}, got {n}"));
    }
    Ok(n as u64)
}

/// A duration string ("60s", "1m", "500ms", "1h 30m") or a number of seconds.
fn duration(v: Field<'_>) -> Result<Duration, String> {
    let d = match v {
        Field::Str(s) => humantime::parse_duration(s.trim())
            .map_err(|e| format!("is not a duration like \"60s\" or \"1m\" ({e}): \"{s}\""))?,
        Field::Int(i) if i > 0 => Duration::from_secs(i as u64),
        Field::Int(i) => return Err(format!("must be longer than zero, got {i}")),
        // NaN fails every comparison, so test for it by name.
        Field::Float(f) if f.is_nan() || f <= 0.0 => {
            return Err(format!(
                "must be a positive number of seconds, got {}",
                show(v)
            ))
        }
        Field::Float(f) => {
            Duration::try_from_secs_f64(f).map_err(|_| format!("is out of range: {f}"))?
        }
        _ => {
            return Err(format!(
                "must be a duration string like \"60s\", got {}",
                show(v)
            ))
        }
    };
    if d.is_zero() {
        return Err("must be longer than zero".into());
    }
    Ok(d)
}

/// The rules of a JSON body, each with the tier it names, before any
/// check across rules: what tests compare the set's own checks against.
#[cfg(test)]
pub(super) fn set_rules_for_tests(body: &str) -> Vec<super::Rule> {
    json_rules(&json_doc(body).unwrap(), None).unwrap()
}
