//! The simulation harness.
#![forbid(unsafe_code)]
