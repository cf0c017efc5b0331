//! The `weir-sim` binary: parse, run, print the table, write JSON and plots.

use std::process::ExitCode;

use clap::Parser;
use weir_sim::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(file) = &cli.replot {
        return replot(file, &cli.out);
    }
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

/// The table and plots of a run already done.
fn replot(file: &std::path::Path, out: &std::path::Path) -> ExitCode {
    let runs = std::fs::read_to_string(file)
        .map_err(|e| e.to_string())
        .and_then(|text| {
            let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
            serde_json::from_value::<Vec<weir_sim::score::RunResult>>(doc["runs"].clone())
                .map_err(|e| e.to_string())
        });
    let results = match runs {
        Ok(r) => r,
        Err(e) => {
            eprintln!("weir-sim: cannot read {}: {e}", file.display());
            return ExitCode::from(1);
        }
    };
    if let Err(e) = std::fs::create_dir_all(out) {
        eprintln!("weir-sim: cannot create {}: {e}", out.display());
        return ExitCode::from(1);
    }
    println!("{}", weir_sim::report::table(&results));
    let plots = weir_sim::plot::draw_all(out, &results);
    println!("drew {} plots under {}", plots.len(), out.display());
    ExitCode::SUCCESS
}
