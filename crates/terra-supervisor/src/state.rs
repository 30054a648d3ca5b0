//! The per-run directories, owner-only and outside every grant of the plan:
//!
//! - the state directory keeps what outlives the run: the receipt, the
//!   request without environment values (the canary), the network receipt. Candidates, first usable wins:
//!   `$XDG_STATE_HOME/terra/runs`, `$HOME/.local/state/terra/runs`,
//!   `/run/user/UID/terra/runs`, `/tmp/terra-UID/runs`;
//! - the runtime directory holds what lives only as long as the run: the run
//!   lock and the pid files; it is removed at the end. Candidates
//!   (memory file systems, so a run costs no disk metadata writes for them):
//!   `$XDG_RUNTIME_DIR/terra/runs`, `/run/user/UID/terra/runs`,
//!   `/dev/shm/terra-UID/runs`; when none is usable, the run's state directory
//!   holds these files too.
//!
//! A candidate the box could see (covered by a read or write rule of the plan)
//! is skipped, and so is one whose terra-owned directories are not ours or are
//! open to group or others.

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

/// The run's directories, created, with the run lock held.
pub struct RunDir {
    /// `<state base>/<run-id>`: receipts and the canary, kept after the run.
    pub path: PathBuf,
    /// `<runtime base>/<run-id>`: lock, pid files; removed at the end.
    /// The same as `path` when no runtime base was usable.
    pub runtime: PathBuf,
    pub run_id: String,
    _lock: Flock<File>,
}

/// The files of the runtime directory, removed when the run ends.
const RUNTIME_FILES: [&str; 3] = ["host.pid", "broker.pid", "supervisor.pid"];

/// The canary file: the run request without environment values.
const CANARY: &str = "request.json";

impl RunDir {
    /// Picks the state and runtime bases outside the plan's grants, creates
    /// the runtime directory `<base>/<run-id>` (0700), takes the run lock
    /// (moved to fd 3) and writes `supervisor.pid`. The state directory is
    /// named, and made by `create_state_dir`.
    pub fn create(plan: &SandboxPlan) -> Result<RunDir, String> {
        let uid = nix::unistd::geteuid().as_raw();
        let base = pick_base(plan, candidates(uid), uid)
            .map_err(|why| format!("no usable state directory: {why}"))?;
        let runtime_base = match pick_base(plan, runtime_candidates(uid), uid) {
            Ok(b) => Some(b),
            Err(why) => {
                tracing::debug!("no runtime directory, the state directory is used: {why}");
                None
            }
        };
        RunDir::create_in(&base, runtime_base.as_deref())
    }

    /// With a runtime base of its own, the state directory is only named
    /// here; `create_state_dir` makes it (the supervisor does that while the
    /// box builds its root).
    fn create_in(base: &Path, runtime_base: Option<&Path>) -> Result<RunDir, String> {
        let run_id = new_run_id();
        let path = base.join(&run_id);
        let runtime = match runtime_base {
            Some(b) => b.join(&run_id),
            None => path.clone(),
        };
        make_private_dir(&runtime)?;
        let lock_path = runtime.join("lock");
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
            runtime,
            run_id,
            _lock: lock,
        };
        dir.write_runtime(
            "supervisor.pid",
            format!("{}\n", std::process::id()).as_bytes(),
        )?;
        Ok(dir)
    }

    /// Creates the state directory (0700) unless it exists already (it is the
    /// runtime directory, or was made earlier in this run; nobody else can
    /// create entries in the owner-only base).
    pub fn create_state_dir(&self) -> Result<(), String> {
        if self.path == self.runtime || fs::symlink_metadata(&self.path).is_ok_and(|m| m.is_dir()) {
            return Ok(());
        }
        make_private_dir(&self.path)
    }

    /// Where the canary goes: `request.json` in the state directory, a record
    /// of the run's request that is kept. Not in the runtime directory: that
    /// may be under /dev, and the box always gets a /dev of its own, so a
    /// canary there would stay invisible even in a box that wrongly showed
    /// the host's root.
    pub fn canary_path(&self) -> PathBuf {
        self.path.join(CANARY)
    }

    /// Writes the canary at `canary_path` (the state directory must exist).
    pub fn write_canary(&self, bytes: &[u8]) -> Result<PathBuf, String> {
        write_private(&self.canary_path(), bytes)
    }

    /// Writes an owner-only file in the state directory, atomically.
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> Result<PathBuf, String> {
        write_private(&self.path.join(name), bytes)
    }

    /// Writes an owner-only file in the runtime directory, atomically.
    pub fn write_runtime(&self, name: &str, bytes: &[u8]) -> Result<PathBuf, String> {
        write_private(&self.runtime.join(name), bytes)
    }

    /// Removes the runtime files and, when it is a directory of its own, the
    /// runtime directory with its lock file (the lock itself is released when
    /// the supervisor exits).
    pub fn remove_runtime(&self) {
        for name in RUNTIME_FILES {
            let _ = fs::remove_file(self.runtime.join(name));
        }
        if self.runtime != self.path {
            let _ = fs::remove_file(self.runtime.join("lock"));
            let _ = fs::remove_dir(&self.runtime);
        }
    }
}

fn write_private(p: &Path, bytes: &[u8]) -> Result<PathBuf, String> {
    write_replacing(p, bytes, false).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    Ok(p.to_path_buf())
}

/// mkdir 0700; the mode is set again only when the umask changed it (a chmod
/// is one more metadata write per run).
fn make_private_dir(path: &Path) -> Result<(), String> {
    DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(|e| format!("cannot create the run directory {}: {e}", path.display()))?;
    let mode = fs::symlink_metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .mode();
    if mode & 0o7777 != 0o700 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot set the mode of {}: {e}", path.display()))?;
    }
    Ok(())
}

/// The first usable base of `cands`, or why none is.
fn pick_base(
    plan: &SandboxPlan,
    cands: Vec<(PathBuf, BaseKind)>,
    uid: u32,
) -> Result<PathBuf, String> {
    let mut why_not = Vec::new();
    for (base, kind) in cands {
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
                    tracing::debug!("run directory candidate skipped: {w}");
                }
                return Ok(b);
            }
            Err(e) => why_not.push(e),
        }
    }
    Err(why_not.join("; "))
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

/// The runtime bases, in order of preference (all memory file systems on a
/// usual Linux host).
pub fn runtime_candidates(uid: u32) -> Vec<(PathBuf, BaseKind)> {
    let mut v = Vec::new();
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        v.push((x.join("terra/runs"), BaseKind::RuntimeDir));
    }
    v.push((
        PathBuf::from(format!("/run/user/{uid}/terra/runs")),
        BaseKind::RuntimeDir,
    ));
    if Path::new("/dev/shm").is_dir() {
        v.push((
            PathBuf::from(format!("/dev/shm/terra-{uid}/runs")),
            BaseKind::SharedTmp,
        ));
    }
    v
}

/// Where a candidate base lives, which decides how its anchor is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaseKind {
    /// Under the user's own directories: the anchor is created if missing.
    UserDir,
    /// Under /run/user/UID: the anchor must exist and be owned by the user.
    RuntimeDir,
    /// Under world-writable /tmp or /dev/shm: nothing above terra's own
    /// directories is created.
    SharedTmp,
}

/// Creates the base if needed and checks ownership; returns its canonical path.
fn prepare_base(base: &Path, kind: BaseKind, uid: u32) -> Result<PathBuf, String> {
    // The directories terra owns: `terra/runs` under a user directory, or
    // `terra-UID/runs` under /tmp or /dev/shm (world-writable, so created and
    // checked strictly).
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
