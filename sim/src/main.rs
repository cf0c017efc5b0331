//! The `weir-sim` binary: parse, run, print the table, write JSON, plots and `index.html`.

use std::process::ExitCode;

use clap::Parser;
use weir_sim::cli::Cli;
use weir_sim::html::RunInfo;

fn main() -> ExitCode {
    // `dst` has a command line of its own; the scenarios keep theirs.
    if std::env::args().nth(1).as_deref() == Some("dst") {
        let args = weir_sim::dst::DstArgs::parse_from(std::env::args().skip(1));
        return weir_sim::dst::main(args);
    }
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
    let info = RunInfo::here(&command);
    if let Err(e) = weir_sim::report::write_json(&cli.out, &info, &results) {
        eprintln!("weir-sim: {e}");
        return ExitCode::from(1);
    }
    let plots = weir_sim::plot::draw_all(&cli.out, &results);
    let index = match weir_sim::html::write_index(&cli.out, &info, &results, &plots) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("weir-sim: {e}");
            return ExitCode::from(1);
        }
    };
    println!(
        "wrote {}, {} and {} plots under {}",
        index.display(),
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
            let runs =
                serde_json::from_value::<Vec<weir_sim::score::RunResult>>(doc["runs"].clone())
                    .map_err(|e| e.to_string())?;
            Ok((RunInfo::recorded(&doc), runs))
        });
    let (info, results) = match runs {
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
    match weir_sim::html::write_index(out, &info, &results, &plots) {
        Ok(index) => println!(
            "drew {} plots and {} under {}",
            plots.len(),
            index.display(),
            out.display()
        ),
        Err(e) => {
            eprintln!("weir-sim: {e}");
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}
