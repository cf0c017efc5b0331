//! The peer client pool: one lazily connected, reused `PeerClient` per node, rebuilt after a failure.

use std::net::SocketAddr;
use std::time::Duration;

use dashmap::DashMap;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};
use weir_proto::weir::v1::peer_client::PeerClient;
use weir_proto::weir::v1::{
    DecideRequest, DecideResponse, HandoffRequest, HandoffResponse, MembersRequest,
    MembersResponse, PullRulesRequest, PushRulesResponse, RuleSet as WireRuleSet, SyncRequest,
    SyncResponse,
};

use super::auth::PeerToken;
use crate::membership::Blackhole;

/// Why a peer call produced no answer.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum PeerFailure {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("unreachable: {0}")]
    Unreachable(String),
    #[error("refused: {0}")]
    Refused(String),
    #[error("too many calls queued for this owner")]
    Overloaded,
}

impl PeerFailure {
    fn from_status(s: &Status, deadline: Duration) -> PeerFailure {
        match s.code() {
            Code::DeadlineExceeded | Code::Cancelled => PeerFailure::Timeout(deadline),
            Code::Unavailable | Code::Unknown | Code::Internal => {
                PeerFailure::Unreachable(s.message().to_string())
            }
            _ => PeerFailure::Refused(format!("{:?}: {}", s.code(), s.message())),
        }
    }
}

struct Slot {
    addr: SocketAddr,
    client: PeerClient<Channel>,
}

pub(crate) struct PeerPool {
    clients: DashMap<String, Slot>,
    token: Option<PeerToken>,
    blackhole: Option<Blackhole>,
    /// Message size ceiling, both ways (handoffs carry whole counters).
    max_message: usize,
}

/// Dead connections are noticed by keepalive within about this long even
/// when no call is waiting (a half-open TCP connection after a partition
/// heals otherwise stays stuck).
const KEEPALIVE: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

impl PeerPool {
    pub fn new(token: Option<PeerToken>, blackhole: Option<Blackhole>, max_message: usize) -> Self {
        PeerPool {
            clients: DashMap::new(),
            token,
            blackhole,
            max_message,
        }
    }

    fn client(&self, id: &str, addr: SocketAddr) -> PeerClient<Channel> {
        if let Some(slot) = self.clients.get(id) {
            if slot.addr == addr {
                return slot.client.clone();
            }
        }
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .expect("a socket address is a valid URI authority")
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEPALIVE)
            .keep_alive_timeout(KEEPALIVE)
            .keep_alive_while_idle(true);
        let client = PeerClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(self.max_message)
            .max_encoding_message_size(self.max_message);
        self.clients.insert(
            id.to_string(),
            Slot {
                addr,
                client: client.clone(),
            },
        );
        client
    }

    /// Forgets the connection to `id` so the next call dials afresh: after
    /// an error the old one may be stuck.
    pub fn reset(&self, id: &str, addr: SocketAddr) {
        self.clients.remove_if(id, |_, slot| slot.addr == addr);
    }

    /// Drops connections to nodes `keep` rejects (members that left).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.clients.retain(|id, _| keep(id));
    }

    fn request<T>(&self, message: T, deadline: Duration) -> Request<T> {
        let mut r = Request::new(message);
        r.set_timeout(deadline);
        if let Some(t) = &self.token {
            t.attach(r.metadata_mut());
        }
        r
    }

    /// Runs one call with a deadline; a blackholed peer never answers.
    async fn call<T, F, Fut>(
        &self,
        id: &str,
        addr: SocketAddr,
        deadline: Duration,
        f: F,
    ) -> Result<T, PeerFailure>
    where
        F: FnOnce(PeerClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, Status>>,
    {
        if self.blackhole.as_ref().is_some_and(|b| b.contains(addr)) {
            tokio::time::sleep(deadline).await;
            return Err(PeerFailure::Timeout(deadline));
        }
        let client = self.client(id, addr);
        let failure = match tokio::time::timeout(deadline, f(client)).await {
            Ok(Ok(response)) => return Ok(response.into_inner()),
            Ok(Err(status)) => PeerFailure::from_status(&status, deadline),
            Err(_) => PeerFailure::Timeout(deadline),
        };
        if !matches!(failure, PeerFailure::Refused(_)) {
            self.reset(id, addr);
        }
        Err(failure)
    }

    pub async fn decide(
        &self,
        id: &str,
        addr: SocketAddr,
        req: DecideRequest,
        deadline: Duration,
    ) -> Result<DecideResponse, PeerFailure> {
        let req = self.request(req, deadline);
        self.call(
            id,
            addr,
            deadline,
            |mut c| async move { c.decide(req).await },
        )
        .await
    }

    pub async fn handoff(
        &self,
        id: &str,
        addr: SocketAddr,
        req: HandoffRequest,
        deadline: Duration,
    ) -> Result<HandoffResponse, PeerFailure> {
        let req = self.request(req, deadline);
        self.call(
            id,
            addr,
            deadline,
            |mut c| async move { c.handoff(req).await },
        )
        .await
    }

    pub async fn push_rules(
        &self,
        id: &str,
        addr: SocketAddr,
        set: WireRuleSet,
        deadline: Duration,
    ) -> Result<PushRulesResponse, PeerFailure> {
        let req = self.request(set, deadline);
        self.call(id, addr, deadline, |mut c| async move {
            c.push_rules(req).await
        })
        .await
    }

    pub async fn pull_rules(
        &self,
        id: &str,
        addr: SocketAddr,
        have_version: u64,
        deadline: Duration,
    ) -> Result<WireRuleSet, PeerFailure> {
        let req = self.request(PullRulesRequest { have_version }, deadline);
        self.call(id, addr, deadline, |mut c| async move {
            c.pull_rules(req).await
        })
        .await
    }

    pub async fn sync_counts(
        &self,
        id: &str,
        addr: SocketAddr,
        req: SyncRequest,
        deadline: Duration,
    ) -> Result<SyncResponse, PeerFailure> {
        let req = self.request(req, deadline);
        self.call(id, addr, deadline, |mut c| async move {
            c.sync_counts(req).await
        })
        .await
    }

    pub async fn members(
        &self,
        id: &str,
        addr: SocketAddr,
        deadline: Duration,
    ) -> Result<MembersResponse, PeerFailure> {
        let req = self.request(MembersRequest {}, deadline);
        self.call(
            id,
            addr,
            deadline,
            |mut c| async move { c.members(req).await },
        )
        .await
    }
}
