//! Reloads the rules file when it changes; a broken file, or one emptied by accident, keeps the last good set.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use weir_core::rules::TierDigests;
use weir_core::{RuleSet, RulesFile};

use crate::state::NodeState;

/// Editors and `cp` write a file in several steps (truncate, write, rename);
/// waiting for this long without a new event reads the finished file once.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// What the reloader keeps of the file it installed last: a digest of its
/// text (an event that leaves it as it was installs nothing) and of each
/// of its tiers (what an edit is compared with). The text and the file's
/// own parsed, indexed set were kept before: at 100,000 rules about 45 MB
/// beside the set in force, and a second copy of every rule once a peer's
/// write had replaced the file's.
pub struct Loaded {
    text: [u8; 32],
    tiers: TierDigests,
    rules: usize,
}

impl Loaded {
    /// The file `text`, parsed into `set`.
    pub fn new(text: &str, set: &RuleSet) -> Loaded {
        Loaded {
            text: Sha256::digest(text.as_bytes()).into(),
            tiers: set.tier_digests(),
            rules: set.written_len(),
        }
    }
}

/// Starts watching `path`. The watch is in place when this returns, so a
/// change made right after a node starts is seen. `loaded` is the file the
/// node started with. None if the directory cannot be watched (logged; the
/// node runs on with the rules it has).
pub fn spawn(
    state: Arc<NodeState>,
    path: PathBuf,
    loaded: Option<Loaded>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Option<JoinHandle<()>> {
    let (watcher, rx) = watch(&[path.as_path()], "rules file")?;
    Some(tokio::spawn(async move {
        // Moved in so the watch lives exactly as long as this task.
        let _watcher = watcher;
        watch_loop(state, path, loaded, rx, stop).await;
    }))
}

/// A watch on the directories of `files`, and the channel it says "some
/// change" on. None if they cannot be watched (logged, naming `what`: the
/// node runs on with what it has).
pub(crate) fn watch(
    files: &[&Path],
    what: &str,
) -> Option<(RecommendedWatcher, mpsc::UnboundedReceiver<()>)> {
    let (tx, rx) = mpsc::unbounded_channel();
    // Any event in the directory may have changed what the path resolves
    // to, not only one naming the file: a Kubernetes ConfigMap or Secret
    // volume swaps a `..data` symlink that the file reaches through, and
    // no event names the file. Comparing what was read keeps unrelated
    // events from installing anything.
    let handler = move |res: notify::Result<notify::Event>| {
        let Ok(event) = res else { return };
        // Our own reads show up as access events; reacting to them would loop.
        if !matches!(event.kind, EventKind::Access(_)) {
            let _ = tx.send(());
        }
    };
    let mut watcher = match notify::recommended_watcher(handler) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the {what} watcher; it will not reload");
            return None;
        }
    };
    // The parent directory is watched, not the file: an editor that saves
    // by writing a new file and renaming it over the old one replaces the
    // inode, and a watch on the old inode would never fire again.
    let mut dirs: Vec<PathBuf> = files
        .iter()
        .map(|f| match f.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        })
        .collect();
    dirs.sort();
    dirs.dedup();
    for dir in &dirs {
        if let Err(e) = watcher.watch(dir, RecursiveMode::NonRecursive) {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the {what}'s directory; it will not reload");
            return None;
        }
    }
    Some((watcher, rx))
}

/// Waits for a change and then for the writes to settle (editors and `cp`
/// write a file in several steps): false once `stop` resolves or the watch
/// is gone.
pub(crate) async fn settled_change(
    changes: &mut mpsc::UnboundedReceiver<()>,
    mut stop: Pin<&mut impl Future<Output = ()>>,
) -> bool {
    tokio::select! {
        _ = &mut stop => return false,
        change = changes.recv() => if change.is_none() { return false },
    }
    loop {
        tokio::select! {
            _ = &mut stop => return false,
            more = tokio::time::timeout(DEBOUNCE, changes.recv()) => match more {
                Ok(Some(())) => continue,
                Ok(None) => return false,
                Err(_) => return true,
            },
        }
    }
}

async fn watch_loop(
    state: Arc<NodeState>,
    path: PathBuf,
    mut last_loaded: Option<Loaded>,
    mut changes: mpsc::UnboundedReceiver<()>,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    while settled_change(&mut changes, stop.as_mut()).await {
        // Parsing and indexing tens of thousands of rules takes a while:
        // on the blocking pool, no worker that answers checks or drives
        // gossip waits for it.
        let (s, p, mut last) = (state.clone(), path.clone(), last_loaded.take());
        let done = tokio::task::spawn_blocking(move || {
            reload(&s, &p, &mut last);
            last
        });
        match done.await {
            Ok(last) => last_loaded = last,
            Err(e) => {
                state.metrics.record_reload_failure();
                tracing::error!(error = %e, "the rules reload did not finish; keeping the rules in force");
                return;
            }
        }
    }
}

/// Reads, validates and installs the file. On any failure the set in force
/// stays, and the failure is logged and counted.
pub(crate) fn reload(state: &NodeState, path: &Path, last_loaded: &mut Option<Loaded>) {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            state.metrics.record_reload_failure();
            tracing::warn!(path = %path.display(), error = %e, "cannot read the rules file; keeping the rules in force");
            return;
        }
    };
    // A touch, a metadata change or another file's event is not a new rule
    // set; installing it again would bump the version for nothing.
    let text_digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
    if last_loaded.as_ref().is_some_and(|l| l.text == text_digest) {
        return;
    }
    let file = match RulesFile::parse(&text) {
        Ok(f) => f,
        Err(e) => return refused(state, path, &e),
    };
    // A file with no rules replacing one with rules is what a writer that
    // truncates before it writes leaves for a moment (`: > rules.toml`):
    // taken at its word, it would lift every limit. Only a file that says
    // `allow_empty = true` may do that.
    let had_rules = match last_loaded {
        Some(l) => l.rules > 0,
        None => state.engine.rules().written_len() > 0,
    };
    if file.empty_by_accident() && had_rules {
        state.metrics.record_reload_failure();
        tracing::warn!(path = %path.display(), "the rules file holds no rules; keeping the rules in force (write `allow_empty = true` in it to remove every rule)");
        return;
    }
    // Only what the edit changed is written: the previous file's rules
    // say which tiers those are.
    let set = file.set;
    let loaded = Loaded::new(&text, &set);
    drop(text);
    let installed = match last_loaded {
        Some(l) => state.engine.install_edit(&l.tiers, set),
        None => state.engine.install(set),
    };
    match installed {
        Ok(installed) => {
            state.metrics.record_reload();
            *last_loaded = Some(loaded);
            tracing::info!(path = %path.display(), version = installed.version(), rules = installed.rules().len(), "rules reloaded");
        }
        Err(e) => refused(state, path, &e),
    }
}

fn refused(state: &NodeState, path: &Path, e: &weir_core::RulesError) {
    state.metrics.record_reload_failure();
    let (rule, field) = e
        .rule_error()
        .map_or(("", ""), |r| (r.rule.as_str(), r.field.as_str()));
    tracing::warn!(path = %path.display(), rule, field, error = %e, "invalid rules file; keeping the rules in force");
}

#[cfg(test)]
mod tests;
