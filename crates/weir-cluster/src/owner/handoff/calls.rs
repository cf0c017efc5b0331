//! The named handoff calls a node received, so that each is taken once at
//! most and its sender can ask what became of one it got no answer to.
//!
//! A call that times out at its sender may still have landed here: a
//! large one is absorbed on the blocking pool whether or not anyone waits
//! for the answer. Offered again whole, the counters were added twice, and
//! the keys refused their callers for the rest of the window. Asked about
//! instead, the call is either known taken or, from that moment, never
//! taken: its sender then knows which of the two it is.

use std::collections::VecDeque;

use std::sync::Arc;
use weir_core::determinism::HashMap;

use parking_lot::Mutex;
use tokio::sync::watch;
use weir_proto::weir::v1::CallFate;

/// Calls remembered, the oldest forgotten first. A sender asks about a
/// call at its next sweep, within a second or two; this many calls of up
/// to a megabyte each is gigabytes of handoffs later.
const REMEMBERED: usize = 16_384;

/// A sender process (node id and boot) and its name for the call.
type CallId = (String, u64, u64);

#[derive(Clone)]
enum Fate {
    /// Being taken; its fate comes on the channel.
    Taking(watch::Receiver<Option<CallFate>>),
    Known(CallFate),
}

#[derive(Default)]
struct Record {
    fates: HashMap<CallId, Fate>,
    order: VecDeque<CallId>,
}

impl Record {
    fn set(&mut self, id: CallId, fate: Fate) {
        if self.fates.insert(id.clone(), fate).is_some() {
            return;
        }
        self.order.push_back(id);
        while self.order.len() > REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.fates.remove(&old);
            }
        }
    }
}

/// The named calls this node received, and those asked about first.
#[derive(Default)]
pub struct Calls {
    record: Mutex<Record>,
}

/// A call arriving: take it, or answer as for the same call before.
pub enum Arrival {
    /// Not named (a sender that does not name calls): take it.
    Unnamed,
    /// First seen: take it, then `Taking::landed`.
    Take(Taking),
    /// Seen or asked about before: take nothing, answer this.
    Seen(Seen),
}

/// A call seen before, whose fate may still be coming.
pub struct Seen(Fate);

impl Seen {
    pub async fn fate(self) -> CallFate {
        match self.0 {
            Fate::Known(fate) => fate,
            Fate::Taking(rx) => landing(rx).await,
        }
    }
}

/// Waits for a call being taken to be taken.
async fn landing(mut rx: watch::Receiver<Option<CallFate>>) -> CallFate {
    match rx.wait_for(Option::is_some).await {
        Ok(fate) => fate.unwrap_or(CallFate::Never),
        // Its taker always says; gone without a word, it took nothing whole.
        Err(_) => CallFate::Never,
    }
}

/// A call being taken. Dropped before [`Taking::landed`] (its absorbing
/// panicked), the call counts as never taken: offered again, what it did
/// take is counted twice, which refuses callers rather than admit them.
pub struct Taking {
    calls: Arc<Calls>,
    id: CallId,
    tx: watch::Sender<Option<CallFate>>,
    said: bool,
}

impl Taking {
    pub fn landed(mut self) {
        self.say(CallFate::Landed);
    }

    fn say(&mut self, fate: CallFate) {
        self.said = true;
        self.calls
            .record
            .lock()
            .set(self.id.clone(), Fate::Known(fate));
        self.tx.send_replace(Some(fate));
    }
}

impl Drop for Taking {
    fn drop(&mut self) {
        if !self.said {
            self.say(CallFate::Never);
        }
    }
}

impl Calls {
    /// Call `call` of process `boot` of node `from` arrives.
    pub fn arrive(self: &Arc<Self>, from: &str, boot: u64, call: u64) -> Arrival {
        if call == 0 {
            return Arrival::Unnamed;
        }
        let id = (from.to_string(), boot, call);
        let mut record = self.record.lock();
        if let Some(fate) = record.fates.get(&id) {
            return Arrival::Seen(Seen(fate.clone()));
        }
        let (tx, rx) = watch::channel(None);
        record.set(id.clone(), Fate::Taking(rx));
        Arrival::Take(Taking {
            calls: self.clone(),
            id,
            tx,
            said: false,
        })
    }

    /// What became of call `call` of process `boot` of node `from`: landed
    /// (once taken, if it is being taken), or never, and then never after.
    pub async fn ask(&self, from: &str, boot: u64, call: u64) -> CallFate {
        let id = (from.to_string(), boot, call);
        let fate = {
            let mut record = self.record.lock();
            match record.fates.get(&id) {
                Some(fate) => fate.clone(),
                None => {
                    record.set(id, Fate::Known(CallFate::Never));
                    Fate::Known(CallFate::Never)
                }
            }
        };
        Seen(fate).fate().await
    }
}

#[cfg(test)]
mod tests;
