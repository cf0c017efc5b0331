//! Black-box tests over real sockets.
#![forbid(unsafe_code)]
