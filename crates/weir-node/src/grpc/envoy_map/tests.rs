//! Unit tests of the Envoy mapping.
