//! The `weir-sim` binary: parse, run, print the table, write JSON and plots.

use std::process::ExitCode;

use clap::Parser;
use weir_sim::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("weir-sim: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let outcome = runtime.block_on(async {
        weir_sim::guard::install_signal_handler();
        weir_sim::run::run(&cli).await
    });
    // Belt and braces: every cluster is dropped by now, but a panic in a
    // spawned task could have leaked one.
    weir_sim::guard::cleanup_all();
    let results = match outcome {
        Ok(r) => r,
        Err(e) => {
            eprintln!("weir-sim: {e}");
            return ExitCode::from(1);
        }
    };
    println!("{}", weir_sim::report::table(&results));
    let command: Vec<String> = std::env::args().collect();
    if let Err(e) = weir_sim::report::write_json(&cli.out, &command, &results) {
        eprintln!("weir-sim: {e}");
        return ExitCode::from(1);
    }
    let plots = weir_sim::plot::draw_all(&cli.out, &results);
    println!(
        "wrote {} and {} plots under {}",
        cli.out.join("results.json").display(),
        plots.len(),
        cli.out.display()
    );
    if results.iter().any(|r| r.error.is_some()) {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
