//! bench/edges-summary.awk: the worst round of each edge against its
//! target, judged on the unrounded ratio.

use std::path::Path;
use std::process::Command;

/// The whole summary the script prints for `rows` (round, edge, node
/// figure, bare figure; one line of results.tsv each).
fn summary(rows: &[(u32, &str, f64, f64)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let tsv = dir.path().join("results.tsv");
    let text: String = rows
        .iter()
        .map(|(round, edge, node, bare)| {
            format!("{round}\t{edge}\t{node}\t{bare}\t1.0\t1.0\t0.5 0.5 0.5\n")
        })
        .collect();
    std::fs::write(&tsv, text).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/edges-summary.awk");
    let out = Command::new("awk")
        .arg("-F\t")
        .arg("-f")
        .arg(script)
        .arg(&tsv)
        .output()
        .expect("awk runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The summary's line for `edge`.
fn line<'a>(summary: &'a str, edge: &str) -> &'a str {
    summary
        .lines()
        .find(|l| l.starts_with(edge))
        .unwrap_or_else(|| panic!("no line for {edge} in\n{summary}"))
}

#[test]
fn a_worst_round_just_under_the_target_is_a_miss_though_it_prints_as_the_target() {
    let out = summary(&[
        // Rounds summed over their pairs: 0.95, then 0.89986 (prints 0.900).
        (1, "HTTP c=64, allowed", 95.0, 100.0),
        (2, "HTTP c=64, allowed", 100_000.0, 111_126.0),
        (2, "HTTP c=64, allowed", 116_442.0, 129_402.0),
        (1, "RLS, allowed", 90.0, 100.0),
        (2, "RLS, allowed", 99.0, 100.0),
    ]);
    let http = line(&out, "HTTP c=64, allowed");
    assert!(http.contains("0.900") && http.contains("MISSED"), "{http}");
    let rls = line(&out, "RLS, allowed");
    assert!(rls.contains("0.900") && rls.contains(">= 0.9 met"), "{rls}");
}

#[test]
fn the_p50_row_is_held_to_ten_microseconds_and_comparisons_have_no_target() {
    let out = summary(&[
        (1, "HTTP c=1 p50 (us)", 22.0, 12.0),
        (2, "HTTP c=1 p50 (us)", 30.0, 40.0),
        (1, "HTTP c=64 vs hand-written", 70.0, 100.0),
        (1, "100 items, counting vs plain", 50.0, 100.0),
    ]);
    let p50 = line(&out, "HTTP c=1 p50");
    assert!(
        p50.contains("+10.0") && p50.contains("<= +10 us met"),
        "{p50}"
    );
    for edge in ["HTTP c=64 vs hand-written", "100 items, counting vs plain"] {
        let l = line(&out, edge);
        assert!(!l.contains("met") && !l.contains("MISSED"), "{l}");
    }
    let late = summary(&[(1, "HTTP c=1 p50 (us)", 22.5, 12.0)]);
    assert!(line(&late, "HTTP c=1 p50").contains("MISSED"), "{late}");
}
