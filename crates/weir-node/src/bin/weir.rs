//! The `weir` binary: `weir serve` and `weir check`; all of it lives in `weir_node::cli`.

fn main() -> std::process::ExitCode {
    weir_node::cli::main()
}
