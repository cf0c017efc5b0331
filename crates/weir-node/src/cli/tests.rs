//! Flag parsing and `weir check` output, without a process.

use std::path::PathBuf;

use serde_json::json;
use weir_cluster::{OwnerFailure, StrategyKind};

use super::check::{check_url, report, with_hint};
use super::*;

pub(super) fn parse(args: &[&str]) -> Result<ServeConfig, String> {
    let cli = Cli::try_parse_from(args).map_err(|e| e.to_string())?;
    match cli.command {
        Command::Serve(a) => serve_config(&a),
        Command::Check(_) => Err("not serve".into()),
    }
}

#[test]
fn no_flags_give_the_library_defaults() {
    let c = parse(&["weir", "serve"]).unwrap();
    assert_eq!(format!("{c:?}"), format!("{:?}", ServeConfig::default()));
}

#[test]
fn the_help_shows_the_defaults_the_library_runs_with() {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    let serve = cmd.find_subcommand_mut("serve").expect("serve");
    let help = serve.render_long_help().to_string();
    let c = ClusterConfig::default();
    for shown in [
        format!("[default: {}]", c.strategy),
        format!("[default: {}]", humantime::format_duration(c.sync_interval)),
        format!("[default: {}]", c.on_owner_failure),
        format!(
            "[default: {}]",
            humantime::format_duration(c.owner_deadline)
        ),
        format!("[default: {}]", humantime::format_duration(c.leave_timeout)),
        format!("GET /ui [default: {}]", ServeConfig::default().ui),
        format!(
            "[default: {}]",
            crate::traces::TraceConfig::default().sample_ratio
        ),
    ] {
        assert!(help.contains(&shown), "help lacks {shown}:\n{help}");
    }
}

#[test]
fn every_serve_flag_lands_in_the_config() {
    let c = parse(&[
        "weir",
        "serve",
        "--node-id=n1",
        "--http=0.0.0.0:9080",
        "--grpc=0.0.0.0:9081",
        "--gossip=0.0.0.0:9946",
        "--advertise-grpc=10.0.0.7:9081",
        "--advertise-gossip=10.0.0.7:9946",
        "--seeds=a:7946,b:7946",
        "--rules=/etc/weir/rules.toml",
        "--strategy=divide",
        "--sync-interval=250ms",
        "--on-owner-failure=closed",
        "--owner-deadline=20ms",
        "--leave-timeout=25s",
        "--join-timeout=90s",
        "--replicas=1",
        "--hot-key-rate=50",
        "--fallback-cap=0",
        "--admin-token=t0ken",
        "--cluster-secret=s3cret",
        "--log-format=json",
        "--retry-jitter",
        "--max-keys=5",
        "--max-body-bytes=100",
        "--max-batch=7",
        "--max-connections=3",
        "--drain-timeout=2s",
        "--header-read-timeout=3s",
        "--body-read-timeout=4s",
        "--ui=false",
        "--otlp-endpoint=http://collector:4318",
        "--trace-sample-ratio=0.25",
        "--grpc-threads=3",
        "--http-threads=0",
    ])
    .unwrap();
    assert_eq!(c.node_id.as_deref(), Some("n1"));
    assert_eq!(c.http.port(), 9080);
    assert_eq!(c.grpc.port(), 9081);
    assert_eq!(c.gossip.port(), 9946);
    assert_eq!(c.advertised_grpc().to_string(), "10.0.0.7:9081");
    assert_eq!(c.advertised_gossip().to_string(), "10.0.0.7:9946");
    assert_eq!(c.cluster.seeds, ["a:7946", "b:7946"]);
    assert_eq!(c.rules_file, Some(PathBuf::from("/etc/weir/rules.toml")));
    assert_eq!(c.cluster.strategy, StrategyKind::Divide);
    assert_eq!(c.cluster.sync_interval, Duration::from_millis(250));
    assert_eq!(c.cluster.on_owner_failure, OwnerFailure::Closed);
    assert_eq!(c.cluster.owner_deadline, Duration::from_millis(20));
    assert_eq!(c.cluster.leave_timeout, Duration::from_secs(25));
    assert_eq!(c.cluster.join_timeout, Some(Duration::from_secs(90)));
    assert_eq!(c.cluster.replicas, 1);
    assert_eq!((c.cluster.hot_key_rate, c.cluster.fallback_cap), (50, 0));
    assert_eq!(c.admin_token.as_deref(), Some("t0ken"));
    assert_eq!(c.cluster.secret.as_deref(), Some("s3cret"));
    assert!(c.retry_jitter);
    assert_eq!(c.max_keys_per_rule, 5);
    assert_eq!(c.limits.max_body_bytes, 100);
    assert_eq!(c.limits.max_batch_items, 7);
    assert_eq!(c.limits.max_connections, 3);
    assert_eq!(c.drain_timeout, Duration::from_secs(2));
    assert_eq!(c.limits.header_read_timeout, Duration::from_secs(3));
    assert_eq!(c.limits.body_read_timeout, Duration::from_secs(4));
    // Twice the body timeout: on the HTTP port its 408 always comes first.
    assert_eq!(c.limits.timeouts().stall, Duration::from_secs(8));
    assert!(!c.ui);
    assert_eq!(
        c.traces.otlp_endpoint.as_deref(),
        Some("http://collector:4318")
    );
    assert_eq!(c.traces.sample_ratio, 0.25);
    assert_eq!((c.grpc_threads(), c.http_threads()), (3, 0));
}

#[test]
fn the_serving_threads_follow_threads_unless_told() {
    let c = parse(&["weir", "serve", "--threads=2", "--http-threads=1"]).unwrap();
    assert_eq!((c.grpc_threads(), c.http_threads()), (2, 1));
    let c = parse(&["weir", "serve", "--threads=3", "--grpc-threads=0"]).unwrap();
    assert_eq!((c.grpc_threads(), c.http_threads()), (0, 3));
}

#[test]
fn nonsense_values_are_refused_naming_the_flag() {
    assert!(parse(&["weir", "serve", "--max-body-bytes=0"])
        .unwrap_err()
        .contains("--max-body-bytes"));
    assert!(parse(&["weir", "serve", "--owner-deadline=0s"])
        .unwrap_err()
        .contains("--owner-deadline"));
    assert!(parse(&["weir", "serve", "--leave-timeout=0s"])
        .unwrap_err()
        .contains("--leave-timeout"));
    assert!(parse(&["weir", "serve", "--join-timeout=0s"])
        .unwrap_err()
        .contains("--join-timeout"));
    assert!(parse(&["weir", "serve", "--admin-token="])
        .unwrap_err()
        .contains("--admin-token"));
    assert!(parse(&["weir", "serve", "--header-read-timeout=0s"])
        .unwrap_err()
        .contains("--header-read-timeout"));
    assert!(parse(&["weir", "serve", "--strategy=fastest"]).is_err());
    assert!(parse(&["weir", "serve", "--sync-interval=soon"]).is_err());
    assert!(parse(&["weir", "serve", "--http=nowhere"]).is_err());
    assert!(parse(&["weir", "serve", "--ui=maybe"]).is_err());
    for ratio in ["1.5", "-0.1", "NaN"] {
        let e = parse(&["weir", "serve", &format!("--trace-sample-ratio={ratio}")]).unwrap_err();
        assert!(
            e.contains("--trace-sample-ratio must be between 0.0 and 1.0"),
            "{e}"
        );
    }
    for url in ["collector:4318", "https://collector:4318", "http://"] {
        let e = parse(&["weir", "serve", &format!("--otlp-endpoint={url}")]).unwrap_err();
        assert!(e.contains("--otlp-endpoint"), "{e}");
    }
}

#[test]
fn seeds_need_the_secret_or_the_insecure_flag_and_not_both() {
    let e = parse(&["weir", "serve", "--seeds=a:7946"]).unwrap_err();
    assert!(e.contains("--cluster-secret"), "{e}");
    let open = parse(&["weir", "serve", "--seeds=a:7946", "--insecure-open-cluster"]).unwrap();
    assert!(open.cluster.insecure_open && open.cluster.secret.is_none());
    let e = parse(&[
        "weir",
        "serve",
        "--cluster-secret=s",
        "--insecure-open-cluster",
    ])
    .unwrap_err();
    assert!(e.contains("contradict"), "{e}");
    let alone = parse(&["weir", "serve"]).unwrap();
    assert!(
        !alone.cluster.insecure_open,
        "a node without a secret is closed by default"
    );
}

#[test]
fn forwarded_checks_go_on_direct_connections_unless_told_grpc_only() {
    assert!(!parse(&["weir", "serve"]).unwrap().cluster.grpc_only);
    let told = parse(&["weir", "serve", "--peer-grpc-only"]).unwrap();
    assert!(told.cluster.grpc_only);
}

#[test]
fn a_cluster_node_must_advertise_addresses_peers_can_reach() {
    let seeds = "--seeds=a:7946";
    let e = parse(&["weir", "serve", "--grpc=0.0.0.0:8081", seeds]).unwrap_err();
    assert!(e.contains("--advertise-grpc"), "{e}");
    let e = parse(&["weir", "serve", "--gossip=[::]:7946", seeds]).unwrap_err();
    assert!(e.contains("--advertise-gossip"), "{e}");
    let e = parse(&["weir", "serve", "--advertise-grpc=0.0.0.0:8081"]).unwrap_err();
    assert!(e.contains("--advertise-grpc"), "{e}");
    assert!(!e.contains('\n'), "one line: {e}");
    // A single node may bind every interface; a cluster node may too, when
    // it says where peers reach it.
    assert!(parse(&[
        "weir",
        "serve",
        "--grpc=0.0.0.0:8081",
        "--gossip=0.0.0.0:7946"
    ])
    .is_ok());
    let c = parse(&[
        "weir",
        "serve",
        "--grpc=0.0.0.0:8081",
        "--gossip=0.0.0.0:7946",
        "--advertise-grpc=10.0.0.7:8081",
        "--advertise-gossip=10.0.0.7:7946",
        "--cluster-secret=s",
        seeds,
    ])
    .unwrap();
    assert_eq!(c.advertised_grpc().to_string(), "10.0.0.7:8081");
    assert_eq!(
        c.grpc.to_string(),
        "0.0.0.0:8081",
        "still binds every interface"
    );
}

#[test]
fn tls_needs_both_files_and_a_peer_port() {
    let e = parse(&["weir", "serve", "--tls-cert=c.pem"]).unwrap_err();
    assert!(e.contains("--tls-key"), "{e}");
    let e = parse(&["weir", "serve", "--tls-key=k.pem"]).unwrap_err();
    assert!(e.contains("--tls-cert"), "{e}");
    let e = parse(&["weir", "serve", "--tls-cert=c.pem", "--tls-key=k.pem"]).unwrap_err();
    assert!(e.contains("--peer-grpc"), "{e}");
    let c = parse(&[
        "weir",
        "serve",
        "--tls-cert=c.pem",
        "--tls-key=k.pem",
        "--peer-grpc=127.0.0.1:8082",
    ])
    .unwrap();
    let tls = c.tls.as_ref().unwrap();
    assert_eq!(
        (tls.cert.to_str(), tls.key.to_str()),
        (Some("c.pem"), Some("k.pem"))
    );
    assert_eq!(
        c.advertised_grpc().port(),
        8082,
        "peers are told the peer port"
    );
}

#[test]
fn one_line_joins_a_multi_line_message() {
    assert_eq!(
        one_line("TOML parse error\n  |\n1 | x\n"),
        "TOML parse error | 1 | x"
    );
}

fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

#[test]
fn report_prints_the_verdict_and_headers() {
    let body = json!({"allowed":false,"limit":5,"remaining":0,"retry_after_ms":1500,
                      "reset_at":1,"rule":"r"});
    let (allowed, out) = report(429, &headers(&[("Retry-After", "2")]), &body).unwrap();
    assert!(!allowed);
    assert!(
        out.starts_with("denied: rule=r limit=5 remaining=0"),
        "{out}"
    );
    assert!(out.contains("retry_after_ms=1500"));
    assert!(out.ends_with("Retry-After: 2\n"));

    let (allowed, out) = report(200, &[], &json!({"allowed":true,"rule":null})).unwrap();
    assert!(allowed);
    assert!(out.contains("unlimited"));
}

#[test]
fn report_turns_other_statuses_into_errors_with_the_field() {
    let e = report(
        400,
        &[],
        &json!({"detail":"must be at least 1","field":"cost"}),
    )
    .unwrap_err();
    assert!(e.contains("400") && e.contains("cost"), "{e}");
}

/// Apart from the every-flag test: that one picks the divide strategy,
/// and regions need the owner strategy.
#[test]
fn region_flags_land_in_the_config() {
    let c = parse(&[
        "weir",
        "serve",
        "--region=eu",
        "--region-peers=us=10.1.0.1:8081, 10.2.0.1:8081",
        "--region-round=100ms",
    ])
    .unwrap();
    let region = c.cluster.region.as_ref().expect("a region");
    assert_eq!(region.name, "eu");
    assert_eq!(region.peers, ["us=10.1.0.1:8081", "10.2.0.1:8081"]);
    assert_eq!(region.round, Duration::from_millis(100));
    let e = parse(&["weir", "serve", "--region=eu", "--strategy=gossip"]).unwrap_err();
    assert!(e.contains("owner strategy"), "{e}");
}

#[test]
fn region_peers_without_a_region_are_refused() {
    let e = parse(&["weir", "serve", "--region-peers=a:1"]).unwrap_err();
    assert!(e.contains("--region"), "{e}");
    let e = parse(&["weir", "serve", "--region="]).unwrap_err();
    assert!(e.contains("--region"), "{e}");
}

fn usage_error_of(args: &[&str]) -> String {
    let Err(e) = Cli::try_parse_from(args) else {
        panic!("{args:?} parsed");
    };
    usage_error(&e.render().to_string())
}

#[test]
fn a_usage_error_keeps_what_follows_its_first_line() {
    assert_eq!(
        usage_error_of(&["weir", "check"]),
        "the following required arguments were not provided: --server <URL> --key <K>"
    );
    assert_eq!(
        usage_error_of(&["weir", "serve", "--strategy", "nope"]),
        "invalid value 'nope' for '--strategy <STRATEGY>' [possible values: owner, gossip, divide]"
    );
    let tip = usage_error_of(&[
        "weir", "check", "--server", "x", "--key", "k", "--tiers", "t",
    ]);
    assert!(
        tip.starts_with("unexpected argument '--tiers' found") && tip.contains("'--tier'"),
        "{tip}"
    );
}

#[test]
fn a_usage_error_leaves_out_the_usage_and_the_help_pointer() {
    let e = usage_error_of(&["weir", "bogus"]);
    assert_eq!(e, "unrecognized subcommand 'bogus'");
}

#[test]
fn check_url_puts_the_check_path_under_the_base() {
    for (server, url) in [
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080/v1/check"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080/v1/check"),
        ("https://weir.internal", "https://weir.internal/v1/check"),
        // As every address flag of `weir serve` is written.
        ("127.0.0.1:8080", "http://127.0.0.1:8080/v1/check"),
        ("localhost:8080", "http://localhost:8080/v1/check"),
        // Behind a proxy at a path.
        ("http://gw:80/weir/", "http://gw/weir/v1/check"),
        // The whole URL of the check, as curl would be given it.
        ("http://h:8080/v1/check", "http://h:8080/v1/check"),
    ] {
        assert_eq!(check_url(server).unwrap().as_str(), url, "{server}");
    }
}

#[test]
fn check_url_refuses_what_is_not_a_node_base_url_naming_the_flag() {
    for (server, why) in [
        ("ftp://h:21", "http:// or https://"),
        ("http://", "empty host"),
        ("http://h:8080/?x=1", "without a query"),
        ("http://h:99999", "invalid port"),
    ] {
        let e = check_url(server).unwrap_err();
        assert!(
            e.starts_with("--server") && e.contains(why),
            "{server}: {e}"
        );
    }
}

#[test]
fn a_first_tls_mistake_is_explained() {
    let ca_as_leaf = with_hint(
        "error sending request: invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))"
            .into(),
    );
    assert!(ca_as_leaf.contains("CA:FALSE"), "{ca_as_leaf}");
    let plain_to_tls = with_hint("client error (SendRequest): invalid HTTP version parsed".into());
    assert!(plain_to_tls.ends_with("try https://)"), "{plain_to_tls}");
    let tls_to_plain = with_hint("received corrupt message of type InvalidContentType".into());
    assert!(tls_to_plain.ends_with("try http://)"), "{tls_to_plain}");
    assert_eq!(with_hint("connection refused".into()), "connection refused");
}
