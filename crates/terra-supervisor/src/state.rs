//! The per-run state directory: owner-only, outside every grant of the plan,
//! holding the run lock, the pid files, the canary and the receipt.
//!
//! Candidates, first usable wins: `$XDG_STATE_HOME/terra/runs`,
//! `$HOME/.local/state/terra/runs`, `/run/user/UID/terra/runs`,
//! `/tmp/terra-UID/runs`. A candidate the box could see (covered by a read or
//! write rule of the plan) is skipped, and so is one whose terra-owned
//! directories are not ours or are open to group or others.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use nix::fcntl::{fcntl, FcntlArg, FdFlag, Flock, FlockArg};
use terra_policy::{Access, SandboxPlan, Scope};

use crate::receipt::write_replacing;

/// The run lock lives on this descriptor for the supervisor's lifetime.
pub const LOCK_FD: i32 = 3;

/// A created run directory with its lock held.
pub struct RunDir {
    pub path: PathBuf,
    pub run_id: String,
    _lock: Flock<File>,
}

impl RunDir {
    /// Picks a base outside the plan's grants, creates `<base>/<run-id>` (0700),
    /// takes the run lock (moved to fd 3) and writes `supervisor.pid`.
    pub fn create(plan: &SandboxPlan) -> Result<RunDir, String> {
        let uid = nix::unistd::geteuid().as_raw();
        let mut why_not = Vec::new();
        for (base, kind) in candidates(uid) {
            // Judge the candidate before creating anything in it.
            if visible_in_box(plan, &canonical_prefix(&base)) {
                why_not.push(format!("{} is inside a grant of the plan", base.display()));
                continue;
            }
            match prepare_base(&base, kind, uid).and_then(|b| {
                if visible_in_box(plan, &b) {
                    Err(format!("{} is inside a grant of the plan", b.display()))
                } else {
                    Ok(b)
                }
            }) {
                Ok(b) => {
                    for w in &why_not {
                        tracing::debug!("state directory candidate skipped: {w}");
                    }
                    return RunDir::create_in(&b);
                }
                Err(e) => why_not.push(e),
            }
        }
        Err(format!("no usable state directory: {}", why_not.join("; ")))
    }

    fn create_in(base: &Path) -> Result<RunDir, String> {
        let run_id = new_run_id();
        let path = base.join(&run_id);
        DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| format!("cannot create the run directory {}: {e}", path.display()))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot set the mode of {}: {e}", path.display()))?;
        let lock_path = path.join("lock");
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc_o_cloexec())
            .open(&lock_path)
            .map_err(|e| format!("cannot create {}: {e}", lock_path.display()))?;
        let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| format!("cannot lock {}: {e}", lock_path.display()))?;
        // The lock belongs to the open file description, so fd 3 holds it too.
        if lock.as_raw_fd() != LOCK_FD {
            nix::unistd::dup2(lock.as_raw_fd(), LOCK_FD)
                .map_err(|e| format!("cannot move the run lock to fd {LOCK_FD}: {e}"))?;
        }
        fcntl(LOCK_FD, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
            .map_err(|e| format!("cannot mark fd {LOCK_FD} close-on-exec: {e}"))?;
        let dir = RunDir {
            path,
            run_id,
            _lock: lock,
        };
        dir.write_file(
            "supervisor.pid",
            format!("{}\n", std::process::id()).as_bytes(),
        )?;
        Ok(dir)
    }

    /// Writes an owner-only file in the run directory, atomically.
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> Result<PathBuf, String> {
        let p = self.path.join(name);
        write_replacing(&p, bytes, false)
            .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
        Ok(p)
    }

    pub fn remove_file(&self, name: &str) {
        let _ = fs::remove_file(self.path.join(name));
    }
}

fn libc_o_cloexec() -> i32 {
    nix::fcntl::OFlag::O_CLOEXEC.bits()
}

/// The candidate bases, in order of preference.
pub fn candidates(uid: u32) -> Vec<(PathBuf, BaseKind)> {
    let mut v = Vec::new();
    let abs = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(x) = abs("XDG_STATE_HOME") {
        v.push((x.join("terra/runs"), BaseKind::UserDir));
    }
    if let Some(h) = abs("HOME") {
        v.push((h.join(".local/state/terra/runs"), BaseKind::UserDir));
    }
    v.push((
        PathBuf::from(format!("/run/user/{uid}/terra/runs")),
        BaseKind::RuntimeDir,
    ));
    v.push((
        PathBuf::from(format!("/tmp/terra-{uid}/runs")),
        BaseKind::SharedTmp,
    ));
    v
}

/// Where a candidate base lives, which decides how its anchor is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaseKind {
    /// Under the user's own directories: the anchor is created if missing.
    UserDir,
    /// Under /run/user/UID: the anchor must exist and be owned by the user.
    RuntimeDir,
    /// Under world-writable /tmp: nothing above terra's own directories is created.
    SharedTmp,
}

/// Creates the base if needed and checks ownership; returns its canonical path.
fn prepare_base(base: &Path, kind: BaseKind, uid: u32) -> Result<PathBuf, String> {
    // The directories terra owns: `terra/runs` under a user directory, or
    // `terra-UID/runs` under /tmp (world-writable, so created and checked strictly).
    let owned: Vec<&Path> = vec![base.parent().unwrap_or(base), base];
    let anchor = owned[0].parent().unwrap_or(Path::new("/"));
    match kind {
        BaseKind::RuntimeDir => {
            let meta =
                fs::symlink_metadata(anchor).map_err(|e| format!("{}: {e}", anchor.display()))?;
            if !meta.is_dir() || meta.uid() != uid {
                return Err(format!(
                    "{} is not a directory owned by uid {uid}",
                    anchor.display()
                ));
            }
        }
        BaseKind::UserDir => {
            fs::create_dir_all(anchor)
                .map_err(|e| format!("cannot create {}: {e}", anchor.display()))?;
        }
        BaseKind::SharedTmp => {}
    }
    for dir in owned {
        match DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
        }
        let meta = fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if !meta.is_dir() {
            return Err(format!(
                "{} is not a directory (or is a symlink)",
                dir.display()
            ));
        }
        if meta.uid() != uid {
            return Err(format!(
                "{} is owned by uid {}, not {uid}",
                dir.display(),
                meta.uid()
            ));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(format!(
                "{} has mode {:o}; it must be accessible to its owner only",
                dir.display(),
                meta.mode() & 0o7777
            ));
        }
    }
    fs::canonicalize(base).map_err(|e| format!("{}: {e}", base.display()))
}

/// The canonical form of the longest existing prefix of `path`, with the
/// remaining components appended as written.
fn canonical_prefix(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut cur = path.to_path_buf();
    loop {
        if let Ok(c) = fs::canonicalize(&cur) {
            return rest
                .iter()
                .rev()
                .fold(c, |acc: PathBuf, part| acc.join(part));
        }
        match (cur.file_name().map(|n| n.to_os_string()), cur.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                cur = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Whether a read or write rule of the plan covers `path` (denies are not
/// counted: a state directory must not depend on a deny staying in place).
pub fn visible_in_box(plan: &SandboxPlan, path: &Path) -> bool {
    let p = path.to_string_lossy();
    plan.rules()
        .iter()
        .filter(|r| matches!(r.access, Access::Read | Access::Write))
        .any(|r| covers(&r.path, r.scope, &p))
}

fn covers(rule: &str, scope: Scope, path: &str) -> bool {
    if rule == path {
        return true;
    }
    scope == Scope::Tree
        && (rule == "/"
            || (path.starts_with(rule) && path.as_bytes().get(rule.len()) == Some(&b'/')))
}

/// `YYYYMMDDTHHMMSSZ-<pid>-<8 hex>`: sortable, unique per host.
fn new_run_id() -> String {
    let t = crate::receipt::rfc3339(SystemTime::now());
    let compact: String = t[..19]
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .collect();
    let mut rnd = [0u8; 4];
    let _ = File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut rnd));
    format!(
        "{compact}Z-{}-{}",
        std::process::id(),
        crate::request::hex(&rnd)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coverage_on_segment_boundaries() {
        assert!(covers("/a", Scope::Tree, "/a/b"));
        assert!(covers("/a", Scope::Exact, "/a"));
        assert!(!covers("/a", Scope::Exact, "/a/b"));
        assert!(!covers("/a", Scope::Tree, "/ab"));
        assert!(covers("/", Scope::Tree, "/x/y"));
    }

    #[test]
    fn run_ids_are_distinct() {
        assert_ne!(new_run_id(), new_run_id());
    }
}
