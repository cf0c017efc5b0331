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

    // Two servers once more, on codecs of their own: weir.v1.RateLimiter
    // (src/check_wire.rs) and Envoy's RateLimitService (src/rls_wire.rs),
    // each in a file named for its package and service beside prost's.
    tonic_build::manual::Builder::new()
        .build_client(false)
        .compile(&[
            unary_server(
                ("weir.v1", "RateLimiter"),
                ("check", "Check"),
                [
                    "crate::check_wire::Request",
                    "crate::check_wire::Response",
                    "crate::check_wire::CheckCodec",
                ],
            ),
            unary_server(
                ("envoy.service.ratelimit.v3", "RateLimitService"),
                ("should_rate_limit", "ShouldRateLimit"),
                [
                    "crate::rls_wire::Request",
                    "crate::rls_wire::Encoded",
                    "crate::rls_wire::RlsCodec",
                ],
            ),
        ]);
    Ok(())
}

/// A service of one unary method: `(package, service)`, `(method, route
/// name)`, and the paths of its input and output types and its codec.
fn unary_server(
    (package, name): (&str, &str),
    (method, route): (&str, &str),
    [input, output, codec]: [&str; 3],
) -> tonic_build::manual::Service {
    let method = tonic_build::manual::Method::builder()
        .name(method)
        .route_name(route)
        .input_type(input)
        .output_type(output)
        .codec_path(codec)
        .build();
    tonic_build::manual::Service::builder()
        .name(name)
        .package(package)
        .method(method)
        .build()
}
