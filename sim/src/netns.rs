//! Network namespaces for the partition fault: one per node, so one node's cluster link can be cut while clients still reach it.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;

use crate::error::SimError;
use crate::guard;

/// One namespace per node. A client link (10.214.{k+1}.0/24) joins node
/// k's namespace to the sim's and carries only the sim's HTTP checks. A
/// cluster link joins it to a bridge shared by all nodes (10.215.0.0/24)
/// and carries gossip and forwarding. Partitioning node k takes its bridge
/// port down: it can no longer reach its peers, but its clients can still
/// reach it, which is what a partition between gateways looks like. Needs
/// root and `ip`; every address is private to this machine.
pub struct Netns {
    id: String,
    nodes: usize,
}

/// Why partitions cannot run here, or None when they can.
pub fn unavailable() -> Option<String> {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        return Some("partition needs root for network namespaces".into());
    }
    let has_ip = Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_ip {
        return Some("partition needs the `ip` command (iproute2)".into());
    }
    None
}

fn ip(args: &[String]) -> Result<(), SimError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| SimError::Network(format!("ip {}: {e}", args.join(" "))))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(SimError::Network(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// Removes what a sim killed outright (SIGKILL runs no cleanup) left
/// behind: its namespaces, once no process runs in them, and its bridge.
/// Their routes would otherwise shadow this run's.
fn remove_stale(ours: &str) {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    let listing = String::from_utf8_lossy(&out.stdout).to_string();
    let mut stale_ids = std::collections::BTreeSet::new();
    for ns in listing.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some((id, k)) = ns.strip_prefix("wsim").and_then(|r| r.split_once('-')) else {
            continue;
        };
        if id == ours {
            continue;
        }
        let idle = Command::new("ip")
            .args(["netns", "pids", ns])
            .output()
            .is_ok_and(|o| o.stdout.iter().all(u8::is_ascii_whitespace));
        if idle {
            // The outside ends first, as in `Drop`.
            let _ = ip(&args(&format!("link del wsc{id}x{k}")));
            let _ = ip(&args(&format!("link del wsp{id}x{k}")));
            let _ = ip(&args(&format!("netns del {ns}")));
            stale_ids.insert(id.to_string());
        }
    }
    for id in stale_ids {
        let _ = ip(&args(&format!("link del wsb{id}")));
    }
}

impl Netns {
    /// Creates the bridge and one namespace per node.
    pub fn create(nodes: usize) -> Result<Netns, SimError> {
        if nodes > 250 {
            return Err(SimError::Usage(
                "partition supports at most 250 nodes".into(),
            ));
        }
        // Interface names are capped at 15 bytes; the pid keeps two sims apart.
        let id = format!("{}", std::process::id() % 100_000);
        remove_stale(&id);
        let mut net = Netns { id, nodes: 0 };
        let br = net.bridge();
        ip(&args(&format!("link add {br} type bridge")))?;
        guard::on_exit_ip(args(&format!("link del {br}")));
        ip(&args(&format!("addr add 10.215.0.1/24 dev {br}")))?;
        ip(&args(&format!("link set {br} up")))?;
        for k in 0..nodes {
            // Counted before it exists, so a half-made namespace is removed too.
            net.nodes = k + 1;
            net.add_node(k)?;
        }
        Ok(net)
    }

    fn bridge(&self) -> String {
        format!("wsb{}", self.id)
    }

    pub fn namespace(&self, k: usize) -> String {
        format!("wsim{}-{k}", self.id)
    }

    fn cluster_port(&self, k: usize) -> String {
        format!("wsp{}x{k}", self.id)
    }

    fn client_link(&self, k: usize) -> String {
        format!("wsc{}x{k}", self.id)
    }

    /// The `ip` commands that remove node k's links and namespace, in the
    /// order to run them.
    fn undo_node(&self, k: usize) -> [Vec<String>; 3] {
        [
            args(&format!("link del {}", self.client_link(k))),
            args(&format!("link del {}", self.cluster_port(k))),
            args(&format!("netns del {}", self.namespace(k))),
        ]
    }

    /// Where the sim reaches node k's HTTP API.
    pub fn client_ip(k: usize) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 214, (k + 1) as u8, 2))
    }

    /// Where node k's peers reach it (gRPC and gossip).
    pub fn cluster_ip(k: usize) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 215, 0, (k + 2) as u8))
    }

    fn add_node(&self, k: usize) -> Result<(), SimError> {
        let ns = self.namespace(k);
        let client = self.client_link(k);
        let port = self.cluster_port(k);
        ip(&args(&format!("netns add {ns}")))?;
        // Undone in reverse: the links, then the namespace.
        for a in self.undo_node(k).into_iter().rev() {
            guard::on_exit_ip(a);
        }
        ip(&args(&format!("-n {ns} link set lo up")))?;
        ip(&args(&format!(
            "link add {client} type veth peer name c0 netns {ns}"
        )))?;
        ip(&args(&format!(
            "addr add 10.214.{}.1/24 dev {client}",
            k + 1
        )))?;
        ip(&args(&format!("link set {client} up")))?;
        ip(&args(&format!(
            "-n {ns} addr add {}/24 dev c0",
            Self::client_ip(k)
        )))?;
        ip(&args(&format!("-n {ns} link set c0 up")))?;
        ip(&args(&format!(
            "link add {port} type veth peer name p0 netns {ns}"
        )))?;
        ip(&args(&format!("link set {port} master {}", self.bridge())))?;
        ip(&args(&format!("link set {port} up")))?;
        ip(&args(&format!(
            "-n {ns} addr add {}/24 dev p0",
            Self::cluster_ip(k)
        )))?;
        ip(&args(&format!("-n {ns} link set p0 up")))?;
        Ok(())
    }

    /// Cuts node k off from its peers; its clients still reach it.
    pub fn cut(&self, k: usize) -> Result<(), SimError> {
        ip(&args(&format!("link set {} down", self.cluster_port(k))))
    }

    pub fn heal(&self, k: usize) -> Result<(), SimError> {
        ip(&args(&format!("link set {} up", self.cluster_port(k))))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting a namespace destroys the veth ends inside it, and with
        // them their peers outside, but the kernel does that later, in the
        // background: on a busy machine the outside ends and their routes
        // outlived this run by seconds, and the next run's client links
        // (same subnets) were shadowed by them. Deleting the outside ends
        // first takes both ends and the routes at once.
        for k in 0..self.nodes {
            for a in self.undo_node(k) {
                let _ = ip(&a);
                guard::forget_ip(&a);
            }
        }
        let a = args(&format!("link del {}", self.bridge()));
        let _ = ip(&a);
        guard::forget_ip(&a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links_named(part: &str) -> Vec<String> {
        let out = Command::new("ip")
            .args(["-o", "link", "show"])
            .output()
            .expect("ip runs");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|name| name.split('@').next().unwrap_or(name).to_string())
            .filter(|name| name.contains(part))
            .collect()
    }

    /// The next run reuses the subnets, so nothing of this one may be
    /// left once it is dropped. Needs root and `ip`, as the partition
    /// fault does; fails naming what is missing otherwise.
    #[test]
    fn dropping_removes_every_link_at_once() {
        if let Some(why) = unavailable() {
            panic!("this test needs network namespaces: {why}");
        }
        let net = Netns::create(3).expect("namespaces");
        let mark = format!("{}x", net.id);
        assert_eq!(links_named(&mark).len(), 6, "two links per node");
        drop(net);
        assert_eq!(links_named(&mark), Vec::<String>::new());
    }
}
