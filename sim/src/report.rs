//! The terminal table and the JSON file of every figure; `html.rs` draws the same table into `index.html`.

use std::fmt::Write as _;
use std::path::Path;

use clap::ValueEnum;

use crate::error::SimError;
use crate::html::RunInfo;
use crate::score::RunResult;
use crate::workloads::Workload;

fn fault_note(r: &RunResult) -> Option<String> {
    let f = r.fault.as_ref()?;
    if let Some(why) = &f.skipped {
        return Some(format!("{} skipped: {why}", f.kind));
    }
    let mut s = format!("{} {}", f.kind, f.node);
    match f.detected_after_s {
        Some(d) => write!(s, ", detected in {d:.1}s").ok()?,
        None if matches!(f.kind.as_str(), "kill" | "pause" | "partition") => {
            s.push_str(", not detected in 30s")
        }
        None => {}
    }
    if let Some(rec) = f.recovered_after_s {
        write!(s, ", whole again after {rec:.1}s").ok()?;
    }
    if f.stalls > 0 {
        write!(
            s,
            " ({} spinning threads, {} stalls of 40ms)",
            f.hogs, f.stalls
        )
        .ok()?;
    }
    if !f.rejoin_s.is_empty() {
        let worst = f.rejoin_s.iter().copied().fold(0.0, f64::max);
        write!(s, ", slowest rejoin {worst:.1}s").ok()?;
    }
    if let Some(b) = &r.fault_bound {
        write!(
            s,
            "; {} of {} keys over, {} beyond what was admitted before",
            b.keys_over, b.keys, b.keys_over_held
        )
        .ok()?;
    }
    if let Some(e) = &f.error {
        write!(s, "; fault error: {e}").ok()?;
    }
    Some(s)
}

/// Runs grouped by workload, in the order the comparison runs them, so
/// strategies sit side by side; stable, so strategies and variants keep
/// the order they ran in.
pub fn ordered(results: &[RunResult]) -> Vec<&RunResult> {
    let mut rows: Vec<&RunResult> = results.iter().collect();
    let all = Workload::value_variants();
    rows.sort_by_key(|r| {
        all.iter()
            .position(|w| w.name() == r.workload)
            .unwrap_or(all.len())
    });
    rows
}

/// The table's columns: name, width in the terminal, right-aligned.
pub const COLUMNS: [(&str, usize, bool); 13] = [
    ("strategy", 8, false),
    ("workload", 26, false),
    ("checks", 6, true),
    ("admit", 6, true),
    ("ref", 6, true),
    ("over%", 7, true),
    ("under%", 7, true),
    ("p50ms", 6, true),
    ("p99ms", 6, true),
    ("p999ms", 6, true),
    ("chk/s", 6, true),
    ("msg/ck", 6, true),
    ("B/ck", 6, true),
];

/// One run's cells in [`COLUMNS`] order; None for a run that failed.
pub fn cells(r: &RunResult) -> Option<[String; 13]> {
    if r.error.is_some() {
        return None;
    }
    Some([
        r.strategy.clone(),
        r.label(),
        r.checks.to_string(),
        r.admitted.to_string(),
        r.reference_admitted.to_string(),
        format!("{:.1}", r.over_pct),
        format!("{:.1}", r.under_pct),
        format!("{:.2}", r.latency.p50_ms),
        format!("{:.2}", r.latency.p99_ms),
        format!("{:.2}", r.latency.p999_ms),
        format!("{:.0}", r.throughput),
        format!("{:.2}", r.messages_per_check),
        if r.peer.bytes_counted {
            format!("{:.0}", r.bytes_per_check)
        } else {
            "-".to_string()
        },
    ])
}

/// The notes column: the workload's own figure, fallback decisions, the fault.
pub fn notes(r: &RunResult) -> String {
    let mut notes = r.figures.note.clone();
    let fallback = r.peer.stat("fallback_decisions");
    if fallback > 0.0 {
        notes.push_str(&format!("; {fallback:.0} decided on the fallback"));
    }
    if let Some(f) = fault_note(r) {
        notes = if notes.is_empty() {
            f
        } else {
            format!("{notes}; {f}")
        };
    }
    notes
}

/// Every run's warnings, once each, naming the strategy.
pub fn warnings(results: &[RunResult]) -> Vec<String> {
    let mut warnings: Vec<String> = results
        .iter()
        .flat_map(|r| {
            r.warnings
                .iter()
                .map(move |w| format!("{}: {w}", r.strategy))
        })
        .collect();
    warnings.sort();
    warnings.dedup();
    warnings
}

fn padded(out: &mut String, cells: &[String]) {
    for (i, (cell, (_, width, right))) in cells.iter().zip(COLUMNS).enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = if right {
            write!(out, "{cell:>width$}")
        } else {
            write!(out, "{cell:<width$}")
        };
    }
}

/// One row per run, grouped by workload so strategies sit side by side.
pub fn table(results: &[RunResult]) -> String {
    let mut out = String::new();
    let header: Vec<String> = COLUMNS.iter().map(|(n, _, _)| n.to_string()).collect();
    padded(&mut out, &header);
    out.push_str("  notes\n");
    let mut last = String::new();
    for r in ordered(results) {
        if !last.is_empty() && last != r.workload {
            out.push('\n');
        }
        last = r.workload.clone();
        match cells(r) {
            Some(c) => {
                padded(&mut out, &c);
                let _ = writeln!(out, "  {}", notes(r));
            }
            None => {
                let e = r.error.as_deref().unwrap_or_default();
                let _ = writeln!(out, "{:<8} {:<26} error: {e}", r.strategy, r.label());
            }
        }
    }
    let warnings = warnings(results);
    if !warnings.is_empty() {
        out.push('\n');
        for w in warnings {
            let _ = writeln!(out, "warning: {w}");
        }
    }
    out
}

/// The machine, for the record: ratios travel between machines, absolute times do not.
pub fn machine() -> serde_json::Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    serde_json::json!({
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "cpu": cpu,
        "os": std::env::consts::OS,
    })
}

/// Writes `results.json` under `out`.
pub fn write_json(out: &Path, info: &RunInfo, results: &[RunResult]) -> Result<(), SimError> {
    let doc = serde_json::json!({
        "command": info.command,
        "machine": info.machine,
        "commit": info.commit,
        "runs": results,
    });
    let path = out.join("results.json");
    let text = serde_json::to_string_pretty(&doc).expect("results serialize");
    std::fs::write(&path, text).map_err(|e| SimError::io(format!("writing {}", path.display()), e))
}
