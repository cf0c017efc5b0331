//! The nodes under test: a spawned `weir serve`, a running node, one in this process, and the bare reference servers; loopback only.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokio::runtime::Runtime;

use super::args::{Args, Workload};
use super::reference::{bare_axum, bare_grpc, bare_http};
use crate::cluster::{Cluster, ClusterOptions};
use crate::error::SimError;
use crate::rules;

/// The one rule spawned and in-process nodes serve: far above anything a
/// run can reach on one key, so every check is admitted.
pub const RULES: &str = r#"[[rule]]
name      = "bench"
algorithm = "sliding_window_counter"
limit     = 1000000000
window    = "60s"
"#;
pub const ROUTE: &str = "POST /bench";

/// What is measured: a name for the table and where it listens.
#[derive(Clone)]
pub struct Target {
    pub name: String,
    pub http: Option<SocketAddr>,
    pub grpc: Option<String>,
    /// The node's process, when it is a separate one, for its CPU time.
    pub pid: Option<u32>,
}

impl Target {
    pub fn serves(&self, w: Workload) -> bool {
        match w {
            Workload::Http => self.http.is_some(),
            Workload::Grpc1 | Workload::Grpc100 => self.grpc.is_some(),
        }
    }
}

/// The address of an `http://IP:PORT` URL, refused unless it is loopback.
pub fn loopback(url: &str) -> Result<SocketAddr, SimError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| SimError::Usage(format!("{url}: only http:// URLs are supported")))?;
    let hostport = rest.split('/').next().unwrap_or(rest);
    let hostport = hostport.replacen("localhost", "127.0.0.1", 1);
    let addr: SocketAddr = hostport
        .parse()
        .map_err(|e| SimError::Usage(format!("{url}: expected http://IP:PORT ({e})")))?;
    if !addr.ip().is_loopback() {
        return Err(SimError::Usage(format!(
            "{url}: weir-bench only sends to loopback addresses"
        )));
    }
    Ok(addr)
}

/// The targets of one run and what keeps them up. Dropping it kills a
/// spawned node.
pub struct Targets {
    pub list: Vec<Target>,
    /// Held for its drop, which kills the node.
    _spawned: Option<Cluster>,
    in_process: Option<weir_node::Node>,
    /// The in-process node's rules file, removed with the node.
    _rules_dir: Option<tempfile::TempDir>,
}

impl Targets {
    /// Starts or finds the node `args` names, and the reference servers if
    /// asked. Servers in this process run on `server_rt`.
    pub fn start(args: &Args, gen_rt: &Runtime, server_rt: &Runtime) -> Result<Targets, SimError> {
        let mut t = Targets {
            list: Vec::new(),
            _spawned: None,
            in_process: None,
            _rules_dir: None,
        };
        if let Some(bin) = &args.spawn {
            // Kept after the run: the node's log is named on stderr.
            let dir = std::env::temp_dir().join(format!("weir-bench-{}", std::process::id()));
            let cluster = gen_rt.block_on(spawn(bin, &dir))?;
            t.list.push(Target {
                name: "weir serve (separate process)".into(),
                http: Some(cluster.nodes[0].http),
                grpc: Some(cluster.grpc_uri(0)),
                pid: cluster.pid(0),
            });
            t._spawned = Some(cluster);
        } else if args.http.is_some() || args.grpc.is_some() {
            let http = args.http.as_deref().map(loopback).transpose()?;
            if let Some(url) = &args.grpc {
                loopback(url)?;
            }
            t.list.push(Target {
                name: "weir serve (running)".into(),
                http,
                grpc: args.grpc.clone(),
                pid: None,
            });
        } else {
            let rules_dir = tempfile::tempdir()
                .map_err(|e| SimError::io("creating a directory for the rules", e))?;
            let mut config = weir_node::ServeConfig::ephemeral();
            config.rules_file = Some(rules::write_file(rules_dir.path(), RULES)?);
            t._rules_dir = Some(rules_dir);
            let node = server_rt
                .block_on(weir_node::Node::start(config))
                .expect("start the node");
            t.list.push(Target {
                name: "weir node (in-process)".into(),
                http: Some(node.http_addr()),
                grpc: Some(format!("http://{}", node.grpc_addr())),
                pid: None,
            });
            t.in_process = Some(node);
        }
        if args.reference {
            let http = server_rt.block_on(bare_http());
            let grpc = server_rt.block_on(bare_grpc());
            t.list.push(Target {
                name: "bare reference (in-process)".into(),
                http: Some(http),
                grpc: Some(grpc),
                pid: None,
            });
            t.list.push(Target {
                name: "bare axum check (in-process)".into(),
                http: Some(server_rt.block_on(bare_axum())),
                grpc: None,
                pid: None,
            });
        }
        if args.bare_http.is_some() || args.bare_grpc.is_some() {
            if let Some(url) = &args.bare_grpc {
                loopback(url)?;
            }
            t.list.push(Target {
                name: "bare reference (running)".into(),
                http: args.bare_http.as_deref().map(loopback).transpose()?,
                grpc: args.bare_grpc.clone(),
                pid: None,
            });
        }
        Ok(t)
    }

    /// Shuts an in-process node down; a spawned one is killed on drop.
    pub fn stop(mut self, server_rt: &Runtime) {
        if let Some(node) = self.in_process.take() {
            server_rt.block_on(node.shutdown());
        }
    }
}

/// `bin serve` as a one-node cluster of the sim's launcher, logging into
/// `dir`.
async fn spawn(bin: &Path, dir: &Path) -> Result<Cluster, SimError> {
    let serve = weir_node::ServeConfig::default();
    let mut opts = ClusterOptions::new(
        bin.to_path_buf(),
        1,
        serve.cluster.strategy.as_str(),
        rules::write_file(dir, RULES)?,
        dir.to_path_buf(),
    );
    // Warnings only, whatever RUST_LOG this process has: a node logging
    // more would spend the measured CPU on it.
    opts.rust_log = Some("warn".into());
    opts.form_deadline = Duration::from_secs(15);
    let cluster = Cluster::start(opts).await?;
    eprintln!(
        "node: {} serve, HTTP {}, gRPC {}, log in {}",
        bin.display(),
        cluster.nodes[0].http,
        cluster.nodes[0].grpc,
        dir.display()
    );
    Ok(cluster)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_http_urls_are_accepted() {
        for ok in [
            "http://127.0.0.1:8080",
            "http://localhost:8081/",
            "http://[::1]:8080/v1",
        ] {
            assert!(loopback(ok).is_ok(), "{ok}");
        }
        for refused in [
            "http://10.0.0.1:8080",
            "https://127.0.0.1:8080",
            "http://example.com:80",
            "127.0.0.1:8080",
        ] {
            assert!(loopback(refused).is_err(), "{refused}");
        }
    }
}
