//! Why a check could not be decided. Every variant leaves all state unchanged.

use thiserror::Error;

/// The request attribute at fault, as it is named on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputField {
    Key,
    Route,
    Tier,
    Ip,
    Cost,
}

impl InputField {
    pub fn as_str(self) -> &'static str {
        match self {
            InputField::Key => "key",
            InputField::Route => "route",
            InputField::Tier => "tier",
            InputField::Ip => "ip",
            InputField::Cost => "cost",
        }
    }
}

impl std::fmt::Display for InputField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A check that was refused before it was decided. No variant consumes
/// budget or creates a key: the request is rejected on its way in.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CheckError {
    /// A request attribute is malformed (empty, too long, not an IP...).
    #[error("invalid {field}: {reason}")]
    Invalid {
        field: InputField,
        reason: &'static str,
    },
    /// The cost can never succeed under this rule: it is larger than the most
    /// the rule can ever admit at once. An error (400), not a denial (429),
    /// because waiting would not help.
    #[error("cost {cost} exceeds the {max} that rule \"{rule}\" can ever admit at once")]
    CostExceedsLimit { rule: String, cost: u64, max: u64 },
    /// A peer named a rule this node does not have (rule sets not yet converged).
    #[error("unknown rule \"{0}\"")]
    UnknownRule(String),
    /// The store is at its configured key ceiling and no idle key could be
    /// dropped; a new key is refused rather than growing memory without bound.
    #[error("counter store for rule \"{rule}\" is full ({max_keys} keys)")]
    StoreFull { rule: String, max_keys: usize },
}

impl CheckError {
    /// The wire name of the field at fault, when one is.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            CheckError::Invalid { field, .. } => Some(field.as_str()),
            CheckError::CostExceedsLimit { .. } => Some("cost"),
            CheckError::UnknownRule(_) => Some("rule"),
            CheckError::StoreFull { .. } => None,
        }
    }
}
