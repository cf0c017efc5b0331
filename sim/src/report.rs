//! The terminal table and the JSON file of every figure.

use std::fmt::Write as _;
use std::path::Path;

use crate::error::SimError;
use crate::score::RunResult;

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

/// One row per run, grouped by workload so strategies sit side by side.
pub fn table(results: &[RunResult]) -> String {
    let mut rows: Vec<&RunResult> = results.iter().collect();
    let order = |w: &str| {
        [
            "steady",
            "boundary",
            "single-connection",
            "spread",
            "burst",
            "hot-key",
            "retry-storm",
            "fault",
        ]
        .iter()
        .position(|x| *x == w)
        .unwrap_or(99)
    };
    // Stable: strategies and variants keep the order they ran in.
    rows.sort_by_key(|r| order(&r.workload));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<8} {:<26} {:>6} {:>6} {:>6} {:>7} {:>7} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}  notes",
        "strategy",
        "workload",
        "checks",
        "admit",
        "ref",
        "over%",
        "under%",
        "p50ms",
        "p99ms",
        "p999ms",
        "chk/s",
        "msg/ck",
        "B/ck"
    );
    let mut last = String::new();
    for r in rows {
        if !last.is_empty() && last != r.workload {
            out.push('\n');
        }
        last = r.workload.clone();
        if let Some(e) = &r.error {
            let _ = writeln!(out, "{:<8} {:<26} error: {e}", r.strategy, r.label());
            continue;
        }
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
        let _ = writeln!(
            out,
            "{:<8} {:<26} {:>6} {:>6} {:>6} {:>7.1} {:>7.1} {:>6.2} {:>6.2} {:>6.2} {:>6.0} {:>6.2} {:>6}  {}",
            r.strategy,
            r.label(),
            r.checks,
            r.admitted,
            r.reference_admitted,
            r.over_pct,
            r.under_pct,
            r.latency.p50_ms,
            r.latency.p99_ms,
            r.latency.p999_ms,
            r.throughput,
            r.messages_per_check,
            if r.peer.bytes_counted {
                format!("{:.0}", r.bytes_per_check)
            } else {
                "-".to_string()
            },
            notes
        );
    }
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
pub fn write_json(out: &Path, command: &[String], results: &[RunResult]) -> Result<(), SimError> {
    let doc = serde_json::json!({
        "command": command.join(" "),
        "machine": machine(),
        "runs": results,
    });
    let path = out.join("results.json");
    let text = serde_json::to_string_pretty(&doc).expect("results serialize");
    std::fs::write(&path, text).map_err(|e| SimError::io(format!("writing {}", path.display()), e))
}
