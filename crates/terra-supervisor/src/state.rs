//! The per-run directories, owner-only and outside every grant of the plan:
//!
//! - the state directory keeps what outlives the run: the receipt, the
//!   request without environment values (the canary), the network receipt. Candidates, first usable wins:
//!   `$XDG_STATE_HOME/terra/runs`, `$HOME/.local/state/terra/runs`,
//!   `/run/user/UID/terra/runs`, then the user's private fallback
//!   `$TMPDIR/terra-state-UID/runs` (else `/tmp/...`), one per user and
//!   reused by every run: used only when `terra-state-UID` is a real
//!   directory (not a symlink) owned by the user and closed to group and
//!   others (it is made so when absent). When another user took that name
//!   first, or nothing else is usable, a fresh private directory
//!   `terra-state-UID-RANDOM` there, announced on stderr;
//! - the runtime directory holds what lives only as long as the run: the run
//!   lock and the pid files; it is removed at the end. Candidates
//!   (memory file systems, so a run costs no disk metadata writes for them):
//!   `$XDG_RUNTIME_DIR/terra/runs`, `/run/user/UID/terra/runs`, else a fresh
//!   private directory `/dev/shm/terra-run-UID-RANDOM` (removed with the run);
//!   when none is usable, the run's state directory holds these files too.
//!
//! Both directories are held open by descriptor once made; every file in
//! them is written relative to that descriptor (see [`crate::files`]).
//!
//! A candidate the box could see (covered by a read or write rule of the plan)
//! is skipped, and so is one whose terra-owned directories are not ours or are
//! open to group or others.

use std::ffi::OsStr;
use std::fs::{self, DirBuilder, File};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::SystemTime;

use nix::fcntl::{fcntl, FcntlArg, FdFlag, Flock, FlockArg};
use terra_policy::{Access, SandboxPlan, Scope};

use crate::error::{Error, Result};
use crate::files::{Existing, Follow, OutDir};

/// The run lock lives on this descriptor for the supervisor's lifetime.
pub const LOCK_FD: i32 = 3;

/// Occupies fd 3 with a placeholder (/dev/null) so nothing else the
/// supervisor opens lands there before the run lock is moved onto it. Call
/// it once the inherited request descriptor is closed; fails when fd 3 is
/// taken already.
pub fn reserve_lock_fd() -> Result<File> {
    let null = Path::new("/dev/null");
    let f = File::open(null).map_err(|e| Error::io("", null, e))?;
    if f.as_raw_fd() != LOCK_FD {
        return Err(Error::Host(format!(
            "fd {LOCK_FD} is in use (the run lock goes there); terra run starts the supervisor with it free"
        )));
    }
    Ok(f)
}

/// The run's directories, created, with the run lock held.
pub struct RunDir {
    /// `<state base>/<run-id>`: receipts and the canary, kept after the run.
    pub path: PathBuf,
    /// `<runtime base>/<run-id>`: lock, pid files; removed at the end.
    /// The same as `path` when no runtime base was usable.
    pub runtime: PathBuf,
    pub run_id: String,
    /// `runtime`, held open since it was made.
    runtime_dir: OutDir,
    /// `path`, once made (the runtime directory's descriptor when they are one).
    state_dir: OnceLock<OutDir>,
    _lock: Flock<File>,
}

/// The files of the runtime directory, removed when the run ends.
const RUNTIME_FILES: [&str; 5] = [
    "host.pid",
    "broker.pid",
    "supervisor.pid",
    // The macos backend's launch specs (terra_supervisor::macos).
    "workload.spec",
    "broker.spec",
];

/// The canary file: the run request without environment values.
const CANARY: &str = "request.json";

impl RunDir {
    /// Picks the state and runtime bases outside the plan's grants, creates
    /// the runtime directory `<base>/<run-id>` (0700), takes the run lock
    /// (moved to fd 3, where `lock_slot` keeps the number free; see
    /// [`reserve_lock_fd`]) and writes `supervisor.pid`. The state directory is
    /// named, and made by `create_state_dir`.
    pub fn create(plan: &SandboxPlan, lock_slot: File) -> Result<RunDir> {
        RunDir::create_with(plan, Some(lock_slot))
    }

    /// [`RunDir::create`] with the run lock left on the descriptor it was
    /// opened on (close-on-exec), for a supervisor that does not own fd 3:
    /// the macos backend's `terra run`, which is its own supervisor.
    pub fn create_unpinned(plan: &SandboxPlan) -> Result<RunDir> {
        RunDir::create_with(plan, None)
    }

    fn create_with(plan: &SandboxPlan, lock_slot: Option<File>) -> Result<RunDir> {
        let uid = nix::unistd::geteuid().as_raw();
        let state = match pick_base(plan, candidates(uid), uid) {
            Ok(b) => Base::Shared(b),
            Err(why) => {
                let fresh = fresh_private_dir(plan, &shared_tmp(), &format!("terra-state-{uid}"))
                    .map_err(|e| {
                    Error::Host(format!("no usable state directory: {why}; {e}"))
                })?;
                eprintln!(
                    "terra: no usable state directory ({why}); this run's state (its receipt) goes to \
                     the fresh private directory {}",
                    fresh.display()
                );
                Base::Fresh(fresh)
            }
        };
        let runtime = match pick_base(plan, runtime_candidates(uid), uid) {
            Ok(b) => Some(Base::Shared(b)),
            Err(why) => {
                let shm = Path::new("/dev/shm");
                match shm
                    .is_dir()
                    .then(|| fresh_private_dir(plan, shm, &format!("terra-run-{uid}")))
                {
                    Some(Ok(fresh)) => Some(Base::Fresh(fresh)),
                    other => {
                        let more = match other {
                            Some(Err(e)) => format!("; {e}"),
                            _ => "; no /dev/shm".into(),
                        };
                        tracing::debug!(
                            "no runtime directory, the state directory is used: {why}{more}"
                        );
                        None
                    }
                }
            }
        };
        RunDir::create_in(state, runtime, lock_slot)
    }

    /// With a runtime base of its own, the state directory is only named
    /// here; `create_state_dir` makes it (the supervisor does that while the
    /// box builds its root). A fresh directory is the run's directory itself.
    fn create_in(
        state: Base,
        runtime_base: Option<Base>,
        lock_slot: Option<File>,
    ) -> Result<RunDir> {
        let run_id = new_run_id();
        let state_is_fresh = matches!(state, Base::Fresh(_));
        let path = state.run_dir(&run_id);
        let runtime = match &runtime_base {
            Some(b) => b.run_dir(&run_id),
            None => path.clone(),
        };
        let runtime_fresh = match &runtime_base {
            Some(Base::Fresh(_)) => true,
            None => state_is_fresh,
            Some(Base::Shared(_)) => false,
        };
        if !runtime_fresh {
            make_private_dir(&runtime)?;
        }
        let runtime_dir = OutDir::open(&runtime, Follow::Nothing)?;
        let file = runtime_dir.create_append(OsStr::new("lock"))?;
        let lock_path = runtime.join("lock");
        let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| Error::sys_at("cannot lock", &lock_path, e))?;
        if let Some(lock_slot) = lock_slot {
            // The lock belongs to the open file description, so fd 3 holds it
            // too. dup2 replaces what is on fd 3: only the placeholder may be.
            if lock_slot.as_raw_fd() != LOCK_FD {
                return Err(Error::Host(format!(
                    "fd {LOCK_FD} is not reserved for the run lock"
                )));
            }
            if lock.as_raw_fd() != LOCK_FD {
                nix::unistd::dup2(lock.as_raw_fd(), LOCK_FD).map_err(|e| {
                    Error::sys(format!("cannot move the run lock to fd {LOCK_FD}"), e)
                })?;
            }
            fcntl(LOCK_FD, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
                .map_err(|e| Error::sys(format!("cannot mark fd {LOCK_FD} close-on-exec"), e))?;
            // fd 3 now holds the lock: the placeholder's descriptor number is
            // no longer its own, so it must not be closed when the placeholder goes.
            std::mem::forget(lock_slot);
        }
        let state_dir = OnceLock::new();
        if path == runtime || state_is_fresh {
            let _ = state_dir.set(OutDir::open(&path, Follow::Nothing)?);
        }
        let dir = RunDir {
            path,
            runtime,
            run_id,
            runtime_dir,
            state_dir,
            _lock: lock,
        };
        dir.write_runtime(
            "supervisor.pid",
            format!("{}\n", std::process::id()).as_bytes(),
        )?;
        Ok(dir)
    }

    /// Creates the state directory (0700) and opens it, unless that was done
    /// already (it is the runtime directory or a fresh one, or was made
    /// earlier in this run; nobody else can create entries in the owner-only
    /// base).
    pub fn create_state_dir(&self) -> Result<()> {
        if self.state_dir.get().is_some() {
            return Ok(());
        }
        make_private_dir(&self.path)?;
        let d = OutDir::open(&self.path, Follow::Nothing)?;
        let _ = self.state_dir.set(d);
        Ok(())
    }

    fn state(&self) -> Result<&OutDir> {
        self.state_dir.get().ok_or_else(|| {
            Error::Host(format!(
                "the state directory {} was not created",
                self.path.display()
            ))
        })
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
    pub fn write_canary(&self, bytes: &[u8]) -> Result<PathBuf> {
        self.write_file(CANARY, bytes)
    }

    /// Writes an owner-only file in the state directory, atomically.
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> Result<PathBuf> {
        write_private(self.state()?, name, bytes)
    }

    /// Creates an owner-only file for appending in the state directory (it
    /// must not exist).
    pub fn create_state_file(&self, name: &str) -> Result<(File, PathBuf)> {
        let f = self.state()?.create_append(OsStr::new(name))?;
        Ok((f, self.path.join(name)))
    }

    /// Opens a file of the state directory for reading (a descriptor of its
    /// own, which also reads what is appended later).
    pub fn open_state_file_read(&self, name: &str) -> Result<File> {
        Ok(self.state()?.open_read(OsStr::new(name))?)
    }

    /// Writes an owner-only file in the runtime directory, atomically.
    pub fn write_runtime(&self, name: &str, bytes: &[u8]) -> Result<PathBuf> {
        write_private(&self.runtime_dir, name, bytes)
    }

    /// Removes the runtime files and, when it is a directory of its own, the
    /// runtime directory with its lock file (the lock itself is released when
    /// the supervisor exits).
    pub fn remove_runtime(&self) {
        use rustix::fs::AtFlags;
        for name in RUNTIME_FILES {
            let _ = rustix::fs::unlinkat(self.runtime_dir.fd(), name, AtFlags::empty());
        }
        if self.runtime != self.path {
            let _ = rustix::fs::unlinkat(self.runtime_dir.fd(), "lock", AtFlags::empty());
            let _ = fs::remove_dir(&self.runtime);
        }
    }
}

/// Removes the runtime directories of runs whose supervisor was killed
/// before it could remove them: `<runtime base>/<run-id>` and the fresh
/// `/dev/shm/terra-run-UID-...`. One goes only when it is a directory of
/// the user closed to others (opened without following a symlink), its
/// `lock` is a regular file nobody holds (a supervisor holds it for its whole
/// life: the kernel drops it when the supervisor dies, however it dies) and
/// its `supervisor.pid` exists (written only once the lock is held, so a
/// directory without it may still be being set up); then only terra's own
/// files in it are unlinked and the directory removed if that left it empty.
#[cfg(target_os = "linux")]
pub fn clean_stale_runtime() {
    let uid = nix::unistd::geteuid().as_raw();
    for (base, _) in runtime_candidates(uid) {
        if let Ok(dir) = open_private(&base, uid) {
            for name in dir_names(&dir) {
                if name.to_str().is_some_and(is_run_id) {
                    remove_stale_runtime(&dir, &name, uid);
                }
            }
        }
    }
    let fresh_prefix = format!("terra-run-{uid}-");
    if let Ok(shm) = OutDir::open(Path::new("/dev/shm"), Follow::Nothing) {
        for name in dir_names(&shm) {
            let fresh = name.to_str().is_some_and(|n| {
                n.strip_prefix(&fresh_prefix)
                    .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_hexdigit()))
            });
            if fresh {
                remove_stale_runtime(&shm, &name, uid);
            }
        }
    }
}

/// The names in `dir` (not `.` and `..`).
#[cfg(target_os = "linux")]
fn dir_names(dir: &OutDir) -> Vec<std::ffi::OsString> {
    use rustix::fs::{Mode, OFlags};
    use std::os::unix::ffi::OsStrExt;
    let Ok(fd) = rustix::fs::openat(
        dir.fd(),
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return Vec::new();
    };
    let Ok(entries) = rustix::fs::Dir::new(fd) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| OsStr::from_bytes(e.file_name().to_bytes()).to_os_string())
        .filter(|n| n != "." && n != "..")
        .collect()
}

/// [`clean_stale_runtime`] for the one directory `name` of `parent`.
#[cfg(target_os = "linux")]
fn remove_stale_runtime(parent: &OutDir, name: &OsStr, uid: u32) {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    let Ok(dir) = rustix::fs::openat(
        parent.fd(),
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let open = |file: &str| {
        let fd = rustix::fs::openat(
            &dir,
            file,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        (FileType::from_raw_mode(st.st_mode) == FileType::RegularFile && st.st_uid == uid)
            .then(|| File::from(fd))
    };
    let ours = rustix::fs::fstat(&dir).is_ok_and(|st| {
        FileType::from_raw_mode(st.st_mode) == FileType::Directory
            && st.st_uid == uid
            && st.st_mode & 0o077 == 0
    });
    if !ours {
        return;
    }
    // Held while the files go: a supervisor that is alive holds it.
    let Some(lock) = open("lock") else {
        return;
    };
    let Ok(_held) = Flock::lock(lock, FlockArg::LockExclusiveNonblock) else {
        return;
    };
    // Written once the lock is held: without it the directory may be one a
    // supervisor is still setting up.
    if open("supervisor.pid").is_none() {
        return;
    }
    for file in RUNTIME_FILES.iter().chain(&["lock"]) {
        let _ = rustix::fs::unlinkat(&dir, *file, AtFlags::empty());
    }
    let _ = rustix::fs::unlinkat(parent.fd(), name, AtFlags::REMOVEDIR); // fails unless empty
}

fn write_private(dir: &OutDir, name: &str, bytes: &[u8]) -> Result<PathBuf> {
    dir.write(
        OsStr::new(name),
        bytes,
        0o600,
        Existing::ReplaceRegular,
        false,
    )
    .map_err(|e| Error::Host(format!("cannot write the run file: {e}")))?;
    Ok(dir.path().join(name))
}

/// Where a run directory goes: under a shared base (`<base>/<run-id>`), or a
/// fresh private directory that is the run directory itself.
enum Base {
    Shared(PathBuf),
    Fresh(PathBuf),
}

impl Base {
    fn run_dir(&self, run_id: &str) -> PathBuf {
        match self {
            Base::Shared(b) => b.join(run_id),
            Base::Fresh(d) => d.clone(),
        }
    }
}

/// `$TMPDIR` when absolute, else /tmp: where a fresh state directory goes.
fn shared_tmp() -> PathBuf {
    std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// Makes a new directory `<parent>/<prefix>-<random>` (0700, exclusive, so
/// nobody can have prepared it) outside the plan's grants; returns its
/// canonical path.
fn fresh_private_dir(plan: &SandboxPlan, parent: &Path, prefix: &str) -> Result<PathBuf> {
    let parent = fs::canonicalize(parent).map_err(|e| Error::io("", parent, e))?;
    if visible_in_box(plan, &parent.join(prefix)) {
        return Err(Error::Host(format!(
            "{} is inside a grant of the plan",
            parent.display()
        )));
    }
    new_private_dir(&parent, prefix)
}

/// Makes a new directory `<parent>/<prefix>-<random>`, mode 0700, exclusive
/// (so nobody can have prepared it); returns its path. The mode is set
/// again only when the umask changed it (a chmod is a journaled write).
pub(crate) fn new_private_dir(parent: &Path, prefix: &str) -> Result<PathBuf> {
    for _ in 0..16 {
        let mut rnd = [0u8; 8];
        crate::files::random_bytes(&mut rnd).map_err(|e| Error::op("random bytes", e))?;
        let dir = parent.join(format!("{prefix}-{}", crate::hex::hex(&rnd)));
        match DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                let mode = fs::symlink_metadata(&dir)
                    .map_err(|e| Error::io("", &dir, e))?
                    .mode();
                if mode & 0o7777 != 0o700 {
                    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
                        .map_err(|e| Error::io("cannot set the mode of", &dir, e))?;
                }
                return Ok(dir);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io("cannot create a directory in", parent, e)),
        }
    }
    Err(Error::io(
        "no free directory name in",
        parent,
        std::io::ErrorKind::AlreadyExists.into(),
    ))
}

/// mkdir 0700; the mode is set again only when the umask changed it (a chmod
/// is one more metadata write per run).
fn make_private_dir(path: &Path) -> Result<()> {
    DirBuilder::new()
        .mode(0o700)
        .create(path)
        .map_err(|e| Error::io("cannot create the run directory", path, e))?;
    let mode = fs::symlink_metadata(path)
        .map_err(|e| Error::io("", path, e))?
        .mode();
    if mode & 0o7777 != 0o700 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::io("cannot set the mode of", path, e))?;
    }
    Ok(())
}

/// The first usable base of `cands`, or why none is.
fn pick_base(plan: &SandboxPlan, cands: Vec<(PathBuf, BaseKind)>, uid: u32) -> Result<PathBuf> {
    let mut why_not = Vec::new();
    let in_grant = |p: &Path| Error::Host(format!("{} is inside a grant of the plan", p.display()));
    for (base, kind) in cands {
        // Judge the candidate before creating anything in it.
        if visible_in_box(plan, &canonical_prefix(&base)) {
            why_not.push(in_grant(&base));
            continue;
        }
        match prepare_base(&base, kind, uid).and_then(|b| {
            if visible_in_box(plan, &b) {
                Err(in_grant(&b))
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
    Err(Error::Several(why_not))
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
        shared_tmp().join(format!("terra-state-{uid}/runs")),
        BaseKind::PrivateFallback,
    ));
    v
}

/// The directory of terra's own records (placeholders, temp directories of
/// runs; see `crate::placeholders`) for a run of `plan`: `records` beside
/// `runs` in the first state base outside every read and write grant of the
/// plan, so no box of this run can write or read them. Made owner-only and
/// opened without following a symlink.
pub fn records_dir(plan: &SandboxPlan) -> Result<OutDir> {
    let uid = nix::unistd::geteuid().as_raw();
    let mut why_not = Vec::new();
    for (base, kind) in candidates(uid) {
        let Some(terra) = base.parent() else {
            continue;
        };
        let records = terra.join(RECORDS);
        if visible_in_box(plan, &canonical_prefix(&records)) {
            why_not.push(Error::Host(format!(
                "{} is inside a grant of the plan",
                records.display()
            )));
            continue;
        }
        let opened = prepare_base(&base, kind, uid).and_then(|b| {
            let records = b.parent().unwrap_or(&b).join(RECORDS);
            if visible_in_box(plan, &records) {
                return Err(Error::Host(format!(
                    "{} is inside a grant of the plan",
                    records.display()
                )));
            }
            match DirBuilder::new().mode(0o700).create(&records) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::io("cannot create", &records, e)),
            }
            open_private(&records, uid)
        });
        match opened {
            Ok(d) => return Ok(d),
            Err(e) => why_not.push(e),
        }
    }
    Err(Error::Several(why_not))
}

/// The record directories that exist for this user (the current one and
/// the former `placeholders`, of every state base), each opened without
/// following a symlink and checked to be the user's and private.
pub fn existing_records_dirs() -> Vec<OutDir> {
    let uid = nix::unistd::geteuid().as_raw();
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for (base, _) in candidates(uid) {
        let Some(terra) = base.parent() else {
            continue;
        };
        for name in [RECORDS, "placeholders"] {
            let Ok(d) = open_private(&terra.join(name), uid) else {
                continue;
            };
            let Ok(st) = rustix::fs::fstat(d.fd()) else {
                continue;
            };
            if !seen.contains(&(st.st_dev, st.st_ino)) {
                seen.push((st.st_dev, st.st_ino));
                out.push(d);
            }
        }
    }
    out
}

/// The directory of terra's records beside `runs`.
const RECORDS: &str = "records";

/// Opens `path` with no symlink in any component and checks, on the
/// descriptor, that it is a directory of `uid` closed to group and others.
fn open_private(path: &Path, uid: u32) -> Result<OutDir> {
    let d = OutDir::open(path, Follow::Nothing)?;
    let st = rustix::fs::fstat(d.fd()).map_err(|e| {
        Error::io(
            "",
            path,
            std::io::Error::from_raw_os_error(e.raw_os_error()),
        )
    })?;
    let is_dir = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory;
    if !is_dir || st.st_uid != uid || st.st_mode & 0o077 != 0 {
        return Err(Error::Host(format!(
            "{} is not a directory of uid {uid} closed to group and others",
            path.display()
        )));
    }
    Ok(d)
}

/// The runtime bases, in order of preference (memory file systems on a
/// usual Linux host; `/dev/shm` is the fallback, with a fresh name).
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
    v
}

/// Where a candidate base lives, which decides how its anchor is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaseKind {
    /// Under the user's own directories: the anchor is created if missing.
    UserDir,
    /// Under /run/user/UID: the anchor must exist and be owned by the user.
    RuntimeDir,
    /// `terra-state-UID/runs` in the shared temp directory: the anchor
    /// (`$TMPDIR` or /tmp) must exist; `terra-state-UID` is made or, when it
    /// exists, must pass the checks of every directory terra owns.
    PrivateFallback,
}

/// Creates the base if needed and checks ownership; returns its canonical path.
fn prepare_base(base: &Path, kind: BaseKind, uid: u32) -> Result<PathBuf> {
    // The directories terra owns: `terra/runs` under a user directory.
    let owned: Vec<&Path> = vec![base.parent().unwrap_or(base), base];
    let anchor = owned[0].parent().unwrap_or(Path::new("/"));
    match kind {
        BaseKind::RuntimeDir => {
            let meta = fs::symlink_metadata(anchor).map_err(|e| Error::io("", anchor, e))?;
            if !meta.is_dir() || meta.uid() != uid {
                return Err(Error::Host(format!(
                    "{} is not a directory owned by uid {uid}",
                    anchor.display()
                )));
            }
        }
        BaseKind::UserDir => {
            fs::create_dir_all(anchor).map_err(|e| Error::io("cannot create", anchor, e))?;
        }
        BaseKind::PrivateFallback => {
            // Others may create entries there (/tmp), but must not be able to
            // rename ours away: a sticky directory, or one only its owner
            // (the user or root) can write.
            let meta = fs::metadata(anchor).map_err(|e| Error::io("", anchor, e))?;
            let owner_ok = meta.uid() == uid || meta.uid() == 0;
            let shared_ok = meta.mode() & 0o022 == 0 || meta.mode() & 0o1000 != 0;
            if !meta.is_dir() || !owner_ok || !shared_ok {
                return Err(Error::Host(format!(
                    "{} is not a directory of uid {uid} or root that is sticky or closed to others",
                    anchor.display()
                )));
            }
        }
    }
    for dir in owned {
        match DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io("cannot create", dir, e)),
        }
        let meta = fs::symlink_metadata(dir).map_err(|e| Error::io("", dir, e))?;
        if !meta.is_dir() {
            return Err(Error::Host(format!(
                "{} is not a directory (or is a symlink)",
                dir.display()
            )));
        }
        if meta.uid() != uid {
            return Err(Error::Host(format!(
                "{} is owned by uid {}, not {uid}",
                dir.display(),
                meta.uid()
            )));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(Error::Host(format!(
                "{} has mode {:o}; it must be accessible to its owner only",
                dir.display(),
                meta.mode() & 0o7777
            )));
        }
    }
    fs::canonicalize(base).map_err(|e| Error::io("", base, e))
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

/// `YYYYMMDDTHHMMSSZ-PID-8HEX`.
pub fn is_run_id(name: &str) -> bool {
    let b = name.as_bytes();
    if b.len() < 16 + 1 + 1 + 1 + 8 || b[8] != b'T' || b[15] != b'Z' || b[16] != b'-' {
        return false;
    }
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    let Some((pid, hex)) = name[17..].split_once('-') else {
        return false;
    };
    digits(&b[..8])
        && digits(&b[9..15])
        && digits(pid.as_bytes())
        && hex.len() == 8
        && hex.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// `YYYYMMDDTHHMMSSZ-<pid>-<8 hex>`: sortable, unique per host.
fn new_run_id() -> String {
    let t = terra_netd::receipt::rfc3339(SystemTime::now());
    let compact: String = t[..19]
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .collect();
    let mut rnd = [0u8; 4];
    let _ = crate::files::random_bytes(&mut rnd);
    format!(
        "{compact}Z-{}-{}",
        std::process::id(),
        crate::hex::hex(&rnd)
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
