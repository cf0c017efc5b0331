//! weir-client
#![forbid(unsafe_code)]
