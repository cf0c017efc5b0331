//! `weir check`: one `POST /v1/check` from the command line, its verdict and headers printed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::{json, Value};

use weir_core::with_causes;

use super::fail;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The node's base URL, e.g. `http://127.0.0.1:8080` or `https://weir.internal:8080`;
    /// a bare HOST:PORT means http://.
    #[arg(long, value_name = "URL")]
    pub server: String,
    #[arg(long, value_name = "K")]
    pub key: String,
    #[arg(long, value_name = "R")]
    pub route: Option<String>,
    #[arg(long, value_name = "N")]
    pub cost: Option<u64>,
    #[arg(long, value_name = "T")]
    pub tier: Option<String>,
    #[arg(long, value_name = "IP")]
    pub ip: Option<String>,
    /// Give up after this long.
    #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration, default_value = "5s")]
    pub timeout: Duration,
    /// PEM certificates to trust for an https:// server besides the public
    /// roots: the node's own --tls-cert when it is self-signed, or its CA.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
}

/// The headers `weir check` shows, in the order a reader compares them.
const SHOWN_HEADERS: [&str; 9] = [
    "RateLimit-Limit",
    "RateLimit-Remaining",
    "RateLimit-Reset",
    "RateLimit-Policy",
    "RateLimit",
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "Retry-After",
];

pub(super) async fn check(args: CheckArgs) -> ExitCode {
    match send_check(&args).await {
        Ok((allowed, report)) => {
            print!("{report}");
            if allowed {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => fail(2, &e),
    }
}

/// Sends the check; Ok((allowed, what to print)) for a 200 or a 429.
async fn send_check(args: &CheckArgs) -> Result<(bool, String), String> {
    let mut body = json!({"key": args.key});
    if let Some(r) = &args.route {
        body["route"] = r.clone().into();
    }
    if let Some(c) = args.cost {
        body["cost"] = c.into();
    }
    if let Some(t) = &args.tier {
        body["tier"] = t.clone().into();
    }
    if let Some(ip) = &args.ip {
        body["ip"] = ip.clone().into();
    }
    let url = check_url(&args.server)?;
    let client = http_client(args, url.scheme() == "https")?;
    let res = client
        .post(url.clone())
        .json(&body)
        .send()
        .await
        .map_err(|e| with_hint(with_causes(&e)))?;
    let status = res.status().as_u16();
    let headers: Vec<(String, String)> = SHOWN_HEADERS
        .iter()
        .filter_map(|name| {
            let v = res.headers().get(*name)?.to_str().ok()?;
            Some((name.to_string(), v.to_string()))
        })
        .collect();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    // A 404 is most often a wrong --server path: show where it went.
    report(status, &headers, &body).map_err(|e| match status {
        404 => format!("{e} (at {url})"),
        _ => e,
    })
}

/// Where the check goes: `/v1/check` under the node's base URL. A bare
/// HOST:PORT, as every address flag of `weir serve` takes, means http://.
pub(super) fn check_url(server: &str) -> Result<reqwest::Url, String> {
    let server = server.trim();
    let with_scheme = if server.contains("://") {
        server.to_string()
    } else {
        format!("http://{server}")
    };
    let bad = |why: &str| format!("--server {server:?}: {why}, e.g. http://127.0.0.1:8080");
    let mut url = reqwest::Url::parse(&with_scheme).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("must be an http:// or https:// URL"));
    }
    // http and https URLs have a host, or do not parse ("empty host").
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("must be a base URL, without a query or fragment"));
    }
    // A path is kept as a prefix (a node behind a proxy at /weir); one that
    // already ends in the check's own path is not given it twice.
    let base = url.path().trim_end_matches('/');
    let path = format!(
        "{}/v1/check",
        base.strip_suffix("/v1/check").unwrap_or(base)
    );
    url.set_path(&path);
    Ok(url)
}

/// A transport error, with what to do about the ones a first TLS setup
/// meets, whose own words do not say it.
pub(super) fn with_hint(error: String) -> String {
    let hint = if error.contains("CaUsedAsEndEntity") {
        "the node's certificate is a CA certificate (basicConstraints CA:TRUE, \
         as `openssl req -x509` makes by default), which TLS clients refuse as \
         a server's own: make it with CA:FALSE, or sign it with a CA and give \
         --ca that CA (docs/security.md)"
    } else if error.contains("invalid HTTP version parsed") {
        "the node may be serving TLS (--tls-cert): try https://"
    } else if error.contains("InvalidContentType") {
        "the node may be serving plain HTTP: try http://"
    } else {
        return error;
    };
    format!("{error} ({hint})")
}

/// The client for one check; `--ca` adds the node's certificate to the
/// public roots an https:// server is verified against.
fn http_client(args: &CheckArgs, https: bool) -> Result<reqwest::Client, String> {
    if args.timeout.is_zero() {
        return Err("--timeout must be more than 0".to_string());
    }
    let mut builder = reqwest::Client::builder().timeout(args.timeout);
    if let Some(path) = &args.ca {
        if !https {
            return Err(format!(
                "--ca is for an https:// --server; {:?} is plain http",
                args.server
            ));
        }
        for cert in ca_certificates(path)? {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder.build().map_err(|e| with_causes(&e))
}

/// Every certificate in a PEM file, or why there is none to trust.
fn ca_certificates(path: &std::path::Path) -> Result<Vec<reqwest::Certificate>, String> {
    let shown = path.display();
    let pem = std::fs::read(path).map_err(|e| format!("--ca {shown}: cannot read it: {e}"))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| format!("--ca {shown}: not PEM certificates: {}", with_causes(&e)))?;
    if certs.is_empty() {
        return Err(format!("--ca {shown}: holds no PEM certificate"));
    }
    Ok(certs)
}

/// The verdict line and the rate-limit headers, or the server's refusal.
pub(super) fn report(
    status: u16,
    headers: &[(String, String)],
    body: &Value,
) -> Result<(bool, String), String> {
    let allowed = match status {
        200 => true,
        429 => false,
        _ => {
            let detail = body["detail"].as_str().unwrap_or("no detail");
            let field = body["field"]
                .as_str()
                .map(|f| format!(" (field {f})"))
                .unwrap_or_default();
            return Err(format!("server answered {status}: {detail}{field}"));
        }
    };
    let mut out = String::new();
    match body["rule"].as_str() {
        None => out.push_str("allowed: no rule matched (unlimited)\n"),
        Some(rule) => {
            let verdict = if allowed { "allowed" } else { "denied" };
            out.push_str(&format!(
                "{verdict}: rule={rule} limit={} remaining={} reset_at={}",
                body["limit"], body["remaining"], body["reset_at"]
            ));
            if !allowed {
                out.push_str(&format!(" retry_after_ms={}", body["retry_after_ms"]));
            }
            if let Some(delay) = body["delay_ms"].as_u64() {
                out.push_str(&format!(" delay_ms={delay}"));
            }
            out.push('\n');
        }
    }
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\n"));
    }
    Ok((allowed, out))
}
