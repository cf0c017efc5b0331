//! Real `weir serve` processes: SIGKILL a key's owner mid-traffic; the client sees no 5xx and no hang.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use weir_cluster::membership::NodeIdentity;
use weir_cluster::ring::Ring;

const WEIR: &str = env!("CARGO_BIN_EXE_weir");
const RULES: &str = r#"
[[rule]]
name      = "per-client"
algorithm = "sliding_window_log"
limit     = 20
window    = "60s"
"#;
/// Stated bound for the survivors to agree on a new owner after a SIGKILL,
/// with the default (LAN) gossip profile the binary runs: detection is
/// ~3-4 s (probe 0.5 s, suspect-to-down 2 s), asserted with room for a
/// loaded machine.
const AGREE: Duration = Duration::from_secs(12);
/// No single check may take longer: a hang is a failure.
const PER_CHECK: Duration = Duration::from_secs(2);

/// A `weir serve` child, killed when dropped.
struct Proc {
    child: Child,
    http: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(id: &str, rules: &std::path::Path, seed: Option<&str>) -> Proc {
    let mut cmd = Command::new(WEIR);
    cmd.args(["serve", "--log-format", "json", "--node-id", id])
        .args(["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
        .args(["--gossip", "127.0.0.1:0"])
        .arg("--rules")
        .arg(rules)
        .env("RUST_LOG", "info")
        .env("WEIR_CLUSTER_SECRET", "cluster-kill-test-secret")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(seed) = seed {
        cmd.args(["--seeds", seed]);
    }
    let mut child = cmd.spawn().expect("spawn weir serve");
    // The chosen ports are only in the log; keep draining it afterwards so
    // the child never blocks on a full pipe.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let http = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the node logs that it serves");
        let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if v["fields"]["message"] == "weir node serving" {
            break v["fields"]["http"].as_str().unwrap().to_string();
        }
    };
    std::thread::spawn(move || for _ in rx {});
    Proc {
        child,
        http: format!("http://{http}"),
    }
}

async fn cluster_doc(client: &reqwest::Client, p: &Proc) -> Value {
    client
        .get(format!("{}/v1/cluster", p.http))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn live_ids(doc: &Value) -> Vec<String> {
    doc["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["state"] != "down")
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect()
}

async fn wait_for(what: &str, limit: Duration, mut cond: impl AsyncFnMut() -> bool) -> Duration {
    let started = Instant::now();
    loop {
        if cond().await {
            return started.elapsed();
        }
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_a_keys_owner_costs_no_5xx_and_no_hang_and_survivors_agree_on_a_new_owner() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, RULES).unwrap();
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(PER_CHECK)
        .build()
        .unwrap();

    let n1 = spawn("n1", &rules, None);
    let seed = cluster_doc(&client, &n1).await["members"][0]["gossip"]
        .as_str()
        .unwrap()
        .to_string();
    let n2 = spawn("n2", &rules, Some(&seed));
    let n3 = spawn("n3", &rules, Some(&seed));
    for p in [&n1, &n2, &n3] {
        wait_for("three live members", Duration::from_secs(30), async || {
            live_ids(&cluster_doc(&client, p).await) == ["n1", "n2", "n3"]
        })
        .await;
    }

    // A key n3 owns (ownership is a function of the member ids alone).
    let ids = |names: &[&str]| -> Vec<NodeIdentity> {
        let any = "127.0.0.1:1".parse().unwrap();
        names
            .iter()
            .map(|n| NodeIdentity::new(*n, any, any))
            .collect()
    };
    let ring = Ring::with_default_vnodes(&ids(&["n1", "n2", "n3"]));
    let key = (0..)
        .map(|i| format!("victim-{i}"))
        .find(|k| ring.owner_id(k) == Some("n3"))
        .unwrap();
    let after = Ring::with_default_vnodes(&ids(&["n1", "n2"]));
    let new_owner = after.owner_id(&key).unwrap().to_string();

    let check = |p: &Proc| {
        let (client, url, key) = (client.clone(), format!("{}/v1/check", p.http), key.clone());
        async move {
            let started = Instant::now();
            let res = client
                .post(url)
                .json(&json!({"key": key, "route": "GET /x"}))
                .send()
                .await;
            let status = res.map(|r| r.status().as_u16()).unwrap_or(0);
            (status, started.elapsed())
        }
    };
    for p in [&n1, &n2, &n1, &n2, &n1] {
        assert_eq!(check(p).await.0, 200);
    }

    let mut n3 = n3;
    let killed_at = Instant::now();
    n3.child.kill().expect("SIGKILL n3");
    let _ = n3.child.wait();

    // Traffic continues through the survivors while they notice.
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    let mut slowest = Duration::ZERO;
    let agreed = loop {
        for p in [&n1, &n2] {
            let (status, took) = check(p).await;
            *statuses.entry(status).or_default() += 1;
            slowest = slowest.max(took);
        }
        let (d1, d2) = (
            cluster_doc(&client, &n1).await,
            cluster_doc(&client, &n2).await,
        );
        if live_ids(&d1) == ["n1", "n2"] && live_ids(&d2) == ["n1", "n2"] {
            break killed_at.elapsed();
        }
        assert!(
            killed_at.elapsed() < AGREE,
            "survivors did not drop n3 within {AGREE:?}"
        );
    };
    println!(
        "survivors agreed on {new_owner} as the new owner {agreed:?} after SIGKILL; \
         statuses during detection {statuses:?}; slowest check {slowest:?}"
    );
    assert!(
        statuses.keys().all(|s| *s == 200 || *s == 429),
        "only verdicts, never a 5xx or a dropped request: {statuses:?}"
    );
    assert!(slowest < PER_CHECK, "a check hung for {slowest:?}");

    // After agreement checks are decided by the new owner again, not the fallback.
    let fallback_ended = wait_for("fallback ends", Duration::from_secs(10), async || {
        let d = cluster_doc(&client, &n1).await;
        d["fallback"]["active"] == false
    })
    .await;
    let d1 = cluster_doc(&client, &n1).await;
    assert!(d1["fallback"]["entered_total"].as_u64().unwrap() <= 1);
    println!("fallback over {fallback_ended:?} after agreement");
    for p in [&n1, &n2] {
        let (status, _) = check(p).await;
        assert!(status == 200 || status == 429);
    }
}
