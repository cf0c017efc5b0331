//! RFC 9457 problem documents: every 4xx and 5xx a node or a layer sends.

use http::header::{CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::{json, Map, Value};

use super::Rendered;
use crate::error::CheckError;

pub const PROBLEM_JSON: &str = "application/problem+json";

/// One refusal, naming what was wrong so a client can fix it without guessing.
#[derive(Debug, Clone)]
pub struct Problem {
    pub status: StatusCode,
    /// Stable machine-readable kind; becomes the `type` URI.
    pub kind: &'static str,
    pub title: &'static str,
    pub detail: String,
    /// The request field at fault (`cost`, `key`, `body`...).
    pub field: Option<String>,
    /// The rule at fault, when one is.
    pub rule: Option<String>,
    /// `WWW-Authenticate: Bearer` on 401, as RFC 6750 requires.
    pub bearer_challenge: bool,
}

impl Problem {
    fn new(status: StatusCode, kind: &'static str, title: &'static str, detail: String) -> Self {
        Problem {
            status,
            kind,
            title,
            detail,
            field: None,
            rule: None,
            bearer_challenge: false,
        }
    }

    pub fn invalid(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-input",
            "Invalid request",
            detail.into(),
        )
        .with_field(field)
    }

    pub fn too_large(max: usize) -> Self {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "Request body too large",
            format!("the request body is larger than the {max} bytes this node accepts"),
        )
        .with_field("body")
    }

    pub fn request_timeout(after: std::time::Duration) -> Self {
        Problem::new(
            StatusCode::REQUEST_TIMEOUT,
            "request-timeout",
            "Request Timeout",
            format!("the request body did not arrive within {after:?}"),
        )
        .with_field("body")
    }

    pub fn unauthorized() -> Self {
        let mut p = Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Unauthorized",
            "this endpoint needs \"Authorization: Bearer <admin token>\"".into(),
        );
        p.bearer_challenge = true;
        p
    }

    pub fn forbidden(detail: impl Into<String>) -> Self {
        Problem::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "Forbidden",
            detail.into(),
        )
    }

    pub fn invalid_rules(rule: Option<String>, field: Option<String>, detail: String) -> Self {
        let mut p = Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-rules",
            "Invalid rule set",
            detail,
        );
        p.rule = rule;
        p.field = field;
        p
    }

    /// A 412: a conditional write (`If-Match`) whose resource changed
    /// since the caller read it; nothing was written.
    pub fn precondition_failed(detail: impl Into<String>) -> Self {
        Problem::new(
            StatusCode::PRECONDITION_FAILED,
            "precondition-failed",
            "Precondition Failed",
            detail.into(),
        )
        .with_field("If-Match")
    }

    pub fn unavailable(detail: impl Into<String>) -> Self {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "Limiter unavailable",
            detail.into(),
        )
    }

    /// A 500: the service around the limiter is set up wrong (`kind` and
    /// `title` say how); nothing about the request.
    pub fn misconfigured(
        kind: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            kind,
            title,
            detail.into(),
        )
    }

    pub fn not_found(detail: impl Into<String>) -> Self {
        Problem::new(
            StatusCode::NOT_FOUND,
            "not-found",
            "Not Found",
            detail.into(),
        )
    }

    pub fn method_not_allowed() -> Self {
        Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "Method Not Allowed",
            "this path does not accept that method".into(),
        )
    }

    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub fn with_rule(mut self, rule: impl Into<String>) -> Self {
        self.rule = Some(rule.into());
        self
    }

    pub fn to_json(&self) -> Map<String, Value> {
        let mut m = problem_members(self.status, self.kind, self.title);
        m.insert("detail".into(), self.detail.clone().into());
        if let Some(f) = &self.field {
            m.insert("field".into(), f.clone().into());
        }
        if let Some(r) = &self.rule {
            m.insert("rule".into(), r.clone().into());
        }
        m
    }
}

/// The members every problem document starts with; the 429 body reuses them.
pub fn problem_members(status: StatusCode, kind: &str, title: &str) -> Map<String, Value> {
    let Value::Object(m) = json!({
        "type": format!("urn:weir:problem:{kind}"),
        "title": title,
        "status": status.as_u16(),
    }) else {
        unreachable!("json! of an object literal is an object")
    };
    m
}

impl Problem {
    /// The refusal of a check that got no verdict.
    pub fn of_check(e: &CheckError) -> Problem {
        match e {
            CheckError::Unavailable(u) => Problem::unavailable(u.to_string()),
            CheckError::CostExceedsLimit { rule, .. } => {
                Problem::invalid("cost", e.to_string()).with_rule(rule.clone())
            }
            CheckError::Invalid { field, .. } => Problem::invalid(field.as_str(), e.to_string()),
        }
    }

    pub fn render(&self) -> Rendered {
        let mut headers = HeaderMap::with_capacity(2);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if self.bearer_challenge {
            headers.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        Rendered {
            status: self.status,
            headers,
            body: Value::Object(self.to_json()).to_string().into(),
        }
    }
}
