//! Protobuf messages and gRPC clients/servers for weir, generated from `proto/`.
//!
//! - [`weir::v1`]: the public `RateLimiter` API and the node-to-node `Peer` protocol.
//! - [`envoy::service::ratelimit::v3`]: Envoy's rate limit service (RLS), wire-compatible
//!   with Envoy, plus the Envoy packages it depends on.
//! - [`convert`]: the public API's messages to weir-core's check contract and back,
//!   one mapping shared by the node and the client.
//! - [`check_wire`]: `weir.v1.RateLimiter/Check`'s server on a hand-written
//!   codec, the node's side of its busiest call.
//! - [`rls_wire`]: Envoy's `ShouldRateLimit` server with an answer written by
//!   the server itself ([`write`](mod@write)).
//! - [`read`]: protobuf read by hand, and the decoder both servers share: it
//!   hands a request's bytes over with one count from its top level, so a
//!   call over the node's limits is refused before it is decoded.
//!
//! Well-known types (`google.protobuf.Duration`, `Struct`, `Timestamp`) are
//! [`prost_types`]; `google.protobuf.UInt64Value` maps to `Option<u64>`.
// One exception, for ASCII known to be UTF-8 (read.rs).
#![deny(unsafe_code)]

pub mod check_wire;
pub mod convert;
pub mod read;
pub mod rls_wire;
#[cfg(test)]
mod wire_test;
pub mod write;

pub use prost;
pub use prost_types;
pub use tonic;

/// Encoded `google.protobuf.FileDescriptorSet` of every `.proto` compiled into
/// this crate (including the well-known types they import): the schema of
/// every message and service, for tools that read one at run time.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/weir_descriptor.bin"));

/// weir's own packages.
pub mod weir {
    /// `weir.v1`: the public API and the peer protocol.
    #[allow(clippy::all, clippy::pedantic, missing_docs)]
    pub mod v1 {
        tonic::include_proto!("weir.v1");
    }
}

/// Envoy API packages, trimmed to what the rate limit service needs.
pub mod envoy {
    /// `envoy.config.*`
    pub mod config {
        /// `envoy.config.core`
        pub mod core {
            /// `envoy.config.core.v3`
            #[allow(clippy::all, clippy::pedantic, missing_docs)]
            pub mod v3 {
                tonic::include_proto!("envoy.config.core.v3");
            }
        }
    }

    /// `envoy.extensions.*`
    pub mod extensions {
        /// `envoy.extensions.common`
        pub mod common {
            /// `envoy.extensions.common.ratelimit`
            pub mod ratelimit {
                /// `envoy.extensions.common.ratelimit.v3`
                #[allow(clippy::all, clippy::pedantic, missing_docs)]
                pub mod v3 {
                    tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                }
            }
        }
    }

    /// `envoy.service.*`
    pub mod service {
        /// `envoy.service.ratelimit`
        pub mod ratelimit {
            /// `envoy.service.ratelimit.v3`: `RateLimitService/ShouldRateLimit`.
            #[allow(clippy::all, clippy::pedantic, missing_docs)]
            pub mod v3 {
                tonic::include_proto!("envoy.service.ratelimit.v3");
            }
        }
    }

    /// `envoy.type.*`
    pub mod r#type {
        /// `envoy.type.v3`
        #[allow(clippy::all, clippy::pedantic, missing_docs)]
        pub mod v3 {
            // prost escapes the `type` keyword in the generated file name.
            tonic::include_proto!("envoy.r#type.v3");
        }
    }
}
