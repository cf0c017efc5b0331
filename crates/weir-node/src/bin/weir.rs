//! The `weir` binary: `weir serve` and `weir check`; all of it lives in `weir_node::cli`.

// Set here, not in the library: a service embedding a node keeps its own.
#[global_allocator]
static ALLOC: weir_alloc::Mimalloc = weir_alloc::Mimalloc;

fn main() -> std::process::ExitCode {
    weir_node::cli::main()
}
