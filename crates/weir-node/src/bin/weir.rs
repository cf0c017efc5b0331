//! The `weir` binary: `weir serve` and `weir check`.

fn main() {}
