//! `terra run`, `terra doctor` and `terra backends` end to end: exit codes,
//! refusals, the environment, receipts, the deadline, signals, stdin and the
//! run's temp and state directories.
// Linux only: `terra run` starts runs only on Linux in this build.
#![cfg(target_os = "linux")]

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

mod common;

use common::{require_root, run_bounded, terra_as, RunDirs, User, NOBODY};
use terra_test_support::json::field_strs;
use terra_test_support::users::make_null_device;

/// A workspace, state and runtime directories, a home and a temp directory,
/// removed at drop.
struct Env(RunDirs);

impl std::ops::Deref for Env {
    type Target = RunDirs;
    fn deref(&self) -> &RunDirs {
        &self.0
    }
}

impl Env {
    fn new(name: &str) -> Env {
        Env(RunDirs::new("terra-runcli", name, User::Caller))
    }

    /// terra with the run's environment (PATH=/usr/bin:/bin).
    fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_terra"));
        self.run_env(&mut c, "/usr/bin:/bin");
        c
    }

    /// `terra run OPTS -- sh -c SCRIPT`.
    fn run_sh(&self, opts: &[&str], script: &str) -> Output {
        let mut args = vec!["run"];
        args.extend_from_slice(opts);
        args.extend(["--", "sh", "-c", script]);
        self.run(&args)
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut c = self.cmd();
        c.args(args);
        run_bounded(c)
    }

    /// The run directories the supervisor created.
    fn runs(&self) -> Vec<PathBuf> {
        list(&self.state.join("terra/runs"))
    }

    /// The runs' runtime directories (removed when a run ends).
    fn runtime_runs(&self) -> Vec<PathBuf> {
        list(&self.runtime.join("terra/runs"))
    }

    fn only_receipt(&self) -> Value {
        let runs = self.runs();
        assert_eq!(runs.len(), 1, "expected one run directory: {runs:?}");
        serde_json::from_slice(&fs::read(runs[0].join("receipt.json")).unwrap()).unwrap()
    }

    /// Entries left in the TMPDIR terra made the run's temp directory in.
    fn temp_dirs(&self) -> Vec<PathBuf> {
        fs::read_dir(&self.tmp)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect()
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn exit_codes_follow_the_workload() {
    let e = Env::new("codes");
    assert_eq!(e.run(&["run", "--", "true"]).status.code(), Some(0));
    assert_eq!(
        e.run(&["run", "--", "sh", "-c", "exit 7"]).status.code(),
        Some(7)
    );
    let o = e.run(&["run", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(o.status.code(), Some(128 + 15), "{}", stderr(&o));
    let o = e.run(&["run", "--", "terra-surely-not-a-command"]);
    assert_eq!(o.status.code(), Some(127));
    assert!(stderr(&o).starts_with("terra: "), "{}", stderr(&o));
    fs::write(e.ws.join("not-executable"), "#!/bin/sh\n").unwrap();
    let o = e.run(&["run", "--", "./not-executable"]);
    assert_eq!(o.status.code(), Some(126), "{}", stderr(&o));
}

#[test]
fn stdio_passes_through() {
    let e = Env::new("stdio");
    let mut c = e.cmd();
    c.args(["run", "--", "sh", "-c", "tr a-z A-Z; echo err >&2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello box\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "HELLO BOX\n");
    assert!(stderr(&out).contains("err"));
}

#[test]
fn environment_is_an_allowlist() {
    let e = Env::new("env");
    let mut c = e.cmd();
    c.env("TERRA_TEST_SECRET", "s3cret")
        .env("TERRA_TEST_COPY", "copied")
        .env("TERM", "xterm-test")
        .env("LC_TIME", "C");
    c.args([
        "run",
        "--env",
        "A=b",
        "--env",
        "TERRA_TEST_COPY",
        "--",
        "env",
    ]);
    let o = run_bounded(c);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let env = stdout(&o);
    assert!(
        !env.contains("s3cret"),
        "a variable outside the allowlist leaked:\n{env}"
    );
    for want in [
        "A=b\n",
        "TERRA_TEST_COPY=copied\n",
        "TERM=xterm-test\n",
        "LC_TIME=C\n",
        "HOME=/tmp\n",
        "TMPDIR=/tmp\n",
        "PATH=",
    ] {
        assert!(env.contains(want), "missing {want:?} in:\n{env}");
    }
    // HOME exists and is writable inside the box.
    let o = e.run_sh(&[], "touch \"$HOME/x\" && test -d \"$HOME\"");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // --env NAME that terra does not have is refused.
    let o = e.run(&["run", "--env", "TERRA_TEST_UNSET", "--", "true"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(stderr(&o).contains("TERRA_TEST_UNSET"), "{}", stderr(&o));
}

#[test]
fn receipt_records_the_run() {
    let e = Env::new("receipt");
    let extra = e.root.join("receipt.json");
    let o = e.run_sh(&["--receipt", extra.to_str().unwrap()], "exit 3");
    assert_eq!(o.status.code(), Some(3));
    let r = e.only_receipt();
    let copy: Value = serde_json::from_slice(&fs::read(&extra).unwrap()).unwrap();
    assert_eq!(
        r, copy,
        "the --receipt copy equals the state directory's receipt"
    );
    assert_eq!(r["backend"], "linux");
    assert_eq!(r["terraVersion"], env!("CARGO_PKG_VERSION"));
    assert_eq!(r["policy"]["source"], "default");
    let default_digest =
        terra_policy::digest::artifact_digest(terra_policy::DEFAULT_POLICY_SOURCE.as_bytes());
    assert_eq!(r["policy"]["artifactDigest"], default_digest.as_str());
    let mir = terra_policy::compile_source(terra_policy::DEFAULT_POLICY_SOURCE.as_bytes()).unwrap();
    assert_eq!(r["decisionDigest"], mir.decision_digest().as_str());
    assert_eq!(r["outcome"]["exitCode"], 3);
    assert_eq!(r["outcome"]["timedOut"], false);
    assert_eq!(r["outcome"]["refused"], Value::Null);
    assert_eq!(r["activation"], "passed");
    assert_eq!(r["argv"], serde_json::json!(["sh", "-c", "exit 3"]));
    assert_eq!(
        r["hostBindings"]["workspace"],
        fs::canonicalize(&e.ws).unwrap().to_str().unwrap()
    );
    assert!(r["capabilities"]["required"]
        .as_array()
        .unwrap()
        .contains(&Value::from("network-none")));
    assert!(r["capabilities"]["declared"]
        .as_array()
        .unwrap()
        .contains(&Value::from("fs-write")));
    for k in ["startedAt", "endedAt"] {
        let t = r[k].as_str().unwrap();
        assert!(
            t.len() == 24 && t.ends_with('Z') && &t[10..11] == "T",
            "{k} = {t}"
        );
    }
    // What applied beside the policy: the time taken, the host, the limits.
    assert!(r["durationMs"].as_u64().is_some(), "{r}");
    assert_eq!(
        r["hostName"].as_str(),
        nix::unistd::gethostname().unwrap().to_str(),
        "{r}"
    );
    assert_eq!(r["limits"]["timeoutMs"], Value::Null, "{r}");
    assert_eq!(r["limits"]["timeoutGraceMs"], 2000, "{r}");
    assert_eq!(r["limits"]["network"], Value::Null, "no broker: {r}");
    assert_eq!(r["outcome"]["roleKilled"], Value::Null, "{r}");
    assert!(r["landlockAbi"].as_i64().unwrap_or(0) >= 1 || r["landlockAbi"].is_null());
    // The supervisor confined itself too, under the same kernel's Landlock.
    assert_eq!(
        r["supervisorLandlockAbi"].is_null(),
        r["landlockAbi"].is_null(),
        "{r}"
    );
    // After the run the receipt and the request (the canary) are left,
    // owner-only; the runtime directory (lock, pid files) is gone.
    let dir = &e.runs()[0];
    let mut left: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["receipt.json", "request.json"]);
    assert_eq!(mode(dir), 0o700);
    assert_eq!(mode(&dir.join("receipt.json")), 0o600);
    assert_eq!(mode(&dir.join("request.json")), 0o600);
    assert_eq!(e.runtime_runs(), Vec::<PathBuf>::new());
}

/// Starts `terra run OPTS` of a workload that says "ready" and then waits for
/// its stdin to close (drop the child's stdin to end it); returns once it is
/// ready.
fn start_held(mut c: Command, opts: &[&str]) -> std::process::Child {
    c.arg("run")
        .args(opts)
        .args(["--", "sh", "-c", "echo ready; cat >/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let _stdout = read_ready(&mut child);
    child
}

/// Reads the workload's first line, which must be "ready"; returns the rest
/// of its standard output.
fn read_ready(child: &mut std::process::Child) -> BufReader<std::process::ChildStdout> {
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    out
}

fn list(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn state_directory_during_the_run() {
    let e = Env::new("statelive");
    let secret = "value-of-a-secret-7391";
    let mut child = start_held(e.cmd(), &["--env", &format!("TOKEN={secret}")]);
    let runs = e.runs();
    assert_eq!(runs.len(), 1);
    assert_eq!(mode(&runs[0]), 0o700);
    let live = e.runtime_runs();
    assert_eq!(live.len(), 1, "one runtime directory: {live:?}");
    let dir = &live[0];
    assert_eq!(
        dir.file_name(),
        runs[0].file_name(),
        "both directories are named by the run id"
    );
    let read_pid = |name: &str| -> u32 {
        fs::read_to_string(dir.join(name))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let supervisor = read_pid("supervisor.pid");
    let host = read_pid("host.pid");
    // The CLI starts its supervisor on a thread: its parent is the CLI
    // process, whichever thread.
    let status = fs::read_to_string(format!("/proc/{supervisor}/status")).unwrap();
    let ppid = status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .map(|v| v.trim().to_string());
    assert_eq!(
        ppid,
        Some(child.id().to_string()),
        "supervisor.pid names the CLI's child"
    );
    assert!(
        Path::new(&format!("/proc/{host}")).exists(),
        "host.pid names a live process"
    );
    assert_eq!(mode(dir), 0o700);
    let canary = runs[0].join("request.json");
    assert_eq!(mode(&canary), 0o600, "the canary is owner-only");
    assert_eq!(mode(&dir.join("lock")), 0o600);
    // The run lock is held: a second exclusive lock attempt fails.
    let lock = fs::File::open(dir.join("lock")).unwrap();
    let lock = match nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(_) => panic!("the supervisor does not hold the run lock"),
        Err((f, _)) => f,
    };
    drop(child.stdin.take());
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(!dir.exists(), "the runtime directory outlived the run");
    // The canary stays as a record of the request, without environment values.
    let kept = fs::read_to_string(&canary).unwrap();
    let hex_secret: String = secret.bytes().map(|b| format!("{b:02x}")).collect();
    let hex_name: String = "TOKEN".bytes().map(|b| format!("{b:02x}")).collect();
    assert!(
        !kept.contains(secret) && !kept.contains(&hex_secret),
        "an --env value was left on disk: {kept}"
    );
    assert!(
        kept.contains(&hex_name),
        "the variable's name is kept: {kept}"
    );
    assert!(
        nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock).is_ok(),
        "the run lock is released when the supervisor ends"
    );
}

#[test]
fn runtime_directory_falls_back_outside_the_grants() {
    // XDG_RUNTIME_DIR inside the workspace is visible to the box: skipped.
    // The next candidate is /run/user/UID, then a fresh private directory
    // /dev/shm/terra-run-UID-RANDOM (never a predictable name in /dev/shm).
    let uid = nix::unistd::geteuid().as_raw();
    let e = Env::new("runtimefallback");
    let inside = e.ws.join(".run");
    fs::create_dir_all(&inside).unwrap();
    let mut c = e.cmd();
    c.env("XDG_RUNTIME_DIR", &inside);
    let mut child = start_held(c, &[]);
    assert!(
        fs::read_dir(&inside).unwrap().next().is_none(),
        "runtime files written inside the workspace"
    );
    let runs = e.runs();
    assert_eq!(runs.len(), 1);
    let run_id = runs[0].file_name().unwrap().to_owned();
    let user_run = PathBuf::from(format!("/run/user/{uid}"));
    let runtime = if user_run.is_dir() {
        user_run.join("terra/runs").join(&run_id)
    } else if Path::new("/dev/shm").is_dir() {
        fresh_runtime_dir_of(child.id(), uid)
    } else {
        // No memory file system to use: the state directory holds it all.
        runs[0].clone()
    };
    for f in ["lock", "supervisor.pid", "host.pid"] {
        assert!(runtime.join(f).is_file(), "{f} in {}", runtime.display());
    }
    drop(child.stdin.take());
    assert_eq!(child.wait().unwrap().code(), Some(0));
    if runtime == runs[0] {
        for f in ["supervisor.pid", "host.pid"] {
            assert!(!runtime.join(f).exists(), "{f} outlived the run");
        }
    } else {
        assert!(!runtime.exists(), "{} outlived the run", runtime.display());
    }
}

/// The fresh `/dev/shm/terra-run-UID-*` directory of the supervisor whose
/// parent is the CLI `cli_pid`.
fn fresh_runtime_dir_of(cli_pid: u32, uid: u32) -> PathBuf {
    let prefix = format!("terra-run-{uid}-");
    let found: Vec<PathBuf> = list(Path::new("/dev/shm"))
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
        })
        .filter(|p| {
            let pid = fs::read_to_string(p.join("supervisor.pid")).unwrap_or_default();
            let stat = fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
            // pid (comm) state ppid ...
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1).map(str::to_owned))
                == Some(cli_pid.to_string())
        })
        .collect();
    assert_eq!(found.len(), 1, "one fresh runtime directory: {found:?}");
    let meta = fs::symlink_metadata(&found[0]).unwrap();
    assert!(meta.is_dir());
    assert_eq!(mode(&found[0]), 0o700);
    found[0].clone()
}

#[test]
fn temp_is_private_and_removed_unless_kept() {
    let e = Env::new("temp");
    let o = e.run(&["run", "--", "sh", "-c", "echo x > /tmp/f && ls -ld /tmp"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        e.temp_dirs().is_empty(),
        "temp left behind: {:?}",
        e.temp_dirs()
    );
    let o = e.run_sh(
        &["--keep-temp"],
        "echo kept > /tmp/f; mkdir /tmp/locked; chmod 000 /tmp/locked",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let kept = e.temp_dirs();
    assert_eq!(kept.len(), 1);
    assert_eq!(fs::read_to_string(kept[0].join("f")).unwrap(), "kept\n");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        fs::metadata(&kept[0]).unwrap().permissions().mode() & 0o777,
        0o700
    );
    // A workload that leaves an unreadable directory still gets its temp removed.
    let _ = fs::set_permissions(kept[0].join("locked"), fs::Permissions::from_mode(0o700));
    fs::remove_dir_all(&kept[0]).unwrap();
    let o = e.run_sh(&[], "mkdir -p /tmp/d/e && chmod 000 /tmp/d");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        e.temp_dirs().is_empty(),
        "temp left behind: {:?}",
        e.temp_dirs()
    );
}

#[test]
fn timeout_stops_the_box() {
    let e = Env::new("timeout");
    let o = e.run(&["run", "--timeout", "300ms", "--", "sleep", "60"]);
    assert_eq!(o.status.code(), Some(128 + 15), "{}", stderr(&o));
    let r = e.only_receipt();
    assert_eq!(r["outcome"]["timedOut"], true);
    assert_eq!(r["outcome"]["signal"], 15);
    // A workload that ignores SIGTERM is killed after the grace period.
    let e = Env::new("timeout-kill");
    let o = e.run_sh(
        &["--timeout", "200ms"],
        "trap '' TERM; while :; do sleep 1; done",
    );
    assert!(
        matches!(o.status.code(), Some(137) | Some(143)),
        "{:?} {}",
        o.status,
        stderr(&o)
    );
    assert_eq!(e.only_receipt()["outcome"]["timedOut"], true);
    for bad in ["0", "abc", "1.5s", "-1"] {
        let o = e.run(&["run", "--timeout", bad, "--", "true"]);
        assert_eq!(o.status.code(), Some(125), "--timeout {bad}");
    }
}

#[test]
fn refusals_exit_125_with_a_message() {
    let e = Env::new("refuse");
    let policy = e.root.join("p.json");
    fs::write(&policy, terra_policy::DEFAULT_POLICY_SOURCE).unwrap();
    let p = policy.to_str().unwrap();
    // Each command line, split at spaces ({p}: a policy file), and what the refusal names.
    let cases = [
        ("run --policy {p} --read /etc -- true", "only --deny"),
        (
            "run --policy {p} --allow-net example.com:443 -- true",
            "only --deny",
        ),
        (
            "run --allow-net example.com:0 -- true",
            "port must be 1..65535",
        ),
        ("run --allow-net example.com -- true", "HOST:PORT"),
        (
            "run --read /terra/surely/missing -- true",
            "/terra/surely/missing",
        ),
        (
            "run --policy /terra/missing.json -- true",
            "/terra/missing.json",
        ),
        ("run --backend macos -- true", "not available on this OS"),
        ("run --backend plan9 -- true", "unknown backend"),
        ("run --workspace / -- true", "whole host"),
    ];
    for (line, needle) in cases {
        let line = line.replace("{p}", p);
        let args: Vec<&str> = line.split(' ').collect();
        let o = e.run(&args);
        assert_eq!(o.status.code(), Some(125), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.starts_with("terra: ") && err.contains(needle),
            "{args:?}: {err}"
        );
    }
    let bad = e.root.join("bad.json");
    fs::write(&bad, "{\"formatVersion\": 3.0}").unwrap();
    let o = e.run(&["run", "--policy", bad.to_str().unwrap(), "--", "true"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(
        e.runs().is_empty(),
        "a refused run must not reach the supervisor"
    );
    // The supervisor starts beside the CLI's resolving: a run refused
    // before its request leaves no process of its own behind.
    let mark = format!("XDG_STATE_HOME={}", e.state.display());
    let left: Vec<String> = fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|d| d.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|d| {
            fs::read(d.path().join("environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == mark.as_bytes()))
        })
        .map(|d| d.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        left.is_empty(),
        "processes of refused runs remain: {left:?}"
    );
    assert!(
        e.temp_dirs().is_empty(),
        "a refused run must not leave a temp directory"
    );
}

#[test]
fn policy_files_json_and_mir_with_deny() {
    let e = Env::new("policyfile");
    fs::create_dir_all(e.ws.join("secret")).unwrap();
    fs::write(e.ws.join("secret/key"), "k").unwrap();
    let json = e.root.join("p.json");
    fs::write(&json, terra_policy::DEFAULT_POLICY_SOURCE).unwrap();
    let mir = terra_policy::compile_source(terra_policy::DEFAULT_POLICY_SOURCE.as_bytes()).unwrap();
    let mir_path = e.root.join("p.mir");
    fs::write(&mir_path, mir.bytes()).unwrap();
    for (path, format) in [(&json, "json"), (&mir_path, "mir")] {
        let p = path.to_str().unwrap();
        let o = e.run(&["run", "--policy", p, "--", "cat", "secret/key"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let o = e.run(&[
            "run",
            "--policy",
            p,
            "--deny",
            "secret",
            "--",
            "cat",
            "secret/key",
        ]);
        assert_ne!(o.status.code(), Some(0), "--deny must hide secret/key");
        assert!(!stdout(&o).contains('k'));
        let runs = e.runs();
        let last = runs
            .iter()
            .map(|d| {
                serde_json::from_slice::<Value>(&fs::read(d.join("receipt.json")).unwrap()).unwrap()
            })
            .find(|r| {
                r["policy"]["format"] == format
                    && !r["policy"]["overlay"].as_array().unwrap().is_empty()
            })
            .expect("a receipt with the overlay");
        let bytes = fs::read(path).unwrap();
        assert_eq!(
            last["policy"]["artifactDigest"],
            terra_policy::digest::artifact_digest(&bytes).as_str()
        );
        assert_ne!(
            last["decisionDigest"],
            mir.decision_digest().as_str(),
            "the deny changes the decision"
        );
        let _ = fs::remove_dir_all(e.state.join("terra"));
    }
}

#[test]
fn grants_from_the_command_line() {
    let e = Env::new("grants");
    let ro = e.root.join("ro");
    let rw = e.root.join("rw");
    fs::create_dir_all(&ro).unwrap();
    fs::create_dir_all(&rw).unwrap();
    fs::write(ro.join("f"), "ro\n").unwrap();
    let script = format!(
        "cat {0}/f && ! touch {0}/g 2>/dev/null && echo w > {1}/g",
        ro.display(),
        rw.display()
    );
    let o = e.run_sh(
        &[
            "--read",
            ro.to_str().unwrap(),
            "--write",
            rw.to_str().unwrap(),
        ],
        &script,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(fs::read_to_string(rw.join("g")).unwrap(), "w\n");
    // Relative paths are made absolute against the current directory.
    fs::create_dir_all(e.ws.join("sub")).unwrap();
    let o = e.run(&[
        "run",
        "--dry-run",
        "--read",
        "../ro",
        "--deny",
        "sub",
        "--",
        "true",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let has_rule = |access: &str, path: String| {
        text.lines().any(|l| {
            l.split_whitespace().next() == Some(access)
                && l.split_whitespace().nth(2) == Some(path.as_str())
        })
    };
    assert!(
        has_rule("read", fs::canonicalize(&ro).unwrap().display().to_string()),
        "{text}"
    );
    assert!(
        has_rule(
            "deny",
            format!("{}/sub", fs::canonicalize(&e.ws).unwrap().display())
        ),
        "{text}"
    );
}

#[test]
fn dry_run_prints_the_plan_and_runs_nothing() {
    let e = Env::new("dry");
    let marker = e.ws.join("ran");
    let o = e.run(&["run", "--dry-run", "--", "touch", marker.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let mir = terra_policy::compile_source(terra_policy::DEFAULT_POLICY_SOURCE.as_bytes()).unwrap();
    assert!(
        text.contains(&format!("decision digest: {}", mir.decision_digest())),
        "{text}"
    );
    assert!(text.contains("backend program (linux):"), "{text}");
    // terra's own roles and their allowlists, from the tables they install.
    for role in [
        "supervisor (terra __supervisor), once the workers run:",
        "the box's init (terra __vm), once the workload runs:",
        "seccomp any other call of terra __supervisor kills the process",
    ] {
        assert!(text.contains(role), "{role} missing from:\n{text}");
    }
    assert!(
        text.contains("seccomp"),
        "the filter program is shown:\n{text}"
    );
    assert!(text.contains("network:         none"), "{text}");
    assert!(!marker.exists(), "--dry-run ran the command");
    assert!(e.runs().is_empty());
    assert!(e.temp_dirs().is_empty());
}

#[test]
fn sigterm_to_the_cli_reaches_the_workload_once() {
    let e = Env::new("signal");
    let mut c = e.cmd();
    c.args([
        "run",
        "--",
        "sh",
        "-c",
        "n=0; trap 'n=$((n+1))' TERM; echo ready; while [ ! -e /tmp/stop ]; do sleep 0.05; if [ $n -gt 0 ]; then sleep 1; echo got $n; exit 42; fi; done",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut out = read_ready(&mut child);
    Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(42));
    assert_eq!(rest, "got 1\n", "SIGTERM must arrive exactly once");
}

#[test]
fn backends_lists_linux_landlock_vm_macos_windows() {
    let e = Env::new("backends");
    let o = e.run(&["backends", "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let names = field_strs(&v, "name");
    assert_eq!(names, ["linux", "landlock", "vm", "macos", "windows"]);
    assert_eq!(
        v[0]["supported"], true,
        "this host runs the suite, so it supports linux: {v}"
    );
    assert!(v[0]["declaredCapabilities"]
        .as_array()
        .unwrap()
        .contains(&Value::from("fs-deny-write")));
    // The network broker is built in and this host runs boxes, so the
    // mediated capabilities are declared (tests/network_e2e.rs uses them).
    for cap in [
        "network-mediated",
        "network-require-tls-sni",
        "network-private-addresses",
    ] {
        assert!(
            v[0]["declaredCapabilities"]
                .as_array()
                .unwrap()
                .contains(&Value::from(cap)),
            "{cap}: {v}"
        );
    }
    // The vm backend's row says what it declares whether or not QEMU is here.
    assert!(v[2]["declaredCapabilities"]
        .as_array()
        .unwrap()
        .contains(&Value::from("network-none")));
    assert_eq!(v[3]["supported"], false);
    assert_eq!(v[4]["supported"], false);
    let o = e.run(&["backends"]);
    assert!(stdout(&o).contains("not supported on this host"));
    // This binary does not build for those targets yet: it must not say so.
    assert!(!stdout(&o).contains("builds for"), "{}", stdout(&o));
}

#[test]
fn doctor_reports_each_check() {
    let e = Env::new("doctor");
    let o = e.run(&["doctor", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(if v["ok"] == true { 0 } else { 1 }));
    let names = field_strs(&v["checks"], "name");
    for want in [
        "user-namespaces",
        "apparmor-userns",
        "container",
        "landlock",
        "seccomp",
        "cgroup-v2",
    ] {
        assert_eq!(
            names.iter().filter(|n| **n == want).count(),
            1,
            "check {want} once: {names:?}"
        );
    }
    // One container check, not two under different names.
    assert_eq!(
        names.iter().filter(|n| n.contains("container")).count(),
        1,
        "{names:?}"
    );
    let unique: std::collections::HashSet<&&str> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "no check twice: {names:?}");
    // What the doctor requires is what the launcher needs: a box runs without
    // Landlock (namespaces and seccomp), not without user namespaces.
    let required = |name: &str| {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["required"].clone())
    };
    assert_eq!(required("landlock"), Some(Value::Bool(false)));
    assert_eq!(required("container"), Some(Value::Bool(false)));
    assert_eq!(required("user-namespaces"), Some(Value::Bool(true)));
    assert_eq!(required("seccomp"), Some(Value::Bool(true)));
    // `terra backends` agrees with the doctor: the host runs boxes when the
    // linux or the landlock backend can start.
    let b: Value = serde_json::from_slice(&e.run(&["backends", "--json"]).stdout).unwrap();
    assert_eq!(
        b[0]["supported"], v["linuxOk"],
        "backends {b} vs doctor {v}"
    );
    assert_eq!(
        Value::Bool(b[0]["supported"] == true || b[1]["supported"] == true),
        v["ok"],
        "backends {b} vs doctor {v}"
    );
    for c in v["checks"].as_array().unwrap() {
        if c["ok"] == false {
            assert!(
                c["fix"].as_str().is_some_and(|f| !f.is_empty()),
                "a failing check says what to change: {c}"
            );
        }
    }
    assert_eq!(
        v["ok"], true,
        "this host runs the suite, so doctor must pass: {v}"
    );
    let o = e.run(&["doctor"]);
    assert!(stdout(&o).contains("landlock"));
}

#[test]
fn state_directory_falls_back_outside_the_grants() {
    // XDG_STATE_HOME inside the workspace is visible to the box: refused as a
    // state directory, the next candidate is used instead.
    let e = Env::new("statefallback");
    let inside = e.ws.join(".state");
    fs::create_dir_all(&inside).unwrap();
    let mut c = e.cmd();
    c.env("XDG_STATE_HOME", &inside)
        .env("HOME", e.root.join("home"));
    c.args(["run", "--", "sh", "-c", "ls -A \"$PWD/.state\""]);
    let o = run_bounded(c);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).trim().is_empty(),
        "the box saw run state: {}",
        stdout(&o)
    );
    assert!(
        fs::read_dir(&inside).unwrap().next().is_none(),
        "state written inside the workspace"
    );
    let home_runs = e.root.join("home/.local/state/terra/runs");
    assert_eq!(
        fs::read_dir(&home_runs).unwrap().count(),
        1,
        "the run used $HOME/.local/state"
    );
    assert!(Path::new(&home_runs).is_dir());
}

/// Runs terra on a new pseudo-terminal (its controlling terminal, terra in the
/// foreground), types `input`, then Ctrl-C once `ready` appears; returns the
/// terminal's output and the exit status.
const PTY_DRIVER: &str = r#"
import os, sys, time, select
pid, fd = os.forkpty()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
buf = b""
def pump(until, limit=60):
    global buf
    end = time.time() + limit
    while (until is None or until not in buf) and time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                d = os.read(fd, 4096)
            except OSError:
                return
            if not d:
                return
            buf += d
pump(b"type:")
os.write(fd, sys.argv[1].encode() + b"\n")
pump(b"ready")
os.write(fd, b"\x03")
pump(None)
_, st = os.waitpid(pid, 0)
sys.stdout.buffer.write(buf.replace(b"\r\n", b"\n"))
sys.exit(os.waitstatus_to_exitcode(st) & 255)
"#;

/// The workload reads a line from the terminal, then counts SIGINT
/// deliveries (the wakeup fd gets one byte per delivery, where Python-level
/// handlers would merge deliveries that arrive close together).
const CTRL_C_COUNTER: &str = r#"
import os, signal, sys, time
r, w = os.pipe()
os.set_blocking(w, False)
os.set_blocking(r, False)
signal.set_wakeup_fd(w)
signal.signal(signal.SIGINT, lambda s, f: None)
sys.stdout.write("type:"); sys.stdout.flush()
line = sys.stdin.readline().strip()
print("got " + line, flush=True)
print("ready", flush=True)
seen = b""
while not seen:
    time.sleep(0.02)
    try:
        seen += os.read(r, 64)
    except BlockingIOError:
        pass
time.sleep(1.5)
try:
    seen += os.read(r, 64)
except BlockingIOError:
    pass
print("count %d" % seen.count(bytes([signal.SIGINT])), flush=True)
"#;

#[test]
fn terminal_input_and_ctrl_c_reach_the_workload_once() {
    let e = Env::new("tty");
    let mut c = Command::new("/usr/bin/python3");
    c.arg("-c")
        .arg(PTY_DRIVER)
        .arg("hello box")
        .arg(env!("CARGO_BIN_EXE_terra"))
        .args(["run", "--", "python3", "-c", CTRL_C_COUNTER]);
    e.run_env(&mut c, "/usr/bin:/bin");
    c.env("TERM", "xterm");
    let o = run_bounded(c);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{text}\n{}", stderr(&o));
    assert!(
        text.contains("got hello box"),
        "terminal input did not reach the workload:\n{text}"
    );
    assert!(
        text.contains("count 1\n"),
        "Ctrl-C must reach the workload exactly once:\n{text}"
    );
}

// ------------------------------------------------------------ outputs and inputs

/// A character device of the test's own (the node of /dev/null), as root.
#[test]
fn receipt_is_never_a_symlink_fifo_or_device() {
    use std::os::unix::fs::FileTypeExt;
    let e = Env::new("receiptkinds");
    // A symlink to a file (like /dev/stdout), a FIFO without a reader (an
    // open for writing would block forever), and a device node (as root).
    let target = e.root.join("target");
    fs::write(&target, b"keep").unwrap();
    let link = e.root.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let fifo = e.root.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut outputs = vec![(link.clone(), "a symlink"), (fifo.clone(), "a FIFO")];
    let dev = e.root.join("null");
    let has_dev = make_null_device(&dev);
    if has_dev {
        outputs.push((dev.clone(), "a character device"));
    }
    for (out, kind) in &outputs {
        let o = e.run_sh(&["--receipt", out.to_str().unwrap()], "touch ran");
        assert_eq!(
            o.status.code(),
            Some(125),
            "{}: {}",
            out.display(),
            stderr(&o)
        );
        assert!(
            stderr(&o).contains("--receipt") && stderr(&o).contains(kind),
            "{}",
            stderr(&o)
        );
        assert!(!e.ws.join("ran").exists(), "the workload ran");
    }
    assert_eq!(fs::read(&target).unwrap(), b"keep");
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    if has_dev {
        assert!(fs::symlink_metadata(&dev)
            .unwrap()
            .file_type()
            .is_char_device());
    }
}

#[test]
fn receipt_dash_goes_to_standard_output_after_the_workload() {
    let e = Env::new("receiptdash");
    let o = e.run_sh(&["--receipt", "-"], "echo from-the-workload");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let rest = out
        .strip_prefix("from-the-workload\n")
        .unwrap_or_else(|| panic!("the workload's output comes first: {out}"));
    let printed: Value = serde_json::from_str(rest).unwrap();
    assert_eq!(printed, e.only_receipt());
    assert!(!e.ws.join("-").exists(), "a file named - was written");
}

#[test]
fn receipt_that_cannot_be_written_refuses_the_run() {
    // Checked before the workload starts: its directory does not exist.
    let e = Env::new("receiptmissing");
    let missing = e.root.join("no-such-dir/receipt.json");
    let o = e.run_sh(&["--receipt", missing.to_str().unwrap()], "touch ran");
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).contains("--receipt"), "{}", stderr(&o));
    assert!(!e.ws.join("ran").exists(), "the workload ran");
    // A symlink on the way to the receipt is refused too (the box could
    // have made it), naming the symlink.
    fs::create_dir(e.root.join("real")).unwrap();
    std::os::unix::fs::symlink(e.root.join("real"), e.root.join("via")).unwrap();
    let via = e.root.join("via/receipt.json");
    let o = e.run(&["run", "--receipt", via.to_str().unwrap(), "--", "true"]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(stderr(&o).contains("is a symlink"), "{}", stderr(&o));
    assert!(list(&e.root.join("real")).is_empty());
}

#[test]
fn receipt_ignores_prepared_temporary_names() {
    // Everything the old naming could have produced for this run
    // (`.receipt.json.tmp-PID` from the CLI's pid on) is taken before the
    // supervisor writes, and a forged receipt waits there: the genuine
    // receipt replaces it.
    let e = Env::new("receipttemps");
    let dest = e.ws.join("receipt.json");
    let mut child = start_held(e.cmd(), &["--receipt", dest.to_str().unwrap()]);
    let cli = child.id();
    for pid in cli..cli + 300 {
        fs::write(e.ws.join(format!(".receipt.json.tmp-{pid}")), b"").unwrap();
    }
    fs::write(&dest, br#"{"decisionDigest":"forged"}"#).unwrap();
    drop(child.stdin.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let written: Value = serde_json::from_slice(&fs::read(&dest).unwrap()).unwrap();
    assert_eq!(written, e.only_receipt(), "the receipt is the run's own");
}

/// `terra run --policy P -- true` under a 2 GiB address-space limit.
fn run_with_policy_limited(e: &Env, policy: &Path) -> Output {
    let mut c = e.cmd();
    c.arg("-c")
        .arg("ulimit -v 2097152 && exec \"$0\" run --policy \"$1\" -- true")
        .arg(env!("CARGO_BIN_EXE_terra"))
        .arg(policy);
    let mut sh = Command::new("/bin/sh");
    sh.args(c.get_args());
    sh.env_clear();
    for (k, v) in c.get_envs() {
        if let Some(v) = v {
            sh.env(k, v);
        }
    }
    sh.current_dir(&e.ws).stdin(Stdio::null());
    run_bounded(sh)
}

#[test]
fn endless_policy_inputs_are_refused_at_the_limit() {
    let e = Env::new("endless");
    let o = run_with_policy_limited(&e, Path::new("/dev/zero"));
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("/dev/zero is more than 1048576 bytes"),
        "{}",
        stderr(&o)
    );
    // A FIFO that a writer feeds forever.
    let fifo = e.root.join("policy.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let feeder_path = fifo.clone();
    let feeder = std::thread::spawn(move || {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .open(&feeder_path)
            .unwrap();
        let block = vec![b' '; 65536];
        // Ends when the reader closes its end (EPIPE).
        while f.write_all(&block).is_ok() {}
    });
    let o = run_with_policy_limited(&e, &fifo);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is more than 1048576 bytes"),
        "{}",
        stderr(&o)
    );
    feeder.join().unwrap();
}

#[test]
#[ignore = "needs root: another user's directory in /tmp, a run as uid 65534"]
fn state_directory_squatted_in_tmp_falls_back_to_a_fresh_one() {
    // Another user made the predictable /tmp/terra-65534 (and its /dev/shm
    // twin), and 65534's private state fallback /tmp/terra-state-65534,
    // first; a run as 65534 without a home or XDG directories still works,
    // does not use the squatted fallback, and says where its state went.
    require_root("state_directory_squatted_in_tmp_falls_back_to_a_fresh_one");
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    const SQUATTER: u32 = 4242;
    let squats = [
        PathBuf::from("/tmp/terra-65534"),
        PathBuf::from("/dev/shm/terra-65534"),
        PathBuf::from("/tmp/terra-state-65534"),
    ];
    for d in &squats {
        let _ = fs::remove_dir_all(d);
        if d.parent().is_some_and(Path::is_dir) {
            fs::create_dir(d).unwrap();
            fs::set_permissions(d, fs::Permissions::from_mode(0o700)).unwrap();
            std::os::unix::fs::chown(d, Some(SQUATTER), Some(SQUATTER)).unwrap();
        }
    }
    let ws = PathBuf::from(format!("/tmp/terra-runcli-{}-squat-ws", std::process::id()));
    let _ = fs::remove_dir_all(&ws);
    fs::create_dir(&ws).unwrap();
    std::os::unix::fs::chown(&ws, Some(NOBODY), Some(NOBODY)).unwrap();
    let mut c = terra_as(User::Nobody, &[]);
    c.args(["run", "--", "sh", "-c", "echo ran"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir(&ws)
        .stdin(Stdio::null());
    let o = run_bounded(c);
    let err = stderr(&o);
    for d in &squats {
        let _ = fs::remove_dir_all(d);
    }
    let _ = fs::remove_dir_all(&ws);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(stdout(&o), "ran\n");
    let fresh = err
        .split("fresh private directory ")
        .nth(1)
        .and_then(|s| s.lines().next())
        .map(|s| PathBuf::from(s.trim()))
        .unwrap_or_else(|| panic!("terra did not say where the state went: {err}"));
    assert!(fresh.starts_with("/tmp"), "{}", fresh.display());
    let meta = fs::symlink_metadata(&fresh).unwrap();
    assert!(meta.is_dir() && meta.uid() == NOBODY && meta.mode() & 0o777 == 0o700);
    let receipt: Value =
        serde_json::from_slice(&fs::read(fresh.join("receipt.json")).unwrap()).unwrap();
    assert_eq!(receipt["outcome"]["exitCode"], 0);
    fs::remove_dir_all(&fresh).unwrap();
}
