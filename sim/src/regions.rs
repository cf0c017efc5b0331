//! The `regions` scenario: three regions of weir clusters linked by delaying relays, one global limit, demand that moves between regions, and one region cut off from the key's home; scored per window against an exact global reference.
//!
//! Timeline (22 s): east carries the demand, then west does (the shift,
//! at 6 s); from 12 s to 18 s west's link to eu, the key's home, is cut
//! while west keeps its demand and east asks for half the limit; then the
//! link heals. The reference is one exact fixed window over every region:
//! in each window it admits min(L, asked). Over-admission is what the
//! regions admitted above L in a window; under-admission what they refused
//! of the reference's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plotters::prelude::*;
use serde_json::Value;
use tokio::time::Instant;

use crate::cli::Cli;
use crate::cluster::{Cluster, ClusterOptions};
use crate::error::SimError;
use crate::relay::Relay;
use crate::score::RunResult;
use crate::workloads::Figures;

pub const REGIONS: [&str; 3] = ["east", "eu", "west"];
/// One-way delay between two regions: US-East to Europe 75 ms, California
/// to Europe 150 ms, US-East to California 75 ms.
fn delay(a: &str, b: &str) -> Duration {
    match (a.min(b), a.max(b)) {
        ("eu", "west") => Duration::from_millis(150),
        _ => Duration::from_millis(75),
    }
}

const LIMIT: u64 = 300;
const RULE: &str = "regions-global";
const ROUND: Duration = Duration::from_millis(250);
const RUN: f64 = 22.0;
const SHIFT: f64 = 6.0;
const CUT: (f64, f64) = (12.0, 18.0);
/// The region cut off from the key's home.
const CUT_REGION: usize = 2;
const HOME: &str = "eu";

/// Checks per second each region is asked at `t` seconds.
fn demand(t: f64) -> [f64; 3] {
    let (busy, idle) = (2.0 * LIMIT as f64, 0.02 * LIMIT as f64);
    if t < SHIFT {
        [busy, idle, idle]
    } else if (CUT.0..CUT.1).contains(&t) {
        [0.5 * LIMIT as f64, idle, busy]
    } else {
        [idle, idle, busy]
    }
}

fn rules_toml() -> String {
    format!(
        "[[rule]]\nname = \"{RULE}\"\nalgorithm = \"fixed_window\"\nlimit = {LIMIT}\nwindow = \"1s\"\nscope = \"global\"\nhot = \"off\"\n"
    )
}

/// One answered check.
#[derive(Debug, Clone, Copy)]
struct Check {
    region: usize,
    /// The unix second whose window decided it (the server's, from
    /// `reset_at` when admitted; the send time's when refused).
    window: u64,
    allowed: bool,
}

/// One poll of a region's owner of the key.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Poll {
    t: f64,
    region: usize,
    allocation: u64,
    next: u64,
    fallback: bool,
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn key_homed_in(home: &str) -> String {
    (0..)
        .map(|i| format!("traveller-{i}"))
        .find(|k| weir_cluster::regions::home::home(k, &REGIONS) == Some(home))
        .expect("some key is homed in every region")
}

/// Starts the three regions and their relays; returns them with the relays
/// of each region pair (both directions), for the cut.
async fn start(
    cli: &Cli,
    bin: &Path,
    nodes: usize,
) -> Result<(Vec<Cluster>, Vec<(usize, usize, Relay)>), SimError> {
    let rules_file = cli.out.join("regions-rules.toml");
    std::fs::create_dir_all(&cli.out).map_err(|e| SimError::io("creating the out dir", e))?;
    std::fs::write(&rules_file, rules_toml())
        .map_err(|e| SimError::io("writing the regions rules", e))?;
    // relays[(from, to)][j]: from region `from` to node j of region `to`.
    let mut relays: Vec<(usize, usize, Relay)> = Vec::new();
    let mut peers: Vec<Vec<String>> = vec![Vec::new(); REGIONS.len()];
    for (from, fname) in REGIONS.iter().enumerate() {
        for (to, tname) in REGIONS.iter().enumerate() {
            if from == to {
                continue;
            }
            for _ in 0..nodes {
                let r = Relay::start(delay(fname, tname)).await?;
                peers[from].push(format!("{tname}={}", r.addr));
                relays.push((from, to, r));
            }
        }
    }
    let mut clusters = Vec::new();
    for (i, name) in REGIONS.iter().enumerate() {
        let mut opts = ClusterOptions::new(
            bin.to_path_buf(),
            nodes,
            "owner",
            rules_file.clone(),
            cli.out.join("logs").join(format!("region-{name}")),
        );
        opts.extra_args = vec![
            "--region".into(),
            (*name).into(),
            "--region-peers".into(),
            peers[i].join(","),
            "--region-round".into(),
            format!("{}ms", ROUND.as_millis()),
        ];
        clusters.push(Cluster::start(opts).await?);
    }
    // Point each relay at its node, in the order they were made.
    let mut next = vec![vec![0usize; REGIONS.len()]; REGIONS.len()];
    for (from, to, r) in &relays {
        let j = next[*from][*to];
        next[*from][*to] += 1;
        r.point_at(clusters[*to].nodes[j].grpc);
    }
    Ok((clusters, relays))
}

async fn wait_ready(client: &reqwest::Client, clusters: &[Cluster]) -> Result<(), SimError> {
    let give_up = Instant::now() + Duration::from_secs(30);
    for c in clusters {
        for i in 0..c.len() {
            loop {
                let url = format!("{}/v1/cluster", c.http_base(i));
                let ready = match client.get(&url).send().await {
                    Ok(r) => r
                        .json::<Value>()
                        .await
                        .ok()
                        .map(|d| d["region"]["ready"] == true),
                    Err(_) => None,
                };
                if ready == Some(true) {
                    break;
                }
                if Instant::now() > give_up {
                    return Err(SimError::Usage(format!(
                        "{url}: regions never became ready"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    Ok(())
}

/// Sends each region's checks at its demand until the run ends.
async fn drive(
    client: reqwest::Client,
    bases: Vec<Vec<String>>,
    key: String,
    start: Instant,
    checks: Arc<Mutex<Vec<Check>>>,
) {
    let mut tasks = Vec::new();
    for (region, nodes) in bases.into_iter().enumerate() {
        let (client, key, checks) = (client.clone(), key.clone(), checks.clone());
        tasks.push(tokio::spawn(async move {
            // At most this many checks in flight per region: a node that
            // stalls slows its region's load instead of piling it up.
            let slots = Arc::new(tokio::sync::Semaphore::new(64));
            let mut sent = 0u64;
            let mut owed = 0.0;
            let tick = Duration::from_millis(10);
            let mut next = start;
            loop {
                next += tick;
                tokio::time::sleep_until(next).await;
                let t = start.elapsed().as_secs_f64();
                if t >= RUN {
                    break;
                }
                owed += demand(t)[region] * tick.as_secs_f64();
                while owed >= 1.0 {
                    owed -= 1.0;
                    let Ok(permit) = slots.clone().try_acquire_owned() else {
                        continue;
                    };
                    let url = format!("{}/v1/check", nodes[(sent as usize) % nodes.len()]);
                    sent += 1;
                    let (client, key, checks) = (client.clone(), key.clone(), checks.clone());
                    tokio::spawn(async move {
                        let _permit = permit;
                        let body = serde_json::json!({"key": key, "route": "GET /"});
                        let sent_unix = unix_now();
                        let Ok(res) = client.post(&url).json(&body).send().await else {
                            return;
                        };
                        let allowed = res.status().as_u16() == 200;
                        let doc: Value = res.json().await.unwrap_or(Value::Null);
                        let window = match doc["reset_at"].as_u64() {
                            // Admitted: reset_at is the end of the window that counted it.
                            Some(ms) if allowed => (ms / 1000).saturating_sub(1),
                            _ => sent_unix as u64,
                        };
                        checks.lock().expect("checks").push(Check {
                            region,
                            window,
                            allowed,
                        });
                    });
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Polls every node for the key's allocation, keeping per region the node
/// that holds it (its owner in the region).
async fn poll(
    client: reqwest::Client,
    bases: Vec<Vec<String>>,
    key: String,
    start: Instant,
    polls: Arc<Mutex<Vec<Poll>>>,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    while start.elapsed().as_secs_f64() < RUN {
        tick.tick().await;
        let t = start.elapsed().as_secs_f64();
        for (region, nodes) in bases.iter().enumerate() {
            let mut best: Option<Poll> = None;
            for base in nodes {
                let Ok(r) = client.get(format!("{base}/v1/cluster")).send().await else {
                    continue;
                };
                let Ok(doc) = r.json::<Value>().await else {
                    continue;
                };
                let keys = doc["region"]["keys"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                for k in keys.iter().filter(|k| k["key"] == key.as_str()) {
                    let p = Poll {
                        t,
                        region,
                        allocation: k["allocation"].as_u64().unwrap_or(0),
                        next: k["next"].as_u64().unwrap_or(0),
                        fallback: k["mode"] == "fallback",
                    };
                    if best.is_none_or(|b| p.allocation + p.next > b.allocation + b.next) {
                        best = Some(p);
                    }
                }
            }
            if let Some(p) = best {
                polls.lock().expect("polls").push(p);
            }
        }
    }
}

/// Per window: admitted per region, and asked in all.
#[derive(Debug, Default, Clone, Copy)]
struct Window {
    admitted: [u64; 3],
    asked: u64,
    /// Seconds into the run of the window's start.
    t: f64,
}

fn windows(checks: &[Check], t0_unix: f64) -> BTreeMap<u64, Window> {
    let mut w: BTreeMap<u64, Window> = BTreeMap::new();
    for c in checks {
        let e = w.entry(c.window).or_default();
        e.t = c.window as f64 - t0_unix;
        e.asked += 1;
        if c.allowed {
            e.admitted[c.region] += 1;
        }
    }
    w
}

/// Runs the scenario and scores it.
pub async fn run(cli: &Cli, bin: &Path) -> Result<Vec<RunResult>, SimError> {
    let nodes = cli.nodes.clamp(2, 3);
    if !cli.quiet {
        eprintln!(
            "starting 3 regions of {nodes} nodes (east, eu, west), links delayed 75/150 ms one way"
        );
    }
    let (clusters, relays) = start(cli, bin, nodes).await?;
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .pool_max_idle_per_host(64)
        .build()
        .map_err(|e| SimError::Usage(format!("http client: {e}")))?;
    wait_ready(&client, &clusters).await?;
    let key = key_homed_in(HOME);
    let bases: Vec<Vec<String>> = clusters
        .iter()
        .map(|c| (0..c.len()).map(|i| c.http_base(i)).collect())
        .collect();
    let checks: Arc<Mutex<Vec<Check>>> = Arc::default();
    let polls: Arc<Mutex<Vec<Poll>>> = Arc::default();
    let start = Instant::now();
    let t0_unix = unix_now();
    let load = tokio::spawn(drive(
        client.clone(),
        bases.clone(),
        key.clone(),
        start,
        checks.clone(),
    ));
    let watcher = tokio::spawn(poll(client, bases, key.clone(), start, polls.clone()));
    let cut_links = |cut: bool| {
        let home = REGIONS.iter().position(|r| *r == HOME).expect("home");
        for (from, to, r) in &relays {
            if (*from, *to) == (CUT_REGION, home) || (*from, *to) == (home, CUT_REGION) {
                r.set_cut(cut);
            }
        }
    };
    tokio::time::sleep_until(start + Duration::from_secs_f64(CUT.0)).await;
    cut_links(true);
    if !cli.quiet {
        eprintln!("cut west from eu at {:.1}s", start.elapsed().as_secs_f64());
    }
    tokio::time::sleep_until(start + Duration::from_secs_f64(CUT.1)).await;
    cut_links(false);
    let _ = load.await;
    let _ = watcher.await;
    // Answers still in flight land within the client's timeout.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let checks = checks.lock().expect("checks").clone();
    let polls = polls.lock().expect("polls").clone();
    drop(clusters);
    let result = score(&checks, &polls, t0_unix);
    let svg = cli.out.join("regions.svg");
    if let Err(e) = draw(&svg, &checks, &polls, t0_unix) {
        eprintln!("weir-sim: could not draw {}: {e}", svg.display());
    }
    let raw = serde_json::json!({"polls": polls, "limit": LIMIT, "shift_s": SHIFT, "cut_s": [CUT.0, CUT.1]});
    let _ = std::fs::write(cli.out.join("regions-allocations.json"), raw.to_string());
    Ok(vec![result])
}

fn score(checks: &[Check], polls: &[Poll], t0_unix: f64) -> RunResult {
    let ws = windows(checks, t0_unix);
    // Whole windows only: the first and last are partly outside the run.
    let whole: Vec<&Window> = ws
        .values()
        .filter(|w| w.t >= 0.0 && w.t + 1.0 <= RUN)
        .collect();
    // A window is "cut" if it overlaps the cut or the two windows after it
    // heals (the fallback's last window and the first reallocated one).
    let in_cut = |w: &Window| w.t + 1.0 > CUT.0 && w.t < CUT.1 + 2.0;
    let over = |w: &Window| w.admitted.iter().sum::<u64>().saturating_sub(LIMIT);
    let reference = |w: &Window| w.asked.min(LIMIT);
    let under = |w: &Window| reference(w).saturating_sub(w.admitted.iter().sum::<u64>());
    let sum = |f: &dyn Fn(&Window) -> u64, pick: &dyn Fn(&Window) -> bool| -> u64 {
        whole.iter().filter(|w| pick(w)).map(|w| f(w)).sum()
    };
    let up = |w: &Window| !in_cut(w);
    let all = |_: &Window| true;
    let pct = |a: u64, b: u64| {
        if b == 0 {
            0.0
        } else {
            100.0 * a as f64 / b as f64
        }
    };
    let mut f = Figures::default();
    f.set(
        "over_pct_links_up",
        pct(sum(&over, &up), sum(&reference, &up)),
    );
    f.set(
        "under_pct_links_up",
        pct(sum(&under, &up), sum(&reference, &up)),
    );
    f.set(
        "over_pct_cut",
        pct(sum(&over, &in_cut), sum(&reference, &in_cut)),
    );
    f.set(
        "under_pct_cut",
        pct(sum(&under, &in_cut), sum(&reference, &in_cut)),
    );
    f.set(
        "worst_window_admitted",
        whole
            .iter()
            .map(|w| w.admitted.iter().sum::<u64>())
            .max()
            .unwrap_or(0) as f64,
    );
    // The shift: how long until west holds 90% of L of the window being
    // allocated (its next), in rounds after the round trip to the home
    // (a round's answer comes back one round trip after its report).
    let moved = polls
        .iter()
        .filter(|p| p.region == 2 && p.t >= SHIFT && p.t < CUT.0)
        .find(|p| p.next.max(p.allocation) as f64 >= 0.9 * LIMIT as f64)
        .map(|p| p.t - SHIFT);
    let rtt = 2.0 * delay("west", HOME).as_secs_f64();
    let round = ROUND.as_secs_f64();
    // Rounds of wall time, and which of west's reports after the shift was
    // answered with it: its answer lands one round trip after the report.
    f.set("shift_wall_rounds", moved.map_or(f64::NAN, |s| s / round));
    f.set(
        "shift_rounds",
        moved.map_or(f64::NAN, |s| ((s - rtt) / round).max(0.0)),
    );
    f.set("shift_s", moved.unwrap_or(f64::NAN));
    // West's share of each whole window from the second after the shift to the cut.
    let after: Vec<&&Window> = whole
        .iter()
        .filter(|w| w.t >= SHIFT + 1.0 && w.t + 1.0 <= CUT.0)
        .collect();
    let west_share = after.iter().map(|w| w.admitted[2] as f64).sum::<f64>()
        / (after.len().max(1) as f64 * LIMIT as f64);
    f.set("west_pct_of_l_after_shift", 100.0 * west_share);
    // The cut: when west fell back, what it admitted per window on its own.
    let fell = polls
        .iter()
        .find(|p| p.region == 2 && p.fallback && p.t >= CUT.0)
        .map(|p| p.t - CUT.0);
    f.set("fallback_after_cut_s", fell.unwrap_or(f64::NAN));
    let static_windows: Vec<&&Window> = whole
        .iter()
        .filter(|w| w.t >= CUT.0 + 3.0 && w.t + 1.0 <= CUT.1)
        .collect();
    let west_static = static_windows
        .iter()
        .map(|w| w.admitted[2])
        .max()
        .unwrap_or(0);
    f.set("west_admitted_per_window_fallen_back", west_static as f64);
    f.set("static_share", (LIMIT / 3) as f64);
    f.note = format!(
        "over {:.1}% links up; west ≥90% of L after {:.1} rounds (+ a round trip); cut: over {:.1}%, west {} per window on its static share",
        f.get("over_pct_links_up").unwrap_or(0.0),
        f.get("shift_rounds").unwrap_or(f64::NAN),
        f.get("over_pct_cut").unwrap_or(0.0),
        west_static
    );
    let admitted = checks.iter().filter(|c| c.allowed).count() as u64;
    let reference_admitted = sum(&reference, &all);
    let over_all = sum(&over, &all);
    let under_all = sum(&under, &all);
    RunResult {
        strategy: "owner".into(),
        workload: "regions".into(),
        variant: String::new(),
        nodes: 0,
        checks: checks.len() as u64,
        admitted,
        denied: checks.len() as u64 - admitted,
        reference_admitted,
        over: over_all,
        under: under_all,
        over_pct: pct(over_all, reference_admitted),
        under_pct: pct(under_all, reference_admitted),
        elapsed_s: RUN,
        throughput: checks.len() as f64 / RUN,
        figures: f,
        ..RunResult::default()
    }
}

fn region_color(i: usize) -> RGBColor {
    [
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
    ][i]
}

/// Each region's allocation (polled) and use (admitted per window) against L.
fn draw(
    path: &PathBuf,
    checks: &[Check],
    polls: &[Poll],
    t0_unix: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let y_max = LIMIT as f64 * 1.25;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "regions: allocation (line) and use per window (dots) against L; west cut from eu's home 12-18 s",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(0.0..RUN, 0.0..y_max)?;
    chart
        .configure_mesh()
        .light_line_style(RGBColor(245, 245, 245))
        .x_desc("seconds into the run")
        .y_desc("units per 1 s window")
        .draw()?;
    chart.draw_series(std::iter::once(Rectangle::new(
        [(CUT.0, 0.0), (CUT.1, y_max)],
        RGBColor(255, 235, 235).filled(),
    )))?;
    chart
        .draw_series(LineSeries::new(
            [(0.0, LIMIT as f64), (RUN, LIMIT as f64)],
            BLACK.stroke_width(2),
        ))?
        .label("L (global)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK));
    let ws = windows(checks, t0_unix);
    for (i, name) in REGIONS.iter().enumerate() {
        let c = region_color(i);
        let line: Vec<(f64, f64)> = polls
            .iter()
            .filter(|p| p.region == i)
            .map(|p| (p.t, p.allocation as f64))
            .collect();
        chart
            .draw_series(LineSeries::new(line, c.stroke_width(2)))?
            .label(format!("{name} allocation"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], c.stroke_width(2)));
        let used: Vec<(f64, f64)> = ws
            .values()
            .filter(|w| w.t >= 0.0 && w.t < RUN)
            .map(|w| (w.t + 0.5, w.admitted[i] as f64))
            .collect();
        chart
            .draw_series(used.into_iter().map(|p| Circle::new(p, 4, c.filled())))?
            .label(format!("{name} use"))
            .legend(move |(x, y)| Circle::new((x + 8, y), 4, c.filled()));
    }
    let total: Vec<(f64, f64)> = ws
        .values()
        .filter(|w| w.t >= 0.0 && w.t < RUN)
        .map(|w| (w.t + 0.5, w.admitted.iter().sum::<u64>() as f64))
        .collect();
    chart
        .draw_series(total.into_iter().map(|p| Cross::new(p, 5, BLACK)))?
        .label("all regions' use")
        .legend(|(x, y)| Cross::new((x + 8, y), 5, BLACK));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::MiddleLeft)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(region: usize, window: u64, allowed: bool) -> Check {
        Check {
            region,
            window,
            allowed,
        }
    }

    #[test]
    fn a_window_over_the_limit_is_over_admission_and_a_short_one_under() {
        let t0 = 1_000.0;
        let mut checks = Vec::new();
        // Window 1001 (1 s in, links up): 310 admitted over two regions, 10 over L.
        checks.extend((0..200).map(|_| check(0, 1_001, true)));
        checks.extend((0..110).map(|_| check(2, 1_001, true)));
        // Window 1002: 400 asked, 250 admitted: 50 under.
        checks.extend((0..250).map(|_| check(2, 1_002, true)));
        checks.extend((0..150).map(|_| check(2, 1_002, false)));
        let r = score(&checks, &[], t0);
        assert_eq!((r.over, r.under), (10, 50));
        assert_eq!(r.reference_admitted, 600);
        assert!((r.figure("over_pct_links_up").unwrap() - 100.0 * 10.0 / 600.0).abs() < 1e-9);
        assert_eq!(r.figure("worst_window_admitted"), Some(310.0));
    }

    #[test]
    fn the_key_is_homed_where_the_cut_is_measured() {
        let k = key_homed_in(HOME);
        assert_eq!(weir_cluster::regions::home::home(&k, &REGIONS), Some(HOME));
        assert_eq!(delay("west", "eu"), Duration::from_millis(150));
        assert_eq!(delay("eu", "east"), Duration::from_millis(75));
    }
}
