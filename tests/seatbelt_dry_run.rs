//! `terra run --backend macos --dry-run` on any host: the profile and its
//! parameters; the refusals around it.
// Linux only: `terra run` (also its macos dry run) is built only on Linux in this version.
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
