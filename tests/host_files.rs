//! The files terra keeps or reads on the host for its caller, as the caller
//! and, as root, as 65534:
//!
//! - profiles are used only when the caller (or root) owns them and nobody
//!   else can write them or their directories;
//! - terra's records of a run (its temp directory, its placeholders) are never
//!   kept where the run's box can read or write them;
//! - no run leaves clutter: a failed run's temp directory is removed (kept only
//!   with --keep-temp), a killed run's temp directory is removed by the next
//!   run, and runs without a state directory share one private fallback.
#![cfg(target_os = "linux")]

mod common;

use common::{run_bounded, show, terra_as, users, RunDirs, User};
use std::fs;
use std::os::unix::fs::{chown, lchown, symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// `terra ARGS` as the run's user in the run's environment.
fn terra_cmd(d: &RunDirs, args: &[&str]) -> Command {
    let mut c = terra_as(d.user, &[]);
    d.run_env(&mut c, PATH);
    c.args(args);
    c
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn set_mode(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

/// The run temp directories (`terra-tmp-UID-*`) in `dir`.
fn temp_dirs(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("terra-tmp-"))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

// ------------------------------------------------------------------ profiles

/// The default policy plus a read grant of `extra`.
fn policy_reading(extra: &Path) -> String {
    terra_policy::DEFAULT_POLICY_SOURCE.replace(
        "\"rules\": [",
        &format!(
            "\"rules\": [\n      {{ \"access\": \"read\", \"path\": {{ \"absolute\": \"{}\" }}, \"scope\": \"tree\" }},",
            extra.display()
        ),
    )
}

#[test]
fn a_profile_is_used_only_when_nobody_else_can_change_it() {
    for user in users() {
        let d = RunDirs::new("terra-hostfiles", "profile", user);
        let extra = d.root.join("extra");
        fs::create_dir_all(&extra).unwrap();
        fs::write(extra.join("data"), "granted\n").unwrap();
        let profiles = d.home.join(".config/terra/profiles");
        fs::create_dir_all(&profiles).unwrap();
        let profile = profiles.join("default.json");
        fs::write(&profile, policy_reading(&extra)).unwrap();
        d.chown_to_user(None);
        for p in [
            &d.home,
            &d.home.join(".config"),
            &profiles.parent().unwrap().to_path_buf(),
            &profiles,
        ] {
            set_mode(p, 0o755);
        }
        set_mode(&profile, 0o644);
        let data = extra.join("data");
        let cat = ["run", "--", "cat", data.to_str().unwrap()];
        let run = || run_bounded(terra_cmd(&d, &cat));
        let refused = |o: &Output, path: &Path, words: &str| {
            assert_eq!(o.status.code(), Some(125), "{user:?}: {}", show(o));
            let err = stderr(o);
            assert!(
                err.contains(&path.display().to_string()) && err.contains(words),
                "{user:?}: names {} and {words:?}: {}",
                path.display(),
                show(o)
            );
            assert!(!stdout(o).contains("granted"), "{}", show(o));
        };
        // The caller's own 0644 profile: used.
        let o = run();
        assert_eq!(o.status.code(), Some(0), "{user:?}: {}", show(&o));
        assert_eq!(stdout(&o), "granted\n");
        // Writable by others, or by the group: refused, with the fix.
        set_mode(&profile, 0o666);
        refused(
            &run(),
            &profile,
            &format!("chmod go-w {}", profile.display()),
        );
        // Group write is trusted only for the user's private group (umask
        // 002 on Debian and Ubuntu): root hands the file and its directory
        // to nogroup, which is nobody's private group (65534 is `nobody`).
        if common::is_root() {
            for p in [&profile, &profiles] {
                chown(p, None, Some(common::NOBODY)).unwrap();
            }
        }
        if common::is_root() || !callers_group_is_private() {
            set_mode(&profile, 0o664);
            refused(&run(), &profile, "writable by its group");
            set_mode(&profile, 0o644);
            // A group-writable directory above it: refused, naming the directory.
            set_mode(&profiles, 0o775);
            refused(&run(), &profiles, "writable by its group");
            set_mode(&profiles, 0o755);
        }
        if user == User::Caller && common::is_root() {
            // Root's own private group (`root`, no other member here) may
            // write them: used.
            for p in [&profile, &profiles] {
                chown(p, None, Some(0)).unwrap();
                set_mode(p, if p == &profile { 0o664 } else { 0o775 });
            }
            if callers_group_is_private() {
                let o = run();
                assert_eq!(o.status.code(), Some(0), "{}", show(&o));
                assert_eq!(stdout(&o), "granted\n");
            }
            set_mode(&profile, 0o644);
            set_mode(&profiles, 0o755);
        }
        set_mode(&d.home, 0o777);
        refused(&run(), &d.home, "chmod go-w");
        set_mode(&d.home, 0o755);
        match user {
            // Root's run: a profile another uid owns is refused, even 0644.
            User::Caller if common::is_root() => {
                chown(&profile, Some(common::NOBODY), Some(common::NOBODY)).unwrap();
                refused(&run(), &profile, "owned by uid 65534");
                set_mode(&profile, 0o666);
                refused(&run(), &profile, "owned by uid 65534");
                chown(&profile, Some(0), Some(0)).unwrap();
                set_mode(&profile, 0o644);
            }
            // 65534's run: root's 0644 profile is trusted, root's 0666 is not.
            User::Nobody => {
                chown(&profile, Some(0), Some(0)).unwrap();
                let o = run();
                assert_eq!(o.status.code(), Some(0), "{}", show(&o));
                assert_eq!(stdout(&o), "granted\n");
                set_mode(&profile, 0o666);
                refused(&run(), &profile, "(mode 0666)");
                set_mode(&profile, 0o644);
            }
            User::Caller => {}
        }
        // A symlinked profile (a dotfile manager's) is judged by its target.
        let dotfiles = d.home.join("dotfiles");
        fs::create_dir(&dotfiles).unwrap();
        fs::rename(&profile, dotfiles.join("terra.json")).unwrap();
        symlink(dotfiles.join("terra.json"), &profile).unwrap();
        if common::is_root() {
            let uid = user.uid();
            chown(&dotfiles, Some(uid), Some(uid)).unwrap();
            chown(dotfiles.join("terra.json"), Some(uid), Some(uid)).unwrap();
            lchown(&profile, Some(uid), Some(uid)).unwrap();
        }
        set_mode(&dotfiles, 0o755);
        let o = run();
        assert_eq!(o.status.code(), Some(0), "{user:?}: {}", show(&o));
        set_mode(&dotfiles, 0o777);
        refused(&run(), &dotfiles, "writable by");
        // The limits beside a profile go through the same check.
        set_mode(&dotfiles, 0o755);
        let limits = profiles.join("default.limits.json");
        fs::write(&limits, "{}").unwrap();
        if common::is_root() {
            chown(&limits, Some(user.uid()), Some(user.uid())).unwrap();
        }
        set_mode(&limits, 0o646);
        refused(&run(), &limits, "writable by others");
    }
}

// ------------------------------------------------------------------ records

/// A policy writing the workspace and denying the missing `.env` in it (a
/// placeholder, so a record), reading `extra` (a read grant).
fn protect_policy(extra: &Path) -> String {
    format!(
        r#"{{"formatVersion": 3,
 "filesystem": {{"default": "deny", "rules": [
   {{"access": "read", "path": {{"special": "minimal-runtime"}}, "scope": "tree"}},
   {{"access": "read", "path": {{"absolute": "{}"}}, "scope": "tree"}},
   {{"access": "write", "path": {{"root": "workspace", "relative": ""}}, "scope": "tree"}},
   {{"access": "write", "path": {{"root": "temp", "relative": ""}}, "scope": "tree"}},
   {{"access": "deny", "path": {{"root": "workspace", "relative": ".env"}}, "missing": "skip"}}]}},
 "network": {{"mode": "none"}},
 "process": {{"treeConfinement": "required"}},
 "root": {{"mode": "read-only"}}}}"#,
        extra.display()
    )
}

#[test]
fn records_are_never_kept_inside_a_grant_of_the_run() {
    for user in users() {
        let d = RunDirs::new("terra-hostfiles", "records", user);
        let extra = d.root.join("extra");
        fs::create_dir_all(&extra).unwrap();
        let policy = d.write("policy.json", &protect_policy(&extra));
        // The state directory inside a read grant, then inside the writable
        // workspace: the box lists what terra keeps there during the run.
        for state in [extra.join("state"), d.ws.join(".state")] {
            fs::create_dir_all(&state).unwrap();
            d.chown_to_user(None);
            let look = format!(
                "ls -A {0}/terra/records {0}/terra/placeholders 2>/dev/null; test -e .env && echo held",
                state.display()
            );
            let mut c = terra_cmd(
                &d,
                &[
                    "run",
                    "--policy",
                    policy.to_str().unwrap(),
                    "--",
                    "sh",
                    "-c",
                    &look,
                ],
            );
            c.env("XDG_STATE_HOME", &state);
            let o = run_bounded(c);
            assert_eq!(o.status.code(), Some(0), "{user:?}: {}", show(&o));
            let out = stdout(&o);
            assert!(
                out.contains("held"),
                "the placeholder was made: {}",
                show(&o)
            );
            assert!(
                !out.contains(".jsonl"),
                "{user:?}: a record inside a grant ({}): {}",
                state.display(),
                show(&o)
            );
            // They went to the next state base (~/.local/state) and are gone.
            let next = d.home.join(".local/state/terra/records");
            assert!(next.is_dir(), "{}", show(&o));
            assert_eq!(fs::read_dir(&next).unwrap().count(), 0, "{}", show(&o));
            assert!(!d.ws.join(".env").exists());
        }
    }
}

#[test]
fn a_forged_record_in_the_state_directory_removes_nothing() {
    for user in users() {
        let d = RunDirs::new("terra-hostfiles", "forged", user);
        let records = d.state.join("terra/records");
        fs::create_dir_all(&records).unwrap();
        // A host directory (empty) and a host file (empty, mode 0) that are
        // not terra's, named by a record of a process that is gone: as intent
        // lines, as a placeholder's parent, as the run's temp directory.
        let host_dir = d.root.join("host-dir");
        let host_file = d.root.join("host-file");
        fs::create_dir(&host_dir).unwrap();
        fs::write(&host_file, "").unwrap();
        let mut child = Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        d.chown_to_user(None);
        set_mode(&host_file, 0o000);
        let meta = fs::symlink_metadata(&host_dir).unwrap();
        let (dev, ino) = (meta.dev(), meta.ino());
        let lines = [
            format!(
                r#"{{"path":"{}","dir":true,"dev":null,"ino":null}}"#,
                host_dir.display()
            ),
            format!(
                r#"{{"path":"{}","dir":false,"dev":null,"ino":null}}"#,
                host_file.display()
            ),
            format!(
                r#"{{"path":"{}","dir":true,"dev":{dev},"ino":{ino}}}"#,
                host_dir.display()
            ),
            format!(
                r#"{{"path":"{}","dir":true,"temp":true,"dev":{dev},"ino":{ino}}}"#,
                host_dir.display()
            ),
        ];
        let record = records.join(format!("{dead}.1.jsonl"));
        fs::write(&record, lines.join("\n")).unwrap();
        // The same in the former records directory.
        let legacy = d.state.join("terra/placeholders");
        fs::create_dir_all(&legacy).unwrap();
        fs::write(legacy.join(format!("{dead}.2.jsonl")), lines.join("\n")).unwrap();
        d.chown_to_user(None);
        for dir in [d.state.join("terra"), records.clone(), legacy.clone()] {
            set_mode(&dir, 0o700);
        }
        let o = run_bounded(terra_cmd(&d, &["run", "--", "true"]));
        assert_eq!(o.status.code(), Some(0), "{user:?}: {}", show(&o));
        assert!(host_dir.is_dir(), "{user:?}: {}", show(&o));
        assert!(
            fs::symlink_metadata(&host_file).is_ok(),
            "{user:?}: {}",
            show(&o)
        );
        // The records were read (their process is gone) and dropped.
        assert!(!record.exists(), "{user:?}: {}", show(&o));
        assert_eq!(fs::read_dir(&legacy).unwrap().count(), 0, "{}", show(&o));
    }
}

/// Starts `terra run` of `script` (which touches `started` in the workspace
/// first), waits until the workload runs, kills `terra run` with SIGKILL
/// (setpriv execs terra: the same process; its supervisor and box follow it
/// through parent-death signals) and returns once it is reaped.
fn run_and_kill(d: &RunDirs, args: &[&str]) {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend(["--", "sh", "-c", "touch started; sleep 60"]);
    let mut child = terra_cmd(d, &all)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = d.ws.join("started");
    let until = Instant::now() + Duration::from_secs(30);
    while !started.exists() {
        assert!(Instant::now() < until, "the workload never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn the_next_run_removes_the_temp_directory_of_a_killed_run() {
    for user in users() {
        let d = RunDirs::new("terra-hostfiles", "killtemp", user);
        let extra = d.root.join("extra");
        fs::create_dir(&extra).unwrap();
        let policy = d.write("policy.json", &protect_policy(&extra));
        d.chown_to_user(None);
        run_and_kill(&d, &[]);
        let left = temp_dirs(&d.tmp);
        assert_eq!(
            left.len(),
            1,
            "{user:?}: a killed run cannot clean up: {left:?}"
        );
        fs::write(left[0].join("left-by-the-box"), "x").unwrap();
        // The next run, killed too, with a placeholder: it removed the
        // first one's temp directory before its own run.
        fs::remove_file(d.ws.join("started")).unwrap();
        run_and_kill(&d, &["--policy", policy.to_str().unwrap()]);
        assert!(d.ws.join(".env").exists(), "a killed run cannot clean up");
        let second = temp_dirs(&d.tmp);
        assert_eq!(second.len(), 1, "{user:?}: {second:?}");
        assert_ne!(second, left, "{user:?}: the first killed run's is gone");
        let o = run_bounded(terra_cmd(&d, &["run", "--", "true"]));
        assert_eq!(o.status.code(), Some(0), "{user:?}: {}", show(&o));
        assert!(
            temp_dirs(&d.tmp).is_empty(),
            "{user:?}: {:?}\n{}",
            temp_dirs(&d.tmp),
            show(&o)
        );
        assert!(!d.ws.join(".env").exists(), "{}", show(&o));
        let records = d.state.join("terra/records");
        assert_eq!(fs::read_dir(&records).unwrap().count(), 0, "{}", show(&o));
    }
}

// ------------------------------------------------------------------ clutter

#[test]
fn a_failed_run_leaves_no_temp_directory_unless_kept() {
    for user in users() {
        let d = RunDirs::new("terra-hostfiles", "false", user);
        d.chown_to_user(None);
        let o = run_bounded(terra_cmd(
            &d,
            &["run", "--", "sh", "-c", "echo log > /tmp/log; false"],
        ));
        assert_eq!(o.status.code(), Some(1), "{user:?}: {}", show(&o));
        assert!(temp_dirs(&d.tmp).is_empty(), "{user:?}: {}", show(&o));
        let o = run_bounded(terra_cmd(
            &d,
            &[
                "run",
                "--keep-temp",
                "--",
                "sh",
                "-c",
                "echo log > /tmp/log; false",
            ],
        ));
        assert_eq!(o.status.code(), Some(1), "{user:?}: {}", show(&o));
        let kept = temp_dirs(&d.tmp);
        assert_eq!(kept.len(), 1, "{user:?}: {}", show(&o));
        assert_eq!(fs::read_to_string(kept[0].join("log")).unwrap(), "log\n");
        // A kept directory is the user's: the next run leaves it alone.
        let o = run_bounded(terra_cmd(&d, &["run", "--", "true"]));
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert_eq!(temp_dirs(&d.tmp), kept);
    }
}

/// `terra run -- true` with no usable state directory: no HOME, a relative
/// XDG_STATE_HOME; None when /run/user/UID exists (it would be used first).
fn run_without_state(d: &RunDirs) -> Option<Output> {
    if Path::new(&format!("/run/user/{}", d.user.uid())).is_dir() {
        eprintln!(
            "/run/user/{} exists: the private fallback is not reached here",
            d.user.uid()
        );
        return None;
    }
    let mut c = terra_cmd(d, &["run", "--", "true"]);
    c.env_remove("HOME").env("XDG_STATE_HOME", "relative/state");
    Some(run_bounded(c))
}

#[test]
fn runs_without_a_state_directory_share_one_private_fallback() {
    for user in users() {
        let d = RunDirs::new("terra-hostfiles", "fallback", user);
        d.chown_to_user(None);
        let fallback = d.tmp.join(format!("terra-state-{}", user.uid()));
        for _ in 0..2 {
            let Some(o) = run_without_state(&d) else {
                return;
            };
            assert_eq!(o.status.code(), Some(0), "{user:?}: {}", show(&o));
            assert!(
                !stderr(&o).contains("fresh private directory"),
                "{}",
                show(&o)
            );
        }
        let meta = fs::symlink_metadata(&fallback).unwrap();
        assert!(meta.is_dir() && meta.uid() == user.uid() && meta.mode() & 0o777 == 0o700);
        let runs = fs::read_dir(fallback.join("runs")).unwrap().count();
        assert_eq!(runs, 2, "both runs' state is in {}", fallback.display());
        let names: Vec<String> = fs::read_dir(&d.tmp)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [format!("terra-state-{}", user.uid())],
            "nothing else is left"
        );
    }
}

#[test]
fn a_fallback_someone_else_could_change_is_not_used() {
    for user in users() {
        let uid = user.uid();
        let d = RunDirs::new("terra-hostfiles", "squat", user);
        let fallback = d.tmp.join(format!("terra-state-{uid}"));
        let elsewhere = d.root.join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        // Another uid's (root can make one), mode 0755, a symlink to the
        // user's own directory.
        let mut cases: Vec<&str> = vec!["0755", "symlink"];
        if common::is_root() {
            cases.push("other-uid");
        }
        for case in cases {
            let _ = fs::remove_file(&fallback);
            let _ = fs::remove_dir_all(&fallback);
            for e in fs::read_dir(&d.tmp).unwrap().flatten() {
                let _ = fs::remove_dir_all(e.path());
            }
            d.chown_to_user(None);
            match case {
                "0755" => {
                    fs::create_dir(&fallback).unwrap();
                    chown(&fallback, Some(uid), Some(uid)).unwrap();
                    set_mode(&fallback, 0o755);
                }
                "symlink" => {
                    set_mode(&elsewhere, 0o700);
                    symlink(&elsewhere, &fallback).unwrap();
                    lchown(&fallback, Some(uid), Some(uid)).unwrap();
                }
                _ => {
                    let other = if uid == 0 { 4242 } else { 0 };
                    fs::create_dir(&fallback).unwrap();
                    set_mode(&fallback, 0o700);
                    chown(&fallback, Some(other), Some(other)).unwrap();
                }
            }
            let Some(o) = run_without_state(&d) else {
                return;
            };
            assert_eq!(o.status.code(), Some(0), "{user:?} {case}: {}", show(&o));
            let err = stderr(&o);
            assert!(
                err.contains(&fallback.display().to_string())
                    && err.contains("fresh private directory"),
                "{user:?} {case}: says why and where the state went: {}",
                show(&o)
            );
            assert!(!fallback.join("runs").exists(), "{user:?} {case}");
            assert!(!elsewhere.join("runs").exists(), "{user:?} {case}");
        }
    }
}

/// The runtime directories (`<base>/<run-id>`) under `base`.
fn run_dirs_in(base: &Path) -> Vec<PathBuf> {
    fs::read_dir(base)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// Waits until no process holds the run lock in `runtime` (the kernel drops
/// it when the killed run's supervisor is gone).
fn wait_unlocked(runtime: &Path) {
    common::wait_until(
        || {
            let f = fs::File::open(runtime.join("lock")).unwrap();
            nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).is_ok()
        },
        "the killed run's supervisor to end",
    );
}

#[test]
fn the_next_run_removes_the_runtime_directory_of_a_killed_run() {
    for user in users() {
        let d = RunDirs::new("terra-hostfiles", "killruntime", user);
        d.chown_to_user(None);
        let base = d.runtime.join("terra/runs");
        run_and_kill(&d, &[]);
        let left = run_dirs_in(&base);
        assert_eq!(
            left.len(),
            1,
            "{user:?}: a killed run cannot clean up: {left:?}"
        );
        wait_unlocked(&left[0]);
        // A directory a supervisor is still setting up (no supervisor.pid
        // yet) is left alone, and so is one whose lock is held.
        let setting_up = base.join("20260101T000000Z-1-0123abcd");
        let held = base.join("20260101T000000Z-2-0123abcd");
        for dir in [&setting_up, &held] {
            fs::create_dir(dir).unwrap();
            fs::write(dir.join("lock"), "").unwrap();
        }
        fs::write(held.join("supervisor.pid"), "1\n").unwrap();
        d.chown_to_user(None);
        for dir in [&setting_up, &held] {
            set_mode(dir, 0o700);
        }
        let lock = nix::fcntl::Flock::lock(
            fs::File::open(held.join("lock")).unwrap(),
            nix::fcntl::FlockArg::LockExclusiveNonblock,
        )
        .unwrap();
        let o = run_bounded(terra_cmd(&d, &["run", "--", "true"]));
        assert_eq!(o.status.code(), Some(0), "{user:?}: {}", show(&o));
        drop(lock);
        let mut now = run_dirs_in(&base);
        now.sort();
        assert_eq!(now, [setting_up, held], "{user:?}: {}", show(&o));
    }
}

/// Whether the caller's primary group is named after it with no other
/// member (a user private group, whose write bit terra trusts).
fn callers_group_is_private() -> bool {
    let uid = nix::unistd::geteuid();
    let Some(user) = nix::unistd::User::from_uid(uid).ok().flatten() else {
        return false;
    };
    nix::unistd::Group::from_gid(user.gid)
        .ok()
        .flatten()
        .is_some_and(|g| g.name == user.name && g.mem.iter().all(|m| *m == user.name))
}
