//! grpc.health.v1.Health and server reflection on the gRPC port: health
//! follows readiness (joining, ready, leaving), and reflection lists weir's services.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use weir_tests::{cluster_member, wait_until, TestNode};

const RULES: &str = r#"
[[rule]]
name      = "per-client"
algorithm = "fixed_window"
limit     = 100
window    = "1h"
"#;

async fn channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect")
}

/// The status `service` has, as grpc_health_probe asks it.
async fn health(addr: SocketAddr, service: &str) -> ServingStatus {
    let mut client = HealthClient::new(channel(addr).await);
    let answer = client
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .expect("health check answered")
        .into_inner();
    ServingStatus::try_from(answer.status).expect("a known status")
}

#[tokio::test]
async fn a_ready_node_answers_serving_for_itself_and_each_client_service() {
    let node = TestNode::start(RULES, |_| {}).await;
    let grpc = node.node().grpc_addr();
    wait_until("the health service says SERVING", || async {
        health(grpc, "").await == ServingStatus::Serving
    })
    .await;
    for service in [
        "weir.v1.RateLimiter",
        "envoy.service.ratelimit.v3.RateLimitService",
    ] {
        assert_eq!(
            health(grpc, service).await,
            ServingStatus::Serving,
            "{service}"
        );
    }
    let mut client = HealthClient::new(channel(grpc).await);
    let unknown = client
        .check(HealthCheckRequest {
            service: "no.such.Service".into(),
        })
        .await
        .expect_err("an unknown service is NOT_FOUND");
    assert_eq!(unknown.code(), tonic::Code::NotFound);
}

/// Guard: health follows readiness, NOT_SERVING while a node given seeds
/// has not joined, SERVING once its grace alone has passed.
#[tokio::test]
async fn a_seeded_node_is_not_serving_until_its_join_ends() {
    // A UDP port on loopback that nothing answers on.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let seed = silent.local_addr().unwrap().to_string();
    let started = std::time::Instant::now();
    let node = TestNode::start(RULES, |c| {
        c.cluster.seeds = vec![seed];
        c.cluster.secret = Some("health-test-cluster-secret".into());
    })
    .await;
    let grpc = node.node().grpc_addr();
    let first = health(grpc, "").await;
    // The grace is five announce intervals (5 s at the default profile);
    // a host so busy that the first call came later has nothing to show.
    if started.elapsed() < Duration::from_secs(4) {
        assert_eq!(first, ServingStatus::NotServing);
    }
    wait_until("SERVING once the grace has passed", || async {
        health(grpc, "").await == ServingStatus::Serving
    })
    .await;
}

/// A peer's gRPC address that takes connections and never answers: calls
/// to it last until their deadline.
fn black_hole() -> (std::net::TcpListener, SocketAddr) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

/// Guard: once shutdown begins, `/readyz` answers 503 and gRPC health
/// NOT_SERVING for as long as the leave lasts. The node leaving holds a
/// counter whose new owner never answers its peer calls, so its handover
/// takes seconds (about 7 here), with both ports still answering.
#[tokio::test]
async fn a_leaving_node_is_not_ready_while_it_hands_its_counters_over() {
    let (_hole, hole) = black_hole();
    let b = TestNode::start(RULES, |c| {
        cluster_member(c, "node-b", None);
        c.advertise_grpc = Some(hole);
    })
    .await;
    let seed = b.state().config.gossip;
    let mut a = TestNode::start(RULES, |c| {
        cluster_member(c, "node-a", Some(seed));
        c.cluster.leave_timeout = Duration::from_secs(60);
    })
    .await;
    let grpc = a.node().grpc_addr();
    wait_until("node-a has joined node-b", || async {
        a.get("/readyz").await.status() == 200
    })
    .await;
    wait_until("gRPC health says SERVING", || async {
        health(grpc, "").await == ServingStatus::Serving
    })
    .await;
    let cluster = a.state().engine.cluster().unwrap().clone();
    let key = (0..1000)
        .map(|i| format!("key-{i}"))
        .find(|k| cluster.owner_of(k).is_some_and(|o| o.id == "node-a"))
        .expect("node-a owns some key");
    assert_eq!(a.check(json!({"key": key})).await.status(), 200);

    let (base, client) = (a.base.clone(), a.client.clone());
    let leaving = tokio::spawn(a.take().shutdown());
    wait_until("/readyz says the node is leaving", || async {
        // An error (the node already stopped) is not the answer sought.
        let Ok(res) = client.get(format!("{base}/readyz")).send().await else {
            return false;
        };
        res.status() == 503 && res.text().await.is_ok_and(|t| t == "leaving its cluster\n")
    })
    .await;
    wait_until("gRPC health says NOT_SERVING", || async {
        health(grpc, "").await == ServingStatus::NotServing
    })
    .await;
    assert!(!leaving.is_finished(), "still handing its counter over");
    let res = client.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(res.status(), 200, "alive while leaving");
    leaving.abort();
}

#[tokio::test]
async fn reflection_lists_the_services_a_client_calls() {
    let node = TestNode::start(RULES, |_| {}).await;
    let mut client = ServerReflectionClient::new(channel(node.node().grpc_addr()).await);
    let ask = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let file_of = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::FileContainingSymbol(
            "weir.v1.RateLimiter".into(),
        )),
    };
    let mut answers = client
        .server_reflection_info(futures::stream::iter([ask, file_of]))
        .await
        .expect("reflection answers")
        .into_inner();
    let answer = answers
        .message()
        .await
        .expect("a reflection answer")
        .expect("one message");
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("not a service list: {answer:?}");
    };
    let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "envoy.service.ratelimit.v3.RateLimitService",
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "weir.v1.RateLimiter",
        ]
    );
    // The service's own definition, from the descriptors weir is built from.
    let answer = answers.message().await.unwrap().expect("a second answer");
    let Some(MessageResponse::FileDescriptorResponse(files)) = answer.message_response else {
        panic!("not a file: {answer:?}");
    };
    use weir_proto::prost::Message as _;
    let names: Vec<String> = files
        .file_descriptor_proto
        .iter()
        .map(|f| {
            weir_proto::prost_types::FileDescriptorProto::decode(f.as_slice())
                .unwrap()
                .name()
                .to_string()
        })
        .collect();
    assert!(
        names.iter().any(|n| n == "weir/v1/ratelimiter.proto"),
        "{names:?}"
    );
}
