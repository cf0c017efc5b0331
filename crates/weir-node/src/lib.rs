//! weir-node
#![forbid(unsafe_code)]
