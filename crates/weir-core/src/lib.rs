//! weir-core
#![forbid(unsafe_code)]
