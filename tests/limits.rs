//! Resource limits (`--memory`, `--pids`, `--cpus`, `--max-file-size`,
//! `--require-limits`) against the terra binary, as the caller and, when the
//! caller is root, as uid 65534. Which mechanism applies depends on the host
//! (cgroup v2, cgroup v1, rlimit, none); every test reads it from the receipt
//! and checks what that mechanism must do, so no limit is taken on trust.
#![cfg(target_os = "linux")]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{command_as, run_bounded, show, terra_bin, users, RunDirs, User};
use serde_json::Value;

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

struct Box_ {
    dirs: RunDirs,
}

impl Box_ {
    fn new(name: &str, user: User) -> Box_ {
        let dirs = RunDirs::new("terra-limits", name, user);
        fs::create_dir_all(dirs.root.join("out")).unwrap();
        fs::set_permissions(dirs.root.join("out"), fs::Permissions::from_mode(0o777)).unwrap();
        Box_ { dirs }
    }

    fn receipt_path(&self) -> PathBuf {
        self.dirs.root.join("out/receipt.json")
    }

    /// `terra run LIMITS --receipt R -- ARGV` in the workspace.
    fn run(&self, limits: &[&str], argv: &[&str]) -> Output {
        self.dirs.chown_to_user(None);
        let user = self.dirs.user;
        let mut cmd = command_as(user, None, &[], &terra_bin(user));
        cmd.arg("run").args(limits);
        cmd.arg("--workspace")
            .arg(&self.dirs.ws)
            .arg("--timeout")
            .arg("60s")
            .arg("--rm-temp")
            .arg("--receipt")
            .arg(self.receipt_path())
            .arg("--")
            .args(argv);
        self.dirs.run_env(&mut cmd, PATH);
        cmd.current_dir(&self.dirs.ws);
        let _ = fs::remove_file(self.receipt_path());
        run_bounded(cmd)
    }

    fn receipt(&self, out: &Output) -> Value {
        let text = fs::read_to_string(self.receipt_path())
            .unwrap_or_else(|e| panic!("no receipt ({e}): {}", show(out)));
        serde_json::from_str(&text).unwrap()
    }
}

fn mechanism<'a>(r: &'a Value, limit: &str) -> &'a str {
    r["limits"][limit]["mechanism"].as_str().unwrap_or("")
}

/// The cgroup named in a limit's detail, if any, is gone after the run.
fn assert_cgroup_removed(r: &Value, limit: &str) {
    let detail = r["limits"][limit]["detail"].as_str().unwrap_or("");
    if let Some(dir) = detail
        .strip_prefix("cgroup v1 ")
        .or(detail.strip_prefix("cgroup v2 "))
    {
        assert!(
            !Path::new(dir).exists(),
            "the run's cgroup {dir} was left behind"
        );
    }
}

const ALLOC: &str = r#"
import resource, sys
n = int(sys.argv[1]) << 20
try:
    b = bytearray(n)
    b[-1] = 1
    print("allocated")
except MemoryError:
    print("MemoryError")
try:
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    print("raised")
except (ValueError, OSError):
    print("not raised")
"#;

#[test]
fn a_400_mib_allocation_fails_under_64m_and_8_mib_fits() {
    for user in users() {
        let b = Box_::new("memory", user);
        let out = b.run(&["--memory", "64M"], &["python3", "-c", ALLOC, "400"]);
        let r = b.receipt(&out);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            r["limits"]["memory"]["value"],
            64u64 << 20,
            "{}",
            show(&out)
        );
        assert_eq!(r["limits"]["memory"]["requested"], "64 MiB");
        assert!(!stdout.contains("allocated"), "{user:?}: {}", show(&out));
        match mechanism(&r, "memory") {
            "rlimit" => {
                // RLIMIT_AS: the allocation fails inside, and the workload
                // cannot lift its own limit.
                assert!(stdout.contains("MemoryError"), "{user:?}: {}", show(&out));
                assert!(stdout.contains("not raised"), "{user:?}: {}", show(&out));
                assert_eq!(out.status.code(), Some(0), "{}", show(&out));
            }
            "cgroup-v1" | "cgroup-v2" => {
                // The kernel's OOM killer ends the workload, and terra says so.
                if !stdout.contains("MemoryError") {
                    assert_eq!(out.status.code(), Some(137), "{user:?}: {}", show(&out));
                    assert!(
                        err.contains("killed by the memory limit (64 MiB)"),
                        "{user:?}: {}",
                        show(&out)
                    );
                    assert!(r["outcome"]["limitReached"]
                        .as_str()
                        .is_some_and(|s| s.contains("memory limit")));
                }
                assert_cgroup_removed(&r, "memory");
            }
            other => panic!(
                "{user:?}: --memory must always be enforced here, got {other:?}: {}",
                show(&out)
            ),
        }
        // The twin: a small allocation under the same limit works.
        let out = b.run(&["--memory", "64M"], &["python3", "-c", ALLOC, "8"]);
        assert_eq!(out.status.code(), Some(0), "{user:?}: {}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("allocated"),
            "{}",
            show(&out)
        );
    }
}

/// Forks up to 300 children that wait on a pipe, prints how many it got,
/// then lets them go. The marker in argv finds leftovers on the host.
const FORKS: &str = r#"
import os, sys
r, w = os.pipe()
kids = []
try:
    for i in range(300):
        p = os.fork()
        if p == 0:
            os.close(w)
            os.read(r, 1)
            os._exit(0)
        kids.append(p)
except OSError as e:
    print("fork refused:", e.errno)
print("forked", len(kids))
sys.stdout.flush()
os.close(w)
for p in kids:
    os.waitpid(p, 0)
"#;

/// Every file and directory under `dir`, counted.
fn entries(dir: &Path) -> usize {
    fs::read_dir(dir).map_or(0, |d| {
        d.flatten()
            .map(|e| {
                1 + if e.path().is_dir() {
                    entries(&e.path())
                } else {
                    0
                }
            })
            .sum()
    })
}

fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        {
            found.push(pid);
        }
    }
    found
}

#[test]
fn a_fork_storm_under_pids_64_is_contained_and_leaves_nothing() {
    for user in users() {
        let b = Box_::new("pids", user);
        let marker = format!("terra-fork-storm-{}-{user:?}", std::process::id());
        let out = b.run(&["--pids", "64"], &["python3", "-c", FORKS, &marker]);
        let r = b.receipt(&out);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let forked: usize = stdout
            .lines()
            .find_map(|l| l.strip_prefix("forked "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("{user:?}: {}", show(&out)));
        match mechanism(&r, "pids") {
            "none" => {
                // Nothing enforces it here (root without a pids cgroup): the
                // receipt says so, and the run was not limited.
                assert_eq!(forked, 300, "{user:?}: {}", show(&out));
                assert!(r["limits"]["pids"]["detail"]
                    .as_str()
                    .unwrap_or("")
                    .contains("root"));
            }
            m => {
                // The workload, the box's init and its network service count.
                assert!(
                    forked < 64,
                    "{user:?} ({m}): {forked} forks under --pids 64: {}",
                    show(&out)
                );
                assert!(
                    stdout.contains("fork refused: 11"),
                    "{user:?}: {}",
                    show(&out)
                );
                if m.starts_with("cgroup") {
                    assert!(
                        String::from_utf8_lossy(&out.stderr)
                            .contains("the pids limit (64) refused"),
                        "{user:?}: {}",
                        show(&out)
                    );
                }
                assert_cgroup_removed(&r, "pids");
            }
        }
        assert_eq!(
            out.status.code(),
            Some(0),
            "{user:?}: the run ends: {}",
            show(&out)
        );
        assert_eq!(
            processes_with(&marker),
            Vec::<u32>::new(),
            "{user:?}: processes left"
        );
    }
}

#[test]
fn writing_2_mib_under_max_file_size_1m_fails_and_512_kib_fits() {
    for user in users() {
        let b = Box_::new("fsize", user);
        // A program that does not handle SIGXFSZ is killed by it.
        let out = b.run(
            &["--max-file-size", "1M"],
            &["sh", "-c", "exec head -c 2097152 /dev/zero > big"],
        );
        let r = b.receipt(&out);
        assert_eq!(mechanism(&r, "maxFileSize"), "rlimit", "{}", show(&out));
        assert_eq!(
            out.status.code(),
            Some(128 + libc::SIGXFSZ),
            "{user:?}: {}",
            show(&out)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("SIGXFSZ"),
            "{user:?}: {}",
            show(&out)
        );
        let len = fs::metadata(b.dirs.ws.join("big")).map_or(0, |m| m.len());
        assert!(len <= 1 << 20, "{user:?}: the file grew to {len} bytes");
        // One that ignores it (Python) gets EFBIG.
        let out = b.run(
            &["--max-file-size", "1M"],
            &[
                "python3",
                "-c",
                "import errno\ntry:\n open('big2','wb').write(b'x'*(2<<20)); print('wrote')\nexcept OSError as e: print('errno', e.errno == errno.EFBIG)",
            ],
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "errno True\n",
            "{user:?}: {}",
            show(&out)
        );
        // The twin: a file under the limit is written whole.
        let out = b.run(
            &["--max-file-size", "1M"],
            &["sh", "-c", "head -c 524288 /dev/zero > small"],
        );
        assert_eq!(out.status.code(), Some(0), "{user:?}: {}", show(&out));
        assert_eq!(fs::metadata(b.dirs.ws.join("small")).unwrap().len(), 524288);
    }
}

#[test]
fn require_limits_refuses_what_nothing_enforces_and_runs_what_is() {
    for user in users() {
        let b = Box_::new("require", user);
        // Learn what this host can do for --cpus (rlimits cannot express it).
        let out = b.run(&["--cpus", "1"], &["true"]);
        let r = b.receipt(&out);
        assert_eq!(r["limits"]["cpus"]["requested"], "1", "{}", show(&out));
        assert!(r["limits"]["memory"].is_null() && r["limits"]["pids"].is_null());
        let cpus = mechanism(&r, "cpus").to_string();
        assert!(
            ["none", "cgroup-v1", "cgroup-v2"].contains(&cpus.as_str()),
            "{user:?}: --cpus is never an rlimit: {cpus}"
        );
        let marker = b.dirs.ws.join("ran");
        let runs_before = entries(&b.dirs.state);
        let _ = fs::remove_file(b.receipt_path());
        let out = b.run(&["--require-limits", "--cpus", "1"], &["touch", "ran"]);
        if cpus == "none" {
            assert_eq!(out.status.code(), Some(125), "{user:?}: {}", show(&out));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("--require-limits") && err.contains("--cpus 1"),
                "{user:?}: {}",
                show(&out)
            );
            assert!(!marker.exists(), "{user:?}: the workload ran");
            assert!(
                !b.receipt_path().exists(),
                "{user:?}: a receipt of a run that never was"
            );
            assert_eq!(
                entries(&b.dirs.state),
                runs_before,
                "{user:?}: run state left behind"
            );
        } else {
            assert_eq!(out.status.code(), Some(0), "{user:?}: {}", show(&out));
            assert!(marker.exists());
        }
        // --max-file-size is an rlimit everywhere: required, it runs.
        let out = b.run(&["--require-limits", "--max-file-size", "1M"], &["true"]);
        assert_eq!(out.status.code(), Some(0), "{user:?}: {}", show(&out));
    }
}

#[test]
fn limit_values_are_checked_before_anything_runs() {
    let b = Box_::new("values", User::Caller);
    for args in [
        &["--memory", "lots"][..],
        &["--memory", "0"],
        &["--pids", "many"],
        &["--pids", "0"],
        &["--cpus", "0"],
        &["--max-file-size", "1Q"],
        &["--require-limits"],
    ] {
        let out = b.run(args, &["touch", "ran"]);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(args[0]),
            "{args:?} names its flag: {}",
            show(&out)
        );
        assert!(!b.dirs.ws.join("ran").exists(), "{args:?} ran the workload");
    }
}

#[test]
fn a_profile_carries_limits_and_the_command_line_wins() {
    let b = Box_::new("profile", User::Caller);
    let dir = b.dirs.home.join(".config/terra/profiles");
    fs::create_dir_all(&dir).unwrap();
    let mut init = std::process::Command::new(terra_bin(User::Caller));
    init.args(["policy", "init"]);
    let policy = run_bounded(init);
    assert_eq!(policy.status.code(), Some(0), "{}", show(&policy));
    fs::write(dir.join("ci.json"), &policy.stdout).unwrap();
    fs::write(dir.join("ci.limits.json"), r#"{"maxFileSize": "1M"}"#).unwrap();
    let out = b.run(&["--profile", "ci"], &["true"]);
    let r = b.receipt(&out);
    assert_eq!(
        r["limits"]["maxFileSize"]["requested"],
        "1 MiB",
        "{}",
        show(&out)
    );
    assert_eq!(mechanism(&r, "maxFileSize"), "rlimit");
    let out = b.run(&["--profile", "ci", "--max-file-size", "2M"], &["true"]);
    let r = b.receipt(&out);
    assert_eq!(
        r["limits"]["maxFileSize"]["requested"],
        "2 MiB",
        "{}",
        show(&out)
    );
    // A field the file format does not know refuses the run.
    fs::write(dir.join("ci.limits.json"), r#"{"memroy": "1M"}"#).unwrap();
    let out = b.run(&["--profile", "ci"], &["touch", "ran"]);
    assert_eq!(out.status.code(), Some(125), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ci.limits.json"),
        "{}",
        show(&out)
    );
    assert!(!b.dirs.ws.join("ran").exists());
}

#[test]
fn the_landlock_backend_limits_memory_and_never_claims_nproc() {
    for user in users() {
        let b = Box_::new("landlock", user);
        let out = b.run(
            &["--backend", "landlock", "--memory", "64M", "--pids", "64"],
            &["python3", "-c", ALLOC, "400"],
        );
        let r = b.receipt(&out);
        assert_eq!(r["backend"], "landlock", "{}", show(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!stdout.contains("allocated"), "{user:?}: {}", show(&out));
        assert_ne!(mechanism(&r, "memory"), "none", "{user:?}: {}", show(&out));
        // Without a user namespace RLIMIT_NPROC would count the caller's
        // whole uid on the host: only a cgroup may enforce --pids here.
        let pids = mechanism(&r, "pids");
        assert_ne!(pids, "rlimit", "{user:?}: {}", show(&out));
        if pids == "none" {
            assert!(r["limits"]["pids"]["detail"]
                .as_str()
                .is_some_and(|d| d.contains("landlock") || d.contains("root")));
        }
        assert_cgroup_removed(&r, "memory");
        assert_cgroup_removed(&r, "pids");
    }
}

#[test]
fn dry_run_names_the_limits_and_runs_nothing() {
    let b = Box_::new("dry", User::Caller);
    let out = b.run(
        &["--dry-run", "--memory", "64M", "--pids", "64"],
        &["touch", "ran"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("limits:          memory 64 MiB, pids 64"),
        "{}",
        show(&out)
    );
    assert!(!b.dirs.ws.join("ran").exists());
}
