//! The results table: one row per target, workload and load, in Markdown.

use super::measure::Measured;

pub struct Row {
    pub target: String,
    pub workload: String,
    pub concurrency: String,
    pub m: Measured,
}

/// Nanoseconds as microseconds: whole above 100, one decimal below.
pub fn us(ns: u64) -> String {
    let us = ns as f64 / 1000.0;
    if us >= 100.0 {
        format!("{us:.0}")
    } else {
        format!("{us:.1}")
    }
}

/// A count rounded to a whole number, with thousands separated by commas.
pub fn thousands(x: f64) -> String {
    let n = x.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

const HEADER: &str = "| target | workload | concurrency | checks/s | calls/s | p50 us | p99 us | max us | generator CPU (cores) | node CPU (cores) | other CPU (cores) | errors + denials |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|";

/// A quantile from when each call was sent, and from when it was due where
/// the run was open-loop.
fn quantile(m: &Measured, q: f64) -> String {
    let sent = us(m.totals.latency.value_at_quantile(q));
    match &m.from_due {
        Some(h) => format!("{sent} ({} from due)", us(h.value_at_quantile(q))),
        None => sent,
    }
}

fn line(r: &Row) -> String {
    let m = &r.m;
    let t = &m.totals;
    let secs = m.elapsed.as_secs_f64();
    let node_cpu = m
        .cpu
        .node
        .map(|c| format!("{:.2}", c / secs))
        .unwrap_or_else(|| "-".into());
    // Busy CPU not accounted to the generator or a separate node: other
    // processes (and, for an in-process node, the node itself).
    let other = (m.cpu.machine - m.cpu.own - m.cpu.node.unwrap_or(0.0)).max(0.0) / secs;
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {} | {:.2} | {} |",
        r.target,
        r.workload,
        r.concurrency,
        thousands(t.tally.checks as f64 / secs),
        thousands(t.calls as f64 / secs),
        quantile(m, 0.5),
        quantile(m, 0.99),
        us(t.latency.max()),
        m.cpu.own / secs,
        node_cpu,
        other,
        t.tally.errors + (t.tally.checks - t.tally.allowed),
    )
}

pub fn print_table(rows: &[Row]) {
    println!();
    println!("{HEADER}");
    for r in rows {
        println!("{}", line(r));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::bench::machine::CpuUsed;
    use crate::bench::measure::{histogram, Tally, Totals};

    #[test]
    fn figures_are_rounded_for_reading() {
        assert_eq!(us(12_345), "12.3");
        assert_eq!(us(123_456), "123");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1_234_567.5), "1,234,568");
    }

    #[test]
    fn a_row_has_every_column_and_open_loop_quantiles_from_due() {
        let mut totals = Totals::default();
        totals.record(Duration::from_micros(50), Tally::of_status(200));
        totals.record(Duration::from_micros(50), Tally::of_status(429));
        let mut from_due = histogram();
        from_due.record(80_000).expect("in bounds");
        let row = Row {
            target: "t".into(),
            workload: "w".into(),
            concurrency: "1".into(),
            m: Measured {
                totals,
                elapsed: Duration::from_secs(2),
                from_due: Some(from_due),
                cpu: CpuUsed {
                    own: 1.0,
                    node: None,
                    machine: 3.0,
                },
            },
        };
        let line = line(&row);
        assert_eq!(
            line.matches('|').count(),
            HEADER.lines().next().expect("header").matches('|').count()
        );
        assert!(
            line.starts_with("| t | w | 1 | 1 | 1 | 50.2 (80.4 from due) | 50.2 (80.4 from due) |"),
            "{line}"
        );
        assert!(line.ends_with("| 0.50 | - | 1.00 | 1 |"), "{line}");
    }
}
