//! A trace's account of the decide calls: each op a call carries and the
//! result it got, so a trace filtered by key shows the messages that key
//! travelled in and not only the checks' answers.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use weir_proto::prost::Message;
use weir_proto::weir::v1::{
    op_result::Outcome, CounterOp, CounterState, DecideRequest, DecideResponse, HandoffRequest,
    HandoffResponse, ReplicateRequest,
};

/// The keys of the decide calls in flight between two hosts, oldest first:
/// an answer names none, so it is read against the oldest call its caller
/// made to it. Calls between two hosts overlap rarely and mostly answer in
/// order; the account is for reading, not for the digest.
#[derive(Default)]
pub struct Calls {
    in_flight: HashMap<(IpAddr, IpAddr), VecDeque<Vec<String>>>,
}

impl Calls {
    /// The ops of a decide call from `from` to `to`, one line each.
    pub fn request(&mut self, from: IpAddr, to: IpAddr, bytes: &[u8]) -> String {
        let Ok(req) = DecideRequest::decode(bytes) else {
            return String::new();
        };
        let keys = req
            .ops
            .iter()
            .map(|o| format!("{}/{}", o.rule, o.key))
            .collect();
        self.in_flight
            .entry((from, to))
            .or_default()
            .push_back(keys);
        req.ops.iter().map(op).collect::<Vec<_>>().join("; ")
    }

    /// The results of the answer `from` sent back to `to`.
    pub fn answer(&mut self, from: IpAddr, to: IpAddr, bytes: &[u8]) -> String {
        let keys = self
            .in_flight
            .get_mut(&(to, from))
            .and_then(VecDeque::pop_front)
            .unwrap_or_default();
        let Ok(res) = DecideResponse::decode(bytes) else {
            return String::new();
        };
        res.results
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let key = keys.get(i).map_or("?", String::as_str);
                let what = match &r.outcome {
                    Some(Outcome::Decision(d)) => format!(
                        "{} {} left",
                        if d.allowed { "allowed" } else { "denied" },
                        d.remaining
                    ),
                    Some(Outcome::Error(e)) => format!("{:?} {}", e.code(), e.message),
                    None => "nothing".into(),
                };
                format!("{key}: {what}")
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The counters a handoff or a replication call carries, and what else
/// it says; a handoff's answer.
pub fn counters(what: &str, bytes: &[u8]) -> String {
    let keys = |c: &[CounterState]| {
        c.iter()
            .map(|c| format!("{}/{}", c.rule, c.key))
            .collect::<Vec<_>>()
            .join(" ")
    };
    match what {
        "handoff" => HandoffRequest::decode(bytes).map_or_else(
            |_| String::new(),
            |h| {
                let mut s = keys(&h.counters);
                if h.swept {
                    s += " swept";
                }
                if h.call != 0 {
                    s += &format!(" call {}", h.call);
                }
                if h.ask_about != 0 {
                    s += &format!(" asks about call {}", h.ask_about);
                }
                s
            },
        ),
        "handoff answer" => HandoffResponse::decode(bytes).map_or_else(
            |_| String::new(),
            |a| format!("accepted {} {:?}", a.accepted, a.fate()),
        ),
        "replicate" => {
            ReplicateRequest::decode(bytes).map_or_else(|_| String::new(), |r| keys(&r.states))
        }
        _ => String::new(),
    }
}

fn op(o: &CounterOp) -> String {
    let mut s = format!("{:?} {}/{} cost {}", o.kind(), o.rule, o.key, o.cost);
    if !o.stand_in_for.is_empty() {
        s += &format!(" stand-in for {}", o.stand_in_for);
    }
    if o.sent_on {
        s += " sent on";
    }
    if o.asked_back {
        s += &format!(" asked back (boot {})", o.asker_boot);
    }
    s
}
