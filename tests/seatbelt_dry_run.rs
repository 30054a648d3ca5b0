//! `terra run --backend macos --dry-run` on any host: the profile and its
//! parameters, the command line's rules lowered, the broker's profile of a
//! mediated plan; the refusals around it.
// Linux only: the expectations are a dry run's on Linux (the Mac's resolver
// files in the broker's profile, the refusal of a real run off macOS).
#![cfg(target_os = "linux")]

use std::process::Command;

const POLICY: &str = r#"{"formatVersion":3,"filesystem":{"default":"deny","rules":[
 {"access":"write","path":{"root":"workspace","relative":""},"scope":"tree"},
 {"access":"read","path":{"special":"minimal-runtime"},"scope":"tree"},
 {"access":"deny","path":{"root":"workspace","relative":"secret"},"scope":"tree"}]},
 "network":{"mode":"none"},"process":{"treeConfinement":"disabled"},"root":{"mode":"read-only"}}"#;

fn terra(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_terra"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn seatbelt_dry_run_json_has_profile_and_every_path_as_parameter() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("secret")).unwrap();
    let policy = dir.path().join("p.json");
    std::fs::write(&policy, POLICY).unwrap();
    let out = terra(
        dir.path(),
        &[
            "run",
            "--backend",
            "macos",
            "--dry-run",
            "--json",
            "--policy",
            policy.to_str().unwrap(),
            "--",
            "true",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let obj = v.as_object().unwrap();
    let mut keys: Vec<&String> = obj.keys().collect();
    keys.sort();
    assert_eq!(keys, ["backend", "parameters", "profile"]);
    assert_eq!(v["backend"], "macos");
    let profile = v["profile"].as_str().unwrap();
    assert!(profile.starts_with("(version 1)\n(deny default)\n(import \"system.sb\")\n"));
    assert!(
        !profile.contains('/'),
        "path text in the profile: {profile}"
    );
    let params = v["parameters"].as_object().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    let values: Vec<&str> = params.values().map(|p| p.as_str().unwrap()).collect();
    let secret = ws.join("secret");
    for want in [ws.to_str().unwrap(), secret.to_str().unwrap()] {
        // The Linux temp dir is under /tmp: its Seatbelt form is /private/tmp.
        let want = if want.starts_with("/tmp/") {
            format!("/private{want}")
        } else {
            want.to_string()
        };
        assert!(values.contains(&want.as_str()), "{want} not in {values:?}");
    }
    assert!(profile.contains("(deny file-read* file-write* process-exec (subpath (param \"GRANT_"));
}

#[test]
fn seatbelt_dry_run_refuses_what_seatbelt_cannot_enforce() {
    // The default policy requires process-tree, which the macos backend does not declare.
    let dir = tempfile::tempdir().unwrap();
    let out = terra(
        dir.path(),
        &["run", "--backend", "macos", "--dry-run", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("process-tree"));
}

#[cfg(not(target_os = "macos"))]
#[test]
fn seatbelt_backend_run_is_refused_off_macos() {
    let dir = tempfile::tempdir().unwrap();
    let out = terra(dir.path(), &["run", "--backend", "macos", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("backend macos is not available on this OS")
    );
}

/// `--backend macos --dry-run --json` in `dir` with `args` before `-- true`.
fn dry_json(dir: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["run", "--backend", "macos", "--dry-run", "--json"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "true"]);
    let out = terra(dir, &all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn param<'a>(params: &'a serde_json::Value, value: &str) -> Option<&'a str> {
    params
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, v)| v.as_str() == Some(value))
        .map(|(k, _)| k.as_str())
}

#[test]
fn seatbelt_dry_run_lowers_the_command_lines_rules() {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(ws.join("out/secret")).unwrap();
    std::fs::create_dir_all(ws.join("ro")).unwrap();
    let extra = tempfile::tempdir().unwrap();
    let extra_path = std::fs::canonicalize(extra.path()).unwrap();
    let v = dry_json(
        &ws,
        &[
            "--no-process-tree",
            "--read",
            extra_path.to_str().unwrap(),
            "--write",
            "out",
            "--deny",
            "out/secret",
        ],
    );
    let profile = v["profile"].as_str().unwrap();
    assert!(
        !profile.contains('/'),
        "path text in the profile: {profile}"
    );
    let seatbelt = |p: &std::path::Path| {
        let s = p.to_str().unwrap().to_string();
        if s.starts_with("/tmp/") || s.starts_with("/var/") || s.starts_with("/etc/") {
            format!("/private{s}")
        } else {
            s
        }
    };
    let name = |p: &std::path::Path| {
        param(&v["parameters"], &seatbelt(p))
            .unwrap_or_else(|| panic!("{} is not a parameter: {}", p.display(), v["parameters"]))
            .to_string()
    };
    let read = name(&extra_path);
    let write = name(&ws.join("out"));
    let deny = name(&ws.join("out/secret"));
    assert!(profile.contains(&format!("(allow file-read* (subpath (param \"{read}\")))")));
    assert!(profile.contains(&format!(
        "(allow file-read* file-write* (subpath (param \"{write}\")))"
    )));
    assert!(profile.contains(&format!(
        "(deny file-read* file-write* process-exec (subpath (param \"{deny}\")))"
    )));
    // The deny comes after the write grant it carves out of.
    let at = |rule: &str| profile.find(rule).unwrap();
    assert!(at(&format!("(param \"{deny}\")")) > at(&format!("(subpath (param \"{write}\")))")));
    // network none: not one network rule, so no broker.
    assert!(!profile.contains("(allow network"), "{profile}");
    assert!(v.get("broker").is_none());
}

#[test]
fn seatbelt_dry_run_mediated_shows_the_broker_and_its_port_parameter() {
    let dir = tempfile::tempdir().unwrap();
    let v = dry_json(
        dir.path(),
        &["--no-process-tree", "--allow-net", "example.com:443"],
    );
    let mut keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["backend", "broker", "parameters", "profile"]);
    // The workload reaches the broker's port only, named by a parameter.
    let profile = v["profile"].as_str().unwrap();
    let net: Vec<&str> = profile.lines().filter(|l| l.contains("network")).collect();
    assert_eq!(
        net,
        ["(allow network-outbound (remote tcp (string-append \"localhost:\" (param \"BROKER_PORT\"))))"]
    );
    assert_eq!(v["parameters"]["BROKER_PORT"], "0");
    // The broker: terra itself, the resolver files read-only, no write, no
    // fork, a network client that accepts on the same port parameter.
    let broker = v["broker"]["profile"].as_str().unwrap();
    let bp = &v["broker"]["parameters"];
    assert!(
        !broker.contains('/'),
        "path text in the broker profile: {broker}"
    );
    assert!(!broker.contains("file-write"), "{broker}");
    assert!(!broker.contains("process-fork"), "{broker}");
    assert!(broker.contains("(allow network-outbound (remote ip \"*:*\"))"));
    assert!(broker.contains(
        "(allow network-inbound (local tcp (string-append \"localhost:\" (param \"BROKER_PORT\"))))"
    ));
    assert_eq!(bp["BROKER_PORT"], "0");
    for f in ["/private/var/run/resolv.conf", "/private/etc/hosts"] {
        let name = param(bp, f).unwrap_or_else(|| panic!("{f} missing: {bp}"));
        assert!(broker.contains(&format!("(allow file-read* (literal (param \"{name}\")))")));
    }
    // In Seatbelt's form: a build under /tmp or /var is under /private there.
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_terra")).unwrap();
    let exe = terra_seatbelt::path::seatbelt_path(exe.to_str().unwrap()).unwrap();
    assert_eq!(bp["EXECUTABLE"], exe.as_str());
    // The text form names the broker's profile and parameters separately.
    let out = terra(
        dir.path(),
        &[
            "run",
            "--backend",
            "macos",
            "--dry-run",
            "--no-process-tree",
            "--allow-net",
            "example.com:443",
            "--",
            "true",
        ],
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("\nbroker profile (terra __network):\n(version 1)\n"),
        "{text}"
    );
    assert!(text.contains("\nbroker parameters:\n"), "{text}");
}

#[test]
fn seatbelt_dry_run_process_tree_refusal_names_the_opt_out() {
    let dir = tempfile::tempdir().unwrap();
    let out = terra(
        dir.path(),
        &["run", "--backend", "macos", "--dry-run", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--no-process-tree"), "{err}");
    // Not with a policy file: that file says what it needs.
    let policy = dir.path().join("p.json");
    std::fs::write(&policy, POLICY).unwrap();
    let out = terra(
        dir.path(),
        &[
            "run",
            "--backend",
            "macos",
            "--dry-run",
            "--no-process-tree",
            "--policy",
            policy.to_str().unwrap(),
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("treeConfinement"));
}
