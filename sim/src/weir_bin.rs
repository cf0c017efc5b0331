//! Finding the `weir` binary the nodes run, building it first when the sim runs from a checkout.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::SimError;

/// Which cargo profile to build `weir` with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    Debug,
    Release,
}

impl Profile {
    /// The profile this binary itself was built with.
    pub fn own() -> Profile {
        if cfg!(debug_assertions) {
            Profile::Debug
        } else {
            Profile::Release
        }
    }

    fn dir(self) -> &'static str {
        match self {
            Profile::Debug => "debug",
            Profile::Release => "release",
        }
    }
}

fn build_command(profile: Profile) -> String {
    match profile {
        Profile::Release => "cargo build --release -p weir-node --bin weir".into(),
        Profile::Debug => "cargo build -p weir-node --bin weir".into(),
    }
}

/// The workspace this crate was built from, if it is still there.
fn workspace_root() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()?
        .to_path_buf();
    root.join("crates/weir-node/Cargo.toml")
        .is_file()
        .then_some(root)
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

/// `weir` next to the running executable (or one level up, for test
/// binaries under `target/*/deps`).
fn beside_exe() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join("weir"), dir.parent()?.join("weir")]
        .into_iter()
        .find(|p| p.is_file())
}

/// The `weir` binary to run: `explicit` if given; else, from a checkout,
/// whatever `cargo build` produces (a no-op when it is current, and it
/// keeps a stale binary from being measured); else the one beside this
/// executable. Fails with one line naming the command to run.
pub fn locate(explicit: Option<&Path>, profile: Profile, quiet: bool) -> Result<PathBuf, SimError> {
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(SimError::WeirBinary(format!(
                "--weir-bin {}: no such file",
                p.display()
            )))
        };
    }
    if let Some(root) = workspace_root() {
        let built = target_dir(&root).join(profile.dir()).join("weir");
        if !quiet {
            let first = if built.is_file() {
                ""
            } else {
                " (first build: about 3-4 minutes on 2 cores)"
            };
            eprintln!("weir-sim: {}{first}", build_command(profile));
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(&root)
            .args(["build", "-q", "-p", "weir-node", "--bin", "weir"]);
        if profile == Profile::Release {
            cmd.arg("--release");
        }
        match cmd.status() {
            Ok(s) if s.success() && built.is_file() => return Ok(built),
            Ok(_) if built.is_file() => {
                eprintln!(
                    "weir-sim: building weir failed; using the existing {}",
                    built.display()
                );
                return Ok(built);
            }
            _ => {}
        }
    }
    beside_exe().ok_or_else(|| {
        SimError::WeirBinary(format!(
            "weir binary not found: run `{}` or pass --weir-bin PATH",
            build_command(profile)
        ))
    })
}
