//! The gRPC link: one lazily dialled, reused `PeerClient` per node, rebuilt after a failure.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use futures::future::BoxFuture;
use tokio::time::Instant;
use tonic::{Code, Request, Status};
use weir_proto::weir::v1::peer_client::PeerClient;
use weir_proto::weir::v1::{
    DecideRequest, DecideResponse, HandoffRequest, HandoffResponse, MembersRequest,
    MembersResponse, NodeSummary, PullRulesRequest, PushRulesResponse, ReplicateRequest,
    ReplicateResponse, RuleSet as WireRuleSet, SummaryRequest, SyncRequest, SyncResponse,
    WriteTierRequest, WriteTierResponse,
};

use super::auth::PeerToken;
use super::conn::{ConnConfig, PeerConn};
use super::direct::{DirectConfig, DirectConn, Kind};
use super::peer_tls::PeerTls;
use crate::link::Link;
use crate::link::{PeerFailure, LEAVING};
use crate::topology::membership::NodeIdentity;

/// Handoffs carry whole counters (a sliding log holds up to L timestamps),
/// so peer messages may be far larger than a client's.
pub const MAX_PEER_MESSAGE: usize = 16 << 20;

/// Dead connections are noticed by keepalive within about this long even
/// when no call is waiting (a half-open TCP connection after a partition
/// heals otherwise stays stuck).
const KEEPALIVE: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const CONN: ConnConfig = ConnConfig {
    connect_timeout: CONNECT_TIMEOUT,
    keepalive: KEEPALIVE,
};
const DIRECT: DirectConfig = DirectConfig {
    connect_timeout: CONNECT_TIMEOUT,
    keepalive: KEEPALIVE,
};
/// A peer that took no direct calls is asked again after this long: it
/// may have been upgraded in place.
const REPROBE: Duration = Duration::from_secs(60);

fn failure(s: &Status, deadline: Duration) -> PeerFailure {
    match s.code() {
        Code::DeadlineExceeded => PeerFailure::Timeout(deadline),
        // Cancelled reaches a client when its stream or connection is torn
        // down under the call (a peer going away sends GOAWAY, a reset
        // stream): evidence like a reset, not slowness. This node's own
        // deadline is the timeout above the call, never a status.
        Code::Cancelled | Code::Unavailable | Code::Unknown | Code::Internal => {
            PeerFailure::Unreachable(s.message().to_string())
        }
        Code::FailedPrecondition if s.message() == LEAVING => PeerFailure::Leaving,
        _ => PeerFailure::Refused(format!("{:?}: {}", s.code(), s.message())),
    }
}

/// A peer call's answer, as the link hands it out.
type PeerCall<T> = BoxFuture<'static, Result<T, PeerFailure>>;

struct Slot {
    addr: std::net::SocketAddr,
    conn: PeerConn,
    client: PeerClient<PeerConn>,
}

struct DirectSlot {
    addr: std::net::SocketAddr,
    conn: DirectConn,
    dialled_at: Instant,
}

/// Peer calls over gRPC, each carrying the cluster token when there is
/// one; Decide and Replicate calls on a direct connection
/// (`super::direct`) to every peer that takes them.
#[derive(Clone)]
pub struct TonicLink {
    clients: Arc<DashMap<String, Slot>>,
    direct: Option<Arc<DashMap<String, DirectSlot>>>,
    token: Option<PeerToken>,
    /// Every connection under mutual TLS when set.
    tls: Option<Arc<PeerTls>>,
}

impl TonicLink {
    /// `direct`: whether Decide and Replicate calls go on direct
    /// connections where the peer takes them.
    pub fn new(token: Option<PeerToken>, direct: bool) -> Self {
        TonicLink {
            clients: Arc::default(),
            direct: direct.then(Arc::default),
            token,
            tls: None,
        }
    }

    /// Dials every peer under mutual TLS.
    pub fn with_tls(mut self, tls: Option<Arc<PeerTls>>) -> Self {
        self.tls = tls;
        self
    }

    /// The direct connection to `to`, dialled when there is none, when it
    /// has closed, when `to` moved, and again a while after `to` said it
    /// takes no direct calls.
    fn direct_conn(&self, direct: &DashMap<String, DirectSlot>, to: &NodeIdentity) -> DirectConn {
        if let Some(slot) = direct.get(&to.id) {
            let stale = slot.conn.is_unsupported() && slot.dialled_at.elapsed() > REPROBE;
            if slot.addr == to.grpc && !slot.conn.is_closed() && !stale {
                return slot.conn.clone();
            }
        }
        let token = self
            .token
            .as_ref()
            .and_then(|t| t.current().to_str().ok().map(str::to_string));
        let conn = DirectConn::dial_over(to.grpc, token, DIRECT, self.tls.clone());
        direct.insert(
            to.id.clone(),
            DirectSlot {
                addr: to.grpc,
                conn: conn.clone(),
                dialled_at: Instant::now(),
            },
        );
        conn
    }

    /// A call of `kind` on the direct connection to `to`, or over gRPC
    /// (`grpc`) when direct calls are off or `to` takes none.
    fn direct_or_grpc<Req, Resp>(
        &self,
        to: &NodeIdentity,
        kind: Kind,
        req: Req,
        deadline: Duration,
        grpc: fn(&TonicLink, &NodeIdentity, Req, Duration) -> PeerCall<Resp>,
    ) -> PeerCall<Resp>
    where
        Req: prost::Message + Send + 'static,
        Resp: prost::Message + Default + Send + 'static,
    {
        let Some(direct) = &self.direct else {
            return grpc(self, to, req, deadline);
        };
        let conn = self.direct_conn(direct, to);
        if conn.is_unsupported() {
            return grpc(self, to, req, deadline);
        }
        // Only while the dial is under way can the answer still be "ask
        // over gRPC", and only then is the link needed in the call.
        let fallback = (!conn.is_dialled()).then(|| (self.clone(), to.clone()));
        // As over gRPC, a failed connection is redialled and a slow answer
        // keeps it: a connection that failed reads closed, and the next
        // call's `direct_conn` dials afresh, so nothing is done here.
        Box::pin(async move {
            match conn.call(kind, &req, deadline).await {
                Some(answer) => answer,
                None => match fallback {
                    Some((link, to)) => grpc(&link, &to, req, deadline).await,
                    None => unreachable!("a dialled connection answers or fails"),
                },
            }
        })
    }

    fn grpc_decide(
        &self,
        to: &NodeIdentity,
        req: DecideRequest,
        deadline: Duration,
    ) -> PeerCall<DecideResponse> {
        let req = self.request(req, deadline);
        self.call(to, deadline, |mut c| async move { c.decide(req).await })
    }

    fn grpc_replicate(
        &self,
        to: &NodeIdentity,
        req: ReplicateRequest,
        deadline: Duration,
    ) -> PeerCall<ReplicateResponse> {
        let req = self.request(req, deadline);
        self.call(to, deadline, |mut c| async move { c.replicate(req).await })
    }

    fn client(&self, to: &NodeIdentity) -> PeerClient<PeerConn> {
        if let Some(slot) = self.clients.get(&to.id) {
            // A closed connection is redialled before a call is lost on it.
            if slot.addr == to.grpc && !slot.conn.is_closed() {
                return slot.client.clone();
            }
        }
        let conn = PeerConn::dial_over(to.grpc, CONN, self.tls.clone());
        let origin = format!("http://{}", to.grpc)
            .parse()
            .expect("a socket address is a valid URI authority");
        let client = PeerClient::with_origin(conn.clone(), origin)
            .max_decoding_message_size(MAX_PEER_MESSAGE)
            .max_encoding_message_size(MAX_PEER_MESSAGE);
        self.clients.insert(
            to.id.clone(),
            Slot {
                addr: to.grpc,
                conn,
                client: client.clone(),
            },
        );
        client
    }

    fn request<T>(&self, message: T, deadline: Duration) -> Request<T> {
        let mut r = Request::new(message);
        r.set_timeout(deadline);
        if let Some(t) = &self.token {
            t.attach(r.metadata_mut());
        }
        r
    }

    /// Runs one call with a deadline. A connection that failed is dropped,
    /// so the next call dials afresh (the old one may be stuck); a timeout
    /// keeps it, since redialling inside the next deadline is what turned
    /// one slow answer into a run of misses.
    fn call<T, F, Fut>(
        &self,
        to: &NodeIdentity,
        deadline: Duration,
        f: F,
    ) -> BoxFuture<'static, Result<T, PeerFailure>>
    where
        T: Send + 'static,
        F: FnOnce(PeerClient<PeerConn>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, Status>> + Send + 'static,
    {
        let call = f(self.client(to));
        let forget = self.forget_on_failure(to);
        Box::pin(async move {
            let failure = match tokio::time::timeout(deadline, call).await {
                Ok(Ok(response)) => return Ok(response.into_inner()),
                Ok(Err(status)) => failure(&status, deadline),
                Err(_) => PeerFailure::Timeout(deadline),
            };
            // A slow answer says nothing about the connection: only one
            // that failed outright is dropped, so the next call dials afresh.
            if matches!(failure, PeerFailure::Unreachable(_)) {
                forget();
            }
            Err(failure)
        })
    }

    fn forget_on_failure(&self, to: &NodeIdentity) -> impl FnOnce() + Send + 'static {
        let clients = self.clients.clone();
        let (id, addr) = (to.id.clone(), to.grpc);
        move || {
            clients.remove_if(&id, |_, slot| slot.addr == addr);
        }
    }
}

impl Link for TonicLink {
    fn decide(
        &self,
        to: &NodeIdentity,
        req: DecideRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<DecideResponse, PeerFailure>> {
        self.direct_or_grpc(to, Kind::Decide, req, deadline, TonicLink::grpc_decide)
    }

    fn handoff(
        &self,
        to: &NodeIdentity,
        req: HandoffRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<HandoffResponse, PeerFailure>> {
        let req = self.request(req, deadline);
        self.call(to, deadline, |mut c| async move { c.handoff(req).await })
    }

    fn push_rules(
        &self,
        to: &NodeIdentity,
        set: WireRuleSet,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<PushRulesResponse, PeerFailure>> {
        let req = self.request(set, deadline);
        self.call(to, deadline, |mut c| async move { c.push_rules(req).await })
    }

    fn pull_rules(
        &self,
        to: &NodeIdentity,
        have: PullRulesRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<WireRuleSet, PeerFailure>> {
        let req = self.request(have, deadline);
        self.call(to, deadline, |mut c| async move { c.pull_rules(req).await })
    }

    fn write_tier(
        &self,
        to: &NodeIdentity,
        req: WriteTierRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<WriteTierResponse, PeerFailure>> {
        let req = self.request(req, deadline);
        self.call(to, deadline, |mut c| async move { c.write_tier(req).await })
    }

    fn sync_counts(
        &self,
        to: &NodeIdentity,
        req: SyncRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<SyncResponse, PeerFailure>> {
        let req = self.request(req, deadline);
        self.call(
            to,
            deadline,
            |mut c| async move { c.sync_counts(req).await },
        )
    }

    fn members(
        &self,
        to: &NodeIdentity,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<MembersResponse, PeerFailure>> {
        let req = self.request(MembersRequest {}, deadline);
        self.call(to, deadline, |mut c| async move { c.members(req).await })
    }

    fn replicate(
        &self,
        to: &NodeIdentity,
        req: ReplicateRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<ReplicateResponse, PeerFailure>> {
        self.direct_or_grpc(
            to,
            Kind::Replicate,
            req,
            deadline,
            TonicLink::grpc_replicate,
        )
    }

    fn retain(&self, keep: &dyn Fn(&str) -> bool) {
        self.clients.retain(|id, _| keep(id));
        if let Some(direct) = &self.direct {
            direct.retain(|id, _| keep(id));
        }
    }

    fn summary(
        &self,
        to: &NodeIdentity,
        req: SummaryRequest,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<NodeSummary, PeerFailure>> {
        let req = self.request(req, deadline);
        self.call(to, deadline, |mut c| async move { c.summary(req).await })
    }
}

#[cfg(test)]
mod tests {
    use super::super::conn::tests::eventually;
    use super::*;

    /// Only a status that says the peer ran out of time is slowness; a
    /// stream or connection torn down under the call is evidence the peer
    /// is going or gone, which opens its breaker at once.
    #[test]
    fn a_cancelled_call_is_a_lost_peer_and_only_a_deadline_is_slow() {
        let d = Duration::from_millis(5);
        assert!(matches!(
            failure(&Status::deadline_exceeded("slow"), d),
            PeerFailure::Timeout(_)
        ));
        for s in [
            Status::cancelled("stream reset"),
            Status::unavailable("connection reset"),
        ] {
            assert!(
                matches!(failure(&s, d), PeerFailure::Unreachable(_)),
                "{s:?}"
            );
        }
        assert!(matches!(
            failure(&Status::unauthenticated("no token"), d),
            PeerFailure::Refused(_)
        ));
    }

    /// A peer that closes every connection at once: each dial ends closed.
    #[tokio::test]
    async fn a_closed_connection_is_dialled_afresh_before_the_next_call() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                drop(tcp);
            }
        });
        let link = TonicLink::new(None, false);
        let peer = NodeIdentity::new("peer", "127.0.0.1:7946".parse().unwrap(), addr);
        link.client(&peer);
        let first = link.clients.get("peer").unwrap().conn.clone();
        eventually("the first connection reads closed", || first.is_closed()).await;
        link.client(&peer);
        let second = link.clients.get("peer").unwrap().conn.clone();
        assert!(!second.same_connection(&first), "the closed one was reused");
    }
}
