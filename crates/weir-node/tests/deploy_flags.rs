//! Every `weir` command line in deploy/ goes through the real flag parser, so the deploy files cannot drift from the binary.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{CommandFactory, Parser};
use serde_norway::Value;
use weir_core::RuleSet;
use weir_node::cli::{serve_config, Cli, Command};
use weir_node::ServeConfig;

fn deploy(rel: &str) -> String {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Stand-ins for what a deploy file fills in at run time, each shaped like
/// the real value so the parser judges the same syntax. A variable missing
/// here fails the test: its shape is unknown, so the line is unchecked.
fn placeholder(var: &str) -> Option<&'static str> {
    match var {
        "POD_NAME" | "WEIR_NODE_ID" => Some("weir-0"),
        "POD_IP" | "WEIR_ADVERTISE_IP" => Some("10.0.0.7"),
        "WEIR_SEEDS" => Some("10.0.0.7:7946,10.0.0.8:7946"),
        _ => None,
    }
}

/// Variables referenced as `$(VAR)` (Kubernetes) or `${VAR}` (systemd).
fn referenced(arg: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (open, close) in [("$(", ')'), ("${", '}')] {
        let mut rest = arg;
        while let Some(i) = rest.find(open) {
            let tail = &rest[i + 2..];
            let Some(j) = tail.find(close) else { break };
            out.push(tail[..j].to_string());
            rest = &tail[j..];
        }
    }
    out
}

fn expand(arg: &str) -> Result<String, String> {
    let mut s = arg.to_string();
    for var in referenced(arg) {
        let value = placeholder(&var).ok_or(format!("no placeholder for ${{{var}}}"))?;
        s = s
            .replace(&format!("$({var})"), value)
            .replace(&format!("${{{var}}}"), value);
    }
    Ok(s)
}

/// Parses an invocation as `weir` would: the clap parser, then the checks
/// `weir serve` runs before starting.
fn check(argv: &[String]) -> Result<ServeConfig, String> {
    let bin = argv.first().ok_or("empty command line")?;
    if Path::new(bin).file_name().and_then(|n| n.to_str()) != Some("weir") {
        return Err(format!("runs {bin}, not the weir binary"));
    }
    let mut argv: Vec<String> = argv.iter().map(|a| expand(a)).collect::<Result<_, _>>()?;
    // Every deploy file hands the cluster secret over in the environment
    // (each test below checks its file does), which this process lacks.
    if !argv.iter().any(|a| a.starts_with("--cluster-secret")) {
        argv.push("--cluster-secret=from-the-deploy-environment".into());
    }
    let cli = Cli::try_parse_from(&argv).map_err(|e| e.render().to_string())?;
    match cli.command {
        Command::Serve(args) => serve_config(&args),
        Command::Check(_) => Err("runs `weir check`, not `weir serve`".into()),
    }
}

/// The environment variables `weir serve` reads, from the parser itself.
fn cli_env_vars() -> Vec<String> {
    let cmd = Cli::command();
    let serve = cmd.find_subcommand("serve").expect("serve subcommand");
    serve
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect()
}

fn assert_weir_env(source: &str, name: &str) {
    if name.starts_with("WEIR_") {
        assert!(
            cli_env_vars().iter().any(|v| v == name),
            "{source} sets {name}, which weir does not read (it reads {:?})",
            cli_env_vars()
        );
    }
}

fn strings(v: &Value, what: &str) -> Result<Vec<String>, String> {
    let seq = v.as_sequence().ok_or(format!("{what} must be a list"))?;
    seq.iter()
        .map(|a| match a {
            Value::String(s) => Ok(s.clone()),
            other => Err(format!("{what} holds a non-string {other:?}")),
        })
        .collect()
}

// --- Dockerfile ----------------------------------------------------------

/// The final stage's instructions, continuation lines joined.
fn dockerfile_final_stage(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut line = String::new();
    for raw in text.lines() {
        let t = raw.trim();
        if t.starts_with('#') || (t.is_empty() && line.is_empty()) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(head) => line.push_str(head),
            None => {
                line.push_str(t);
                let (kw, rest) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
                if kw.eq_ignore_ascii_case("FROM") {
                    out.clear();
                }
                out.push((kw.to_ascii_uppercase(), rest.trim().to_string()));
                line.clear();
            }
        }
    }
    out
}

/// The exec (JSON) form only: the shell form makes `sh` PID 1, and SIGTERM
/// would never reach weir to start its drain.
fn exec_form(kw: &str, rest: &str) -> Result<Vec<String>, String> {
    serde_json::from_str(rest).map_err(|_| format!("{kw} must use the exec form [\"...\"]"))
}

/// ENTRYPOINT and CMD of the image's final stage.
fn docker_image(text: &str) -> Result<(Vec<String>, Vec<String>), String> {
    let (mut entry, mut cmd) = (Vec::new(), Vec::new());
    for (kw, rest) in dockerfile_final_stage(text) {
        match kw.as_str() {
            "ENTRYPOINT" => entry = exec_form(&kw, &rest)?,
            "CMD" => cmd = exec_form(&kw, &rest)?,
            _ => {}
        }
    }
    Ok((entry, cmd))
}

fn dockerfile_check(text: &str) -> Result<ServeConfig, String> {
    let (entry, cmd) = docker_image(text)?;
    check(&[entry, cmd].concat())
}

fn healthcheck_port(text: &str) -> u16 {
    let (_, rest) = dockerfile_final_stage(text)
        .into_iter()
        .find(|(kw, _)| kw == "HEALTHCHECK")
        .expect("the image has a HEALTHCHECK");
    let url = rest
        .split('"')
        .find(|s| s.starts_with("http://"))
        .expect("HEALTHCHECK fetches an http:// URL");
    assert!(
        url.ends_with("/healthz"),
        "HEALTHCHECK should use /healthz: {url}"
    );
    let authority = url["http://".len()..].split('/').next().unwrap();
    authority.rsplit(':').next().unwrap().parse().unwrap()
}

// --- compose ---------------------------------------------------------------

struct ComposeNode {
    name: String,
    argv: Vec<String>,
    service: Value,
}

fn compose_nodes(text: &str, entrypoint: &[String]) -> Result<Vec<ComposeNode>, String> {
    let mut doc: Value = serde_norway::from_str(text).map_err(|e| e.to_string())?;
    doc.apply_merge().map_err(|e| e.to_string())?;
    let services = doc["services"].as_mapping().ok_or("no services")?;
    let mut out = Vec::new();
    for (name, svc) in services {
        let name = name.as_str().ok_or("service name")?.to_string();
        // Envoy and its upstream run images of their own; every other
        // service runs weir.
        if svc
            .get("image")
            .and_then(Value::as_str)
            .is_some_and(|image| !image.starts_with("weir"))
        {
            continue;
        }
        let entry = match svc.get("entrypoint") {
            Some(e) => strings(e, "entrypoint")?,
            None => entrypoint.to_vec(),
        };
        let command = strings(&svc["command"], &format!("{name}: command"))?;
        out.push(ComposeNode {
            argv: [entry, command].concat(),
            name,
            service: svc.clone(),
        });
    }
    Ok(out)
}

fn compose_check(text: &str, entrypoint: &[String]) -> Result<(), String> {
    for n in compose_nodes(text, entrypoint)? {
        check(&n.argv).map_err(|e| format!("{}: {e}", n.name))?;
    }
    Ok(())
}

// --- Kubernetes ------------------------------------------------------------

fn k8s_docs(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_norway::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// The StatefulSet's weir container and its command line. Kubernetes leaves
/// an undefined `$(VAR)` as literal text, so each one must be in `env`.
fn k8s_statefulset(text: &str, entrypoint: &[String]) -> Result<(Value, Vec<String>), String> {
    let set = k8s_docs(text)
        .into_iter()
        .find(|d| d["kind"] == "StatefulSet")
        .ok_or("no StatefulSet")?;
    let container = set["spec"]["template"]["spec"]["containers"][0].clone();
    let entry = match container.get("command") {
        Some(c) => strings(c, "command")?,
        None => entrypoint.to_vec(),
    };
    let argv = [entry, strings(&container["args"], "args")?].concat();
    let env: Vec<&str> = container["env"]
        .as_sequence()
        .map(|s| s.iter().filter_map(|e| e["name"].as_str()).collect())
        .unwrap_or_default();
    for var in argv.iter().flat_map(|a| referenced(a)) {
        if !env.contains(&var.as_str()) {
            return Err(format!("args use $({var}) but env does not define it"));
        }
    }
    Ok((set, argv))
}

fn k8s_check(text: &str, entrypoint: &[String]) -> Result<ServeConfig, String> {
    check(&k8s_statefulset(text, entrypoint)?.1)
}

// --- systemd -------------------------------------------------------------

/// `Key=value` lines of one section, continuation lines joined.
fn unit_section(text: &str, section: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let (mut current, mut line) = (String::new(), String::new());
    for raw in text.lines() {
        let t = raw.trim();
        if t.starts_with('#') || t.starts_with(';') || (t.is_empty() && line.is_empty()) {
            continue;
        }
        if t.starts_with('[') {
            current = t.to_string();
            continue;
        }
        match t.strip_suffix('\\') {
            Some(head) => line.push_str(head),
            None => {
                line.push_str(t);
                if current == format!("[{section}]") {
                    if let Some((k, v)) = line.split_once('=') {
                        out.push((k.trim().to_string(), v.trim().to_string()));
                    }
                }
                line.clear();
            }
        }
    }
    out
}

/// ExecStart split into words as systemd does for unquoted and quoted words.
fn systemd_argv(text: &str) -> Result<Vec<String>, String> {
    let service = unit_section(text, "Service");
    let exec = service
        .iter()
        .find(|(k, _)| k == "ExecStart")
        .map(|(_, v)| v.trim_start_matches(['-', '@', '+', '!', ':']))
        .ok_or("no ExecStart")?;
    let (mut words, mut word, mut quote) = (Vec::new(), String::new(), None);
    for c in exec.chars() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            (_, c) => word.push(c),
        }
    }
    if quote.is_some() {
        return Err("unbalanced quote in ExecStart".into());
    }
    if !word.is_empty() {
        words.push(word);
    }
    Ok(words)
}

fn systemd_check(text: &str) -> Result<ServeConfig, String> {
    check(&systemd_argv(text)?)
}

/// A systemd time span: bare seconds or "30s", "1min"...
fn secs(v: &str) -> Duration {
    match v.parse::<u64>() {
        Ok(n) => Duration::from_secs(n),
        Err(_) => humantime::parse_duration(v).unwrap_or_else(|e| panic!("{v}: {e}")),
    }
}

/// Time a node needs after SIGTERM beyond the HTTP drain: handing its
/// counters over and waiting for peers to drop it (weir-cluster's leave
/// timeout is 3 s).
const LEAVE_ALLOWANCE: Duration = Duration::from_secs(5);

// --- the deploy files ------------------------------------------------------

fn image() -> (Vec<String>, Vec<String>) {
    docker_image(&deploy("Dockerfile")).expect("Dockerfile ENTRYPOINT/CMD")
}

#[test]
fn dockerfile_cmd_is_accepted_and_healthcheck_hits_its_http_port() {
    let text = deploy("Dockerfile");
    let config = dockerfile_check(&text).expect("the image's default command parses");
    assert_eq!(healthcheck_port(&text), config.http.port());
    assert!(
        config.http.ip().is_unspecified(),
        "HTTP must be reachable from outside the container"
    );
    assert_eq!(
        config.rules_file.as_deref(),
        Some(Path::new("/etc/weir/rules.toml"))
    );
}

#[test]
fn compose_commands_are_accepted_and_advertise_their_own_address() {
    let text = deploy("compose.yaml");
    let image = image();
    let hc_port = healthcheck_port(&deploy("Dockerfile"));
    let nodes = compose_nodes(&text, &image.0).expect("compose.yaml parses");
    assert_eq!(nodes.len(), 3, "a three-node cluster");
    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    for n in &nodes {
        let c = check(&n.argv).unwrap_or_else(|e| panic!("{}: {e}", n.name));
        // The image's HEALTHCHECK gates depends_on; it probes this port.
        assert_eq!(c.http.port(), hc_port, "{}", n.name);
        let ip = n.service["networks"]["weir"]["ipv4_address"]
            .as_str()
            .unwrap_or_else(|| panic!("{}: a fixed address", n.name));
        assert_eq!(
            c.advertised_grpc().ip().to_string(),
            ip,
            "{}: gRPC advertises its own IP",
            n.name
        );
        assert_eq!(
            c.advertised_gossip().ip().to_string(),
            ip,
            "{}: gossip advertises its own IP",
            n.name
        );
        assert_eq!(c.advertised_grpc().port(), c.grpc.port(), "{}", n.name);
        assert_eq!(c.advertised_gossip().port(), c.gossip.port(), "{}", n.name);
        for seed in &c.cluster.seeds {
            let (host, port) = seed.rsplit_once(':').expect("host:port seed");
            assert!(
                names.contains(&host),
                "{}: seed {seed} is not a service",
                n.name
            );
            assert_eq!(port, c.gossip.port().to_string(), "{}: seed port", n.name);
        }
        for (k, _) in n.service["environment"]
            .as_mapping()
            .expect("environment map")
        {
            assert_weir_env(&n.name, k.as_str().unwrap());
        }
        let rules_dir = c.rules_file.as_ref().and_then(|p| p.parent()).unwrap();
        let mounts = strings(&n.service["volumes"], "volumes").unwrap();
        assert!(
            mounts
                .iter()
                .any(|m| m.split(':').nth(1) == rules_dir.to_str()),
            "{}: the rules directory {} is mounted whole",
            n.name,
            rules_dir.display()
        );
    }
}

#[test]
fn kubernetes_args_are_accepted_and_probes_secrets_and_grace_match() {
    let mut text = String::new();
    for f in [
        "statefulset.yaml",
        "services.yaml",
        "configmap.yaml",
        "pdb.yaml",
    ] {
        text.push_str("---\n");
        text.push_str(&deploy(&format!("k8s/{f}")));
    }
    let (set, argv) = k8s_statefulset(&text, &image().0).expect("StatefulSet args");
    let c = check(&argv).expect("the StatefulSet's args parse");
    let pod = &set["spec"]["template"]["spec"];
    let container = &pod["containers"][0];

    let port_named = |name: &str| {
        container["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .and_then(|p| p["containerPort"].as_u64())
            .unwrap_or_else(|| panic!("no container port {name}"))
    };
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        let port = get["port"]
            .as_str()
            .map_or_else(|| get["port"].as_u64().unwrap(), port_named);
        assert_eq!(port, u64::from(c.http.port()), "{probe} port");
    }
    assert_eq!(port_named("grpc"), u64::from(c.grpc.port()));
    assert_eq!(port_named("gossip"), u64::from(c.gossip.port()));
    // Peers are told the pod's IP at the ports the pod listens on.
    assert_eq!(c.advertised_grpc().to_string(), "10.0.0.7:8081");
    assert_eq!(c.advertised_gossip().to_string(), "10.0.0.7:7946");

    for e in container["env"].as_sequence().unwrap() {
        assert_weir_env("StatefulSet", e["name"].as_str().unwrap());
    }

    // Seeds name the pods through the headless Service the set is bound to.
    let service = set["spec"]["serviceName"].as_str().unwrap();
    let name = set["metadata"]["name"].as_str().unwrap();
    let replicas = set["spec"]["replicas"].as_u64().unwrap();
    let expected: Vec<String> = (0..replicas)
        .map(|i| format!("{name}-{i}.{service}:{}", c.gossip.port()))
        .collect();
    assert_eq!(c.cluster.seeds, expected);
    let headless = k8s_docs(&text)
        .into_iter()
        .find(|d| d["kind"] == "Service" && d["metadata"]["name"] == service)
        .expect("the headless Service exists");
    assert_eq!(headless["spec"]["clusterIP"], "None");
    assert_eq!(headless["spec"]["publishNotReadyAddresses"], true);

    let pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_u64()
        .unwrap_or(0);
    let grace = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("a grace period");
    let needed = Duration::from_secs(pre_stop) + c.drain_timeout + LEAVE_ALLOWANCE;
    assert!(
        Duration::from_secs(grace) > needed,
        "grace {grace}s <= {needed:?}"
    );

    // The ConfigMap is mounted whole (no subPath: updates must reach the
    // node) where --rules points, and holds the same valid rules as the
    // compose and systemd examples.
    let rules_dir = c.rules_file.as_ref().and_then(|p| p.parent()).unwrap();
    let mount = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"].as_str() == rules_dir.to_str())
        .expect("the rules directory is mounted");
    assert!(mount.get("subPath").is_none());
    let map = k8s_docs(&text)
        .into_iter()
        .find(|d| d["kind"] == "ConfigMap")
        .expect("a ConfigMap");
    let file = c
        .rules_file
        .as_ref()
        .unwrap()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    let in_map = map["data"][file]
        .as_str()
        .expect("the rules file is in the ConfigMap");
    assert_eq!(in_map.trim(), deploy("rules/rules.toml").trim());
}

#[test]
fn systemd_execstart_is_accepted_and_stop_timeout_covers_the_drain() {
    let text = deploy("systemd/weir.service");
    let c = systemd_check(&text).expect("ExecStart parses");
    let service = unit_section(&text, "Service");
    let get = |k: &str| {
        service
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no {k}="))
    };
    assert_eq!(get("KillSignal"), "SIGTERM");
    assert_eq!(get("Restart"), "on-failure");
    assert!(secs(get("TimeoutStopSec")) > c.drain_timeout + LEAVE_ALLOWANCE);
    assert_eq!(c.advertised_grpc().to_string(), "10.0.0.7:8081");
    assert_eq!(c.advertised_gossip().to_string(), "10.0.0.7:7946");

    // Every ${VAR} of ExecStart is in the example environment file, and
    // every WEIR_ variable there is one weir or ExecStart reads.
    let example = deploy("systemd/weir.env.example");
    let defined: Vec<&str> = example
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim()))
        .collect();
    let argv = systemd_argv(&text).unwrap();
    let used: Vec<String> = argv.iter().flat_map(|a| referenced(a)).collect();
    for var in &used {
        assert!(
            defined.contains(&var.as_str()),
            "${{{var}}} is not in weir.env.example"
        );
    }
    for var in defined {
        if !used.iter().any(|u| u == var) {
            assert_weir_env("weir.env.example", var);
        }
    }
}

#[test]
fn shipped_rules_files_are_valid() {
    RuleSet::from_toml(&deploy("rules/rules.toml")).expect("deploy/rules/rules.toml");
}

// --- the checks themselves can fail ----------------------------------------

const ENTRY: &str = "/usr/local/bin/weir";

fn entry() -> Vec<String> {
    vec![ENTRY.to_string()]
}

#[test]
fn an_unknown_flag_fails_in_every_format() {
    let docker = format!("FROM x\nENTRYPOINT [\"{ENTRY}\"]\nCMD [\"serve\", \"--no-such-flag\"]\n");
    let err = dockerfile_check(&docker).unwrap_err();
    assert!(err.contains("--no-such-flag"), "{err}");

    let compose =
        "services:\n  a:\n    command: [serve, --http, \"0.0.0.0:8080\", --no-such-flag]\n";
    let err = compose_check(compose, &entry()).unwrap_err();
    assert!(err.contains("--no-such-flag"), "{err}");

    let k8s = "kind: StatefulSet\nspec:\n  template:\n    spec:\n      containers:\n        \
               - name: weir\n          args: [serve, --no-such-flag]\n";
    let err = k8s_check(k8s, &entry()).unwrap_err();
    assert!(err.contains("--no-such-flag"), "{err}");

    let unit = "[Service]\nExecStart=/usr/bin/weir serve \\\n    --no-such-flag\n";
    let err = systemd_check(unit).unwrap_err();
    assert!(err.contains("--no-such-flag"), "{err}");
}

#[test]
fn bad_values_and_unknown_variables_fail() {
    let run = |args: &[&str]| {
        let argv: Vec<String> = std::iter::once(ENTRY)
            .chain(args.iter().copied())
            .map(String::from)
            .collect();
        check(&argv)
    };
    assert!(run(&["serve", "--strategy", "fastest"]).is_err());
    assert!(
        run(&["serve", "--http", "weir-0:8080"]).is_err(),
        "a host name is not an address"
    );
    // Accepted by clap, refused by `weir serve` before it starts.
    assert!(run(&["serve", "--max-keys", "0"]).is_err());
    assert!(run(&["serve", "--seeds", "a:7946,,b:7946"]).is_err());
    let err = run(&["serve", "--node-id", "$(HOSTNAME)"]).unwrap_err();
    assert!(err.contains("HOSTNAME"), "{err}");
    assert!(run(&["check", "--server", "http://x", "--key", "k"]).is_err());
    assert!(check(&["/bin/sh".into(), "-c".into(), "weir serve".into()]).is_err());
    assert!(run(&["serve", "--grpc", "$(POD_IP):8081"]).is_ok());

    let shell_form = "FROM x\nENTRYPOINT weir\nCMD serve\n";
    assert!(dockerfile_check(shell_form)
        .unwrap_err()
        .contains("exec form"));
    let undefined = "kind: StatefulSet\nspec:\n  template:\n    spec:\n      containers:\n        \
                     - name: weir\n          args: [serve, --node-id, $(POD_NAME)]\n";
    assert!(k8s_check(undefined, &entry())
        .unwrap_err()
        .contains("POD_NAME"));
}

#[test]
fn an_env_var_weir_does_not_read_is_caught() {
    let result = std::panic::catch_unwind(|| assert_weir_env("test", "WEIR_CLUSTER_SECRETS"));
    assert!(result.is_err());
    assert_weir_env("test", "WEIR_CLUSTER_SECRET");
    assert_weir_env("test", "WEIR_ADMIN_TOKEN");
}

/// The peer mutual-TLS component (deploy/k8s/peer-tls) applied to the
/// StatefulSet by hand: its JSON patch lands on `--advertise-grpc`'s
/// value, and the variables it adds turn on peer TLS from the files the
/// certificate's Secret mounts, on a peer port of its own that peers are
/// told.
#[test]
fn the_peer_tls_component_moves_the_peer_port_and_mounts_the_certificates() {
    let base = deploy("k8s/statefulset.yaml");
    let (_, mut argv) = k8s_statefulset(&base, &image().0).expect("StatefulSet args");
    let entry = argv.len()
        - strings(
            &k8s_docs(&base)[0]["spec"]["template"]["spec"]["containers"][0]["args"],
            "args",
        )
        .unwrap()
        .len();

    let component = k8s_docs(&deploy("k8s/peer-tls/kustomization.yaml")).remove(0);
    assert_eq!(component["kind"], "Component");
    let inline = component["patches"]
        .as_sequence()
        .unwrap()
        .iter()
        .find_map(|p| p["patch"].as_str())
        .expect("an inline JSON patch");
    let op = k8s_docs(inline).remove(0)[0].clone();
    let path = op["path"].as_str().unwrap();
    let index: usize = path
        .strip_prefix("/spec/template/spec/containers/0/args/")
        .expect("a patch of the args")
        .parse()
        .unwrap();
    assert_eq!(
        argv[entry + index - 1],
        "--advertise-grpc",
        "the patch replaces {path}"
    );
    argv[entry + index] = op["value"].as_str().unwrap().to_string();

    let patch = k8s_docs(&deploy("k8s/peer-tls/statefulset-patch.yaml")).remove(0);
    let container = &patch["spec"]["template"]["spec"]["containers"][0];
    for e in container["env"].as_sequence().unwrap() {
        let name = e["name"].as_str().unwrap();
        assert_weir_env("peer-tls component", name);
        let flag = name["WEIR_".len()..].to_lowercase().replace('_', "-");
        argv.push(format!("--{flag}={}", e["value"].as_str().unwrap()));
    }
    let c = check(&argv).expect("the patched args parse");
    let files = c.peer_tls.clone().expect("peer TLS on");
    let mount = container["volumeMounts"][0]["mountPath"].as_str().unwrap();
    for (file, key) in [
        (&files.cert, "tls.crt"),
        (&files.key, "tls.key"),
        (&files.ca, "ca.crt"),
    ] {
        assert_eq!(file, &Path::new(mount).join(key));
    }
    let peer_port = container["ports"][0]["containerPort"].as_u64().unwrap();
    assert_eq!(c.peer_grpc.map(|a| u64::from(a.port())), Some(peer_port));
    assert_eq!(
        c.advertised_grpc().to_string(),
        format!("10.0.0.7:{peer_port}")
    );
    assert_ne!(
        c.peer_listener(),
        c.grpc,
        "clients keep a port without peer TLS"
    );

    // The Secret mounted is the one the peer Certificate writes.
    let secret = patch["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"].clone();
    let certificates = k8s_docs(&deploy("k8s/peer-tls/certificates.yaml"));
    let peer_cert = certificates
        .iter()
        .find(|d| d["kind"] == "Certificate" && d["spec"]["secretName"] == secret)
        .expect("a Certificate writes the mounted Secret");
    let usages = strings(&peer_cert["spec"]["usages"], "usages").unwrap();
    assert!(
        usages.contains(&"server auth".to_string()) && usages.contains(&"client auth".to_string())
    );
}
