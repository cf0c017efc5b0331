//! One worker's connection to a target and one call on it: raw HTTP/1.1, reqwest, or gRPC with 1 or 100 items.

use tonic::transport::{Channel, Endpoint};
use weir_proto::weir::v1::rate_limiter_client::RateLimiterClient;
use weir_proto::weir::v1::{CheckItem, CheckRequest};

use super::args::{Args, HttpClientKind, Workload};
use super::http1::RawHttp;
use super::keys::{Keys, WorkerRng};
use super::measure::Tally;
use super::target::{Target, ROUTE};

pub enum Conn {
    Raw(RawHttp),
    Reqwest(reqwest::Client, String),
    /// A client and the items each call carries.
    Grpc(RateLimiterClient<Channel>, usize),
}

fn body(key: &str) -> String {
    format!(r#"{{"key":"{key}","route":"{ROUTE}","cost":1}}"#)
}

impl Conn {
    pub async fn call(&mut self, keys: &Keys, rng: &mut WorkerRng) -> Tally {
        match self {
            Conn::Raw(c) => {
                let b = body(keys.pick(rng));
                match c.post("/v1/check", &b).await {
                    Ok(status) => Tally::of_status(status),
                    Err(_) => {
                        // Reconnect so one broken socket does not end the worker.
                        if let Ok(fresh) = RawHttp::connect(c.addr()).await {
                            *c = fresh;
                        }
                        Tally::ERROR
                    }
                }
            }
            Conn::Reqwest(client, url) => {
                let b = body(keys.pick(rng));
                let sent = client
                    .post(url.as_str())
                    .header("content-type", "application/json")
                    .body(b)
                    .send()
                    .await;
                match sent {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let _ = r.bytes().await;
                        Tally::of_status(status)
                    }
                    Err(_) => Tally::ERROR,
                }
            }
            Conn::Grpc(client, n) => {
                let items = (0..*n)
                    .map(|_| CheckItem {
                        key: keys.pick(rng).to_owned(),
                        route: ROUTE.to_owned(),
                        cost: Some(1),
                        ..Default::default()
                    })
                    .collect();
                match client.check(CheckRequest { items }).await {
                    Ok(r) => {
                        let results = r.into_inner().results;
                        let allowed = results.iter().filter(|r| r.allowed).count() as u64;
                        let errors = results.iter().filter(|r| r.error.is_some()).count() as u64;
                        Tally {
                            checks: results.len() as u64 - errors,
                            allowed,
                            errors,
                        }
                    }
                    Err(_) => Tally::ERROR,
                }
            }
        }
    }
}

/// `url` was checked to be loopback when its target was made.
async fn grpc_channel(url: &str) -> Channel {
    Endpoint::from_shared(url.to_owned())
        .expect("gRPC URL")
        .tcp_nodelay(true)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

/// `n` workers' connections to `target` for workload `w`.
pub async fn connections(args: &Args, target: &Target, w: Workload, n: usize) -> Vec<Conn> {
    match w {
        Workload::Http => {
            let addr = target.http.expect("an HTTP address");
            match args.http_client {
                HttpClientKind::Raw => {
                    let mut v = Vec::with_capacity(n);
                    for _ in 0..n {
                        v.push(Conn::Raw(RawHttp::connect(addr).await.expect("connect")));
                    }
                    v
                }
                HttpClientKind::Reqwest => {
                    let client = reqwest::Client::builder()
                        .pool_max_idle_per_host(n)
                        .tcp_nodelay(true)
                        .build()
                        .expect("reqwest client");
                    let url = format!("http://{addr}/v1/check");
                    (0..n)
                        .map(|_| Conn::Reqwest(client.clone(), url.clone()))
                        .collect()
                }
            }
        }
        Workload::Grpc1 | Workload::Grpc100 => {
            let url = target.grpc.as_deref().expect("a gRPC URL");
            let mut channels = Vec::new();
            for _ in 0..args.grpc_conns.clamp(1, n) {
                channels.push(grpc_channel(url).await);
            }
            (0..n)
                .map(|i| {
                    let ch = channels[i % channels.len()].clone();
                    Conn::Grpc(RateLimiterClient::new(ch), w.items())
                })
                .collect()
        }
    }
}
