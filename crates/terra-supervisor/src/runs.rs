//! The runs kept in the state directory: listing them (`terra runs`),
//! finding the run a `terra run` just made, and pruning old ones.
//!
//! Everything here works from descriptors: a state base is opened without
//! following any symlink, and every run directory and file in it is opened
//! relative to that descriptor with `O_NOFOLLOW`, so a symlink planted in the
//! state directory is never followed (it is skipped, and never removed).
//! Only entries named like a run id (`YYYYMMDDTHHMMSSZ-PID-8HEX`) are
//! considered.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use serde_json::Value;

use crate::files::{Follow, OutDir, OutError};

/// The most bytes of a receipt or request read back.
const MAX_RECORD_LEN: u64 = 1 << 20;

/// Runs kept by default: the newest [`DEFAULT_KEEP`], none older than
/// [`DEFAULT_MAX_AGE`].
pub const DEFAULT_KEEP: usize = 100;
/// 14 days.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(14 * 86_400);
/// Pruning beside `terra run` waits until this many runs more than `keep`
/// piled up: finding the runs over the count opens every run, which every
/// run would pay otherwise (about 1 ms of CPU beside the box's start).
pub const DEFAULT_SLACK: usize = 10;

/// How many runs a state base keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// The newest this many finished runs are kept (unless too old).
    pub keep: usize,
    /// Runs that started longer ago than this are removed.
    pub max_age: Duration,
    /// Runs over `keep` are removed only once there are more than
    /// `keep + slack` runs (then down to `keep`); 0: every time.
    pub slack: usize,
}

impl Default for Retention {
    /// What pruning beside `terra run` keeps.
    fn default() -> Retention {
        Retention {
            keep: DEFAULT_KEEP,
            max_age: DEFAULT_MAX_AGE,
            slack: DEFAULT_SLACK,
        }
    }
}

/// A state base (`.../terra/runs`), opened without following symlinks.
#[derive(Debug)]
pub struct StateBase {
    path: PathBuf,
    /// Opened `O_RDONLY | O_DIRECTORY`, for listing and `*at` calls.
    fd: OwnedFd,
}

/// One run directory, opened relative to its base.
#[derive(Debug)]
pub struct RunFiles {
    pub id: String,
    pub path: PathBuf,
    fd: OwnedFd,
}

/// The state bases that exist for this user, in the order terra run prefers
/// them (see [`crate::state::candidates`]), each once. A base that is not a
/// directory owned by this uid and closed to group and others is skipped.
pub fn bases() -> Vec<StateBase> {
    let uid = nix::unistd::geteuid().as_raw();
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for (path, _) in crate::state::candidates(uid) {
        let Ok(real) = std::fs::canonicalize(&path) else {
            continue;
        };
        if seen.contains(&real) {
            continue;
        }
        seen.push(real.clone());
        match StateBase::open(&real, uid) {
            Ok(b) => out.push(b),
            Err(why) => tracing::debug!("state base {} skipped: {why}", real.display()),
        }
    }
    out
}

/// Why a state base or a run in it could not be opened, found or removed.
#[derive(Debug, thiserror::Error)]
pub enum RunsError {
    /// The base could not be reached without following a symlink.
    #[error("{0}")]
    Walk(#[from] OutError),
    #[error("cannot open {}: {source}", path.display())]
    Open {
        path: PathBuf,
        source: rustix::io::Errno,
    },
    #[error("{}: {source}", path.display())]
    Stat {
        path: PathBuf,
        source: rustix::io::Errno,
    },
    #[error("{} is not owned by uid {uid} with mode 0700", path.display())]
    NotPrivate { path: PathBuf, uid: u32 },
    #[error("{id:?} is not a run id")]
    NotRunId { id: String },
    #[error("cannot open the run {id} in {}: {source}", base.display())]
    OpenRun {
        id: String,
        base: PathBuf,
        source: rustix::io::Errno,
    },
    #[error("no runs recorded yet")]
    NoRuns,
    #[error(
        "{which:?} is not a run id (YYYYMMDDTHHMMSSZ-PID-HEX, as `terra runs` lists them) nor `last`"
    )]
    NotRunIdNorLast { which: String },
    #[error("no run {which} in the state directory")]
    NoSuchRun { which: String },
    /// Listing the run's directory failed.
    #[error("{0}")]
    List(rustix::io::Errno),
    #[error("{name:?}: {source}")]
    StatEntry {
        name: CString,
        source: rustix::io::Errno,
    },
    #[error("{name:?} is a directory; left in place")]
    DirectoryInRun { name: CString },
    #[error("cannot remove {name:?}: {source}")]
    RemoveFile {
        name: CString,
        source: rustix::io::Errno,
    },
    #[error("cannot remove the directory: {0}")]
    RemoveDir(rustix::io::Errno),
}

impl StateBase {
    /// Opens `path` (canonical) with no symlink in any component, and checks
    /// that it is ours and private.
    pub fn open(path: &Path, uid: u32) -> Result<StateBase, RunsError> {
        let walked = OutDir::open(path, Follow::Nothing)?;
        let fd = rustix::fs::openat(
            walked.fd(),
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|source| RunsError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        let st = rustix::fs::fstat(&fd).map_err(|source| RunsError::Stat {
            path: path.to_path_buf(),
            source,
        })?;
        if st.st_uid != uid || st.st_mode & 0o077 != 0 {
            return Err(RunsError::NotPrivate {
                path: path.to_path_buf(),
                uid,
            });
        }
        Ok(StateBase {
            path: path.to_path_buf(),
            fd,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The run ids in this base that are directories (not symlinks), oldest first.
    pub fn run_ids(&self) -> Vec<String> {
        let Ok(dir) = rustix::fs::Dir::read_from(&self.fd) else {
            return Vec::new();
        };
        // The entry's type from the listing itself (one stat per run only
        // where the file system does not say).
        let mut ids: Vec<String> = dir
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_str().ok().filter(|n| is_run_id(n))?;
                let is_dir = match e.file_type() {
                    FileType::Unknown => {
                        rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(
                            |st| FileType::from_raw_mode(st.st_mode) == FileType::Directory,
                        )
                    }
                    t => t == FileType::Directory,
                };
                is_dir.then(|| name.to_owned())
            })
            .collect();
        ids.sort();
        ids
    }

    /// Opens the run directory `id` (never through a symlink).
    pub fn open_run(&self, id: &str) -> Result<RunFiles, RunsError> {
        if !is_run_id(id) {
            return Err(RunsError::NotRunId { id: id.to_string() });
        }
        let fd = rustix::fs::openat(
            &self.fd,
            id,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|source| RunsError::OpenRun {
            id: id.to_string(),
            base: self.path.clone(),
            source,
        })?;
        Ok(RunFiles {
            id: id.to_string(),
            path: self.path.join(id),
            fd,
        })
    }

    /// Removes the runs `retention` does not keep; returns the removed ids
    /// and, for each run that could not be removed, why. A run without a
    /// receipt (it may still be running) and a run whose lock is held are
    /// only removed once older than `max_age`, and never while locked.
    pub fn prune(&self, retention: Retention, now: SystemTime) -> (Vec<String>, Vec<String>) {
        let ids = self.run_ids();
        let too_old = |id: &str| {
            run_started(id)
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age > retention.max_age)
        };
        // The common case costs one directory listing: few enough runs, the
        // oldest young enough.
        let over = ids.len() > retention.keep.saturating_add(retention.slack);
        if !over && !ids.first().is_some_and(|id| too_old(id)) {
            return (Vec::new(), Vec::new());
        }
        let mut removed = Vec::new();
        let mut failed = Vec::new();
        let mut finished_kept = 0usize;
        // Newest first: the first `keep` finished runs stay. A run is only
        // opened when it is to go (one stat for each kept one).
        for id in ids.iter().rev() {
            let too_old = too_old(id);
            let finished = self.finished(id);
            let over_count = finished && {
                finished_kept += 1;
                finished_kept > retention.keep
            };
            if !(too_old || over_count) {
                continue;
            }
            let Ok(run) = self.open_run(id) else { continue };
            if run.locked() {
                continue;
            }
            match self.remove_run(&run) {
                Ok(()) => removed.push(id.clone()),
                Err(e) => failed.push(format!("{id}: {e}")),
            }
        }
        (removed, failed)
    }

    /// Whether the run `id` (a directory in the listing) has its receipt, a
    /// regular file: one stat relative to the base. Were `id` swapped for a
    /// symlink since the listing, this would only miscount it; it is
    /// opened without following one before anything is removed.
    fn finished(&self, id: &str) -> bool {
        rustix::fs::statat(
            &self.fd,
            format!("{id}/receipt.json").as_str(),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile)
    }

    /// Unlinks the run's files (never following a symlink; a directory in it
    /// stops the removal), then the run directory.
    fn remove_run(&self, run: &RunFiles) -> Result<(), RunsError> {
        let dir = rustix::fs::Dir::read_from(&run.fd).map_err(RunsError::List)?;
        for entry in dir {
            let entry = entry.map_err(RunsError::List)?;
            let name = entry.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            let st =
                rustix::fs::statat(&run.fd, name, AtFlags::SYMLINK_NOFOLLOW).map_err(|source| {
                    RunsError::StatEntry {
                        name: name.to_owned(),
                        source,
                    }
                })?;
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                return Err(RunsError::DirectoryInRun {
                    name: name.to_owned(),
                });
            }
            rustix::fs::unlinkat(&run.fd, name, AtFlags::empty()).map_err(|source| {
                RunsError::RemoveFile {
                    name: name.to_owned(),
                    source,
                }
            })?;
        }
        rustix::fs::unlinkat(&self.fd, run.id.as_str(), AtFlags::REMOVEDIR)
            .map_err(RunsError::RemoveDir)
    }
}

impl RunFiles {
    fn open_file(&self, name: &str) -> Option<File> {
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        (FileType::from_raw_mode(st.st_mode) == FileType::RegularFile).then(|| File::from(fd))
    }

    /// Whether the run has the regular file `name`.
    pub fn has(&self, name: &str) -> bool {
        self.open_file(name).is_some()
    }

    /// The regular file `name` of the run (at most 1 MiB), or None.
    pub fn read(&self, name: &str) -> Option<Vec<u8>> {
        let mut buf = Vec::new();
        self.open_file(name)?
            .take(MAX_RECORD_LEN + 1)
            .read_to_end(&mut buf)
            .ok()?;
        (buf.len() as u64 <= MAX_RECORD_LEN).then_some(buf)
    }

    /// The regular file `name`, opened for reading (any size).
    pub fn open(&self, name: &str) -> Option<File> {
        self.open_file(name)
    }

    /// The run's receipt, parsed.
    pub fn receipt(&self) -> Option<Value> {
        serde_json::from_slice(&self.read("receipt.json")?).ok()
    }

    /// Whether a supervisor holds this run's lock (when the run keeps its
    /// lock here, i.e. no runtime directory was usable).
    fn locked(&self) -> bool {
        let Some(f) = self.open_file("lock") else {
            return false;
        };
        match nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockSharedNonblock) {
            Ok(_) => false,
            Err((_, e)) => e == nix::errno::Errno::EWOULDBLOCK,
        }
    }
}

/// The run a `terra run` just made, at `run_dir` as its supervisor reported
/// it (`<state base>/<run id>`), when its request names `cli_pid` as the
/// parent. Opened like every run: the base without following a symlink and
/// checked to be this user's and private, the run relative to it.
pub fn open_reported(run_dir: &Path, cli_pid: u32) -> Option<RunFiles> {
    let id = run_dir.file_name()?.to_str()?;
    let base = StateBase::open(run_dir.parent()?, nix::unistd::geteuid().as_raw()).ok()?;
    let run = base.open_run(id).ok()?;
    let parent = run
        .read("request.json")
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v["parentPid"].as_u64());
    (parent == Some(u64::from(cli_pid))).then_some(run)
}

/// A run of any base by id, or the newest for `last`.
pub fn find(bases: &[StateBase], which: &str) -> Result<RunFiles, RunsError> {
    if which == "last" {
        let newest = bases
            .iter()
            .filter_map(|b| b.run_ids().pop().map(|id| (id, b)))
            .max_by(|a, b| a.0.cmp(&b.0));
        return match newest {
            Some((id, base)) => base.open_run(&id),
            None => Err(RunsError::NoRuns),
        };
    }
    if !is_run_id(which) {
        return Err(RunsError::NotRunIdNorLast {
            which: which.to_string(),
        });
    }
    for base in bases {
        if base.run_ids().iter().any(|id| id == which) {
            return base.open_run(which);
        }
    }
    Err(RunsError::NoSuchRun {
        which: which.to_string(),
    })
}

pub use crate::state::is_run_id;

/// When the run `id` started (second precision, from its id).
pub fn run_started(id: &str) -> Option<SystemTime> {
    if !is_run_id(id) {
        return None;
    }
    let n = |r: std::ops::Range<usize>| id[r].parse::<i64>().ok();
    let days = days_from_civil(n(0..4)?, n(4..6)?, n(6..8)?)?;
    let secs = days * 86_400 + n(9..11)? * 3600 + n(11..13)? * 60 + n(13..15)?;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
}

/// Milliseconds between two RFC 3339 UTC times as terra writes them
/// (`YYYY-MM-DDTHH:MM:SS.mmmZ`).
pub fn millis_between(start: &str, end: &str) -> Option<u64> {
    let ms = |t: &str| -> Option<i64> {
        let b = t.as_bytes();
        if b.len() != 24 || b[10] != b'T' || b[19] != b'.' || b[23] != b'Z' {
            return None;
        }
        let n = |r: std::ops::Range<usize>| t.get(r)?.parse::<i64>().ok();
        let days = days_from_civil(n(0..4)?, n(5..7)?, n(8..10)?)?;
        Some(
            ((days * 86_400 + n(11..13)? * 3600 + n(14..16)? * 60 + n(17..19)?) * 1000)
                + n(20..23)?,
        )
    };
    u64::try_from(ms(end)? - ms(start)?).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> Option<i64> {
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_and_their_times() {
        assert!(is_run_id("20261202T142500Z-123-0a1b2c3d"));
        for bad in [
            "",
            "20261202T142500Z-123-0a1b2c3",
            "20261202T142500Z--0a1b2c3d",
            "20261202X142500Z-1-0a1b2c3d",
            "20261202T142500Z-1-0A1B2C3D",
            "../20261202T142500Z-1-0a1b2c3d",
            "20261202T142500Z-1-0a1b2c3d/x",
        ] {
            assert!(!is_run_id(bad), "{bad}");
        }
        let t = run_started("19700102T000001Z-1-00000000").unwrap();
        assert_eq!(t, UNIX_EPOCH + Duration::from_secs(86_401));
        // The inverse of terra_netd's rfc3339 on a date after a leap day.
        let when = UNIX_EPOCH + Duration::from_millis(1_709_251_200_250); // 2024-03-01
        let text = terra_netd::receipt::rfc3339(when);
        assert_eq!(text, "2024-03-01T00:00:00.250Z");
        assert_eq!(millis_between("2024-02-29T23:59:59.900Z", &text), Some(350));
        assert_eq!(millis_between(&text, "2024-02-29T23:59:59.900Z"), None);
        assert_eq!(millis_between("garbage", &text), None);
    }

    /// A private runs directory (as `StateBase::open` wants it) in a
    /// temporary directory.
    fn runs_dir() -> (tempfile::TempDir, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let base_path = dir.path().join("runs");
        std::fs::create_dir(&base_path).unwrap();
        std::fs::set_permissions(&base_path, std::fs::Permissions::from_mode(0o700)).unwrap();
        (dir, base_path)
    }

    /// Makes run `i` in `base_path`, started an hour before `now` plus `i`
    /// seconds (ids sort by `i`), with nothing in it; returns its directory.
    fn add_run(base_path: &Path, now: SystemTime, i: u32) -> (String, PathBuf) {
        let t = now - Duration::from_secs(3600) + Duration::from_secs(u64::from(i));
        let secs = t.duration_since(UNIX_EPOCH).unwrap().as_secs();
        let id = format!("{}-{i}-0000000a", rfc3339_compact(secs));
        let d = base_path.join(&id);
        std::fs::create_dir(&d).unwrap();
        (id, d)
    }

    #[test]
    fn pruning_with_slack_waits_for_the_slack_then_keeps_the_newest() {
        let (_dir, base_path) = runs_dir();
        let uid = nix::unistd::geteuid().as_raw();
        let now = SystemTime::now();
        // Recent runs, all finished.
        let add = |i: u32| {
            let (id, d) = add_run(&base_path, now, i);
            std::fs::write(d.join("receipt.json"), "{}").unwrap();
            id
        };
        let retention = Retention {
            keep: 3,
            max_age: DEFAULT_MAX_AGE,
            slack: 2,
        };
        let ids: Vec<String> = (0..5).map(add).collect();
        let base = StateBase::open(&base_path, uid).unwrap();
        // keep + slack runs: nothing removed yet.
        assert!(base.prune(retention, now).0.is_empty());
        assert_eq!(base.run_ids().len(), 5);
        let newest = add(5);
        // One more: down to the newest three at once.
        let (removed, failed) = base.prune(retention, now);
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(removed.len(), 3, "{removed:?}");
        assert_eq!(base.run_ids(), vec![ids[3].clone(), ids[4].clone(), newest]);
        // Without slack (terra runs prune), every run over the count goes.
        add(6);
        let exact = Retention {
            slack: 0,
            ..retention
        };
        assert_eq!(base.prune(exact, now).0.len(), 1);
    }

    #[test]
    fn only_a_receipt_that_is_a_regular_file_counts_toward_keep() {
        let (dir, base_path) = runs_dir();
        let outside = dir.path().join("outside.json");
        std::fs::write(&outside, "{}").unwrap();
        let now = SystemTime::now();
        // Oldest first: three finished runs, then a run still going (no
        // receipt), one whose receipt is a symlink and one whose receipt is
        // a directory.
        let mut ids = Vec::new();
        for i in 0..6u32 {
            let (id, d) = add_run(&base_path, now, i);
            match i {
                0..=2 => std::fs::write(d.join("receipt.json"), "{}").unwrap(),
                3 => {}
                4 => std::os::unix::fs::symlink(&outside, d.join("receipt.json")).unwrap(),
                _ => std::fs::create_dir(d.join("receipt.json")).unwrap(),
            }
            ids.push(id);
        }
        let base = StateBase::open(&base_path, nix::unistd::geteuid().as_raw()).unwrap();
        let keep_two = Retention {
            keep: 2,
            max_age: DEFAULT_MAX_AGE,
            slack: 0,
        };
        // The two newest finished runs stay; the three newer ones count
        // for nothing and stay too (young, not finished); the oldest goes.
        let (removed, failed) = base.prune(keep_two, now);
        assert_eq!(removed, vec![ids[0].clone()]);
        assert_eq!(failed.len(), 0, "{failed:?}");
        assert_eq!(base.run_ids(), ids[1..].to_vec());
        assert!(outside.exists());
    }

    /// `YYYYMMDDTHHMMSSZ` of a Unix time (the run id's start).
    fn rfc3339_compact(secs: u64) -> String {
        let text = terra_netd::receipt::rfc3339(UNIX_EPOCH + Duration::from_secs(secs));
        // "2024-03-01T00:00:00.000Z" -> "20240301T000000Z"
        let digits: String = text[..19].chars().filter(char::is_ascii_digit).collect();
        format!("{}T{}Z", &digits[..8], &digits[8..])
    }
}
