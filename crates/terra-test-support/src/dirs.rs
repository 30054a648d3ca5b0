//! A run's host directories: one fresh root under /tmp holding the workspace,
//! the state and runtime directories, a home and a temp directory, handed to
//! the run's user and removed at drop.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::users::{is_root, User};

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// The directories one `terra run` works in, under `root` (mode 0755).
pub struct RunDirs {
    pub user: User,
    pub root: PathBuf,
    /// The workspace (the run's working directory).
    pub ws: PathBuf,
    /// XDG_STATE_HOME: receipts and run directories.
    pub state: PathBuf,
    /// XDG_RUNTIME_DIR: the run lock and pid files.
    pub runtime: PathBuf,
    /// HOME.
    pub home: PathBuf,
    /// TMPDIR.
    pub tmp: PathBuf,
}

impl RunDirs {
    /// A fresh `/tmp/<prefix>-<pid>-<name>-<user>-<n>` with its directories.
    pub fn new(prefix: &str, name: &str, user: User) -> RunDirs {
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let root = PathBuf::from(format!(
            "/tmp/{prefix}-{}-{name}-{user:?}-{n}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        let dirs = RunDirs {
            user,
            ws: root.join("ws"),
            state: root.join("state"),
            runtime: root.join("runtime"),
            home: root.join("home"),
            tmp: root.join("tmp"),
            root,
        };
        for d in [&dirs.ws, &dirs.state, &dirs.runtime, &dirs.home, &dirs.tmp] {
            fs::create_dir_all(d).unwrap();
        }
        dirs
    }

    /// Writes `text` at `rel` under the root (parents made), returns the path.
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.root.join(rel);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(&p, text).unwrap();
        p
    }

    /// As root: hands every file under the root to the run's user (65534
    /// runs own their workspace), except the files owned by `keep_owner`
    /// (another user's files the case made). Not root, nothing changes hands.
    ///
    /// Changing a file's owner clears its set-user-ID and set-group-ID bits.
    pub fn chown_to_user(&self, keep_owner: Option<u32>) {
        if is_root() {
            chown_tree(&self.root, self.user.uid(), keep_owner);
        }
    }

    /// Sets the run's environment on `cmd` (cleared first): `path` as PATH,
    /// HOME, XDG_STATE_HOME, XDG_RUNTIME_DIR, TMPDIR, LANG=C.UTF-8; the
    /// workspace as working directory; standard input from /dev/null.
    pub fn run_env(&self, cmd: &mut Command, path: &str) {
        cmd.env_clear()
            .env("PATH", path)
            .env("HOME", &self.home)
            .env("XDG_STATE_HOME", &self.state)
            .env("XDG_RUNTIME_DIR", &self.runtime)
            .env("TMPDIR", &self.tmp)
            .env("LANG", "C.UTF-8")
            .current_dir(&self.ws)
            .stdin(Stdio::null());
    }
}

impl Drop for RunDirs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// A fresh temporary directory and its canonical path (what resolution
/// compares rule paths with).
pub fn canonical_tempdir() -> (tempfile::TempDir, String) {
    let t = tempfile::tempdir().unwrap();
    let p = fs::canonicalize(t.path())
        .unwrap()
        .into_os_string()
        .into_string()
        .unwrap();
    (t, p)
}

/// Gives `p` and everything under it (links not followed) to `uid`, except
/// what `keep_owner` owns.
fn chown_tree(p: &Path, uid: u32, keep_owner: Option<u32>) {
    let Ok(meta) = fs::symlink_metadata(p) else {
        return;
    };
    if Some(std::os::unix::fs::MetadataExt::uid(&meta)) != keep_owner {
        let _ = std::os::unix::fs::lchown(p, Some(uid), Some(uid));
        // chown clears a regular file's set-id bits: fixtures keep theirs.
        let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions());
        if meta.is_file() && mode & 0o6000 != 0 {
            let _ = fs::set_permissions(p, meta.permissions());
        }
    }
    if meta.is_dir() {
        for e in fs::read_dir(p).unwrap().flatten() {
            chown_tree(&e.path(), uid, keep_owner);
        }
    }
}
