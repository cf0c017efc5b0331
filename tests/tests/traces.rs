//! OpenTelemetry traces across a three-node cluster, read back by a local OTLP/HTTP receiver.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use serde_json::json;
use tonic::metadata::MetadataValue;
use weir_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use weir_proto::weir::v1::rate_limiter_client::RateLimiterClient;
use weir_proto::weir::v1::{CheckItem, CheckRequest};
use weir_tests::{rls_request, start_cluster, wait_until, TestNode};

const RULES: &str = r#"
[[rule]]
name      = "per-client"
algorithm = "sliding_window_log"
limit     = 1000
window    = "60s"
"#;

/// One exported span, as far as these tests read it.
#[derive(Debug, Clone)]
struct Received {
    node: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
}

/// An OTLP/HTTP receiver on 127.0.0.1:0 that keeps every span posted to
/// `/v1/traces`.
struct Receiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let spans: Arc<Mutex<Vec<Received>>> = Arc::default();
        let app = Router::new()
            .route("/v1/traces", post(receive))
            .with_state(spans.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { addr, spans }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn in_trace(&self, trace_id: &str) -> Vec<Received> {
        let spans = self.spans.lock().unwrap();
        spans
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .cloned()
            .collect()
    }
}

async fn receive(State(spans): State<Arc<Mutex<Vec<Received>>>>, body: Bytes) -> Vec<u8> {
    let req = ExportTraceServiceRequest::decode(body).expect("an ExportTraceServiceRequest");
    let mut out = spans.lock().unwrap();
    for rs in req.resource_spans {
        let node = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.instance.id")
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                AnyValue::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
            out.push(Received {
                node: node.clone(),
                name: span.name,
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent: hex(&span.parent_span_id),
            });
        }
    }
    // An empty ExportTraceServiceResponse.
    Vec::new()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn owner_of(n: &TestNode, key: &str) -> String {
    let cluster = n.state().engine.cluster().expect("a cluster member");
    cluster.owner_of(key).unwrap().id
}

/// A key that `n` (node-1) forwards: another node owns it.
fn forwarded_key(n: &TestNode, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|k| owner_of(n, k) != n.state().node_id)
        .unwrap()
}

const CALLER_SPAN: &str = "b7ad6b7169203331";

fn traceparent(trace_id: &str) -> String {
    format!("00-{trace_id}-{CALLER_SPAN}-01")
}

/// Waits until the trace holds the edge span `edge` on `gateway` (the
/// caller's span its parent), a forward span under it, and a decision
/// span under the forward on `owner`.
async fn assert_linked(rx: &Receiver, trace_id: &str, edge: &str, gateway: &str, owner: &str) {
    let what = format!("{edge} -> weir.forward -> weir.decide on {owner} in trace {trace_id}");
    wait_until(&what, || async {
        let spans = rx.in_trace(trace_id);
        let named = |name: &str| {
            spans
                .iter()
                .filter(|s| s.name == name)
                .cloned()
                .collect::<Vec<_>>()
        };
        named(edge).iter().any(|e| {
            e.node == gateway
                && e.parent == CALLER_SPAN
                && named("weir.forward").iter().any(|f| {
                    f.node == gateway
                        && f.parent == e.span_id
                        && named("weir.decide")
                            .iter()
                            .any(|d| d.node == owner && d.parent == f.span_id)
                })
        })
    })
    .await;
}

async fn traced_cluster(rx: &Receiver, grpc_only: bool) -> Vec<TestNode> {
    let url = rx.url();
    start_cluster(3, RULES, |c| {
        c.traces.otlp_endpoint = Some(url.clone());
        c.traces.sample_ratio = 1.0;
        c.cluster.grpc_only = grpc_only;
    })
    .await
}

/// Over direct peer connections: an HTTP check and an Envoy RLS call,
/// each with the caller's traceparent, sent to a node that forwards them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_and_rls_checks_are_traced_from_edge_to_owner() {
    let rx = Receiver::start().await;
    let nodes = traced_cluster(&rx, false).await;
    let gateway = &nodes[0];

    let key = forwarded_key(gateway, "http");
    let http_trace = "0af7651916cd43dd8448eb211c80319c";
    let res = gateway
        .client
        .post(gateway.url("/v1/check"))
        .header("traceparent", traceparent(http_trace))
        .json(&json!({"key": key, "route": "GET /x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_linked(
        &rx,
        http_trace,
        "weir.check.http",
        "node-1",
        &owner_of(gateway, &key),
    )
    .await;

    let client = forwarded_key(gateway, "rls");
    let rls_trace = "1bf7651916cd43dd8448eb211c80319d";
    let mut rls = RateLimitServiceClient::connect(format!("http://{}", gateway.node().grpc_addr()))
        .await
        .unwrap();
    let mut req = tonic::Request::new(rls_request("edge", &client));
    let value: MetadataValue<_> = traceparent(rls_trace).parse().unwrap();
    req.metadata_mut().insert("traceparent", value);
    rls.should_rate_limit(req).await.unwrap();
    assert_linked(
        &rx,
        rls_trace,
        "weir.check.rls",
        "node-1",
        &owner_of(gateway, &client),
    )
    .await;
}

/// Over gRPC peer calls: a weir.v1.RateLimiter/Check with the caller's
/// traceparent in its metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_checks_are_traced_through_grpc_peer_calls() {
    let rx = Receiver::start().await;
    let nodes = traced_cluster(&rx, true).await;
    let gateway = &nodes[0];
    let key = forwarded_key(gateway, "grpc");
    let trace = "2cf7651916cd43dd8448eb211c80319e";
    let mut client = RateLimiterClient::connect(format!("http://{}", gateway.node().grpc_addr()))
        .await
        .unwrap();
    let mut req = tonic::Request::new(CheckRequest {
        items: vec![CheckItem {
            key: key.clone(),
            route: "GET /x".into(),
            ..CheckItem::default()
        }],
    });
    let value: MetadataValue<_> = traceparent(trace).parse().unwrap();
    req.metadata_mut().insert("traceparent", value);
    let res = client.check(req).await.unwrap();
    assert!(res.get_ref().results[0].allowed);
    assert_linked(
        &rx,
        trace,
        "weir.check.grpc",
        "node-1",
        &owner_of(gateway, &key),
    )
    .await;
}

/// A gateway with no endpoint builds no span pipeline and sends no trace
/// context with what it forwards: its owners, which export traces, make
/// no span of a traced check that reached them through it. The same
/// check sent to the owner itself is exported (the control: it ends after
/// any span of the first check on that node, so it is exported no sooner).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_without_an_endpoint_traces_nothing() {
    let rx = Receiver::start().await;
    let url = rx.url();
    let nodes = start_cluster(3, RULES, |c| {
        if c.node_id.as_deref() != Some("node-1") {
            c.traces.otlp_endpoint = Some(url.clone());
            c.traces.sample_ratio = 1.0;
        }
    })
    .await;
    let gateway = &nodes[0];
    assert!(gateway.state().traces.is_none());
    let key = forwarded_key(gateway, "off");
    let owner_id = owner_of(gateway, &key);
    let owner = nodes
        .iter()
        .find(|n| n.state().node_id == owner_id)
        .unwrap();
    let untraced = "3df7651916cd43dd8448eb211c80319f";
    let control = "4ef7651916cd43dd8448eb211c80319a";
    for (node, trace) in [(gateway, untraced), (owner, control)] {
        let res = node
            .client
            .post(node.url("/v1/check"))
            .header("traceparent", traceparent(trace))
            .json(&json!({"key": key, "route": "GET /x"}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
    }
    wait_until("the control check's edge span is exported", || async {
        !rx.in_trace(control).is_empty()
    })
    .await;
    assert!(
        rx.in_trace(untraced).is_empty(),
        "{:?}",
        rx.in_trace(untraced)
    );
}
