//! Why a check got no verdict: bad input (naming its field) or a limiter that cannot decide.

use std::borrow::Cow;
use std::time::Duration;

use thiserror::Error;

use crate::rules::Rule;

/// The request attribute at fault, as it is named on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InputField {
    Key,
    Route,
    Tier,
    Ip,
    Cost,
    /// A carried limit (an Envoy descriptor's override).
    Limit,
}

impl InputField {
    pub const ALL: [InputField; 6] = [
        InputField::Key,
        InputField::Route,
        InputField::Tier,
        InputField::Ip,
        InputField::Cost,
        InputField::Limit,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InputField::Key => "key",
            InputField::Route => "route",
            InputField::Tier => "tier",
            InputField::Ip => "ip",
            InputField::Cost => "cost",
            InputField::Limit => "limit",
        }
    }

    /// The field a wire name stands for.
    pub fn parse(name: &str) -> Option<InputField> {
        InputField::ALL.into_iter().find(|f| f.as_str() == name)
    }
}

impl std::fmt::Display for InputField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A check that produced no verdict. No variant consumes budget or creates a
/// key: input is refused on its way in, and a limiter that cannot decide
/// decides nothing.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CheckError {
    /// A request attribute is malformed (empty, too long, not an IP...): HTTP 400.
    #[error("invalid {field}: {reason}")]
    Invalid {
        field: InputField,
        reason: Cow<'static, str>,
    },
    /// The cost can never succeed under this rule: it is larger than the most
    /// the rule can ever admit at once. An error (400), not a denial (429),
    /// because waiting would not help.
    #[error("cost {cost} exceeds the {max} that rule \"{rule}\" can ever admit at once")]
    CostExceedsLimit { rule: String, cost: u64, max: u64 },
    /// The limiter cannot decide (HTTP 503, never 429: the caller is not
    /// over its limit).
    #[error("limiter unavailable: {0}")]
    Unavailable(#[from] Unavailable),
}

/// Why the limiter could not decide. State is unchanged in every case.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Unavailable {
    /// The store is at its configured key ceiling and no idle key could be
    /// dropped; a new key is refused rather than growing memory without bound.
    #[error("counter store for rule \"{rule}\" is full ({max_keys} keys)")]
    StoreFull { rule: String, max_keys: usize },
    /// The one table that holds the keys of every limit carried by requests
    /// (Envoy overrides) is at its key ceiling, every key in it live.
    #[error(
        "the counter store shared by every limit carried in requests is full ({max_keys} keys)"
    )]
    CarriedFull { max_keys: usize },
    /// A peer named a rule this node does not have (rule sets not yet converged).
    #[error("unknown rule \"{0}\"")]
    UnknownRule(String),
    /// The key's owner did not answer and this node fails closed.
    #[error("the owner of this key ({owner}) did not answer and this node fails closed")]
    OwnerUnreachable { owner: String },
    /// This node is leaving and no other member is left to decide.
    #[error("this node is leaving and no other member is left")]
    Leaving,
    /// A remote node did not answer within the deadline.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// A remote node could not be reached, or answered something unreadable.
    #[error("unreachable: {0}")]
    Unreachable(String),
}

impl CheckError {
    pub fn invalid(field: InputField, reason: impl Into<Cow<'static, str>>) -> Self {
        CheckError::Invalid {
            field,
            reason: reason.into(),
        }
    }

    /// Refuses a cost `rule` can never admit.
    pub fn fits(rule: &Rule, cost: u64) -> Result<(), CheckError> {
        let max = rule.policy.max_cost();
        if cost > max {
            return Err(CheckError::CostExceedsLimit {
                rule: rule.name.to_string(),
                cost,
                max,
            });
        }
        Ok(())
    }

    /// The wire name of the field at fault, when one is.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            CheckError::Invalid { field, .. } => Some(field.as_str()),
            CheckError::CostExceedsLimit { .. } => Some("cost"),
            CheckError::Unavailable(_) => None,
        }
    }

    /// True when the request is at fault (400), false when the limiter is (503).
    pub fn is_input(&self) -> bool {
        !matches!(self, CheckError::Unavailable(_))
    }
}

/// An error and its causes on one line ("error sending request: connection
/// refused"), each cause once: clients' transport errors keep the reason
/// (a refused connection, an untrusted certificate) in their sources.
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let c = cause.to_string();
        if !s.contains(&c) {
            s.push_str(": ");
            s.push_str(&c);
        }
        source = cause.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with a fixed message and an optional cause.
    #[derive(Debug)]
    struct Link(&'static str, Option<Box<Link>>);

    impl std::fmt::Display for Link {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Link {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|c| c as _)
        }
    }

    #[test]
    fn with_causes_names_each_cause_once() {
        let e = Link(
            "error sending request",
            Some(Box::new(Link(
                "tls handshake: invalid peer certificate",
                Some(Box::new(Link("invalid peer certificate", None))),
            ))),
        );
        assert_eq!(
            with_causes(&e),
            "error sending request: tls handshake: invalid peer certificate"
        );
        assert_eq!(with_causes(&Link("alone", None)), "alone");
    }
}
