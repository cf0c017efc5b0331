//! The real `weir` binary: one-line errors, SIGTERM draining, and `weir check` exit codes.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use weir_node::{Node, ServeConfig};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// Ephemeral ports for every listener, so parallel tests never collide.
const EPHEMERAL: [&str; 6] = [
    "--http",
    "127.0.0.1:0",
    "--grpc",
    "127.0.0.1:0",
    "--gossip",
    "127.0.0.1:0",
];

fn run(args: &[&str]) -> Output {
    Command::new(WEIR)
        .args(args)
        .env_remove("WEIR_ADMIN_TOKEN")
        .env_remove("WEIR_CLUSTER_SECRET")
        // `weir check` honours proxy variables; a proxy cannot reach loopback.
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("all_proxy")
        .env_remove("ALL_PROXY")
        .stdin(Stdio::null())
        .output()
        .expect("run weir")
}

/// Non-zero exit and exactly one line on stderr that contains every `needle`.
fn assert_one_line_error(out: &Output, needles: &[&str]) {
    assert!(!out.status.success(), "exit status {:?}", out.status);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr, got: {stderr}");
    for n in needles {
        assert!(lines[0].contains(n), "{n:?} missing from {:?}", lines[0]);
    }
    assert!(!stderr.contains("panicked") && !stderr.contains("backtrace"));
}

#[test]
fn unknown_flag_exits_non_zero_with_one_line() {
    let mut args = vec!["serve"];
    args.extend(EPHEMERAL);
    args.push("--no-such-flag");
    assert_one_line_error(&run(&args), &["--no-such-flag"]);
}

#[test]
fn bad_flag_values_exit_non_zero_with_one_line() {
    for (flag, value) in [
        ("--strategy", "fastest"),
        ("--owner-deadline", "soon"),
        ("--http", "not-an-address"),
        ("--max-body-bytes", "0"),
        ("--threads", "0"),
    ] {
        let mut args = vec!["serve"];
        args.extend(EPHEMERAL);
        args.extend([flag, value]);
        assert_one_line_error(&run(&args), &[flag]);
    }
}

#[test]
fn missing_flags_and_possible_values_are_named_on_the_one_line() {
    assert_one_line_error(&run(&["check", "--key", "k"]), &["--server <URL>"]);
    let mut args = vec!["serve"];
    args.extend(EPHEMERAL);
    args.extend(["--strategy", "fastest"]);
    assert_one_line_error(&run(&args), &["possible values: owner, gossip, divide"]);
}

#[test]
fn check_refuses_a_zero_timeout_before_sending() {
    let out = run(&[
        "check",
        "--server",
        "127.0.0.1:9",
        "--key",
        "k",
        "--timeout",
        "0s",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_one_line_error(&out, &["--timeout must be more than 0"]);
}

#[test]
fn no_command_prints_the_help_and_exits_two() {
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for part in ["Usage: weir <COMMAND>", "serve", "check"] {
        assert!(stderr.contains(part), "{part:?} missing from {stderr}");
    }
}

#[test]
fn invalid_rules_file_exits_non_zero_naming_rule_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.toml");
    std::fs::write(
        &path,
        "[[rule]]\nname = \"broken\"\nalgorithm = \"fixed_window\"\nlimit = -5\nwindow = \"1m\"\n",
    )
    .unwrap();
    let mut args = vec!["serve"];
    args.extend(EPHEMERAL);
    args.extend(["--rules", path.to_str().unwrap()]);
    assert_one_line_error(&run(&args), &["broken", "limit"]);

    // A TOML syntax error carries a multi-line excerpt; it still prints as one line.
    std::fs::write(&path, "[[rule]\nname = \n").unwrap();
    assert_one_line_error(&run(&args), &["TOML"]);

    let missing = dir.path().join("missing.toml");
    let mut args = vec!["serve"];
    args.extend(EPHEMERAL);
    args.extend(["--rules", missing.to_str().unwrap()]);
    assert_one_line_error(&run(&args), &["missing.toml"]);
}

#[test]
fn sigterm_drains_and_exits_zero() {
    let mut child = Command::new(WEIR)
        .args(["serve", "--log-format", "json"])
        .args(EPHEMERAL)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weir serve");
    // The chosen port is only in the log: read until the node says it serves.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let serving = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the node logs that it serves");
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON log line");
        if v["fields"]["message"] == "weir node serving" {
            break v;
        }
    };
    let http = serving["fields"]["http"].as_str().expect("http address");
    assert!(
        !http.ends_with(":0"),
        "the log shows the chosen port: {http}"
    );

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    let status = wait_with_deadline(&mut child, Duration::from_secs(30));
    assert!(
        status.success(),
        "weir serve exits 0 after SIGTERM: {status:?}"
    );
    let rest: Vec<String> = rx.try_iter().collect();
    assert!(
        rest.iter().any(|l| l.contains("weir node stopped")),
        "the node logs its stop: {rest:?}"
    );
}

fn wait_with_deadline(
    child: &mut std::process::Child,
    deadline: Duration,
) -> std::process::ExitStatus {
    let give_up = std::time::Instant::now() + deadline;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if std::time::Instant::now() > give_up {
            let _ = child.kill();
            panic!("weir did not exit within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `weir check` against an in-process node: 0 allowed, 1 denied, 2 refused.
#[tokio::test(flavor = "multi_thread")]
async fn check_exit_codes_follow_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nname = \"one\"\nalgorithm = \"sliding_window_log\"\nlimit = 1\nwindow = \"1h\"\n",
    )
    .unwrap();
    let node = Node::start(ServeConfig {
        rules_file: Some(rules),
        ..ServeConfig::ephemeral()
    })
    .await
    .unwrap();
    let server = format!("http://{}", node.http_addr());
    let check = |extra: &'static [&'static str]| {
        let server = server.clone();
        tokio::task::spawn_blocking(move || {
            let mut args = vec!["check", "--server", &server, "--key", "cust_1"];
            args.extend(extra);
            run(&args)
        })
    };

    let allowed = check(&[]).await.unwrap();
    assert_eq!(allowed.status.code(), Some(0));
    let out = String::from_utf8_lossy(&allowed.stdout);
    assert!(
        out.starts_with("allowed: rule=one limit=1 remaining=0"),
        "{out}"
    );
    assert!(out.contains("RateLimit-Remaining: 0"), "{out}");
    assert!(!out.contains("Retry-After"), "{out}");

    let denied = check(&[]).await.unwrap();
    assert_eq!(denied.status.code(), Some(1));
    let out = String::from_utf8_lossy(&denied.stdout);
    assert!(out.starts_with("denied: rule=one"), "{out}");
    assert!(out.contains("Retry-After: "), "{out}");

    let refused = check(&["--cost", "0"]).await.unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert_one_line_error(&refused, &["400", "cost"]);

    node.shutdown().await;
    let unreachable = check(&[]).await.unwrap();
    assert_eq!(unreachable.status.code(), Some(2));
    assert_one_line_error(&unreachable, &["/v1/check"]);
}

/// A node serving HTTPS with a self-signed certificate for 127.0.0.1, made
/// a CA certificate when `as_ca` (as `openssl req -x509` makes one by
/// default); `dir` holds its cert.pem and key.pem.
async fn tls_node(dir: &std::path::Path, as_ca: bool) -> Node {
    let key_pair = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    if as_ca {
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    }
    let cert = params.self_signed(&key_pair).unwrap();
    let files = weir_node::tls::TlsFiles {
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    };
    std::fs::write(&files.cert, cert.pem()).unwrap();
    std::fs::write(&files.key, key_pair.serialize_pem()).unwrap();
    Node::start(ServeConfig {
        tls: Some(files),
        peer_grpc: Some("127.0.0.1:0".parse().unwrap()),
        ..ServeConfig::ephemeral()
    })
    .await
    .unwrap()
}

/// `weir check` against a node serving HTTPS with a self-signed certificate:
/// trusted through `--ca`, refused without it.
#[tokio::test(flavor = "multi_thread")]
async fn check_speaks_https_trusting_the_ca_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let node = tls_node(dir.path(), false).await;
    let cert = dir.path().join("cert.pem");
    let https = format!("https://{}", node.http_addr());
    let http = format!("http://{}", node.http_addr());
    let ca = cert.to_str().unwrap().to_string();
    let check = |server: String, extra: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let mut args = vec!["check", "--server", &server, "--key", "cust_1"];
            args.extend(extra.iter().map(String::as_str));
            run(&args)
        })
    };

    let trusted = check(https.clone(), vec!["--ca".into(), ca.clone()])
        .await
        .unwrap();
    assert_eq!(
        trusted.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&trusted.stderr)
    );
    assert!(String::from_utf8_lossy(&trusted.stdout).starts_with("allowed: "));

    // The public roots alone do not vouch for a self-signed certificate.
    let untrusted = check(https.clone(), vec![]).await.unwrap();
    assert_eq!(untrusted.status.code(), Some(2));
    assert_one_line_error(&untrusted, &["certificate"]);

    let plain = check(http, vec!["--ca".into(), ca]).await.unwrap();
    assert_one_line_error(&plain, &["--ca is for an https:// --server"]);

    let no_cert = dir.path().join("empty.pem");
    std::fs::write(&no_cert, "not a certificate\n").unwrap();
    let empty = check(https, vec!["--ca".into(), no_cert.to_str().unwrap().into()])
        .await
        .unwrap();
    assert_one_line_error(&empty, &["--ca", "no PEM certificate"]);
    node.shutdown().await;
}

/// A CA certificate served as the node's own is refused by rustls even
/// with `--ca`; the error says why and what to make instead.
#[tokio::test(flavor = "multi_thread")]
async fn check_explains_a_ca_certificate_served_as_the_nodes_own() {
    let dir = tempfile::tempdir().unwrap();
    let node = tls_node(dir.path(), true).await;
    let https = format!("https://{}", node.http_addr());
    let ca = dir.path().join("cert.pem").to_str().unwrap().to_string();
    let out = tokio::task::spawn_blocking(move || {
        run(&["check", "--server", &https, "--key", "k", "--ca", &ca])
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_one_line_error(&out, &["CaUsedAsEndEntity", "CA:FALSE"]);
    node.shutdown().await;
}
