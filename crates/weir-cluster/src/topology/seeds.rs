//! Seed names to gossip addresses: resolved at start with some patience, and again while a node is alone.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

type ResolveFn = dyn Fn(&str) -> std::io::Result<Vec<SocketAddr>> + Send + Sync;

/// Turns a `host:port` seed into addresses. Blocking; run off the runtime.
#[derive(Clone)]
pub struct SeedResolver(Arc<ResolveFn>);

impl SeedResolver {
    /// The system resolver (`getaddrinfo`).
    pub fn system() -> Self {
        SeedResolver::new(|name| {
            use std::net::ToSocketAddrs;
            Ok(name.to_socket_addrs()?.collect())
        })
    }

    pub fn new(
        f: impl Fn(&str) -> std::io::Result<Vec<SocketAddr>> + Send + Sync + 'static,
    ) -> Self {
        SeedResolver(Arc::new(f))
    }

    /// Every address one name resolves to now.
    pub fn resolve(&self, name: &str) -> std::io::Result<Vec<SocketAddr>> {
        (self.0)(name)
    }

    /// Every address the names resolve to now; names that fail are skipped.
    pub fn resolve_all(&self, names: &[String]) -> Vec<SocketAddr> {
        let mut out: Vec<SocketAddr> = names
            .iter()
            .filter_map(|n| self.resolve(n).ok())
            .flatten()
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Resolves every name, retrying names that do not resolve yet (a DNS
    /// record that appears a little after the pod does) for up to
    /// `patience`. Names still unresolved then are logged and skipped.
    pub async fn resolve_patiently(&self, names: &[String], patience: Duration) -> Vec<SocketAddr> {
        let give_up = tokio::time::Instant::now() + patience;
        let mut out = Vec::new();
        for name in names {
            let mut wait = Duration::from_millis(100);
            loop {
                let found = match name.parse::<SocketAddr>() {
                    // An address needs no lookup.
                    Ok(addr) => Ok(vec![addr]),
                    Err(_) => {
                        let (this, n) = (self.clone(), name.clone());
                        crate::offload::blocking(move || this.resolve(&n))
                            .await
                            .unwrap_or_else(|| Err(std::io::Error::other("lookup stopped")))
                    }
                };
                match found {
                    Ok(addrs) => {
                        out.extend(addrs);
                        break;
                    }
                    Err(e) if tokio::time::Instant::now() + wait > give_up => {
                        tracing::warn!(seed = %name, error = %e, "cannot resolve seed; skipping it");
                        break;
                    }
                    Err(e) => {
                        tracing::debug!(seed = %name, error = %e, "seed does not resolve yet; retrying");
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(Duration::from_secs(1));
                    }
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

impl std::fmt::Debug for SeedResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SeedResolver(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_name_that_resolves_late_is_waited_for_and_one_that_never_does_is_skipped() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = asked.clone();
        let r = SeedResolver::new(move |name| match name {
            "late:1" if counter.fetch_add(1, Ordering::SeqCst) >= 2 => {
                Ok(vec!["10.0.0.1:1".parse().unwrap()])
            }
            "ok:2" => Ok(vec!["10.0.0.2:2".parse().unwrap()]),
            _ => Err(std::io::Error::other("no such host")),
        });
        let names = ["late:1", "never:3", "ok:2"].map(String::from);
        let got = r.resolve_patiently(&names, Duration::from_secs(5)).await;
        assert_eq!(
            got,
            vec!["10.0.0.1:1".parse().unwrap(), "10.0.0.2:2".parse().unwrap()]
        );
        assert_eq!(asked.load(Ordering::SeqCst), 3, "asked until it resolved");
    }
}
