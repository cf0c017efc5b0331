//! Whether a node can do its job: what `/readyz` and `grpc.health.v1.Health` answer.

use tokio::sync::watch;

use crate::state::NodeState;

/// Where a node is in its life, as only the node itself knows it; the
/// cluster adds whether it has joined ([`NodeState::readiness`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Listeners are being bound.
    Starting,
    /// Every listener is up.
    Serving,
    /// Shutdown began: the node hands its counters over and drains.
    Leaving,
}

/// The node's [`Stage`], watched by the gRPC health service so its answer
/// changes when the stage does.
#[derive(Debug)]
pub struct Lifecycle(watch::Sender<Stage>);

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle(watch::Sender::new(Stage::Starting))
    }
}

impl Lifecycle {
    pub fn stage(&self) -> Stage {
        *self.0.borrow()
    }

    pub fn set(&self, stage: Stage) {
        self.0.send_replace(stage);
    }

    pub fn subscribe(&self) -> watch::Receiver<Stage> {
        self.0.subscribe()
    }
}

/// What a load balancer or probe is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    Starting,
    /// Given seeds, the node has not joined its cluster yet: its checks
    /// would wait for the join.
    Joining,
    Ready,
    /// Ready, but given seeds none of which answered within the join
    /// timeout: the node runs as its cluster's only member, and says so.
    Alone,
    /// Shutdown began: traffic sent now would meet a node handing its
    /// counters away and then closing.
    Leaving,
}

impl Readiness {
    pub fn is_ready(self) -> bool {
        matches!(self, Readiness::Ready | Readiness::Alone)
    }

    /// The line `/readyz` answers.
    pub fn reason(self) -> &'static str {
        match self {
            Readiness::Starting => "starting\n",
            Readiness::Joining => "joining its cluster\n",
            Readiness::Ready => "ready\n",
            Readiness::Alone => "ready, running alone: no seed answered within the join timeout\n",
            Readiness::Leaving => "leaving its cluster\n",
        }
    }
}

impl NodeState {
    pub fn readiness(&self) -> Readiness {
        match self.lifecycle.stage() {
            Stage::Starting => Readiness::Starting,
            Stage::Leaving => Readiness::Leaving,
            Stage::Serving if self.engine.cluster().is_some_and(|c| c.joining()) => {
                Readiness::Joining
            }
            Stage::Serving if self.engine.cluster().is_some_and(|c| c.runs_alone()) => {
                Readiness::Alone
            }
            Stage::Serving => Readiness::Ready,
        }
    }
}
