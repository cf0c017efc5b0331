//! Rule sets as peers exchange them: each tier's write whole, or as an edit of the write before it when the receiver holds that one.
//!
//! A write records how it was made from the tier's previous write
//! (weir-core `TierEdit`). A push goes out right after the write, to peers
//! that almost all hold that previous write, so it carries the edit; a pull
//! answer carries it to a puller whose stamp for the tier names the edit's
//! base. A receiver that does not hold the base takes nothing of the tier
//! ([`Offered::unheld`]) and is sent it whole.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use weir_core::rules::{PeerWrites, TierEdit, TierKey, TierWrite, WriteStamp};
use weir_core::{RuleSet, RulesError};
use weir_proto::weir::v1::{
    PullRulesRequest, RuleSet as WireRuleSet, TierEdit as WireTierEdit, TierRules, TierStamp,
};

/// How one tier travels.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    Whole,
    /// As its edit, when it has one small enough to beat the whole tier.
    Edit,
}

/// A set as peers exchange it: every tier's last write, whole.
pub fn to_wire(set: &RuleSet) -> WireRuleSet {
    to_wire_where(set, |_, _| Some(Form::Whole))
}

/// The tiers of `set` written after version `after` (what one write
/// changed), each as its edit when it has a small one.
pub(crate) fn to_wire_since(set: &RuleSet, after: u64) -> WireRuleSet {
    to_wire_where(set, |_, w| (w.version > after).then_some(Form::Edit))
}

/// [`to_wire_since`] with every tier whole: for a peer that did not hold
/// what the edits were made from.
pub(crate) fn to_wire_whole_since(set: &RuleSet, after: u64) -> WireRuleSet {
    to_wire_where(set, |_, w| (w.version > after).then_some(Form::Whole))
}

/// The tiers of `set` whose write differs from the one `have` names for
/// that tier (or that `have` lacks); every tier when `have` names none.
/// A tier whose write is an edit of the very write `have` names goes as
/// that edit.
pub(crate) fn differing(set: &RuleSet, have: &PullRulesRequest) -> WireRuleSet {
    if have.have.is_empty() {
        return to_wire(set);
    }
    let held: HashMap<Option<&str>, (u64, &str, u64)> = have
        .have
        .iter()
        .map(|h| (h.tier.as_deref(), (h.version, h.origin.as_str(), h.digest)))
        .collect();
    to_wire_where(set, |tier, w| {
        let theirs = held.get(&tier.as_deref()).copied();
        if theirs == Some((w.version, &*w.origin, w.digest())) {
            return None;
        }
        let base = w.edit().map(|e| &e.base);
        let edit_fits = base.is_some_and(|b| theirs == Some((b.version, &*b.origin, b.digest)));
        Some(if edit_fits { Form::Edit } else { Form::Whole })
    })
}

fn to_wire_where(
    set: &RuleSet,
    form: impl Fn(&TierKey, &TierWrite) -> Option<Form>,
) -> WireRuleSet {
    WireRuleSet {
        version: set.version(),
        tiers: set
            .writes()
            .filter_map(|(tier, w)| Some(tier_to_wire(tier, w, form(tier, w)?)))
            .collect(),
    }
}

fn tier_to_wire(tier: &TierKey, w: &TierWrite, form: Form) -> TierRules {
    let mut wire = TierRules {
        tier: tier.clone(),
        version: w.version,
        origin: w.origin.to_string(),
        rules_json: String::new(),
        edit: None,
    };
    match w.edit().filter(|e| form == Form::Edit && e.is_small()) {
        Some(e) => wire.edit = Some(edit_to_wire(e, w)),
        None => wire.rules_json = w.rules_json(),
    }
    wire
}

fn edit_to_wire(e: &TierEdit, w: &TierWrite) -> WireTierEdit {
    let placed: Vec<_> = e.placed.iter().map(|(_, r)| r.clone()).collect();
    WireTierEdit {
        base_version: e.base.version,
        base_origin: e.base.origin.to_string(),
        base_digest: e.base.digest,
        len: e.len as u64,
        dropped: e.dropped.iter().map(|n| n.to_string()).collect(),
        placed_json: weir_core::rules::rules_json(&placed),
        positions: e.placed.iter().map(|(at, _)| *at as u64).collect(),
        digest: w.digest(),
    }
}

/// A pull naming every write `set` holds.
pub fn stamps(set: &RuleSet) -> PullRulesRequest {
    PullRulesRequest {
        have_version: set.version(),
        have: set
            .writes()
            .map(|(tier, w)| TierStamp {
                tier: tier.clone(),
                version: w.version,
                origin: w.origin.to_string(),
                digest: w.digest(),
            })
            .collect(),
    }
}

/// A peer's set as this node can take it.
pub struct Offered {
    pub writes: PeerWrites,
    /// Some tier came as an edit of a write this node does not hold (or
    /// did not rebuild to the sender's digest): it was left out.
    pub unheld: bool,
}

/// A peer's set, each tier validated alone; a tier sent as an edit is
/// rebuilt from the write `held` has of it.
pub fn from_wire(wire: &WireRuleSet, held: &RuleSet) -> Result<Offered, RulesError> {
    let mut writes = Vec::with_capacity(wire.tiers.len());
    let mut unheld = false;
    for t in &wire.tiers {
        let origin: Arc<str> = t.origin.as_str().into();
        let write = match &t.edit {
            None => {
                let rules = RuleSet::parse_tier_json(t.tier.as_deref(), &t.rules_json)?;
                let rules = rules.into_iter().map(Arc::new).collect();
                TierWrite::new(t.version, origin, rules)
            }
            Some(e) if held_already(held, t, e) => continue,
            Some(e) => match rebuilt(t, e, held)? {
                Some(write) => write,
                None => {
                    unheld = true;
                    continue;
                }
            },
        };
        writes.push((t.tier.clone(), write));
    }
    // Left out, a tier's version must not count: the set would claim a
    // version whose write it lacks, and no hint would pull it.
    let version = if unheld {
        writes.iter().map(|(_, w)| w.version).max().unwrap_or(0)
    } else {
        wire.version
    };
    let writes = PeerWrites::new(version, writes)?;
    Ok(Offered { writes, unheld })
}

/// Whether `held` has this very write of the tier, or one that outranks
/// it (a push that arrives after a pull brought the write, or after a
/// later one): nothing to rebuild, and nothing missing.
fn held_already(held: &RuleSet, t: &TierRules, e: &WireTierEdit) -> bool {
    held.tier_write(t.tier.as_deref()).is_some_and(|mine| {
        match (mine.version, &*mine.origin).cmp(&(t.version, t.origin.as_str())) {
            Ordering::Greater => true,
            Ordering::Equal => mine.digest() == e.digest,
            Ordering::Less => false,
        }
    })
}

/// A tier's write rebuilt from its edit and the base `held` has; None
/// when `held` lacks the base or the rebuild is not the sender's rules.
/// Placed rules that do not parse refuse the whole set, as a whole tier
/// that does not parse does.
fn rebuilt(
    t: &TierRules,
    e: &WireTierEdit,
    held: &RuleSet,
) -> Result<Option<TierWrite>, RulesError> {
    let placed = RuleSet::parse_tier_json(t.tier.as_deref(), &e.placed_json)?;
    if placed.len() != e.positions.len() {
        return Ok(None);
    }
    let edit = TierEdit {
        base: WriteStamp {
            version: e.base_version,
            origin: e.base_origin.as_str().into(),
            digest: e.base_digest,
        },
        len: usize::try_from(e.len).unwrap_or(usize::MAX),
        dropped: e.dropped.iter().map(|n| n.as_str().into()).collect(),
        placed: e
            .positions
            .iter()
            .map(|at| usize::try_from(*at).unwrap_or(usize::MAX))
            .zip(placed.into_iter().map(Arc::new))
            .collect(),
    };
    let Some(rules) = held
        .tier_write(t.tier.as_deref())
        .and_then(|base| edit.apply(base))
    else {
        return Ok(None);
    };
    let write = TierWrite::edited(t.version, t.origin.as_str().into(), rules, edit);
    // The digest, worked out here once, is the check that the rebuild is
    // the sender's list; it is kept for the next anti-entropy pull.
    Ok((write.digest() == e.digest).then_some(write))
}

#[cfg(test)]
mod tests;
