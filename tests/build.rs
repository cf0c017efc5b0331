//! Generates a prost client of Envoy's rate limit service from
//! `proto/envoy/` (Envoy's messages with every field upstream defines,
//! see proto/README.md), compiled by protox: no system `protoc`.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("proto");
    println!("cargo:rerun-if-changed={}", root.display());
    let fds = protox::compile(["envoy/service/ratelimit/v3/rls.proto"], [&root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}
