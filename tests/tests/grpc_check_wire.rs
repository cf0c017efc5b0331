//! The node's own codecs over a real socket, with bytes no prost client
//! sends: weir.v1.RateLimiter/Check's malformed messages refused as tonic's
//! prost codec refuses them, unknown fields passed over, a lone item
//! refused alone; and Envoy's ShouldRateLimit, whose answer the node
//! writes itself, refusing a malformed request the same way. (Both
//! against prost, byte for byte: weir-proto's check_wire/tests and
//! weir-node's envoy_map/wire.rs.)

use bytes::{Buf, BufMut};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Code, Status};
use weir_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use weir_proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use weir_proto::envoy::service::ratelimit::v3::rate_limit_response::Code as RlsCode;
use weir_proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use weir_proto::prost;
use weir_proto::weir::v1::{CheckItem, CheckRequest, CheckResponse, ErrorCode, ItemLimit};
use weir_tests::TestNode;

const RULES: &str = r#"
[[rule]]
name      = "per-client"
route     = "POST /limited"
by        = "client"
algorithm = "sliding_window_counter"
limit     = 10
window    = "60s"
"#;

const RLS: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Sends and receives a message's bytes as they are.
#[derive(Debug, Default, Clone, Copy)]
struct Raw;

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        Ok(Some(buf.copy_to_bytes(buf.remaining()).to_vec()))
    }
}

async fn connect(node: &TestNode) -> tonic::client::Grpc<Channel> {
    let channel = Channel::from_shared(format!("http://{}", node.node().grpc_addr()))
        .expect("a URL")
        .connect()
        .await
        .expect("connect");
    tonic::client::Grpc::new(channel)
}

/// `body` sent to `path` as it is: the answer's bytes, or the status.
async fn call(
    grpc: &mut tonic::client::Grpc<Channel>,
    path: &'static str,
    body: Vec<u8>,
) -> Result<Vec<u8>, Status> {
    grpc.ready().await.expect("ready");
    let path = http::uri::PathAndQuery::from_static(path);
    let answer = grpc.unary(tonic::Request::new(body), path, Raw).await?;
    Ok(answer.into_inner())
}

/// `body` as a Check call: the answer decoded, or the status.
async fn check(
    grpc: &mut tonic::client::Grpc<Channel>,
    body: Vec<u8>,
) -> Result<CheckResponse, Status> {
    let answer = call(grpc, "/weir.v1.RateLimiter/Check", body).await?;
    Ok(CheckResponse::decode(answer.as_slice()).expect("a CheckResponse"))
}

fn item(key: &str) -> CheckItem {
    CheckItem {
        key: key.into(),
        route: "POST /limited".into(),
        ..CheckItem::default()
    }
}

fn encoded(items: Vec<CheckItem>) -> Vec<u8> {
    CheckRequest { items }.encode_to_vec()
}

#[tokio::test]
async fn a_malformed_message_is_refused_and_the_node_answers_the_next() {
    let node = TestNode::start(RULES, |_| {}).await;
    let mut grpc = connect(&node).await;
    let malformed: [&[u8]; 4] = [
        &[0x0a, 0x05, 0x0a],             // an item longer than the message
        &[0x0a, 0x02, 0x0a, 0x01, 0xff], // a key that is not UTF-8
        &[0x00],                         // field number 0
        &[0x08, 0x80, 0x80],             // a varint that never ends
    ];
    for body in malformed {
        let status = check(&mut grpc, body.to_vec())
            .await
            .expect_err("a malformed message");
        assert_eq!(status.code(), Code::Internal, "{body:02x?}: {status:?}");
        assert!(
            status.message().contains("failed to decode"),
            "{body:02x?}: {}",
            status.message()
        );
    }
    let answer = check(&mut grpc, encoded(vec![item("after")]))
        .await
        .unwrap();
    assert!(answer.results[0].allowed, "{answer:?}");
    assert_eq!(
        answer.results[0].remaining, 9,
        "the refused calls took nothing"
    );
    node.shutdown().await;
}

#[tokio::test]
async fn unknown_fields_are_passed_over_at_every_level() {
    let node = TestNode::start(RULES, |_| {}).await;
    let mut grpc = connect(&node).await;
    let mut body = vec![0x48, 0x07]; // field 9, a varint, before the items
    let mut one = item("k").encode_to_vec();
    one.extend_from_slice(&[0x7a, 0x02, b'h', b'i']); // field 15, two bytes, in the item
    body.push(0x0a);
    body.push(u8::try_from(one.len()).expect("a short item"));
    body.extend_from_slice(&one);
    body.extend_from_slice(&encoded(vec![item("k")]));
    let answer = check(&mut grpc, body).await.unwrap();
    let remaining: Vec<u64> = answer.results.iter().map(|r| r.remaining).collect();
    assert_eq!(remaining, [9, 8], "two checks of key k: {answer:?}");
    node.shutdown().await;
}

#[tokio::test]
async fn a_lone_item_whose_limit_cannot_limit_is_refused_naming_the_limit() {
    let node = TestNode::start(RULES, |_| {}).await;
    let mut grpc = connect(&node).await;
    let carried = CheckItem {
        limit: Some(ItemLimit {
            limit: 0,
            window_ms: 1_000,
        }),
        ..item("zero")
    };
    let answer = check(&mut grpc, encoded(vec![carried])).await.unwrap();
    let result = &answer.results[0];
    let e = result.error.as_ref().expect("refused");
    assert_eq!(
        (e.code, e.field.as_str()),
        (ErrorCode::InvalidArgument as i32, "limit")
    );
    assert!(!result.allowed);
    node.shutdown().await;
}

#[tokio::test]
async fn a_malformed_rls_request_is_refused_and_a_good_one_answered() {
    let node = TestNode::start(RULES, |_| {}).await;
    let mut grpc = connect(&node).await;
    let status = call(&mut grpc, RLS, vec![0x0a, 0x05, b'd'])
        .await
        .expect_err("a domain longer than the message");
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    let request = RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "client".into(),
                value: "c1".into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    };
    let answer = call(&mut grpc, RLS, request.encode_to_vec()).await.unwrap();
    let answer = RateLimitResponse::decode(answer.as_slice()).expect("a RateLimitResponse");
    assert_eq!(answer.overall_code, RlsCode::Ok as i32, "{answer:?}");
    assert_eq!(answer.statuses.len(), 1, "{answer:?}");
    node.shutdown().await;
}

#[tokio::test]
async fn a_batch_over_the_item_limit_is_refused_before_its_items_are_read() {
    let node = TestNode::start(RULES, |_| {}).await;
    let mut grpc = connect(&node).await;
    // The default limit's worth of empty items and one more, whose key is
    // not UTF-8: refused for its size, so no item was decoded.
    let mut body = [0x0a, 0x00].repeat(1000);
    body.extend_from_slice(&[0x0a, 0x03, 0x0a, 0x01, 0xff]);
    let status = check(&mut grpc, body).await.expect_err("over the limit");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("at most 1000 per call, got 1001"),
        "{}",
        status.message()
    );
    // Within the limit, the same item is read, and refused as malformed.
    let status = check(&mut grpc, vec![0x0a, 0x03, 0x0a, 0x01, 0xff])
        .await
        .expect_err("a key that is not UTF-8");
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    node.shutdown().await;
}

#[tokio::test]
async fn an_rls_request_over_the_descriptor_limit_is_refused_before_it_is_decoded() {
    let node = TestNode::start(RULES, |_| {}).await;
    let mut grpc = connect(&node).await;
    // A domain, the default limit's worth of empty descriptors, and one
    // more whose entry runs past its end: refused for the count, so no
    // descriptor was decoded.
    let mut body = vec![0x0a, 0x04, b'e', b'd', b'g', b'e'];
    body.extend_from_slice(&[0x12, 0x00].repeat(1000));
    body.extend_from_slice(&[0x12, 0x02, 0x0a, 0x05]);
    let status = call(&mut grpc, RLS, body)
        .await
        .expect_err("over the limit");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(
        status.message(),
        "descriptors: at most 1000 per request, got 1001"
    );
    // Within the limit, the same descriptor is decoded, and refused as malformed.
    let status = call(&mut grpc, RLS, vec![0x12, 0x02, 0x0a, 0x05])
        .await
        .expect_err("a malformed descriptor");
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    node.shutdown().await;
}
