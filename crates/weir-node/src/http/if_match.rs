//! `If-Match` on `PUT /v1/limits/{tier}`: write only over the rules the caller has seen (RFC 9110, 13.1.1).

use axum::http::header::IF_MATCH;
use axum::http::HeaderMap;

use weir_cluster::topology::tier_writes::Condition;

use super::problem::Problem;

/// What the caller's `If-Match` asks of the tier's current entity tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IfMatch {
    /// No header, or `*` (the tier always has a representation, if empty).
    Any,
    /// One of these strong tags, quotes included.
    OneOf(Vec<String>),
}

impl IfMatch {
    /// Reads every `If-Match` field. A malformed one is refused naming the
    /// header rather than ignored: ignoring it would write unconditionally,
    /// the very overwrite the caller asked to be protected from.
    pub fn parse(headers: &HeaderMap) -> Result<IfMatch, Problem> {
        let mut tags = Vec::new();
        let mut any = false;
        for value in headers.get_all(IF_MATCH) {
            let text = value
                .to_str()
                .map_err(|_| malformed("is not visible ASCII"))?;
            for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                if item == "*" {
                    any = true;
                } else if let Some(weak) = item.strip_prefix("W/") {
                    // Weak tags never match under the strong comparison
                    // If-Match uses; still held to the syntax.
                    quoted(weak)?;
                } else {
                    tags.push(quoted(item)?.to_string());
                }
            }
        }
        let present = headers.contains_key(IF_MATCH);
        match (present, any) {
            (false, _) | (true, true) => Ok(IfMatch::Any),
            (true, false) => Ok(IfMatch::OneOf(tags)),
        }
    }

    /// The condition as the member that writes the tier judges it.
    pub fn into_condition(self) -> Condition {
        match self {
            IfMatch::Any => Condition::Any,
            IfMatch::OneOf(tags) => Condition::OneOf(tags),
        }
    }
}

/// `"..."` with only the characters an entity tag may hold.
fn quoted(item: &str) -> Result<&str, Problem> {
    let inner = item
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .ok_or_else(|| malformed("each entity tag must be in double quotes, as ETag gives it"))?;
    if inner
        .bytes()
        .any(|b| b == b'"' || !(0x21..=0x7e).contains(&b))
    {
        return Err(malformed("an entity tag holds a character it may not"));
    }
    Ok(item)
}

fn malformed(reason: &str) -> Problem {
    Problem::invalid("If-Match", format!("If-Match {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(values: &[&str]) -> Result<IfMatch, Problem> {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(IF_MATCH, v.parse().unwrap());
        }
        IfMatch::parse(&h)
    }

    #[test]
    fn tags_stars_lists_and_weak_tags() {
        assert_eq!(parse(&[]).unwrap(), IfMatch::Any);
        assert_eq!(parse(&["*"]).unwrap(), IfMatch::Any);
        let one = parse(&[r#""3-ab""#]).unwrap().into_condition();
        assert!(one.allows(r#""3-ab""#));
        assert!(!one.allows(r#""4-ab""#));
        let list = parse(&[r#""1-a", "2-b""#, r#""3-c""#])
            .unwrap()
            .into_condition();
        assert!(list.allows(r#""2-b""#) && list.allows(r#""3-c""#));
        let weak = parse(&[r#"W/"3-ab""#]).unwrap().into_condition();
        assert!(
            !weak.allows(r#""3-ab""#),
            "a weak tag never matches strongly"
        );
    }

    #[test]
    fn a_malformed_if_match_is_refused_naming_the_header() {
        for bad in ["3", r#""3"#, r#""a b""#, r#"W/3"#] {
            let p = parse(&[bad]).unwrap_err();
            assert_eq!(p.field.as_deref(), Some("If-Match"), "{bad}");
        }
    }
}
