//! index.html from made-up runs and the plots drawn for them, without a cluster.

use serde_json::json;

use super::{page, write_index, RunInfo};
use crate::plot::draw_all;
use crate::score::{Buckets, RunResult, Series};

fn run(strategy: &str, workload: &str, variant: &str) -> RunResult {
    let t_s: Vec<f64> = (0..20).map(|i| f64::from(i) * 0.5).collect();
    RunResult {
        strategy: strategy.into(),
        workload: workload.into(),
        variant: variant.into(),
        nodes: 3,
        checks: 100,
        admitted: 40,
        reference_admitted: 40,
        series: Series {
            admitted: t_s.iter().map(|t| (t / 10.0).min(1.0)).collect(),
            reference: t_s.iter().map(|t| (t / 10.0).min(1.0)).collect(),
            t_s,
            window_s: 1.0,
            limit: 10,
            keys: 1,
            boundary_s: None,
        },
        ..RunResult::default()
    }
}

fn results() -> Vec<RunResult> {
    let mut storm = run("owner", "retry-storm", "no-jitter");
    storm.buckets = Some(Buckets {
        start_s: 0.0,
        width_s: 0.01,
        counts: vec![5, 40, 3, 0, 1],
    });
    vec![
        run("owner", "steady", ""),
        run("gossip", "steady", ""),
        run("owner", "hot-key", ""),
        storm,
        RunResult::failed(
            "owner",
            "fault",
            "",
            3,
            "cluster did not form within 30s".into(),
        ),
    ]
}

fn info() -> RunInfo {
    RunInfo {
        command: "weir-sim --nodes 3 --strategy owner,gossip".into(),
        machine: json!({"cpu": "Test CPU @ 2.0GHz", "cores": 2, "os": "linux"}),
        commit: Some("0123abcd".into()),
    }
}

/// The text of the section for `workload`.
fn section<'a>(html: &'a str, workload: &str) -> &'a str {
    let start = html
        .find(&format!("<section id=\"{workload}\">"))
        .unwrap_or_else(|| panic!("no section for {workload}"));
    let end = html[start..].find("</section>").unwrap() + start;
    &html[start..end]
}

#[test]
fn the_index_names_every_workload_and_links_every_plot_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let results = results();
    let plots = draw_all(dir.path(), &results);
    assert_eq!(
        plots.len(),
        4,
        "steady, hot-key, the retry storm, latency: {plots:?}"
    );
    let path = write_index(dir.path(), &info(), &results, &plots).unwrap();
    assert_eq!(path, dir.path().join("index.html"));
    let html = std::fs::read_to_string(&path).unwrap();

    for w in ["steady", "hot-key", "retry-storm", "fault"] {
        assert!(html.contains(&format!("<h2>{w}</h2>")), "{w} is not named");
    }
    for p in &plots {
        let name = p.path.file_name().unwrap().to_str().unwrap();
        let shown_in = match &p.workload {
            Some(w) => section(&html, w),
            None => section(&html, "every-workload"),
        };
        assert!(
            shown_in.contains(&format!("<img src=\"{name}\"")),
            "{name} is not shown beside {:?}",
            p.workload
        );
    }
    for src in html.split("src=\"").skip(1) {
        let file = &src[..src.find('"').unwrap()];
        assert!(
            dir.path().join(file).is_file(),
            "{file} is linked but not written"
        );
    }
    assert!(!html.contains("://"), "nothing is fetched from elsewhere");
    assert!(section(&html, "steady").contains("<td>gossip</td>"));
    assert!(section(&html, "fault").contains("error: cluster did not form within 30s"));
    for shown in [
        "weir-sim --nodes 3 --strategy owner,gossip",
        "Test CPU @ 2.0GHz",
        "0123abcd",
    ] {
        assert!(html.contains(shown), "{shown} missing");
    }
}

#[test]
fn text_from_a_run_is_escaped() {
    let mut r = RunResult::failed("owner", "steady", "", 3, "<script>alert(1)</script>".into());
    r.warnings.push("a & b".into());
    let html = page(&info(), &[r], &[]);
    assert!(!html.contains("<script>"));
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(html.contains("a &amp; b"));
}

#[test]
fn a_replot_shows_what_the_results_file_recorded() {
    let doc = json!({
        "command": "weir-sim burst",
        "machine": {"cpu": "Recorded CPU", "cores": 8, "os": "linux"},
        "commit": "feedbeef",
        "runs": [],
    });
    let info = RunInfo::recorded(&doc);
    assert_eq!(info.command, "weir-sim burst");
    assert_eq!(info.commit.as_deref(), Some("feedbeef"));
    assert!(page(&info, &[], &[]).contains("Recorded CPU, 8 cores, linux"));
}
