//! The request files `bench/edges.sh` and `bench/server-count.sh` send with h2load: each edge's call, allowed and denied, as gRPC frames on disk.
//!
//! h2load repeats one body for every request, so each file is one call
//! with one caller key (the 100-item call, one key per item). They are written by `weir-bare --write-requests
//! DIR` and committed under `bench/requests/`; a test holds the two equal.

use std::path::Path;

use weir_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use weir_proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use weir_proto::envoy::service::ratelimit::v3::RateLimitRequest;
use weir_proto::prost::Message;
use weir_proto::weir::v1::{CheckItem, CheckRequest};

use super::reference::grpc::DENY_DOMAIN;

/// The rules a node under `bench/edges.sh` serves: every check admitted,
/// except those on the route `bench-deny`, all but the first denied.
pub const RULES: &str = r#"# Every check is admitted (limit 10^9 a minute) except on the route
# "bench-deny", where one per hour passes. RLS requests take their route
# from the domain, so domain "bench-deny" is the denied case.
[[rule]]
name      = "bench"
algorithm = "sliding_window_counter"
limit     = 1000000000
window    = "60s"

[[rule]]
name      = "bench-deny"
route     = "bench-deny"
algorithm = "sliding_window_counter"
limit     = 1
window    = "3600s"
"#;

/// A message as it travels in a gRPC call: uncompressed flag, big-endian
/// length, then the message.
pub fn grpc_frame(m: &impl Message) -> Vec<u8> {
    let body = m.encode_to_vec();
    let mut out = Vec::with_capacity(5 + body.len());
    out.push(0);
    out.extend_from_slice(&u32::try_from(body.len()).expect("small").to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// One descriptor with one `user_id` entry, hits_addend 1: what Envoy
/// sends for a route with one rate-limit action.
pub fn rls(domain: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user_id".into(),
                value: "u1".into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 1,
    }
}

pub fn check1(route: &str) -> CheckRequest {
    check(route, ["u1".to_owned()])
}

/// A 100-item call, one key per item (`u0`..`u99`): what
/// `bench/server-count.sh` sends for the batched edge, where h2load repeats
/// one body.
pub fn check100(route: &str) -> CheckRequest {
    check(route, (0..100).map(|i| format!("u{i}")))
}

/// A weir.v1 Check of one cost-1 item per key, all on `route`.
fn check(route: &str, keys: impl IntoIterator<Item = String>) -> CheckRequest {
    CheckRequest {
        items: keys
            .into_iter()
            .map(|key| CheckItem {
                key,
                route: route.into(),
                cost: Some(1),
                ..CheckItem::default()
            })
            .collect(),
    }
}

/// Every file by name, with its content.
pub fn files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("rls-allow.bin", grpc_frame(&rls("bench"))),
        ("rls-deny.bin", grpc_frame(&rls(DENY_DOMAIN))),
        ("check1-allow.bin", grpc_frame(&check1("POST /bench"))),
        ("check1-deny.bin", grpc_frame(&check1(DENY_DOMAIN))),
        ("check100-allow.bin", grpc_frame(&check100("POST /bench"))),
        ("rules.toml", RULES.as_bytes().to_vec()),
    ]
}

pub fn write_all(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, bytes) in files() {
        std::fs::write(dir.join(name), bytes)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_request_files_are_the_generated_ones() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/requests");
        for (name, bytes) in files() {
            let on_disk = std::fs::read(dir.join(name))
                .unwrap_or_else(|e| panic!("bench/requests/{name}: {e}"));
            assert_eq!(
                on_disk, bytes,
                "bench/requests/{name} differs: rerun weir-bare --write-requests bench/requests"
            );
        }
    }

    #[test]
    fn the_rules_deny_only_the_deny_route_after_its_first_check() {
        use std::sync::Arc;
        use weir_core::{CheckRequest as Check, FakeClock, Limiter, LimiterConfig, RuleSet};
        let rules = RuleSet::from_toml(RULES).expect("valid rules");
        let clock = Arc::new(FakeClock::at_secs(100.0));
        let limiter = Limiter::new(rules, clock, LimiterConfig::default());
        let allowed = |route: &str| limiter.check(&Check::new("u1", route)).unwrap().allowed;
        assert!(
            allowed(DENY_DOMAIN),
            "the first check on the deny route passes"
        );
        for _ in 0..3 {
            assert!(allowed("POST /bench") && allowed("bench"));
            assert!(!allowed(DENY_DOMAIN));
        }
    }

    #[test]
    fn a_frame_is_flag_length_message() {
        let f = grpc_frame(&check1("r"));
        let len = u32::from_be_bytes([f[1], f[2], f[3], f[4]]) as usize;
        assert_eq!((f[0], f.len()), (0, 5 + len));
        assert_eq!(CheckRequest::decode(&f[5..]).unwrap(), check1("r"));
    }
}
