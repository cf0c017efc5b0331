//! Flags from the environment and secrets from files, without a process.

use super::tests::parse;
use super::*;

/// Guard: every `weir serve` flag reads `WEIR_` + its name in capitals,
/// and the help shows the variable, so a flag added without one fails here.
#[test]
fn every_serve_flag_has_its_environment_variable_shown_in_the_help() {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    let serve = cmd.find_subcommand_mut("serve").expect("serve");
    let help = serve.render_long_help().to_string();
    let mut flags = 0;
    for arg in serve.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if long == "help" {
            continue;
        }
        flags += 1;
        let want = format!("WEIR_{}", long.to_uppercase().replace('-', "_"));
        assert_eq!(
            arg.get_env().and_then(|e| e.to_str()),
            Some(want.as_str()),
            "--{long}"
        );
        assert!(help.contains(&format!("[env: {want}")), "help lacks {want}");
    }
    assert!(flags >= 40, "only {flags} flags seen");
}

fn file_with(text: &str) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), text).unwrap();
    f
}

#[test]
fn secrets_are_read_from_files_without_their_trailing_newline() {
    let secret = file_with("s3cret\n");
    let token = file_with("t0ken\r\n");
    let c = parse(&[
        "weir",
        "serve",
        &format!("--cluster-secret-file={}", secret.path().display()),
        &format!("--admin-token-file={}", token.path().display()),
    ])
    .unwrap();
    assert_eq!(c.cluster.secret.as_deref(), Some("s3cret"));
    assert_eq!(c.admin_token.as_deref(), Some("t0ken"));
    // Only one line ending goes: the rest is the secret.
    let spaced = file_with(" two words \n\n");
    let c = parse(&[
        "weir",
        "serve",
        &format!("--admin-token-file={}", spaced.path().display()),
    ])
    .unwrap();
    assert_eq!(c.admin_token.as_deref(), Some(" two words \n"));
}

#[test]
fn an_empty_or_unreadable_secret_file_is_refused_naming_it() {
    for (flag, empty) in [
        ("--cluster-secret-file", file_with("\n")),
        ("--admin-token-file", file_with("")),
    ] {
        let shown = empty.path().display().to_string();
        let e = parse(&["weir", "serve", &format!("{flag}={shown}")]).unwrap_err();
        assert!(
            e.contains(flag) && e.contains(&shown) && e.contains("empty"),
            "{e}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-secret").display().to_string();
    let e = parse(&["weir", "serve", &format!("--cluster-secret-file={missing}")]).unwrap_err();
    assert!(
        e.contains("--cluster-secret-file") && e.contains(&missing),
        "{e}"
    );
}

#[test]
fn a_secret_and_its_file_together_are_refused() {
    let f = file_with("x");
    let file = f.path().display().to_string();
    let e = parse(&[
        "weir",
        "serve",
        "--cluster-secret=s",
        &format!("--cluster-secret-file={file}"),
    ])
    .unwrap_err();
    assert!(e.contains("--cluster-secret-file"), "{e}");
    let e = parse(&[
        "weir",
        "serve",
        "--admin-token=t",
        &format!("--admin-token-file={file}"),
    ])
    .unwrap_err();
    assert!(e.contains("--admin-token-file"), "{e}");
    assert_eq!(
        secrets::secret("--a", Some("v"), "--a-file", Some(f.path())).unwrap_err(),
        "give --a or --a-file, not both"
    );
}

#[test]
fn accepted_secrets_come_from_a_list_or_a_file_of_one_a_line() {
    let c = parse(&[
        "weir",
        "serve",
        "--cluster-secret=new",
        "--cluster-secret-accept=old,older",
        "--admin-token=t1",
        "--admin-token-accept=t0",
    ])
    .unwrap();
    assert_eq!(c.cluster.secret_accept, ["old", "older"]);
    assert_eq!(c.admin_token_accept, ["t0"]);
    let secrets = file_with("old\r\nolder\n\n");
    let tokens = file_with("t0\n");
    let c = parse(&[
        "weir",
        "serve",
        "--cluster-secret=new",
        &format!("--cluster-secret-accept-file={}", secrets.path().display()),
        "--admin-token=t1",
        &format!("--admin-token-accept-file={}", tokens.path().display()),
    ])
    .unwrap();
    assert_eq!(c.cluster.secret_accept, ["old", "older"]);
    assert_eq!(c.admin_token_accept, ["t0"]);
}

#[test]
fn accepted_secrets_without_their_primary_or_with_an_empty_entry_are_refused() {
    for (args, named) in [
        (
            &["--cluster-secret-accept=old"][..],
            "--cluster-secret-accept needs --cluster-secret",
        ),
        (
            &["--admin-token-accept=old"][..],
            "--admin-token-accept needs --admin-token",
        ),
        (
            &["--cluster-secret=new", "--cluster-secret-accept=old,"][..],
            "--cluster-secret-accept has an empty entry",
        ),
    ] {
        let mut all = vec!["weir", "serve"];
        all.extend_from_slice(args);
        let e = parse(&all).unwrap_err();
        assert!(e.contains(named), "{args:?}: {e}");
    }
    let empty = file_with("\n");
    let e = parse(&[
        "weir",
        "serve",
        "--cluster-secret=new",
        &format!("--cluster-secret-accept-file={}", empty.path().display()),
    ])
    .unwrap_err();
    assert!(e.contains("--cluster-secret-accept-file"), "{e}");
}

#[test]
fn the_peer_tls_files_go_together() {
    let all = [
        "--peer-tls-cert=node.crt",
        "--peer-tls-key=node.key",
        "--peer-ca=ca.crt",
    ];
    let mut args = vec!["weir", "serve"];
    args.extend_from_slice(&all);
    let c = parse(&args).unwrap();
    let files = c.peer_tls.expect("peer TLS");
    assert_eq!(
        (files.cert, files.key, files.ca),
        ("node.crt".into(), "node.key".into(), "ca.crt".into())
    );
    for left_out in 0..3 {
        let mut args = vec!["weir", "serve"];
        args.extend(
            all.iter()
                .enumerate()
                .filter(|(i, _)| *i != left_out)
                .map(|(_, a)| *a),
        );
        let e = parse(&args).unwrap_err();
        assert!(e.contains("go together"), "{args:?}: {e}");
    }
}
