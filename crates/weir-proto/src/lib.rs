//! weir-proto
#![forbid(unsafe_code)]
