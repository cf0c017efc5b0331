//! `weir.v1.Regions` over gRPC: the inter-region calls of global limits, client and server, each carrying the cluster secret's token as peer calls do.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use futures::future::BoxFuture;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};
use weir_proto::weir::v1::regions_client::RegionsClient;
use weir_proto::weir::v1::regions_server::Regions;
use weir_proto::weir::v1::{
    AllocateRequest, AllocateResponse, HelloRequest, HelloResponse, RegionGrant, RegionReport,
};

use super::auth::PeerToken;
use super::peer_tls::PeerTls;
use crate::regional::{RegionCallFailed, RegionLink, Regional};
use crate::regions::{Grant, Report};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

pub fn report_to_wire(r: &Report) -> RegionReport {
    RegionReport {
        rule: r.rule.to_string(),
        key: r.key.to_string(),
        window: r.window,
        used: r.used,
        received: r.received,
        released: r.released,
        allocation: r.allocation,
        fallback: r.fallback,
        demand: r.demand,
        retire: r.retire,
        holder: r.holder.to_string(),
        answered: r.answered,
    }
}

pub fn report_from_wire(region: &str, r: RegionReport) -> Report {
    Report {
        rule: r.rule.into(),
        key: r.key.into(),
        region: region.into(),
        holder: r.holder.into(),
        window: r.window,
        used: r.used,
        received: r.received,
        released: r.released,
        allocation: r.allocation,
        fallback: r.fallback,
        demand: r.demand,
        retire: r.retire,
        answered: r.answered,
    }
}

fn grant_to_wire(g: &Grant) -> RegionGrant {
    RegionGrant {
        rule: g.rule.to_string(),
        key: g.key.to_string(),
        window: g.window,
        granted: g.granted,
        target: g.target,
        at: g.at,
    }
}

fn grant_from_wire(g: RegionGrant) -> Grant {
    Grant {
        rule: g.rule.into(),
        key: g.key.into(),
        window: g.window,
        granted: g.granted,
        target: g.target,
        at: g.at,
    }
}

/// Region calls over gRPC, one lazily connected client per address.
pub struct TonicRegionLink {
    /// Shared with each call's future, which drops a failed connection.
    clients: Arc<DashMap<String, RegionsClient<Channel>>>,
    token: Option<PeerToken>,
    /// Region peers dialled under mutual TLS when set (their peer ports
    /// speak nothing else).
    tls: Option<Arc<PeerTls>>,
}

impl TonicRegionLink {
    pub fn new(token: Option<PeerToken>) -> Self {
        TonicRegionLink {
            clients: Arc::default(),
            token,
            tls: None,
        }
    }

    /// Dials region peers under mutual TLS.
    pub fn with_tls(mut self, tls: Option<Arc<PeerTls>>) -> Self {
        self.tls = tls;
        self
    }

    fn client(&self, addr: &str) -> Result<RegionsClient<Channel>, RegionCallFailed> {
        if let Some(c) = self.clients.get(addr) {
            return Ok(c.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| RegionCallFailed(format!("bad region peer address {addr}: {e}")))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        let channel = match &self.tls {
            None => endpoint.connect_lazy(),
            Some(tls) => {
                let tls = tls.clone();
                endpoint.connect_with_connector_lazy(tower::service_fn(move |uri: http::Uri| {
                    let tls = tls.clone();
                    async move {
                        let host = uri.host().unwrap_or_default().to_string();
                        let port = uri.port_u16().unwrap_or(80);
                        let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
                        tcp.set_nodelay(true)?;
                        let ip = tcp.peer_addr()?.ip();
                        let stream = tls.connect(ip, tcp).await?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                    }
                }))
            }
        };
        let client = RegionsClient::new(channel);
        self.clients.insert(addr.to_string(), client.clone());
        Ok(client)
    }

    fn request<T>(&self, message: T, deadline: Duration) -> Request<T> {
        let mut r = Request::new(message);
        r.set_timeout(deadline);
        if let Some(t) = &self.token {
            t.attach(r.metadata_mut());
        }
        r
    }
}

impl RegionLink for TonicRegionLink {
    fn allocate(
        &self,
        addr: &str,
        from: &str,
        reports: Vec<Report>,
        forwarded: bool,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<Vec<Grant>, RegionCallFailed>> {
        let client = self.client(addr);
        let req = self.request(
            AllocateRequest {
                region: from.to_string(),
                reports: reports.iter().map(report_to_wire).collect(),
                forwarded,
            },
            deadline,
        );
        let addr = addr.to_string();
        let forget = self.clients.clone();
        Box::pin(async move {
            let mut client = client?;
            match tokio::time::timeout(deadline, client.allocate(req)).await {
                Ok(Ok(r)) => Ok(r
                    .into_inner()
                    .grants
                    .into_iter()
                    .map(grant_from_wire)
                    .collect()),
                Ok(Err(s)) => {
                    // Dial afresh next time: the connection may be stuck.
                    forget.remove(&addr);
                    Err(RegionCallFailed(format!(
                        "{addr}: {:?} {}",
                        s.code(),
                        s.message()
                    )))
                }
                Err(_) => Err(RegionCallFailed(format!(
                    "{addr}: no answer in {deadline:?}"
                ))),
            }
        })
    }

    fn hello(
        &self,
        addr: &str,
        deadline: Duration,
    ) -> BoxFuture<'static, Result<String, RegionCallFailed>> {
        let client = self.client(addr);
        let req = self.request(HelloRequest::default(), deadline);
        let addr = addr.to_string();
        Box::pin(async move {
            let mut client = client?;
            match tokio::time::timeout(deadline, client.hello(req)).await {
                Ok(Ok(r)) => Ok(r.into_inner().region),
                Ok(Err(s)) => Err(RegionCallFailed(format!(
                    "{addr}: {:?} {}",
                    s.code(),
                    s.message()
                ))),
                Err(_) => Err(RegionCallFailed(format!(
                    "{addr}: no answer in {deadline:?}"
                ))),
            }
        })
    }
}

/// The server side: hands reports to this node's [`Regional`].
pub struct RegionsService {
    regional: Arc<Regional>,
}

impl RegionsService {
    pub fn new(regional: Arc<Regional>) -> Self {
        RegionsService { regional }
    }
}

#[tonic::async_trait]
impl Regions for RegionsService {
    async fn allocate(
        &self,
        r: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let req = r.into_inner();
        // Only a node of this region passes on its own region's reports.
        if req.region.is_empty() || (req.region == **self.regional.name() && !req.forwarded) {
            return Err(Status::invalid_argument(
                "region: a report must name the region it comes from, another than this one",
            ));
        }
        let from: Arc<str> = req.region.as_str().into();
        let reports = req
            .reports
            .into_iter()
            .map(|x| report_from_wire(&req.region, x))
            .collect();
        let grants = self.regional.answer(&from, reports, req.forwarded).await;
        Ok(Response::new(AllocateResponse {
            region: self.regional.name().to_string(),
            grants: grants.iter().map(grant_to_wire).collect(),
        }))
    }

    async fn hello(&self, _r: Request<HelloRequest>) -> Result<Response<HelloResponse>, Status> {
        Ok(Response::new(HelloResponse {
            region: self.regional.name().to_string(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regional::tests::Says;

    fn reports(region: &str, forwarded: bool) -> Request<AllocateRequest> {
        Request::new(AllocateRequest {
            region: region.into(),
            reports: vec![RegionReport {
                rule: "g".into(),
                key: "k".into(),
                window: 100,
                demand: 50,
                ..RegionReport::default()
            }],
            forwarded,
        })
    }

    #[tokio::test]
    async fn a_failed_call_drops_its_connection_so_the_next_dials_afresh() {
        // Nothing listens on port 1: the call fails outright.
        let link = TonicRegionLink::new(None);
        let failed = link
            .allocate(
                "127.0.0.1:1",
                "b",
                Vec::new(),
                false,
                Duration::from_secs(5),
            )
            .await;
        assert!(failed.is_err());
        assert!(
            link.clients.get("127.0.0.1:1").is_none(),
            "the failed connection is forgotten"
        );
    }

    #[tokio::test]
    async fn only_reports_from_another_region_or_passed_on_inside_this_one_are_answered() {
        let r = crate::regional::tests::regional(&["b=10.0.0.1:1"], Arc::new(Says(None)));
        let s = RegionsService::new(r);
        let own = s.allocate(reports("a", false)).await.unwrap_err();
        assert_eq!(own.code(), tonic::Code::InvalidArgument);
        let unnamed = s.allocate(reports("", false)).await.unwrap_err();
        assert_eq!(unnamed.code(), tonic::Code::InvalidArgument);
        let answer = s.allocate(reports("b", false)).await.unwrap().into_inner();
        assert_eq!(answer.region, "a");
        assert_eq!(
            answer.grants.len(),
            1,
            "this node owns the key: its allocator answers"
        );
        let passed = s.allocate(reports("a", true)).await.unwrap().into_inner();
        assert_eq!(passed.grants.len(), 1);
    }
}
