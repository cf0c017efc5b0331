//! gRPC server reflection (`grpc.reflection.v1` and `v1alpha`) on the gRPC
//! port, from the descriptors compiled into weir-proto, so grpcurl and
//! similar tools can call weir without its .proto files.

use tonic_reflection::server::v1::{ServerReflection as V1, ServerReflectionServer as V1Server};
use tonic_reflection::server::v1alpha::{
    ServerReflection as V1Alpha, ServerReflectionServer as V1AlphaServer,
};
use tonic_reflection::server::Builder;

/// The services listed: the ones a client calls on this port. The peer
/// protocol is for nodes, which have its definition.
const LISTED: [&str; 3] = [
    "weir.v1.RateLimiter",
    "envoy.service.ratelimit.v3.RateLimitService",
    "grpc.health.v1.Health",
];

fn builder(reflection: &str) -> Builder<'static> {
    let b = Builder::configure()
        .register_encoded_file_descriptor_set(weir_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .with_service_name(reflection);
    LISTED.iter().fold(b, |b, name| b.with_service_name(*name))
}

/// Both versions of the reflection service: grpcurl asks v1 first, older
/// clients only v1alpha. None when the descriptors do not load (a build
/// fault, logged), so the other services still serve.
pub fn services() -> Option<(V1Server<impl V1>, V1AlphaServer<impl V1Alpha>)> {
    let v1 = builder("grpc.reflection.v1.ServerReflection").build_v1();
    let v1alpha = builder("grpc.reflection.v1alpha.ServerReflection").build_v1alpha();
    match (v1, v1alpha) {
        (Ok(v1), Ok(v1alpha)) => Some((v1, v1alpha)),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "gRPC reflection not served: its descriptors do not load");
            None
        }
    }
}
