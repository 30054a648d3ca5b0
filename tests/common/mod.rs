//! Helpers shared by the end-to-end tests that run the terra binary as the
//! caller and, when the caller is root, again as uid/gid 65534.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

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

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Every identity a case runs as: the caller, and 65534 too when that is root.
pub fn users() -> Vec<User> {
    if is_root() {
        vec![User::Caller, User::Nobody]
    } else {
        vec![User::Caller]
    }
}

/// The built terra binary copied into a world-readable 0755 directory under
/// /tmp, so uid 65534 can run it (the build tree may sit under a 0700 home).
/// The copy is named `<prefix><size>-<mtime>` after the build, so repeated
/// runs of a suite reuse it; stale copies with the same prefix are removed.
/// Each test binary passes its own prefix, so suites running in parallel never
/// remove each other's copy.
pub fn world_readable_terra(prefix: &str) -> PathBuf {
    // Tests of one binary run on parallel threads: one copies, the rest wait.
    static COPYING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = COPYING.lock().unwrap_or_else(|e| e.into_inner());
    let built = PathBuf::from(env!("CARGO_BIN_EXE_terra"));
    let meta = fs::metadata(&built).unwrap();
    let mtime = meta
        .modified()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let name = format!("{prefix}{}-{mtime:x}", meta.len());
    let dir = PathBuf::from("/tmp").join(&name);
    let dst = dir.join("terra");
    if fs::metadata(&dst).map(|m| m.len()).ok() != Some(meta.len()) {
        for e in fs::read_dir("/tmp").unwrap().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with(prefix) && n != name {
                let _ = fs::remove_dir_all(e.path());
            }
        }
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let tmp = dir.join(format!("terra.tmp-{}", std::process::id()));
        fs::copy(&built, &tmp).unwrap();
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755)).unwrap();
        fs::rename(&tmp, &dst).unwrap();
    }
    dst
}
