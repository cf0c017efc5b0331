//! What README.md and docs/*.md say a user can type or scrape, checked against the code: every `weir serve`/`weir check` flag against the real parser, every `/v1/...` endpoint against a running node's router, every `weir_*` metric against its exposition; and the pages stay an hour's reading of current figures: under 50,000 words, no run logs, at most five commit hashes a page.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use weir_node::cli::Cli;
use weir_node::{Node, ServeConfig};

/// README.md and every page of docs/, with their names.
fn pages() -> Vec<(String, String)> {
    let root: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut paths = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    paths.extend(docs);
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let name = p.strip_prefix(&root).unwrap().display().to_string();
            (name, text)
        })
        .collect()
}

/// The fenced code blocks of a page, continuation lines joined.
fn code_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            match current.take() {
                Some(b) => blocks.push(b.replace("\\\n", " ")),
                None => current = Some(String::new()),
            }
        } else if let Some(b) = current.as_mut() {
            b.push_str(line);
            b.push('\n');
        }
    }
    blocks
}

/// Inline code spans outside the fenced blocks.
fn inline_spans(text: &str) -> Vec<String> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    prose
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The flags given to `weir serve` or `weir check` in one shell text: the
/// binary by any path (`target/release/weir`), or a variable set to one
/// earlier in the same text (`W=target/release/weir`, then `$W serve`).
fn weir_flags(shell: &str) -> Vec<(String, String)> {
    let is_weir = |t: &str| Path::new(t).file_name().is_some_and(|n| n == "weir");
    let mut vars: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for line in shell.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        // A comment ends the command; `$` prompts and separators split it.
        let line = line.split(" #").next().unwrap();
        for command in line.split(['|', ';', '&']) {
            let tokens: Vec<&str> = command
                .split_whitespace()
                .map(|t| t.trim_matches(|c| matches!(c, '[' | ']' | '(' | ')' | '"' | '\'')))
                .collect();
            for (i, t) in tokens.iter().enumerate() {
                if let Some((name, value)) = t.split_once('=') {
                    if i == 0 && is_weir(value) {
                        vars.push(format!("${name}"));
                    }
                }
            }
            let Some(at) = tokens
                .iter()
                .position(|t| is_weir(t) || vars.iter().any(|v| v == t))
            else {
                continue;
            };
            let Some(sub) = tokens
                .get(at + 1)
                .filter(|s| matches!(**s, "serve" | "check"))
            else {
                continue;
            };
            for t in &tokens[at + 2..] {
                if let Some(flag) = t.strip_prefix("--") {
                    let flag = flag.split('=').next().unwrap();
                    out.push((sub.to_string(), flag.to_string()));
                }
            }
        }
    }
    out
}

/// Flags in the first cell of a flag table's rows (`| `--rules FILE` | ...`).
fn table_flags(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("| `--"))
        .map(|rest| {
            rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// The long flags of a subcommand, from the parser itself.
fn cli_flags(sub: &str) -> BTreeSet<String> {
    let cmd = Cli::command();
    let sub = cmd
        .find_subcommand(sub)
        .unwrap_or_else(|| panic!("no subcommand {sub}"));
    let mut flags: BTreeSet<String> = sub
        .get_arguments()
        .flat_map(|a| {
            a.get_long()
                .into_iter()
                .chain(a.get_all_aliases().into_iter().flatten())
                .map(str::to_string)
        })
        .collect();
    flags.insert("help".into());
    flags
}

#[test]
fn every_weir_flag_the_docs_show_exists() {
    let serve = cli_flags("serve");
    let check = cli_flags("check");
    let known = |sub: &str| if sub == "serve" { &serve } else { &check };
    let mut seen = 0;
    let mut wrong = Vec::new();
    for (page, text) in pages() {
        let mut claims: Vec<(String, String)> = Vec::new();
        for block in code_blocks(&text) {
            claims.extend(weir_flags(&block));
        }
        for span in inline_spans(&text) {
            if span.starts_with("weir serve") || span.starts_with("weir check") {
                claims.extend(weir_flags(&span));
            }
        }
        for (sub, flag) in &claims {
            seen += 1;
            if !known(sub).contains(flag) {
                wrong.push(format!("{page}: weir {sub} --{flag}"));
            }
        }
        // Flag tables document `weir serve` and `weir check`.
        if page == "README.md" || page == "docs/configuration.md" {
            for flag in table_flags(&text) {
                seen += 1;
                if !serve.contains(&flag) && !check.contains(&flag) {
                    wrong.push(format!("{page}: the table's --{flag}"));
                }
            }
        }
    }
    assert!(seen > 50, "the pages' flags were read ({seen})");
    assert!(
        wrong.is_empty(),
        "flags the parser does not know:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_flag_reader_finds_flags_the_parser_would_refuse() {
    let text = "```\nW=target/release/weir\n$W serve --http 127.0.0.1:0 --no-such-flag &\n\
                weir check --server x --key k   # --not-this-one\ncargo run -- --release\n```\n";
    let flags = weir_flags(&code_blocks(text)[0]);
    assert_eq!(
        flags,
        [
            ("serve".to_string(), "http".to_string()),
            ("serve".into(), "no-such-flag".into()),
            ("check".into(), "server".into()),
            ("check".into(), "key".into()),
        ]
    );
    assert!(!cli_flags("serve").contains("no-such-flag"));
    assert_eq!(
        table_flags("| `--rules FILE` | x |\n| flag | meaning |\n"),
        ["rules"]
    );
}

/// An HTTP endpoint a page names: the method when it gives one, and the
/// path. Routes of the example services a rule limits (`"POST
/// /v1/charges"`, the pattern `POST /v1/*`) and proto paths
/// (`proto/weir/v1/`) are not weir's endpoints.
fn endpoints(text: &str) -> Vec<(Option<String>, String)> {
    const METHODS: [&str; 4] = ["GET", "POST", "PUT", "DELETE"];
    let mut out = Vec::new();
    let mut rest = text;
    let mut offset = 0;
    while let Some(i) = rest.find("/v1/") {
        let at = offset + i;
        let path: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "/_-{}*".contains(*c))
            .collect();
        let before = &text[..at];
        let method = METHODS
            .iter()
            .find(|m| before.ends_with(&format!("{m} ")))
            .map(|m| m.to_string());
        let quoted_route = method.as_ref().is_some_and(|m| {
            before
                .strip_suffix(&format!("{m} "))
                .is_some_and(|b| b.ends_with('"'))
        });
        let proto = before.ends_with("weir");
        if !quoted_route && !proto && !path.contains('*') && path.len() > "/v1/".len() {
            out.push((method, path.trim_end_matches('/').to_string()));
        }
        offset = at + 4;
        rest = &text[offset..];
    }
    out
}

#[test]
fn the_endpoint_reader_skips_example_routes() {
    let text = "`GET /v1/hot`, route = \"POST /v1/charges\", (`POST /v1/*`), \
                proto/weir/v1/peer.proto, curl http://x/v1/cluster";
    assert_eq!(
        endpoints(text),
        [
            (Some("GET".to_string()), "/v1/hot".to_string()),
            (None, "/v1/cluster".to_string()),
        ]
    );
}

#[tokio::test]
async fn every_v1_endpoint_the_docs_name_is_routed() {
    let node = Node::start(ServeConfig::ephemeral()).await.expect("node");
    let base = format!("http://{}", node.http_addr());
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    // The router's fallbacks: no route at all, or not this method.
    let routed = |status: u16, body: &str| status != 405 && !body.contains("no such endpoint");
    let mut claims: BTreeSet<(Option<String>, String)> = BTreeSet::new();
    for (_, text) in pages() {
        claims.extend(endpoints(&text));
    }
    assert!(
        claims.len() >= 5,
        "the pages' endpoints were read: {claims:?}"
    );
    let mut wrong = Vec::new();
    for (method, path) in &claims {
        // A placeholder stands for any value; a path a page shortens to
        // its family (`PUT /v1/limits`, `/v1/counters`) names the routes
        // one or two levels under it.
        let concrete = path.replace("{tier}", "free").replace(['{', '}'], "");
        let mut ok = false;
        let below = [format!("{concrete}/free"), format!("{concrete}/free/k")];
        for candidate in std::iter::once(concrete.clone()).chain(below) {
            let m = method.as_deref().unwrap_or("GET");
            let res = http
                .request(m.parse().unwrap(), format!("{base}{candidate}"))
                .send()
                .await
                .unwrap();
            let status = res.status().as_u16();
            let body = res.text().await.unwrap();
            // Without a method, a 405 still says the path is routed.
            if routed(status, &body) || (method.is_none() && status == 405) {
                ok = true;
                break;
            }
        }
        if !ok {
            wrong.push(format!("{} {path}", method.as_deref().unwrap_or("(any)")));
        }
    }
    // The check can fail: a path no page may name is refused.
    let res = http
        .get(format!("{base}/v1/no-such-endpoint"))
        .send()
        .await
        .unwrap();
    assert!(!routed(res.status().as_u16(), &res.text().await.unwrap()));
    node.shutdown().await;
    assert!(
        wrong.is_empty(),
        "endpoints no route serves:\n{}",
        wrong.join("\n")
    );
}

/// Every `weir_...` word of a page that is not a crate path.
fn metric_names(text: &str) -> BTreeSet<String> {
    const CRATES: [&str; 7] = [
        "weir_core",
        "weir_client",
        "weir_node",
        "weir_proto",
        "weir_cluster",
        "weir_sim",
        "weir_alloc",
    ];
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("weir_") {
        let word: String = rest[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let after = &rest[i + word.len()..];
        let starts_word = i == 0 || {
            let c = rest[..i].chars().last().unwrap();
            !(c.is_ascii_alphanumeric() || c == '_')
        };
        if starts_word && !after.starts_with("::") && !CRATES.contains(&word.as_str()) {
            out.insert(word.clone());
        }
        rest = &rest[i + word.len()..];
    }
    out
}

#[tokio::test]
async fn every_metric_the_docs_name_is_exported() {
    // A shadow rule beside an enforcing one, so one check is counted by
    // both; in a region, so the region families are registered too.
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nname = \"a\"\nalgorithm = \"fixed_window\"\nlimit = 5\nwindow = \"1h\"\n\n\
         [[rule]]\nname = \"b\"\nby = \"ip\"\nalgorithm = \"fixed_window\"\nlimit = 1\n\
         window = \"1h\"\nshadow = true\n",
    )
    .unwrap();
    let mut config = ServeConfig {
        rules_file: Some(rules),
        ..ServeConfig::ephemeral()
    };
    let mut region = weir_cluster::regions::RegionConfig::new("a");
    region.peers = vec!["b=127.0.0.1:1".into()];
    config.cluster.region = Some(region);
    let node = Node::start(config).await.expect("node");
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    // Families with labels show once they have a sample: an allowed
    // check, one the shadow rule would deny, and a refused one.
    for body in [
        r#"{"key":"k1","ip":"192.0.2.1"}"#,
        r#"{"key":"k2","ip":"192.0.2.1"}"#,
        r#"{"key":""}"#,
    ] {
        http.post(format!("http://{}/v1/check", node.http_addr()))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
    }
    let text = http
        .get(format!("http://{}/metrics", node.http_addr()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    node.shutdown().await;
    // Every registered family has a TYPE line, samples or not.
    let families: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    assert!(families.len() > 30, "the exposition was read");
    let exported = |name: &str| {
        families.iter().any(|(n, _)| n == name)
            || ["_bucket", "_sum", "_count"].iter().any(|s| {
                name.strip_suffix(s)
                    .is_some_and(|base| families.iter().any(|(n, t)| n == base && t == "histogram"))
            })
    };
    let mut wrong = Vec::new();
    let mut seen = 0;
    for (page, text) in pages() {
        for name in metric_names(&text) {
            seen += 1;
            if !exported(&name) {
                wrong.push(format!("{page}: {name}"));
            }
        }
    }
    assert!(seen > 30, "the pages' metric names were read ({seen})");
    assert!(!exported("weir_no_such_metric_total"));
    assert!(
        wrong.is_empty(),
        "metrics no node exports:\n{}",
        wrong.join("\n")
    );
}

/// The words of a text, lower-cased, stripped of punctuation at either end.
fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_ascii_alphanumeric())
                .to_ascii_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

fn is_count(w: &str) -> bool {
    !w.is_empty() && w.chars().all(|c| c.is_ascii_digit() || c == ',')
}

/// What reads as a run log rather than a current statement: "5 of 100
/// runs", "in 6 of 150", a date of a run (2026-12-07).
fn run_log_phrases(text: &str) -> Vec<String> {
    const RUNS: [&str; 6] = ["runs", "rounds", "races", "tries", "attempts", "seeds"];
    let w = words(text);
    let mut out = Vec::new();
    for i in 0..w.len() {
        if i + 2 < w.len() && is_count(&w[i]) && w[i + 1] == "of" && is_count(&w[i + 2]) {
            let next = &w[i + 3..(i + 5).min(w.len())];
            let in_before = i > 0 && w[i - 1] == "in";
            if in_before || next.iter().any(|n| RUNS.contains(&n.as_str())) {
                out.push(w[i.saturating_sub(1)..(i + 5).min(w.len())].join(" "));
            }
        }
        let b = w[i].as_bytes();
        let date = b.len() == 10
            && b[4] == b'-'
            && b[7] == b'-'
            && b.iter()
                .enumerate()
                .all(|(j, c)| j == 4 || j == 7 || c.is_ascii_digit());
        if date {
            out.push(w[i].clone());
        }
    }
    out
}

/// Distinct words that look like commit hashes: 7 to 40 hex digits with
/// both a letter and a digit among them.
fn commit_hashes(text: &str) -> BTreeSet<String> {
    words(text)
        .into_iter()
        .filter(|w| {
            (7..=40).contains(&w.len())
                && w.chars().all(|c| c.is_ascii_hexdigit())
                && w.chars().any(|c| c.is_ascii_digit())
                && w.chars().any(|c| c.is_ascii_alphabetic())
        })
        .collect()
}

#[test]
fn the_docs_read_in_an_hour_and_state_figures_not_run_logs() {
    let pages = pages();
    let total: usize = pages
        .iter()
        .map(|(_, t)| t.split_whitespace().count())
        .sum();
    assert!(total > 10_000, "the pages were read ({total} words)");
    assert!(
        total < 50_000,
        "README.md and docs/ hold {total} words; an hour's reading is under 50,000"
    );
    let mut wrong = Vec::new();
    for (page, text) in &pages {
        let hashes = commit_hashes(text);
        if hashes.len() > 5 {
            wrong.push(format!("{page}: {} commit hashes", hashes.len()));
        }
        for phrase in run_log_phrases(text) {
            wrong.push(format!("{page}: \"{phrase}\""));
        }
    }
    // The checks can fail.
    assert_eq!(
        run_log_phrases("It failed in 5 of 100 leave races.").len(),
        1
    );
    assert_eq!(run_log_phrases("measured 2026-12-07, 3 of 9 runs").len(), 2);
    assert!(run_log_phrases("0 of 20 keys over").is_empty());
    assert_eq!(
        commit_hashes("3f9a2c1 and 0b7d4e8, not 1795981980").len(),
        2
    );
    assert!(
        wrong.is_empty(),
        "run logs in the docs (say what is true now, with the command that shows it):\n{}",
        wrong.join("\n")
    );
    let readme = &pages[0].1;
    assert!(
        readme.contains("docs/envoy.md"),
        "README links docs/envoy.md"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    assert!(!root.join("docs/performance-history.md").exists());
}
