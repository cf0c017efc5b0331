//! Compiles `proto/` with protox (a pure-Rust protobuf compiler, so no system
//! `protoc` is needed) and generates prost messages plus tonic clients and
//! servers from the resulting descriptor set.

use std::path::PathBuf;

use protox::prost::Message as _;

const PROTOS: &[&str] = &[
    "weir/v1/ratelimiter.proto",
    "weir/v1/peer.proto",
    "weir/v1/regions.proto",
    "envoy/service/ratelimit/v3/rls.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_root = manifest_dir.join("../../proto");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);

    // Re-run when any file under proto/ changes (cargo walks the directory).
    println!("cargo:rerun-if-changed={}", proto_root.display());
    println!("cargo:rerun-if-changed=build.rs");

    // The set includes every import, google/protobuf/*.proto among them
    // (protox ships the well-known types); prost maps those to prost-types.
    let fds = protox::compile(PROTOS, [&proto_root])?;

    // prost-build only writes a descriptor set when it runs protoc itself, so
    // write the one protox produced, for gRPC reflection.
    std::fs::write(out_dir.join("weir_descriptor.bin"), fds.encode_to_vec())?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;

    // weir.v1.RateLimiter's server once more, on the hand-written codec
    // (src/check_wire.rs): weir.v1.RateLimiter.rs beside prost's weir.v1.rs.
    let check = tonic_build::manual::Method::builder()
        .name("check")
        .route_name("Check")
        .input_type("crate::check_wire::Request")
        .output_type("crate::check_wire::Response")
        .codec_path("crate::check_wire::CheckCodec")
        .build();
    let service = tonic_build::manual::Service::builder()
        .name("RateLimiter")
        .package("weir.v1")
        .method(check)
        .build();
    tonic_build::manual::Builder::new()
        .build_client(false)
        .compile(&[service]);
    Ok(())
}
