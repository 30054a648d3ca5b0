//! Who runs a case. When the suite runs as root, each case runs as the caller
//! and again as uid/gid 65534 through `setpriv` (util-linux), from a copy of
//! the executable in a world-readable directory.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The unprivileged identity the suites run as when they run as root.
pub const NOBODY: u32 = 65534;

/// Who runs one case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum User {
    /// Whoever runs the test suite.
    Caller,
    /// uid/gid 65534 through setpriv (only when the suite runs as root).
    Nobody,
}

impl User {
    /// The uid this user runs with.
    pub fn uid(self) -> u32 {
        match self {
            User::Caller => nix::unistd::geteuid().as_raw(),
            User::Nobody => NOBODY,
        }
    }
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// True when the environment says this is a CI run (`CI` set, not "false").
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false")
}

/// Every identity a case runs as: the caller, and 65534 too when that is root.
/// Not root, the 65534 half cannot run: under CI that fails, elsewhere it is
/// said on standard error.
pub fn users() -> Vec<User> {
    if is_root() {
        return vec![User::Caller, User::Nobody];
    }
    assert!(
        !in_ci(),
        "the suites run every case again as uid 65534, which needs root: CI must run them as root"
    );
    eprintln!("not root: running as the caller only, not again as uid {NOBODY}");
    vec![User::Caller]
}

/// As root: makes a character device at `path`, the node /dev/null is
/// (1,3), for the cases that must refuse devices; true when it did. Not root
/// (mknod needs CAP_MKNOD), that case cannot be made: under CI that fails,
/// elsewhere it is said on standard error and false returned.
#[cfg(target_os = "linux")]
pub fn make_null_device(path: &Path) -> bool {
    if !is_root() {
        assert!(!in_ci(), "making a device needs root: CI must run as root");
        eprintln!("not root: no character device at {}", path.display());
        return false;
    }
    let mode = nix::sys::stat::Mode::from_bits_truncate(0o666);
    let dev = nix::sys::stat::makedev(1, 3);
    nix::sys::stat::mknod(path, nix::sys::stat::SFlag::S_IFCHR, mode, dev)
        .unwrap_or_else(|e| panic!("mknod {}: {e}", path.display()));
    true
}

/// The first line of a test that needs root (it is `#[ignore = "needs root"]`
/// and runs with `--include-ignored`, which `make test` passes as root): run
/// without root, it fails and says why instead of passing untested.
pub fn require_root(what: &str) {
    assert!(
        is_root(),
        "{what} needs root (run the ignored tests as root: `make test` does)"
    );
}

/// The command that starts `program` as `user`, with `via` (a program and its
/// arguments, e.g. `unshare -m ...`) started as that user in front of it.
///
/// `groups`: the supplementary groups to start with (`setpriv --groups`); None
/// keeps the caller's, and gives 65534 none.
pub fn command_as(user: User, groups: Option<&str>, via: &[&str], program: &Path) -> Command {
    let mut argv: Vec<OsString> = Vec::new();
    match (user, groups) {
        (User::Caller, None) => {}
        (User::Caller, Some(g)) => {
            argv.extend(["setpriv".into(), format!("--groups={g}").into()]);
        }
        (User::Nobody, g) => {
            argv.extend([
                "setpriv".into(),
                format!("--reuid={NOBODY}").into(),
                format!("--regid={NOBODY}").into(),
                match g {
                    Some(g) => format!("--groups={g}").into(),
                    None => "--clear-groups".into(),
                },
            ]);
        }
    }
    argv.extend(via.iter().map(OsString::from));
    argv.push(program.as_os_str().to_owned());
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    cmd
}

/// `built` copied into a world-readable 0755 directory under /tmp, so uid
/// 65534 can run it (the build tree may sit under a 0700 home). The copy's
/// directory is named `<prefix><size>-<mtime>` after the build, so repeated
/// runs reuse it; stale copies with the same prefix are removed. Each test
/// binary passes its own prefix, so suites running in parallel never remove
/// each other's copy.
pub fn world_readable_copy(built: &Path, prefix: &str) -> PathBuf {
    // Tests of one binary run on parallel threads: one copies, the rest wait.
    static COPYING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = COPYING.lock().unwrap_or_else(|e| e.into_inner());
    let meta = fs::metadata(built).unwrap_or_else(|e| panic!("{}: {e}", built.display()));
    let name = format!(
        "{prefix}{}-{:x}.{:x}",
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec()
    );
    let dir = PathBuf::from("/tmp").join(&name);
    let file_name = built
        .file_name()
        .expect("an executable's path names a file");
    let dst = dir.join(file_name);
    if fs::metadata(&dst).map(|m| m.len()).ok() != Some(meta.len()) {
        for e in fs::read_dir("/tmp").unwrap().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with(prefix) && n != name {
                let _ = fs::remove_dir_all(e.path());
            }
        }
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let mut tmp_name = OsString::from(file_name);
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp = dir.join(tmp_name);
        fs::copy(built, &tmp).unwrap();
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755)).unwrap();
        fs::rename(&tmp, &dst).unwrap();
    }
    dst
}

/// Set in the environment of a test binary that [`rerun_as_nobody`] started.
pub const RERUN_MARK: &str = "TERRA_UNPRIV_CHILD";

/// True in a test binary that [`rerun_as_nobody`] started.
pub fn is_rerun() -> bool {
    std::env::var_os(RERUN_MARK).is_some()
}

/// As root: runs the calling test binary again as uid/gid 65534 (skipping the
/// test `skip`, the one that calls this), from a world-readable copy, with
/// `env` added; asserts that it ran tests and that every one passed.
pub fn rerun_as_nobody(skip: &str, env: &[(&str, &OsStr)]) {
    require_root(skip);
    let me = std::env::current_exe().unwrap();
    // Named after this binary, so two suites rerunning at once keep their copies.
    let prefix = format!("terra-rerun-{}-", me.file_name().unwrap().to_string_lossy());
    let exe = world_readable_copy(&me, &prefix);
    let mut cmd = command_as(User::Nobody, None, &[], &exe);
    cmd.args(["--skip", skip])
        .env(RERUN_MARK, "1")
        .env("TMPDIR", "/tmp")
        .env_remove("TERRA_TEST_TMP")
        .current_dir("/");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .output()
        .expect("setpriv (util-linux) is needed to run the unprivileged half");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "unprivileged run failed:\n{text}");
    assert!(text.contains("test result: ok"), "{text}");
    assert!(!text.contains(" 0 passed"), "{text}");
}

/// As root: runs `f` on a thread of its own whose filesystem uid and gid are
/// 65534 (`setfsuid`/`setfsgid` change only the calling thread). Leaving
/// filesystem uid 0 drops root's file-permission capabilities on that
/// thread, so every path check in `f` is made as 65534's. No re-executed
/// test binary and no setpriv: the rest of the process keeps its identity.
#[cfg(target_os = "linux")]
pub fn with_nobody_file_access<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    require_root("checking file access as uid 65534 (setfsuid)");
    let outcome = std::thread::scope(|s| {
        s.spawn(|| {
            let nobody_uid = nix::unistd::Uid::from_raw(NOBODY);
            let nobody_gid = nix::unistd::Gid::from_raw(NOBODY);
            nix::unistd::setfsgid(nobody_gid);
            nix::unistd::setfsuid(nobody_uid);
            // Each call returns the previous id: asking again confirms it took.
            assert_eq!(nix::unistd::setfsuid(nobody_uid), nobody_uid, "setfsuid");
            assert_eq!(nix::unistd::setfsgid(nobody_gid), nobody_gid, "setfsgid");
            f()
        })
        .join()
    });
    outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}
