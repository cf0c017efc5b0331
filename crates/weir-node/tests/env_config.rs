//! `weir serve` configured from the environment alone: `WEIR_` + a flag's
//! name, and a secret read from a file.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");
const DEADLINE: Duration = Duration::from_secs(30);

/// A child killed when the test ends, passing or not.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port free a moment ago.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Guard: flags come from `WEIR_*` variables. Without them the node would
/// listen on the default 127.0.0.1:8080 and have no admin token, so the
/// PUT below would be refused.
#[tokio::test]
async fn a_node_takes_its_addresses_and_a_secret_file_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("admin-token");
    std::fs::write(&token, "env-t0ken\n").unwrap();
    let port = free_port();
    let child = Command::new(WEIR)
        .arg("serve")
        .env("WEIR_HTTP", format!("127.0.0.1:{port}"))
        .env("WEIR_GRPC", "127.0.0.1:0")
        .env("WEIR_GOSSIP", "127.0.0.1:0")
        .env("WEIR_ADMIN_TOKEN_FILE", &token)
        .env("WEIR_NODE_ID", "from-env")
        .env_remove("WEIR_ADMIN_TOKEN")
        .env_remove("WEIR_CLUSTER_SECRET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn weir serve");
    let mut child = Killed(child);
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let give_up = Instant::now() + DEADLINE;
    loop {
        let up = client.get(format!("{base}/readyz")).send().await;
        if up.is_ok_and(|r| r.status() == 200) {
            break;
        }
        if let Some(status) = child.0.try_wait().unwrap() {
            panic!("weir serve exited: {status:?}");
        }
        assert!(Instant::now() < give_up, "nothing served on {base}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cluster: serde_json::Value = client
        .get(format!("{base}/v1/cluster"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(cluster["node_id"], "from-env");
    let put = |bearer: &'static str| {
        client
            .put(format!("{base}/v1/limits/free"))
            .bearer_auth(bearer)
            .json(&serde_json::json!({"rules": [{
                "name": "env-rule", "algorithm": "fixed_window",
                "limit": 5, "window": "1m"
            }]}))
            .send()
    };
    assert_eq!(put("wrong").await.unwrap().status(), 403);
    assert_eq!(
        put("env-t0ken").await.unwrap().status(),
        200,
        "the token from the file, its newline dropped"
    );
}

/// A secret file that cannot be read stops the start with one line naming it.
#[test]
fn an_unreadable_secret_file_stops_the_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-secret-here");
    let out = Command::new(WEIR)
        .args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
        .args(["--gossip", "127.0.0.1:0"])
        .env("WEIR_CLUSTER_SECRET_FILE", &missing)
        .env_remove("WEIR_CLUSTER_SECRET")
        .stdin(Stdio::null())
        .output()
        .expect("run weir");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--cluster-secret-file") && stderr.contains("no-secret-here"),
        "{stderr}"
    );
}
