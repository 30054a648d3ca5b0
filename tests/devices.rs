//! Devices by path (issue 16): a rule on a device node makes that node, and
//! only it, available in the box with the rule's access; nothing else of the
//! host's device nodes appears. The test makes its own nodes with mknod (a
//! copy of /dev/zero's numbers, and of a loop device's for a block device)
//! in a directory of its own, so it needs root; each case then runs as root
//! and as uid 65534.
#![cfg(target_os = "linux")]

mod common;

use common::{require_root, show, terra_as, users, RunDirs};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// A directory outside every default grant, holding test device nodes;
/// removed at drop.
struct Nodes(PathBuf);

impl Nodes {
    fn new() -> Nodes {
        let dir = PathBuf::from(format!("/srv/terra-devtest-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let mk = |name: &str, kind: &str, major: u32, minor: u32, mode: u32| {
            let p = dir.join(name);
            let st = std::process::Command::new("mknod")
                .args(["-m", &format!("{mode:o}")])
                .arg(&p)
                .args([kind, &major.to_string(), &minor.to_string()])
                .status()
                .unwrap();
            assert!(st.success(), "mknod {}", p.display());
        };
        mk("zero", "c", 1, 5, 0o666);
        mk("other", "c", 1, 5, 0o666);
        mk("loop", "b", 7, 0, 0o600);
        Nodes(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_string()
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
        let _ = fs::remove_dir("/srv");
    }
}

fn run(dirs: &RunDirs, args: &[&str], script: &str) -> std::process::Output {
    dirs.chown_to_user(None);
    let mut c = terra_as(dirs.user, &[]);
    dirs.run_env(&mut c, "/usr/local/bin:/usr/bin:/bin");
    c.arg("run")
        .args(args)
        .arg("--workspace")
        .arg(&dirs.ws)
        .args(["--", "/bin/sh", "-c", script]);
    c.output().unwrap()
}

#[test]
#[ignore = "needs root: mknod"]
fn a_granted_device_is_there_with_its_access_and_nothing_else_is() {
    require_root("a_granted_device_is_there_with_its_access_and_nothing_else_is (mknod)");
    let nodes = Nodes::new();
    let (zero, other, block) = (nodes.path("zero"), nodes.path("other"), nodes.path("loop"));
    for user in users() {
        let dirs = RunDirs::new("terra-dev", "read", user);
        // Read: it reads, a write fails; the sibling node is absent.
        let o = run(
            &dirs,
            &["--read", &zero],
            &format!(
                "test -c {zero} && echo char; head -c 8 {zero} | od -An -tx1 | tr -d ' \\n'; echo; \
                 printf x > {zero} && echo wrote || echo write-refused; \
                 test -e {other} && echo other-present || echo other-absent; \
                 test -e /dev/kvm && echo kvm-present || echo kvm-absent; \
                 test -e /dev/fuse && echo fuse-present || echo fuse-absent"
            ),
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert!(out.contains("char\n0000000000000000\n"), "{}", show(&o));
        assert!(out.contains("write-refused"), "{}", show(&o));
        assert!(out.contains("other-absent"), "{}", show(&o));
        assert!(out.contains("kvm-absent"), "{}", show(&o));
        assert!(out.contains("fuse-absent"), "{}", show(&o));
        // Write: the write goes through.
        let o = run(
            &dirs,
            &["--write", &zero],
            &format!("printf x > {zero} && echo wrote"),
        );
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("wrote"),
            "{}",
            show(&o)
        );
        // A tree grant of the directory holding the nodes does not make them
        // usable: only a rule that names a node does (nodev elsewhere).
        let o = run(
            &dirs,
            &["--read", nodes.0.to_str().unwrap()],
            &format!("head -c 1 {other} >/dev/null && echo opened || echo not-opened"),
        );
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("not-opened"),
            "{}",
            show(&o)
        );
    }
    // A block device appears only when a rule names it (root: its mode is 0600).
    let dirs = RunDirs::new("terra-dev", "block", common::User::Caller);
    let o = run(
        &dirs,
        &["--read", &block],
        &format!("test -b {block} && echo block"),
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("block"),
        "{}",
        show(&o)
    );
}
