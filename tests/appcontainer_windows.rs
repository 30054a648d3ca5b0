//! The windows backend through the built binary, on Windows: the workload
//! is a copy of terra in the workspace, reading files with `terra policy
//! artifact-hash` and printing control characters in an error message; and
//! cmd.exe, whoami.exe (which imports user32.dll) and a process tree, in a
//! plain working directory.
//!
//! Windows only. Not run where this was written (a Linux host): these are
//! what a Windows CI runs, and scripts/windows-acceptance.ps1 runs the
//! broader probes.
#![cfg(windows)]

use std::path::Path;
use std::process::{Command, Output};

const TERRA: &str = env!("CARGO_BIN_EXE_terra");

/// A policy: the workspace writable, its `secret` denied. (Host-root rules
/// name Unix paths in MIR v3, so the workload is a copy of terra inside the
/// workspace rather than terra where it was built.)
fn policy(dir: &Path) -> std::path::PathBuf {
    let source = r#"{"formatVersion":3,"filesystem":{"default":"deny","rules":[
      {"access":"write","path":{"root":"workspace","relative":""},"scope":"tree"},
      {"access":"deny","path":{"root":"workspace","relative":"secret"},"scope":"tree"}]},
      "network":{"mode":"none"},"process":{"treeConfinement":"required"},"root":{"mode":"read-only"}}"#;
    let p = dir.join("policy.json");
    std::fs::write(&p, source).unwrap();
    p
}

fn run(dir: &Path, args: &[&str]) -> Output {
    let p = policy(dir);
    let probe = dir.join("probe.exe");
    let mut a = vec![
        "run",
        "--policy",
        p.to_str().unwrap(),
        "--",
        probe.to_str().unwrap(),
    ];
    a.extend_from_slice(args);
    Command::new(TERRA)
        .current_dir(dir)
        .args(&a)
        .output()
        .unwrap()
}

fn workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("open.txt"), b"open").unwrap();
    std::fs::copy(TERRA, d.path().join("probe.exe")).unwrap();
    std::fs::create_dir(d.path().join("secret")).unwrap();
    std::fs::write(d.path().join("secret").join("key.txt"), b"key").unwrap();
    d
}

#[test]
fn appcontainer_windows_workload_reads_a_granted_file() {
    let d = workspace();
    let out = run(d.path(), &["policy", "artifact-hash", "open.txt"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("sha256:"));
}

#[test]
fn appcontainer_windows_workload_cannot_read_a_denied_file() {
    let d = workspace();
    let out = run(d.path(), &["policy", "artifact-hash", r"secret\key.txt"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Access is denied") || err.contains("os error 5"),
        "{err}"
    );
}

#[test]
fn appcontainer_windows_workload_cannot_read_outside_its_grants() {
    let d = workspace();
    let outside = tempfile::tempdir().unwrap();
    let f = outside.path().join("outside.txt");
    std::fs::write(&f, b"x").unwrap();
    let out = run(d.path(), &["policy", "artifact-hash", f.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn appcontainer_windows_output_passes_the_relay_filter() {
    let d = workspace();
    let out = run(d.path(), &["policy", "artifact-hash", "nope\u{1b}[31m"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains('\u{1b}'), "{err:?}");
    assert!(err.contains("nope^[[31m"), "{err:?}");
}

#[test]
fn appcontainer_windows_dry_run_scans_objects_with_windows_paths() {
    let d = workspace();
    let p = policy(d.path());
    let probe = d.path().join("probe.exe");
    let out = Command::new(TERRA)
        .current_dir(d.path())
        .args([
            "run",
            "--dry-run",
            "--json",
            "--policy",
            p.to_str().unwrap(),
            "--",
            probe.to_str().unwrap(),
            "--version",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["pathsWindowsCanonical"], true);
    assert_eq!(v["objects"]["counted"], true);
    assert!(v["objects"]["scanned"].as_u64().unwrap() >= 4);
    let cwd = v["workingDirectory"].as_str().unwrap();
    assert!(!cwd.starts_with(r"\\"), "{cwd}");
}

fn run_system(dir: &Path, program: &str, args: &[&str]) -> Output {
    let p = policy(dir);
    let system = std::env::var("SystemRoot").unwrap();
    let program = format!(r"{system}\System32\{program}");
    let mut a = vec!["run", "--policy", p.to_str().unwrap(), "--", &program];
    a.extend_from_slice(args);
    Command::new(TERRA)
        .current_dir(dir)
        .args(&a)
        .output()
        .unwrap()
}

#[test]
fn appcontainer_windows_cmd_starts_in_a_plain_working_directory() {
    let d = workspace();
    let out = run_system(d.path(), "cmd.exe", &["/d", "/c", "cd"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("UNC"), "{text}");
    assert!(!text.starts_with(r"\\"), "{text}");
    assert!(
        text.trim_end()
            .ends_with(&*d.path().file_name().unwrap().to_string_lossy()),
        "{text}"
    );
}

#[test]
fn appcontainer_windows_workload_starts_children() {
    let d = workspace();
    // cmd starts cmd, which starts cmd: three processes in the workload's job.
    let out = run_system(
        d.path(),
        "cmd.exe",
        &["/d", "/c", "cmd /d /c cmd /d /c echo nested"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("nested"));
}

#[test]
fn appcontainer_windows_user32_programs_start() {
    let d = workspace();
    // whoami.exe imports user32.dll: under a Win32k lockdown it would die
    // with 0xC0000142 before main.
    let out = run_system(d.path(), "whoami.exe", &[]);
    assert_ne!(out.status.code(), Some(0xC000_0142_u32 as i32));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
