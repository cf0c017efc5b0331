//! Sets `WEIR_COMMIT`, the commit `weir_build_info` names: `git rev-parse
//! HEAD` when the source is a git checkout and git runs, else `unknown`,
//! so a build from a source archive or without git still succeeds.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=WEIR_COMMIT={commit}");
    // Built again when HEAD moves: HEAD itself (a checkout), and the file
    // of the branch it names (a commit). Only paths that exist: cargo
    // would rerun this script on every build for one that does not.
    let watch = [
        git(&["rev-parse", "--git-path", "HEAD"]),
        git(&["symbolic-ref", "-q", "HEAD"])
            .and_then(|branch| git(&["rev-parse", "--git-path", &branch])),
    ];
    for path in watch.into_iter().flatten().map(PathBuf::from) {
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
