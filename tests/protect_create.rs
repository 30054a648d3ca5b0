//! Denying paths that do not exist yet (fs-protect-create, issue 16): a
//! policy that denies `.env` and `secrets/token` (missing: skip) in a
//! workspace that has neither. The box can create neither name (file,
//! directory, symlink, rename onto it, hard link, moving its directory
//! away), nothing is left in the
//! workspace after the run, and after `kill -9` of a run the next run
//! removes the placeholders the killed one left (not the directory made for
//! a missing parent). As the caller and, as root, as 65534.
#![cfg(target_os = "linux")]

mod common;

use common::{show, terra_as, users, RunDirs};
use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const POLICY: &str = r#"{"formatVersion": 3,
 "filesystem": {"default": "deny", "rules": [
   {"access": "read", "path": {"special": "minimal-runtime"}, "scope": "tree"},
   {"access": "write", "path": {"root": "workspace", "relative": ""}, "scope": "tree"},
   {"access": "write", "path": {"root": "temp", "relative": ""}, "scope": "tree"},
   {"access": "deny", "path": {"root": "workspace", "relative": ".env"}, "missing": "skip"},
   {"access": "deny", "path": {"root": "workspace", "relative": "secrets/token"}, "missing": "skip"}]},
 "network": {"mode": "none"},
 "process": {"treeConfinement": "required"},
 "root": {"mode": "read-only"}}"#;

fn command(dirs: &RunDirs, policy: &PathBuf, script: &str) -> Command {
    dirs.chown_to_user(None);
    let mut c = terra_as(dirs.user, &[]);
    dirs.run_env(&mut c, "/usr/local/bin:/usr/bin:/bin");
    c.arg("run")
        .arg("--policy")
        .arg(policy)
        .arg("--workspace")
        .arg(&dirs.ws)
        .args(["--", "/bin/sh", "-c", script]);
    c
}

fn policy(dirs: &RunDirs) -> PathBuf {
    let p = dirs.root.join("policy.json");
    fs::write(&p, POLICY).unwrap();
    p
}

#[test]
fn the_box_cannot_create_a_denied_name_and_nothing_is_left() {
    for user in users() {
        let dirs = RunDirs::new("terra-protect", "create", user);
        fs::write(dirs.ws.join("other"), "other").unwrap();
        let p = policy(&dirs);
        let script = "for t in 'echo x > .env' 'mkdir .env' 'ln -s /etc/passwd .env' \
                      'mv other .env' 'ln other .env' 'rm -f .env' 'echo y > secrets/token' \
                      'mv other secrets/token' 'mv secrets moved'; do \
                        if sh -c \"$t\" 2>/dev/null; then echo \"DID: $t\"; else echo \"refused: $t\"; fi; \
                      done; echo z > secrets/next-to-it && echo beside-ok; \
                      test -s .env && echo env-has-content || echo env-empty";
        let o = command(&dirs, &p, script).output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(!out.contains("DID:"), "{}", show(&o));
        assert_eq!(out.matches("refused:").count(), 9, "{}", show(&o));
        assert!(
            out.contains("beside-ok"),
            "the rest of secrets/ is writable\n{}",
            show(&o)
        );
        assert!(out.contains("env-empty"), "{}", show(&o));
        assert!(!dirs.ws.join(".env").exists(), "the placeholder is gone");
        assert!(!dirs.ws.join("secrets/token").exists());
        assert_eq!(
            fs::read_to_string(dirs.ws.join("secrets/next-to-it")).unwrap(),
            "z\n",
            "the box's own file stays (and with it secrets/)"
        );
        assert_eq!(fs::read_to_string(dirs.ws.join("other")).unwrap(), "other");
        let records = dirs.state.join("terra/records");
        assert!(
            fs::read_dir(&records).unwrap().next().is_none(),
            "the record is gone"
        );
    }
}

#[test]
fn after_kill_9_the_next_run_removes_the_placeholders() {
    for user in users() {
        let dirs = RunDirs::new("terra-protect", "kill", user);
        let p = policy(&dirs);
        let mut child = command(&dirs, &p, "sleep 60")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let env = dirs.ws.join(".env");
        let token = dirs.ws.join("secrets/token");
        let until = Instant::now() + Duration::from_secs(30);
        // Both placeholders (they are made one after the other): a kill
        // between them would leave no `secrets` directory to check below.
        while !(env.exists() && token.exists()) {
            assert!(Instant::now() < until, "the placeholders never appeared");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The CLI (setpriv execs terra: the same process) dies at once; its
        // supervisor and box follow it (parent death signals).
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(env.exists(), "a killed run cannot clean up");
        // Any later run of the same user cleans up, before its own.
        let plain = dirs.root.join("plain.json");
        fs::write(&plain, POLICY.replace(r#"{"access": "deny", "path": {"root": "workspace", "relative": ".env"}, "missing": "skip"},"#, "")).unwrap();
        let o = command(&dirs, &plain, "true").output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(!env.exists(), "the next run removed it\n{}", show(&o));
        assert!(!dirs.ws.join("secrets/token").exists(), "{}", show(&o));
        // The directory made for the missing parent stays, empty: a killed
        // run's record never removes a directory (a forged one could name
        // any empty directory the box can see).
        assert_eq!(
            fs::read_dir(dirs.ws.join("secrets")).unwrap().count(),
            0,
            "{}",
            show(&o)
        );
    }
}
