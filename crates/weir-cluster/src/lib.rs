//! weir-cluster
#![forbid(unsafe_code)]
