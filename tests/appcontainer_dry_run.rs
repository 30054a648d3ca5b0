//! `terra run --backend windows --dry-run [--json]` on Linux through the
//! built binary: the launch plan with the Linux plan's paths (marked as not
//! Windows-canonical), and the refusals around it.
// Linux only: `terra run` (also its windows dry run) is built for Linux here.
#![cfg(target_os = "linux")]

use std::process::Command;

const POLICY: &str = r#"{"formatVersion":3,"filesystem":{"default":"deny","rules":[
 {"access":"write","path":{"root":"workspace","relative":""},"scope":"tree"},
 {"access":"read","path":{"special":"minimal-runtime"},"scope":"tree"},
 {"access":"deny-write","path":{"root":"workspace","relative":"locked"},"scope":"tree"},
 {"access":"deny","path":{"root":"workspace","relative":"secret"},"scope":"tree"}]},
 "network":{"mode":"none"},"process":{"treeConfinement":"required"},"root":{"mode":"read-only"}}"#;

fn terra(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_terra"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

fn workspace() -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("secret")).unwrap();
    std::fs::create_dir(dir.path().join("locked")).unwrap();
    let policy = dir.path().join("p.json");
    std::fs::write(&policy, POLICY).unwrap();
    let ws = std::fs::canonicalize(dir.path())
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let policy = policy.to_str().unwrap().to_string();
    (dir, ws, policy)
}

#[test]
fn appcontainer_dry_run_json_on_linux_lists_the_launch_plan() {
    let (dir, ws, policy) = workspace();
    let out = terra(
        dir.path(),
        &[
            "run",
            "--backend",
            "windows",
            "--dry-run",
            "--json",
            "--policy",
            &policy,
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
    assert_eq!(v["backend"], "windows");
    assert_eq!(v["resolvedOn"], "linux");
    assert_eq!(v["pathsWindowsCanonical"], false);
    assert_eq!(v["capabilities"], serde_json::json!([]));
    assert_eq!(v["workerJob"]["activeProcessLimit"], 0);
    assert_eq!(
        v["mitigationPolicy"]["policy1"]["value"],
        "0x1110010101111100"
    );
    assert_eq!(v["objects"]["counted"], false);
    assert_eq!(
        v["executable"],
        std::fs::canonicalize("/usr/bin/true")
            .unwrap()
            .to_str()
            .unwrap()
    );
    let dacl = v["dacl"].as_array().unwrap();
    let find = |origin: &str, path: &str| {
        dacl.iter()
            .find(|e| e["origin"] == origin && e["path"] == path)
            .unwrap_or_else(|| panic!("no {origin} entry on {path}: {dacl:#?}"))
    };
    let w = find("write", &ws);
    assert_eq!(w["allow"]["mask"], "0x001301bf");
    assert_eq!(w["deny"]["mask"], "0x000c0000");
    assert_eq!(w["sid"], "S-1-15-2-…");
    let d = find("deny", &format!("{ws}/secret"));
    assert_eq!(d["deny"]["mask"], "0x001f01ff");
    assert_eq!(d["allow"]["mask"], "0x00000000");
    let dw = find("deny-write", &format!("{ws}/locked"));
    assert_eq!(dw["deny"]["mask"], "0x000d0156");
    let kept = find("keep-in-place", &ws);
    assert_eq!(
        kept["deny"]["rights"],
        serde_json::json!(["DELETE", "WRITE_DAC", "WRITE_OWNER"])
    );
    assert_eq!(kept["inheritance"], serde_json::json!(["NO_INHERITANCE"]));
    // minimal-runtime is the system's own files: listed, never a DACL entry.
    assert!(dacl.iter().all(|e| e["path"] != "/usr"), "{dacl:#?}");
    let baseline = v["minimalRuntime"]["paths"].as_array().unwrap();
    assert!(
        baseline.contains(&serde_json::json!("/usr")),
        "{baseline:?}"
    );
    // The dry run made no temp directory that outlives it.
    let temp = dacl
        .iter()
        .filter(|e| e["origin"] == "write")
        .filter_map(|e| e["path"].as_str())
        .find(|p| *p != ws);
    if let Some(t) = temp {
        assert!(!std::path::Path::new(t).exists(), "{t} left behind");
    }
}

#[test]
fn appcontainer_dry_run_text_on_linux_marks_paths_not_windows_canonical() {
    let (dir, ws, policy) = workspace();
    let out = terra(
        dir.path(),
        &[
            "run",
            "--backend",
            "windows",
            "--dry-run",
            "--policy",
            &policy,
            "--",
            "true",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for want in [
        "backend: windows (AppContainer)\n",
        "paths: as resolved on linux, NOT Windows-canonical",
        "capabilities: none",
        "workload job: limit flags 0x00002400 ",
        "workload creation flags: 0x09080404 CREATE_SUSPENDED CREATE_NO_WINDOW",
        "  broker job: limit flags 0x00002408 ",
        &format!("  write tree {ws}\n    allow 0x001301bf "),
        &format!("  deny tree {ws}/secret\n    deny  0x001f01ff "),
        &format!("  keep-in-place exact {ws} (keeps {ws}/"),
        "declares: fs-read fs-write fs-deny network-none process-tree fs-deny-write\n",
    ] {
        assert!(text.contains(want), "{want:?} missing:\n{text}");
    }
    // No write grant allows FILE_DELETE_CHILD (the deny lines do deny it).
    for line in text
        .lines()
        .filter(|l| l.trim_start().starts_with("allow "))
    {
        assert!(!line.contains("FILE_DELETE_CHILD"), "{line}");
    }
}

#[test]
fn appcontainer_dry_run_takes_the_default_policy() {
    // The default policy needs process-tree, which the windows backend declares.
    let dir = tempfile::tempdir().unwrap();
    let out = terra(
        dir.path(),
        &[
            "run",
            "--backend",
            "windows",
            "--dry-run",
            "--json",
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
    assert_eq!(v["role"], "workload");
}

#[test]
fn appcontainer_dry_run_refuses_what_the_backend_does_not_declare() {
    let (dir, _ws, _) = workspace();
    let direct = POLICY.replace(r#""mode":"none""#, r#""mode":"direct""#);
    let policy = dir.path().join("direct.json");
    std::fs::write(&policy, direct).unwrap();
    let out = terra(
        dir.path(),
        &[
            "run",
            "--backend",
            "windows",
            "--dry-run",
            "--policy",
            policy.to_str().unwrap(),
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("network-direct"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // What the Windows build refuses, its dry run here refuses too.
    for flag in [
        &["--allow-net", "example.com:443"][..],
        &["--read", "/usr"],
        &["--memory", "1G"],
        &["--timeout", "5"],
    ] {
        let mut args = vec!["run", "--backend", "windows", "--dry-run"];
        args.extend_from_slice(flag);
        args.extend(["--", "true"]);
        let out = terra(dir.path(), &args);
        assert_eq!(out.status.code(), Some(125), "{flag:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("{} is not built for the windows backend", flag[0])),
            "{err}"
        );
    }
}

#[test]
fn appcontainer_backend_run_is_refused_off_windows() {
    let dir = tempfile::tempdir().unwrap();
    let out = terra(dir.path(), &["run", "--backend", "windows", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("backend windows is not available on this OS"));
    let out = terra(
        dir.path(),
        &["run", "--backend", "windows", "--json", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(125));
}

#[test]
fn appcontainer_backends_lists_windows_with_its_capabilities() {
    let dir = tempfile::tempdir().unwrap();
    let out = terra(dir.path(), &["backends", "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let w = v
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "windows")
        .unwrap();
    assert_eq!(w["supported"], false);
    assert_eq!(
        w["declaredCapabilities"],
        serde_json::json!([
            "fs-read",
            "fs-write",
            "fs-deny",
            "network-none",
            "process-tree",
            "fs-deny-write"
        ])
    );
    assert_ne!(w["auto"], true, "auto never picks windows off Windows");
}

/// `terra run --backend windows --dry-run -- git status` with the default
/// policy, from a directory of its own.
fn default_git_status(json: bool) -> (tempfile::TempDir, String, std::process::Output) {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path())
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let mut args = vec!["run", "--backend", "windows", "--dry-run"];
    if json {
        args.push("--json");
    }
    args.extend(["--", "git", "status"]);
    let out = terra(dir.path(), &args);
    (dir, ws, out)
}

fn has_git() -> bool {
    Command::new("git").arg("--version").output().is_ok()
}

#[test]
fn appcontainer_dry_run_default_policy_git_status_is_a_plan_not_a_refusal() {
    assert!(has_git(), "this test needs git on PATH");
    let (_d, ws, out) = default_git_status(false);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for want in [
        // The workload: a process tree, killed with the job, user32 allowed.
        "workload job: limit flags 0x00002400 JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE; no active process limit;",
        "workload child process policy: not set",
        "workload win32k: allowed",
        // The role keeps every restriction.
        "  broker job: limit flags 0x00002408 JOB_OBJECT_LIMIT_ACTIVE_PROCESS",
        "  broker child process policy: 0x00000001 PROCESS_CREATION_CHILD_PROCESS_RESTRICTED",
        "  broker win32k: locked down",
        // Paths, grants, the ledger and the job check.
        &format!("working directory: {ws}\n"),
        "no per-file walk, no object cap",
        "protected DACL",
        r"%LOCALAPPDATA%\terra\state\ledger\PID-START.ledger",
        "the launch spec to its standard input",
        "IsProcessInJob(the launcher itself, the launcher job's own handle",
        "not in any job",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    // The workload's own restrictions never include the roles'.
    assert!(
        !text.contains("workload job: limit flags 0x00002408"),
        "{text}"
    );
}

#[test]
fn appcontainer_dry_run_default_policy_json_pins_each_point() {
    assert!(has_git(), "this test needs git on PATH");
    let (_d, ws, out) = default_git_status(true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let w = &v["processes"]["workload"];
    assert_eq!(w["job"]["activeProcessLimit"], 0);
    assert_eq!(w["job"]["limitFlags"]["value"], "0x00002400");
    assert_eq!(w["childProcessPolicy"], serde_json::Value::Null);
    assert_eq!(w["win32k"], "allowed");
    let b = &v["processes"]["broker"];
    assert_eq!(b["job"]["activeProcessLimit"], 1);
    assert_eq!(b["childProcessPolicy"]["value"], "0x00000001");
    assert_eq!(b["win32k"], "locked down");
    assert_eq!(b["lessPrivileged"], true);
    assert_eq!(v["workingDirectory"], ws.as_str());
    // Every path terra hands the workload is plain.
    let env = v["environment"].as_object().unwrap();
    for k in ["TEMP", "TMP", "HOME", "USERPROFILE"] {
        let p = env[k].as_str().unwrap();
        assert!(!p.starts_with(r"\\?\") && p.starts_with('/'), "{k}={p}");
    }
    // Trees: one inheritable ACE on each root, no cap.
    assert_eq!(v["objects"]["cap"], serde_json::Value::Null);
    let dacl = v["dacl"].as_array().unwrap();
    let root = dacl
        .iter()
        .find(|e| e["path"] == ws.as_str() && e["origin"] == "write")
        .unwrap_or_else(|| panic!("{dacl:#?}"));
    assert_eq!(
        root["inheritance"],
        serde_json::json!(["OBJECT_INHERIT_ACE", "CONTAINER_INHERIT_ACE"])
    );
    assert!(v["ledger"].as_array().unwrap().len() >= 3);
    assert_eq!(v["jobCheck"].as_array().unwrap().len(), 3);
    assert_eq!(v["program"]["access"], "system install");
}
