//! Reloads the peer certificate, key and CA when their files change: new peer connections, both ways, take the new ones; a file that does not load keeps those in force.

use std::future::Future;
use std::sync::Arc;

use tokio::task::JoinHandle;
use weir_cluster::net::peer_tls::{PeerTls, PeerTlsFiles};

/// Starts watching the three files; the watch is in place when this
/// returns. None if they cannot be watched (logged).
pub fn spawn(
    tls: Arc<PeerTls>,
    files: PeerTlsFiles,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Option<JoinHandle<()>> {
    let paths = [
        files.cert.as_path(),
        files.key.as_path(),
        files.ca.as_path(),
    ];
    let (watcher, mut changes) = crate::reload::watch(&paths, "peer TLS files")?;
    Some(tokio::spawn(async move {
        let _watcher = watcher;
        tokio::pin!(stop);
        while crate::reload::settled_change(&mut changes, stop.as_mut()).await {
            reload(&tls, &files);
        }
    }))
}

/// Loads the files and puts them in force, or keeps what is in force.
/// A certificate renewed before its key (or the other way round) fails
/// to load for a moment; the write of the other file reloads again.
pub(crate) fn reload(tls: &PeerTls, files: &PeerTlsFiles) {
    match files.load() {
        Ok(configs) => {
            tls.install(configs);
            tracing::info!(cert = %files.cert.display(), "peer TLS files reloaded");
        }
        Err(e) => {
            tracing::warn!(error = %e, "peer TLS files not reloaded; keeping those in force")
        }
    }
}
