//! `index.html`: the comparison table split by workload, each workload's plots beside its rows, and the run's command, machine and commit; one page that reads offline.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::error::SimError;
use crate::plot::Plot;
use crate::report::{cells, notes, ordered, warnings, COLUMNS};
use crate::score::RunResult;

/// What ran, where, from which source.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    pub command: String,
    /// As `report::machine` writes it.
    pub machine: serde_json::Value,
    pub commit: Option<String>,
}

impl RunInfo {
    /// This run, on this machine, from this checkout.
    pub fn here(command: &[String]) -> RunInfo {
        RunInfo {
            command: command.join(" "),
            machine: crate::report::machine(),
            commit: commit(),
        }
    }

    /// The run a `results.json` records.
    pub fn recorded(doc: &serde_json::Value) -> RunInfo {
        RunInfo {
            command: doc["command"].as_str().unwrap_or_default().to_string(),
            machine: doc["machine"].clone(),
            commit: doc["commit"].as_str().map(str::to_string),
        }
    }
}

/// `git rev-parse HEAD`, marked `-dirty` when the work tree has changes;
/// None outside a git checkout or without git.
pub fn commit() -> Option<String> {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "HEAD"]).filter(|h| !h.is_empty())?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A plot as the page shows it: linked by its file name, since the page
/// sits beside the plots in the output directory.
fn figure(out: &mut String, plot: &Plot) {
    let name = plot
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = escape(&name);
    let _ = writeln!(
        out,
        "<figure><a href=\"{name}\"><img src=\"{name}\" alt=\"{name}\"></a><figcaption>{name}</figcaption></figure>"
    );
}

fn header_row(out: &mut String) {
    out.push_str("<tr>");
    for (name, _, right) in COLUMNS {
        let class = if right { " class=\"num\"" } else { "" };
        let _ = write!(out, "<th{class}>{}</th>", escape(name));
    }
    out.push_str("<th>notes</th></tr>\n");
}

fn row(out: &mut String, r: &RunResult) {
    out.push_str("<tr>");
    match cells(r) {
        Some(cells) => {
            for (cell, (_, _, right)) in cells.iter().zip(COLUMNS) {
                let class = if right { " class=\"num\"" } else { "" };
                let _ = write!(out, "<td{class}>{}</td>", escape(cell));
            }
            let _ = write!(out, "<td>{}</td>", escape(&notes(r)));
        }
        None => {
            let _ = write!(
                out,
                "<td>{}</td><td>{}</td><td class=\"error\" colspan=\"{}\">error: {}</td>",
                escape(&r.strategy),
                escape(&r.label()),
                COLUMNS.len() - 1,
                escape(r.error.as_deref().unwrap_or_default())
            );
        }
    }
    out.push_str("</tr>\n");
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1b1f24}\
table{border-collapse:collapse;margin:8px 0}th,td{padding:3px 8px;border-bottom:1px solid #dde2e7;\
white-space:nowrap;text-align:left}th{color:#5c6670;font-size:12px}.num{text-align:right;\
font-variant-numeric:tabular-nums}td.error{color:#9d0208;white-space:normal}dt{color:#5c6670}\
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px}dd{margin:0}code{font-size:13px}\
section{margin-top:28px}.plots{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0}\
figure img{max-width:900px;width:100%;border:1px solid #dde2e7}figcaption{color:#5c6670;font-size:12px}\
.warnings{color:#bc6c25}";

/// The whole page.
pub fn page(info: &RunInfo, results: &[RunResult], plots: &[Plot]) -> String {
    let mut out = String::new();
    out.push_str("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<title>weir-sim results</title>\n");
    let _ = writeln!(out, "<style>{STYLE}</style>\n</head>\n<body>");
    out.push_str("<h1>weir-sim results</h1>\n<dl>\n");
    let m = &info.machine;
    let machine = format!(
        "{}, {} cores, {}",
        m["cpu"]
            .as_str()
            .filter(|c| !c.is_empty())
            .unwrap_or("unknown CPU"),
        m["cores"].as_u64().unwrap_or(0),
        m["os"].as_str().unwrap_or("unknown OS")
    );
    for (k, v) in [
        ("command", info.command.as_str()),
        ("machine", machine.as_str()),
        ("commit", info.commit.as_deref().unwrap_or("unknown")),
    ] {
        let _ = writeln!(out, "<dt>{k}</dt><dd><code>{}</code></dd>", escape(v));
    }
    out.push_str("</dl>\n");
    out.push_str(
        "<p>Columns as in the terminal table (README, \"Main command\"): checks sent, admitted \
         and what the exact reference admitted, over- and under-admission against it, the \
         client's latency percentiles, checks per second, messages and bytes between nodes per check.</p>\n",
    );
    let warnings = warnings(results);
    if !warnings.is_empty() {
        out.push_str("<ul class=\"warnings\">\n");
        for w in warnings {
            let _ = writeln!(out, "<li>{}</li>", escape(&w));
        }
        out.push_str("</ul>\n");
    }
    let runs = ordered(results);
    let mut workloads: Vec<&str> = Vec::new();
    for r in &runs {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
    }
    for w in workloads {
        let _ = writeln!(
            out,
            "<section id=\"{0}\">\n<h2>{0}</h2>\n<table>",
            escape(w)
        );
        header_row(&mut out);
        for r in runs.iter().filter(|r| r.workload == w) {
            row(&mut out, r);
        }
        out.push_str("</table>\n<div class=\"plots\">\n");
        for p in plots.iter().filter(|p| p.workload.as_deref() == Some(w)) {
            figure(&mut out, p);
        }
        out.push_str("</div>\n</section>\n");
    }
    let shared: Vec<&Plot> = plots.iter().filter(|p| p.workload.is_none()).collect();
    if !shared.is_empty() {
        out.push_str(
            "<section id=\"every-workload\">\n<h2>Every workload</h2>\n<div class=\"plots\">\n",
        );
        for p in shared {
            figure(&mut out, p);
        }
        out.push_str("</div>\n</section>\n");
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// Writes `index.html` under `out`; returns its path.
pub fn write_index(
    out: &Path,
    info: &RunInfo,
    results: &[RunResult],
    plots: &[Plot],
) -> Result<PathBuf, SimError> {
    let path = out.join("index.html");
    std::fs::write(&path, page(info, results, plots))
        .map_err(|e| SimError::io(format!("writing {}", path.display()), e))?;
    Ok(path)
}

#[cfg(test)]
mod tests;
