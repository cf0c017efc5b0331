//! deploy/envoy.yaml against what it must agree with: the weir nodes of deploy/compose.yaml, weir's RLS mapping and the example rules.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use serde_norway::Value;
use weir_core::rules::Subject;
use weir_core::{CheckRequest, RuleSet};
use weir_node::cli::{serve_config, Cli, Command};
use weir_node::grpc::envoy_map;
use weir_proto::rls_wire::{Descriptor, Entry, RlsRequest};

const RATELIMIT_FILTER: &str = "envoy.filters.http.ratelimit";
const RATELIMIT_TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit";
const HCM: &str = "envoy.filters.network.http_connection_manager";
const ROUTER: &str = "envoy.filters.http.router";
const HTTP_OPTIONS: &str = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions";

fn deploy(rel: &str) -> String {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn yaml(text: &str) -> Value {
    let mut doc: Value = serde_norway::from_str(text).expect("YAML parses");
    doc.apply_merge().expect("merge keys resolve");
    doc
}

fn seq<'a>(v: &'a Value, what: &str) -> &'a Vec<Value> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("{what} must be a list"))
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} must be a string"))
}

/// Envoy's JSON form of a `google.protobuf.Duration`: seconds with an `s`.
fn duration(text: &str) -> Result<Duration, String> {
    let secs = text
        .strip_suffix('s')
        .ok_or(format!("{text}: no `s` suffix"))?;
    let secs: f64 = secs.parse().map_err(|e| format!("{text}: {e}"))?;
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{text}: {e}"))
}

/// The weir services of a compose file: name and gRPC port, read through
/// the real flag parser. A service running another image (Envoy, the
/// upstream) is not one.
fn weir_nodes(compose: &Value) -> Vec<(String, u16)> {
    let services = compose["services"].as_mapping().expect("services");
    let mut out = Vec::new();
    for (name, svc) in services {
        let name = str_of(name, "a service name").to_string();
        if svc
            .get("image")
            .and_then(Value::as_str)
            .is_some_and(|i| !i.starts_with("weir"))
        {
            continue;
        }
        let mut argv = vec!["weir".to_string()];
        argv.extend(
            seq(&svc["command"], "command")
                .iter()
                .map(|a| str_of(a, "an argument").to_string()),
        );
        argv.push("--cluster-secret=from-the-environment".into());
        let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{name}: {e}"));
        let Command::Serve(args) = cli.command else {
            panic!("{name}: not `weir serve`");
        };
        let config = serve_config(&args).unwrap_or_else(|e| panic!("{name}: {e}"));
        out.push((name, config.grpc.port()));
    }
    out
}

/// The parts of envoy.yaml the checks below read.
struct Envoy {
    http_filters: Vec<Value>,
    rate_limits: Vec<Value>,
    clusters: Vec<Value>,
}

fn envoy(doc: &Value) -> Envoy {
    let resources = &doc["static_resources"];
    let listeners = seq(&resources["listeners"], "listeners");
    let mut hcms = listeners
        .iter()
        .flat_map(|l| seq(&l["filter_chains"], "filter_chains"))
        .flat_map(|c| seq(&c["filters"], "filters"))
        .filter(|f| f["name"].as_str() == Some(HCM));
    let hcm = &hcms.next().expect("an HTTP connection manager")["typed_config"];
    assert!(hcms.next().is_none(), "one HTTP connection manager");
    let routes: Vec<&Value> = seq(&hcm["route_config"]["virtual_hosts"], "virtual_hosts")
        .iter()
        .flat_map(|vh| seq(&vh["routes"], "routes"))
        .collect();
    assert!(!routes.is_empty(), "routes");
    let mut rate_limits = Vec::new();
    for r in routes {
        let limits = r["route"]
            .get("rate_limits")
            .unwrap_or_else(|| panic!("route {:?} sends no descriptor", r["match"]));
        rate_limits.extend(seq(limits, "rate_limits").iter().cloned());
    }
    Envoy {
        http_filters: seq(&hcm["http_filters"], "http_filters").clone(),
        rate_limits,
        clusters: seq(&resources["clusters"], "clusters").clone(),
    }
}

/// The rate limit filter's settings, with the names of the filters around it.
fn ratelimit_filter(e: &Envoy) -> &Value {
    let names: Vec<&str> = e
        .http_filters
        .iter()
        .map(|f| str_of(&f["name"], "a filter's name"))
        .collect();
    let at = names
        .iter()
        .position(|n| *n == RATELIMIT_FILTER)
        .expect("the HTTP rate limit filter");
    let router = names.iter().position(|n| *n == ROUTER).expect("the router");
    assert!(at < router, "the rate limit filter runs before the router");
    &e.http_filters[at]["typed_config"]
}

/// A request as Envoy sees it, for the route actions to read.
struct Request<'a> {
    headers: &'a [(&'a str, &'a str)],
    peer: &'a str,
}

/// What Envoy's route actions make of a request: one descriptor per
/// `rate_limits` entry, its entries in action order; None when an action
/// cannot produce its entry (Envoy then sends no descriptor for that entry).
fn descriptors(e: &Envoy, req: &Request<'_>) -> Vec<Vec<(String, String)>> {
    let mut out = Vec::new();
    'limits: for limit in &e.rate_limits {
        let mut entries = Vec::new();
        for action in seq(&limit["actions"], "actions") {
            let map = action.as_mapping().expect("an action is a map");
            assert_eq!(map.len(), 1, "one kind per action: {action:?}");
            let (kind, body) = map.iter().next().unwrap();
            match str_of(kind, "an action kind") {
                "request_headers" => {
                    let header = str_of(&body["header_name"], "header_name");
                    let key = str_of(&body["descriptor_key"], "descriptor_key");
                    let skip = body
                        .get("skip_if_absent")
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    match req
                        .headers
                        .iter()
                        .find(|(h, _)| h.eq_ignore_ascii_case(header))
                    {
                        Some((_, v)) => entries.push((key.to_string(), v.to_string())),
                        None if skip => {}
                        None => continue 'limits,
                    }
                }
                "remote_address" => {
                    entries.push(("remote_address".to_string(), req.peer.to_string()))
                }
                "generic_key" => {
                    let key = body
                        .get("descriptor_key")
                        .and_then(Value::as_str)
                        .unwrap_or("generic_key");
                    let value = str_of(&body["descriptor_value"], "descriptor_value");
                    entries.push((key.to_string(), value.to_string()));
                }
                other => panic!("this test does not know Envoy's `{other}` action; teach it"),
            }
        }
        out.push(entries);
    }
    out
}

/// weir's checks for those descriptors, mapped as the node maps an RLS request.
fn checks(domain: &str, descs: &[Vec<(String, String)>]) -> Vec<CheckRequest> {
    let req = RlsRequest {
        domain,
        descriptors: descs
            .iter()
            .map(|d| Descriptor {
                entries: d.iter().map(|(k, v)| Entry { key: k, value: v }).collect(),
                ..Default::default()
            })
            .collect(),
        hits_addend: 0,
    };
    envoy_map::to_checks(&req, 1000).expect("weir takes the descriptors")
}

/// The names of the rules a check selects in the example rule set.
fn selected(rules: &RuleSet, c: &CheckRequest) -> Vec<String> {
    let subject = Subject {
        key: &c.key,
        route: &c.route,
        tier: c.tier.as_deref(),
        ip: c.ip.as_deref(),
    };
    let selection = rules.select(&subject);
    let mut names: Vec<String> = selection
        .iter()
        .map(|s| rules.rules()[s.rule].name.to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn the_filter_has_a_domain_a_failure_mode_and_a_timeout_and_asks_the_weir_cluster() {
    let doc = yaml(&deploy("envoy.yaml"));
    let e = envoy(&doc);
    let f = ratelimit_filter(&e);
    assert_eq!(str_of(&f["@type"], "@type"), RATELIMIT_TYPE);
    assert!(!str_of(&f["domain"], "domain").is_empty(), "a domain");
    assert!(
        f["failure_mode_deny"].as_bool().is_some(),
        "failure_mode_deny stated, true or false"
    );
    let timeout = duration(str_of(&f["timeout"], "timeout")).unwrap();
    assert!(
        timeout >= Duration::from_millis(10) && timeout <= Duration::from_secs(1),
        "a timeout a check can meet without holding requests long: {timeout:?}"
    );
    let service = &f["rate_limit_service"];
    assert_eq!(service["transport_api_version"].as_str(), Some("V3"));
    let cluster = str_of(
        &service["grpc_service"]["envoy_grpc"]["cluster_name"],
        "the rate limit service's cluster",
    );
    assert!(
        e.clusters
            .iter()
            .any(|c| c["name"].as_str() == Some(cluster)),
        "the cluster {cluster} is defined"
    );
}

#[test]
fn the_weir_cluster_speaks_http2_to_every_compose_node_on_its_grpc_port() {
    let doc = yaml(&deploy("envoy.yaml"));
    let e = envoy(&doc);
    let name = str_of(
        &ratelimit_filter(&e)["rate_limit_service"]["grpc_service"]["envoy_grpc"]["cluster_name"],
        "cluster_name",
    );
    let cluster = e
        .clusters
        .iter()
        .find(|c| c["name"].as_str() == Some(name))
        .unwrap();
    let options = &cluster["typed_extension_protocol_options"][HTTP_OPTIONS];
    assert!(
        options["explicit_http_config"]
            .get("http2_protocol_options")
            .is_some(),
        "gRPC needs HTTP/2 to the weir cluster"
    );
    let mut endpoints: Vec<(String, u16)> =
        seq(&cluster["load_assignment"]["endpoints"], "endpoints")
            .iter()
            .flat_map(|l| seq(&l["lb_endpoints"], "lb_endpoints"))
            .map(|ep| {
                let a = &ep["endpoint"]["address"]["socket_address"];
                let port = a["port_value"].as_u64().expect("port_value") as u16;
                (str_of(&a["address"], "address").to_string(), port)
            })
            .collect();
    endpoints.sort();
    let mut nodes = weir_nodes(&yaml(&deploy("compose.yaml")));
    nodes.sort();
    assert_eq!(nodes.len(), 3, "three weir nodes in compose.yaml");
    assert_eq!(
        endpoints, nodes,
        "the cluster lists every weir service at the gRPC port its command line binds"
    );
}

#[test]
fn compose_runs_envoy_on_this_file_in_front_of_the_upstream() {
    let compose = yaml(&deploy("compose.yaml"));
    let services = compose["services"].as_mapping().unwrap();
    let (_, envoy_svc) = services
        .iter()
        .find(|(_, s)| {
            s.get("image")
                .and_then(Value::as_str)
                .is_some_and(|i| i.starts_with("envoyproxy/envoy"))
        })
        .expect("an Envoy service");
    let command: Vec<&str> = seq(&envoy_svc["command"], "command")
        .iter()
        .map(|a| str_of(a, "argument"))
        .collect();
    let config = command[command.iter().position(|a| *a == "-c").expect("-c") + 1];
    let mounts = seq(&envoy_svc["volumes"], "volumes");
    assert!(
        mounts.iter().any(|m| str_of(m, "volume")
            .split(':')
            .take(2)
            .eq(["./envoy.yaml", config])),
        "envoy.yaml is mounted where Envoy reads its configuration ({config})"
    );
    // Envoy's upstream cluster points at a service of the compose file.
    let doc = yaml(&deploy("envoy.yaml"));
    let e = envoy(&doc);
    let targets: Vec<String> = e
        .clusters
        .iter()
        .filter(|c| c["name"].as_str() != Some("weir"))
        .flat_map(|c| seq(&c["load_assignment"]["endpoints"], "endpoints").clone())
        .flat_map(|l| seq(&l["lb_endpoints"], "lb_endpoints").clone())
        .map(|ep| {
            str_of(
                &ep["endpoint"]["address"]["socket_address"]["address"],
                "address",
            )
            .to_string()
        })
        .collect();
    assert!(!targets.is_empty(), "an upstream cluster");
    for t in targets {
        assert!(
            services.iter().any(|(n, _)| n.as_str() == Some(t.as_str())),
            "upstream {t} is a compose service"
        );
    }
}

#[test]
fn the_descriptors_the_routes_send_select_the_example_rules() {
    let doc = yaml(&deploy("envoy.yaml"));
    let e = envoy(&doc);
    let domain = str_of(&ratelimit_filter(&e)["domain"], "domain");
    let rules = RuleSet::from_toml(&deploy("rules/rules.toml")).expect("the example rules");

    // An API client on an /api/ path: the client and IP limits, and the
    // route's own rule instead of the default per-client one.
    let api = Request {
        headers: &[(":path", "/api/orders"), ("x-api-key", "cust_42")],
        peer: "203.0.113.9",
    };
    let descs = descriptors(&e, &api);
    assert_eq!(descs.len(), 1, "one descriptor per request");
    let c = &checks(domain, &descs)[0];
    assert_eq!(c.key, "cust_42", "x-api-key is the caller key");
    assert_eq!(c.route, "/api/orders", "the path is the route");
    assert_eq!(c.ip.as_deref(), Some("203.0.113.9"), "the peer is the IP");
    assert_eq!(selected(&rules, c), ["api-per-client", "per-ip"]);

    // Elsewhere, the default per-client rule.
    let other = Request {
        headers: &[(":path", "/health"), ("x-api-key", "cust_42")],
        peer: "203.0.113.9",
    };
    let c = &checks(domain, &descriptors(&e, &other))[0];
    assert_eq!(selected(&rules, c), ["per-client", "per-ip"]);

    // No key: the descriptor is still sent, keyed on its other entries, so
    // anonymous callers are still limited per path and IP.
    let anonymous = Request {
        headers: &[(":path", "/api/orders")],
        peer: "203.0.113.9",
    };
    let descs = descriptors(&e, &anonymous);
    assert_eq!(descs.len(), 1, "the descriptor without the client entry");
    let c = &checks(domain, &descs)[0];
    assert!(
        c.key.contains("/api/orders") && c.key.contains("203.0.113.9"),
        "keyed on the path and the peer: {}",
        c.key
    );
    assert_eq!(selected(&rules, c), ["api-per-client", "per-ip"]);
}

#[test]
fn the_action_reader_sees_a_descriptor_key_weir_does_not_read() {
    // The checks above can fail: an action sending the key under a name
    // weir does not map leaves the caller key derived, not the header's.
    let doc =
        yaml(&deploy("envoy.yaml").replace("descriptor_key: client", "descriptor_key: user_id"));
    let e = envoy(&doc);
    let req = Request {
        headers: &[(":path", "/api/orders"), ("x-api-key", "cust_42")],
        peer: "203.0.113.9",
    };
    let c = &checks("weir", &descriptors(&e, &req))[0];
    assert_ne!(c.key, "cust_42");
    assert!(duration("100ms").is_err(), "Envoy durations are seconds");
    assert_eq!(duration("0.1s").unwrap(), Duration::from_millis(100));
}
