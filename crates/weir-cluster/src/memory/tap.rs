//! What the in-memory network shows a simulator: each message it carries and what became of it, for a run's digest and its trace.

use std::net::IpAddr;
use std::sync::Arc;

/// One message on the network.
#[derive(Debug, Clone, Copy)]
pub struct NetEvent<'a> {
    pub from: IpAddr,
    pub to: IpAddr,
    /// `gossip`, or the peer call's name (`decide`, `replicate`, ...);
    /// an answer is named `<call> answer`.
    pub what: &'static str,
    /// The datagram, or the call's request or answer as encoded.
    pub bytes: &'a [u8],
    pub fate: Fate,
}

/// What became of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Sent; it arrives after the network's delay.
    Sent,
    /// Sent twice (a datagram the network duplicated).
    Duplicated,
    /// Lost: a cut, a crashed or deaf host, or loss.
    Lost,
    /// Refused at once (a crashed host's closed port).
    Refused,
}

/// Called for every message, on the thread that sends it.
pub type Tap = Arc<dyn Fn(&NetEvent<'_>) + Send + Sync>;
