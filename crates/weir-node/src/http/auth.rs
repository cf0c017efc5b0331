//! The admin token that guards rule writes.

use axum::http::{header, HeaderMap};
use subtle::ConstantTimeEq;

use super::problem::Problem;

/// Checks `Authorization: Bearer <token>` against the node's admin token
/// and the tokens also accepted during a rotation (`accepted`).
///
/// Runs from headers alone, before any body is read, so an unauthenticated
/// client cannot make the node buffer a body. Every comparison takes the
/// same time wherever the first differing byte is, and every token is
/// compared, so response timing reveals neither a prefix nor which token
/// matched.
pub fn authorize(
    expected: Option<&str>,
    accepted: &[String],
    headers: &HeaderMap,
) -> Result<(), Problem> {
    let Some(expected) = expected else {
        return Err(Problem::forbidden(
            "rule writes are disabled on this node: it was started without an admin token",
        ));
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    let Some(presented) = presented else {
        return Err(Problem::unauthorized());
    };
    let matched = std::iter::once(expected)
        .chain(accepted.iter().map(String::as_str))
        .fold(subtle::Choice::from(0), |any, token| {
            any | presented.as_bytes().ct_eq(token.as_bytes())
        });
    if bool::from(matched) {
        Ok(())
    } else {
        Err(Problem::forbidden("the admin token is not valid"))
    }
}

/// The token of a `Bearer` credential; the scheme is case-insensitive (RFC 9110).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderValue, StatusCode};

    use super::*;

    fn with_auth(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn right_token_passes_wrong_is_403_missing_is_401() {
        assert!(authorize(Some("s3cret"), &[], &with_auth("Bearer s3cret")).is_ok());
        assert!(authorize(Some("s3cret"), &[], &with_auth("bearer s3cret")).is_ok());
        let wrong = authorize(Some("s3cret"), &[], &with_auth("Bearer s3cre")).unwrap_err();
        assert_eq!(wrong.status, StatusCode::FORBIDDEN);
        let missing = authorize(Some("s3cret"), &[], &HeaderMap::new()).unwrap_err();
        assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
        assert!(missing.bearer_challenge);
        let basic = authorize(Some("s3cret"), &[], &with_auth("Basic czNjcmV0")).unwrap_err();
        assert_eq!(basic.status, StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn an_accepted_token_passes_beside_the_admin_token() {
        let accepted = ["old".to_string()];
        assert!(authorize(Some("new"), &accepted, &with_auth("Bearer new")).is_ok());
        assert!(authorize(Some("new"), &accepted, &with_auth("Bearer old")).is_ok());
        let other = authorize(Some("new"), &accepted, &with_auth("Bearer older")).unwrap_err();
        assert_eq!(other.status, StatusCode::FORBIDDEN);
        let done = authorize(Some("new"), &[], &with_auth("Bearer old")).unwrap_err();
        assert_eq!(done.status, StatusCode::FORBIDDEN);
    }

    #[test]
    fn no_configured_token_refuses_every_write() {
        let e = authorize(None, &[], &with_auth("Bearer anything")).unwrap_err();
        assert_eq!(e.status, StatusCode::FORBIDDEN);
        assert!(e.detail.contains("disabled"));
    }
}
