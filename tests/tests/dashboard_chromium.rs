//! The dashboard in a real headless browser (Debian's chromium, driven over WebDriver by chromedriver): three members alive, a rule's denied rate rising, a killed node leaving. Writes screenshots under `target/screenshots/`.
//!
//! Ignored by a plain `cargo test`, since it needs the browser installed;
//! `.ci/run` installs `chromium` and `chromium-driver` and runs it with
//! `--ignored`. Everything stays on loopback.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};
use weir_tests::{client, start_cluster, wait_until, TestNode};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

const RULES: &str = r#"
[[rule]]
name      = "per-client"
algorithm = "sliding_window_counter"
limit     = 20
window    = "60s"

[[rule]]
name      = "per-ip"
by        = "ip"
algorithm = "token_bucket"
limit     = 1000
window    = "60s"

[[rule]]
name      = "per-ip-strict-dark"
by        = "ip"
algorithm = "fixed_window"
limit     = 30
window    = "60s"
shadow    = true
"#;

/// chromedriver and the browser it starts, in a process group of their
/// own, ended together when the test ends however it ends.
struct Driver {
    child: Child,
    base: String,
    http: reqwest::Client,
    session: String,
    profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("bound").port()
}

impl Driver {
    async fn start() -> Driver {
        for tool in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(tool).exists(),
                "{tool} is missing: this test needs Debian's chromium and chromium-driver \
                 (apt-get install chromium chromium-driver; .ci/run installs them)"
            );
        }
        let port = free_port();
        let child = {
            use std::os::unix::process::CommandExt;
            Command::new(CHROMEDRIVER)
                .arg(format!("--port={port}"))
                .arg("--allowed-ips=127.0.0.1")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .expect("start chromedriver")
        };
        let profile = tempfile::tempdir().expect("a fresh browser profile");
        let mut driver = Driver {
            child,
            base: format!("http://127.0.0.1:{port}"),
            http: client(),
            session: String::new(),
            profile,
        };
        wait_until("chromedriver is ready", || async {
            let status = driver.http.get(format!("{}/status", driver.base)).send();
            match status.await {
                Ok(r) => r
                    .json::<Value>()
                    .await
                    .is_ok_and(|v| v["value"]["ready"] == true),
                Err(_) => false,
            }
        })
        .await;
        // Without these flags chromium on a machine with no internet hangs
        // on network lookups (updates, sync, first-run pages).
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--no-first-run",
            "--no-default-browser-check",
            "--window-size=1280,1500",
            &format!("--user-data-dir={}", driver.profile.path().display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }}});
        let created = driver.command("POST", "/session", caps).await;
        driver.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_string();
        driver
    }

    /// One WebDriver command; its `value`.
    async fn command(&self, method: &str, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.base);
        let req = match method {
            "POST" => self.http.post(url).json(&body),
            "DELETE" => self.http.delete(url),
            _ => self.http.get(url),
        };
        let res = req.send().await.expect("chromedriver answers");
        let v: Value = res.json().await.expect("a WebDriver answer");
        assert!(v["value"]["error"].is_null(), "{method} {path}: {v}");
        v["value"].clone()
    }

    async fn open(&self, url: &str) {
        let path = format!("/session/{}/url", self.session);
        self.command("POST", &path, json!({"url": url})).await;
    }

    /// Runs `script` (a function body) in the page and returns its result.
    async fn eval(&self, script: &str) -> Value {
        let path = format!("/session/{}/execute/sync", self.session);
        self.command("POST", &path, json!({"script": script, "args": []}))
            .await
    }

    async fn screenshot(&self, name: &str) -> PathBuf {
        let path = format!("/session/{}/screenshot", self.session);
        let png = self.command("GET", &path, Value::Null).await;
        let bytes = base64_decode(png.as_str().expect("a base64 PNG"));
        let dir = screenshots();
        std::fs::create_dir_all(&dir).expect("create target/screenshots");
        let file = dir.join(name);
        std::fs::write(&file, bytes).expect("write the screenshot");
        file
    }

    async fn quit(mut self) {
        let path = format!("/session/{}", self.session);
        self.command("DELETE", &path, Value::Null).await;
        self.session.clear();
    }
}

/// `target/screenshots`, beside the build's own temporary directory.
fn screenshots() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target/tmp has a parent")
        .join("screenshots")
}

/// Standard base64 (RFC 4648) as WebDriver sends screenshots.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let digits: Vec<u8> = text.bytes().filter(|&c| c != b'=').map(value).collect();
    digits
        .chunks(4)
        .flat_map(|c| {
            let n = c
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, &d)| n | u32::from(d) << (18 - 6 * i));
            let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
            bytes.into_iter().take(c.len() - 1)
        })
        .collect()
}

/// The members table as the page shows it: (id, state) per row.
async fn members(page: &Driver) -> Vec<(String, String)> {
    let rows = page
        .eval(
            "return Array.from(document.querySelectorAll('#members tbody tr'))\
             .map(r => [r.dataset.member, r.dataset.state]);",
        )
        .await;
    rows.as_array()
        .map(|rows| {
            rows.iter()
                .map(|r| (r[0].as_str().unwrap().into(), r[1].as_str().unwrap().into()))
                .collect()
        })
        .unwrap_or_default()
}

/// A rule's rate as the page shows it; None before the row exists.
async fn shown_rate(page: &Driver, rule: &str, field: &str) -> Option<f64> {
    let script = format!(
        "const c = document.querySelector('#rules tr[data-rule=\"{rule}\"] td[data-field=\"{field}\"]');\
         return c ? c.textContent : null;"
    );
    page.eval(&script).await.as_str()?.parse().ok()
}

/// Checks from a few clients through every gateway, so each member has
/// activity of its own; `cust_hot` goes past its limit on node-1.
async fn drive(nodes: &[TestNode]) {
    for (i, n) in nodes.iter().enumerate() {
        for c in 0..3 {
            let ip = format!("198.51.100.{c}");
            n.check(json!({"key": format!("cust_{i}_{c}"), "ip": ip}))
                .await;
        }
    }
    for _ in 0..6 {
        nodes[0]
            .check(json!({"key": "cust_hot", "ip": "203.0.113.9"}))
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and chromium-driver installed; .ci/run runs it with --ignored"]
async fn needs_chromium_the_dashboard_shows_members_a_denying_rule_and_a_node_leaving() {
    let mut nodes = start_cluster(3, RULES, |_| {}).await;
    let page = Driver::start().await;
    page.open(&nodes[0].url("/ui")).await;

    wait_until("the page shows three members alive", || async {
        let m = members(&page).await;
        m.len() == 3 && m.iter().all(|(_, state)| state == "alive")
    })
    .await;
    let ids: Vec<String> = members(&page).await.into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["node-1", "node-2", "node-3"]);

    assert_eq!(
        shown_rate(&page, "per-client", "denied").await,
        Some(0.0),
        "nothing denied yet"
    );
    wait_until("per-client's denied rate rises on the page", || async {
        drive(&nodes).await;
        shown_rate(&page, "per-client", "denied").await > Some(0.0)
    })
    .await;
    assert!(shown_rate(&page, "per-client", "allowed").await > Some(0.0));
    // Every file the page loaded came from the node itself.
    let loaded = page
        .eval("return performance.getEntriesByType('resource').map(e => e.name);")
        .await;
    for url in loaded.as_array().expect("resource URLs") {
        let url = url.as_str().unwrap();
        assert!(url.starts_with(&nodes[0].base), "the page loaded {url}");
    }
    wait_until("the shadow rule's would-deny rate shows", || async {
        drive(&nodes).await;
        shown_rate(&page, "per-ip-strict-dark", "shadow").await > Some(0.0)
    })
    .await;
    let shot = page.screenshot("dashboard.png").await;
    eprintln!("screenshot: {}", shot.display());

    nodes[2].take().kill();
    wait_until("node-3 leaves: down, or gone from the page", || async {
        let m = members(&page).await;
        m.iter()
            .find(|(id, _)| id == "node-3")
            .is_none_or(|(_, state)| state == "down")
            && m.iter()
                .filter(|(id, _)| id != "node-3")
                .all(|(_, state)| state == "alive")
    })
    .await;
    let shot = page.screenshot("dashboard-node-down.png").await;
    eprintln!("screenshot: {}", shot.display());
    page.quit().await;
}
