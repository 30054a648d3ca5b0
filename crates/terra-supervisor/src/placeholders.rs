//! Placeholders for denied paths that do not exist yet (fs-protect-create),
//! and the record of each run that lets the user's next run clean up after
//! one that was killed.
//!
//! A policy that denies `.env` or `secrets/` inside a writable grant must
//! stop the box from creating that name. A mount can only cover a name that
//! exists, so for the run's duration terra creates it on the host: the
//! missing directories, then an empty file of mode 0 (`O_EXCL`). The box's
//! deny mount covers the placeholder (the box can neither read, create,
//! replace, rename onto nor link to the name: it is a mount point). After the
//! run each is removed only if it is still what terra made (same device and
//! inode; the file empty and mode 0; a directory empty).
//!
//! The run's record, `records/PID.START.jsonl` in the user's state base
//! (see [`crate::state::records_dir`]: the first one outside every read and
//! write grant of the run, so its box can neither forge nor read it), names
//! the run's temp directory and each placeholder with its device and inode,
//! written before the workload starts (a placeholder's name is also written
//! just before it is made). The record is removed when the run ends. A run
//! killed with SIGKILL leaves it: the next `terra run` of the user, finding
//! that the process PID with start time START is gone, removes
//!
//! - a placeholder only when it is still an empty regular file of mode 0
//!   with the recorded device and inode (a line without them, written just
//!   before the file was made, never causes a removal);
//! - the temp directory only when it is still a directory (not a symlink)
//!   of the user, named `terra-tmp-UID-...` as terra names them, with the
//!   recorded device and inode (removed without following a symlink);
//!
//! and never a directory made for a placeholder's missing parents (it stays,
//! empty: its only mark would be its device and inode, which a box could
//! copy into a forged record for any empty directory it can see). Record
//! files are opened without following a symlink and used only when they are
//! regular files of the user in a directory of the user closed to others.
//!
//! Every path is walked from `/` without following a symbolic link
//! (`files::OutDir`, `Follow::Nothing`): a workspace a previous box wrote
//! into is hostile input.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use serde::{Deserialize, Serialize};
use terra_policy::SandboxPlan;

use crate::error::{Error, Result};
use crate::files::{Follow, OutDir};

/// One thing terra made: the run's temp directory, a directory or the
/// placeholder file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Made {
    path: PathBuf,
    dir: bool,
    /// The run's temp directory (`dir` is true too).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    temp: bool,
    /// None in an intent line (written before the thing was made).
    dev: Option<u64>,
    ino: Option<u64>,
}

/// The record and placeholders of one run, removed by [`Placeholders::remove`].
#[derive(Debug, Default)]
pub struct Placeholders {
    made: Vec<Made>,
    record: Option<Record>,
}

/// The run's record file, in its directory.
#[derive(Debug)]
struct Record {
    dir: OutDir,
    name: OsString,
    file: File,
}

/// Largest record file read.
const MAX_RECORD_LEN: usize = 1 << 20;

/// This process's start time (field 22 of /proc/PID/stat): a record names
/// its process by pid and start time, so a reused pid is not taken for it.
fn start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19).map(str::to_owned)
}

/// Whether the process `pid` that started at `start` (empty: unknown) is
/// still there.
fn still_running(pid: u32, start: &str) -> bool {
    if let Some(now) = start_time(pid) {
        return start.is_empty() || now == start;
    }
    if Path::new("/proc/self/stat").exists() {
        return false; // /proc answers, and has no such process
    }
    // No /proc to ask: kill(0) says whether the pid exists (kept if it does).
    !matches!(
        i32::try_from(pid).map(|p| nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), None)),
        Ok(Err(nix::errno::Errno::ESRCH))
    )
}

fn io_err(what: &str, path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Host(format!(
        "placeholder for the denied path {}: {what}: {e}",
        path.display()
    ))
}

/// Starts the record of a run of `plan` whose temp directory is `temp`,
/// then makes the placeholders `paths` need (see
/// `terra_sandbox::linux::lower::placeholders`). Without a usable record
/// directory a run that needs placeholders is refused; one that needs none
/// runs without a record (a kill would then leave its temp directory).
pub fn create(paths: &[String], plan: &SandboxPlan, temp: &Path) -> Result<Placeholders> {
    let mut ph = Placeholders::default();
    match crate::state::records_dir(plan).and_then(Record::create) {
        Ok(record) => ph.record = Some(record),
        Err(why) if paths.is_empty() => {
            tracing::debug!("no record of this run (its temp directory): {why}");
        }
        Err(why) => {
            return Err(Error::Host(format!(
                "a denied path that does not exist needs a placeholder, and its record needs a \
                 state directory of this user, owner-only and outside every grant of the run; \
                 none is usable: {why}"
            )))
        }
    }
    if let Err(e) = ph.note_temp(temp) {
        ph.remove();
        return Err(e);
    }
    for p in paths {
        if let Err(e) = ph.make(Path::new(p)) {
            ph.remove();
            return Err(e);
        }
    }
    Ok(ph)
}

impl Record {
    /// `PID.START.jsonl`, new (never an existing entry), mode 0600.
    fn create(dir: OutDir) -> Result<Record> {
        let pid = std::process::id();
        let name = OsString::from(format!(
            "{pid}.{}.jsonl",
            start_time(pid).unwrap_or_default()
        ));
        let file = dir.create_append(&name)?;
        Ok(Record { dir, name, file })
    }
}

impl Placeholders {
    /// Appends `m` to the record; `durable` syncs it (a placeholder outlives
    /// a reboot, and so must its line).
    fn note(&mut self, m: &Made, durable: bool) -> Result<()> {
        let Some(rec) = &mut self.record else {
            return Ok(());
        };
        let shown = rec.dir.path().join(&rec.name);
        let mut line = serde_json::to_vec(m).map_err(|e| io_err("record", &m.path, e))?;
        line.push(b'\n');
        rec.file
            .write_all(&line)
            .and_then(|_| {
                if durable {
                    rec.file.sync_data()
                } else {
                    Ok(())
                }
            })
            .map_err(|e| io_err("record", &shown, e))
    }

    /// Records the run's temp directory (its device and inode).
    fn note_temp(&mut self, temp: &Path) -> Result<()> {
        let st = rustix::fs::lstat(temp).map_err(|e| {
            Error::io(
                "",
                temp,
                std::io::Error::from_raw_os_error(e.raw_os_error()),
            )
        })?;
        self.note(
            &Made {
                path: temp.to_path_buf(),
                dir: true,
                temp: true,
                dev: Some(st.st_dev),
                ino: Some(st.st_ino),
            },
            false,
        )
    }

    /// The missing components of `path` (directories), then the name
    /// itself (an empty file, mode 0).
    fn make(&mut self, path: &Path) -> Result<()> {
        // The deepest existing ancestor, walked without symlinks.
        let mut existing = path.to_path_buf();
        let mut missing: Vec<OsString> = Vec::new();
        loop {
            match rustix::fs::lstat(&existing) {
                Ok(_) => break,
                Err(_) => {
                    let name = existing
                        .file_name()
                        .ok_or_else(|| io_err("walk", path, "no existing ancestor"))?
                        .to_owned();
                    missing.push(name);
                    existing.pop();
                }
            }
        }
        missing.reverse();
        if missing.is_empty() {
            return Err(io_err(
                "create",
                path,
                "it exists now (it did not when the plan was resolved); run again",
            ));
        }
        let mut cur = existing;
        for (i, name) in missing.iter().enumerate() {
            let last = i + 1 == missing.len();
            let parent = OutDir::open(&cur, Follow::Nothing)
                .map_err(|e| io_err("open its directory", &cur, e))?;
            cur.push(name);
            self.note(
                &Made {
                    path: cur.clone(),
                    dir: !last,
                    temp: false,
                    dev: None,
                    ino: None,
                },
                true,
            )?;
            if last {
                rustix::fs::openat(
                    parent.fd(),
                    name.as_os_str(),
                    OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::WRONLY
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| io_err("create", &cur, e))?;
            } else {
                rustix::fs::mkdirat(parent.fd(), name.as_os_str(), Mode::from_raw_mode(0o755))
                    .map_err(|e| io_err("create a directory", &cur, e))?;
            }
            let st = rustix::fs::statat(parent.fd(), name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| io_err("stat", &cur, e))?;
            let m = Made {
                path: cur.clone(),
                dir: !last,
                temp: false,
                dev: Some(st.st_dev),
                ino: Some(st.st_ino),
            };
            self.note(&m, true)?;
            self.made.push(m);
        }
        Ok(())
    }

    /// Removes the placeholders and directories that are still terra's,
    /// deepest first, then the record (call it once the run's temp directory
    /// was removed or kept).
    pub fn remove(self) {
        remove_made(&self.made);
        if let Some(r) = &self.record {
            let _ = rustix::fs::unlinkat(r.dir.fd(), r.name.as_os_str(), AtFlags::empty());
        }
    }
}

/// Removes each placeholder and directory of this run that is still what
/// terra made (deepest first): the same device and inode; a file still
/// empty and mode 0, a directory empty.
fn remove_made(made: &[Made]) {
    for m in made.iter().rev().filter(|m| !m.temp) {
        let Some((dir, name, st)) = still_made(m) else {
            continue;
        };
        let kind = FileType::from_raw_mode(st.st_mode);
        if m.dir && kind == FileType::Directory {
            let _ = rustix::fs::unlinkat(dir.fd(), name, AtFlags::REMOVEDIR); // fails unless empty
        } else if !m.dir && is_placeholder(&st) {
            let _ = rustix::fs::unlinkat(dir.fd(), name, AtFlags::empty());
        }
    }
}

/// The directory (opened from `/` without following a symlink), name and
/// status of what `m` recorded, when that name still has the recorded
/// device and inode (never for an intent line, which has neither).
fn still_made(m: &Made) -> Option<(OutDir, &OsStr, rustix::fs::Stat)> {
    let (dev, ino) = (m.dev?, m.ino?);
    let name = m.path.file_name()?;
    let dir = OutDir::open(m.path.parent()?, Follow::Nothing).ok()?;
    let st = rustix::fs::statat(dir.fd(), name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
    ((st.st_dev, st.st_ino) == (dev, ino)).then_some((dir, name, st))
}

/// Still an empty regular file of mode 0 (a freed inode number can come
/// back for a file someone else made).
fn is_placeholder(st: &rustix::fs::Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
        && st.st_size == 0
        && st.st_mode & 0o7777 == 0
}

/// What the user's next run removes of a killed run's record (see the
/// module doc): placeholders still as made, and the temp directory.
fn remove_stale(made: &[Made]) -> bool {
    let uid = nix::unistd::geteuid().as_raw();
    let mut all_gone = true;
    for m in made {
        if m.dir && !m.temp {
            continue; // a placeholder's parent: left in place
        }
        // An intent line (no device and inode) is never a removal.
        let Some((dir, name, st)) = still_made(m) else {
            continue;
        };
        if m.temp {
            let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
            if is_dir && st.st_uid == uid && is_temp_name(name, uid) {
                all_gone &= crate::temp::remove_tree(&m.path).is_ok();
            }
        } else if is_placeholder(&st) {
            let _ = rustix::fs::unlinkat(dir.fd(), name, AtFlags::empty());
        }
    }
    all_gone
}

/// `terra-tmp-UID-HEX`: the name a run's temp directory has
/// (`crate::state::new_private_dir`).
fn is_temp_name(name: &OsStr, uid: u32) -> bool {
    let prefix = format!("terra-tmp-{uid}-");
    name.as_bytes()
        .strip_prefix(prefix.as_bytes())
        .is_some_and(|rest| !rest.is_empty() && rest.iter().all(u8::is_ascii_hexdigit))
}

/// Removes what runs whose process is gone (killed before they could clean
/// up) left, and their records; and the runtime directories of killed
/// supervisors ([`crate::state::clean_stale_runtime`]).
pub fn clean_stale() {
    for dir in crate::state::existing_records_dirs() {
        clean_stale_in(&dir);
    }
    crate::state::clean_stale_runtime();
}

fn clean_stale_in(dir: &OutDir) {
    let Ok(listing) = rustix::fs::openat(
        dir.fd(),
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let Ok(entries) = rustix::fs::Dir::new(listing) else {
        return;
    };
    for e in entries.flatten() {
        let name = OsStr::from_bytes(e.file_name().to_bytes()).to_os_string();
        let Some((pid, start)) = parse_record_name(&name) else {
            continue;
        };
        if still_running(pid, &start) {
            continue;
        }
        let Some(made) = read_record(dir, &name) else {
            continue;
        };
        // A record whose temp directory could not be removed stays for the
        // next run.
        if remove_stale(&made) {
            let _ = rustix::fs::unlinkat(dir.fd(), name.as_os_str(), AtFlags::empty());
        }
    }
}

/// The lines of the record `name`: opened without following a symlink
/// (and without blocking on a FIFO), used only when it is a regular file of
/// the user; a recorded line supersedes the intent line before it.
fn read_record(dir: &OutDir, name: &OsStr) -> Option<Vec<Made>> {
    let fd = rustix::fs::openat(
        dir.fd(),
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    let uid = nix::unistd::geteuid().as_raw();
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || st.st_uid != uid {
        return None;
    }
    let mut text = Vec::new();
    File::from(fd)
        .take(MAX_RECORD_LEN as u64)
        .read_to_end(&mut text)
        .ok()?;
    let mut made: Vec<Made> = Vec::new();
    for line in String::from_utf8_lossy(&text).lines() {
        if let Ok(m) = serde_json::from_str::<Made>(line) {
            made.retain(|x| x.path != m.path);
            made.push(m);
        }
    }
    Some(made)
}

fn parse_record_name(name: &OsStr) -> Option<(u32, String)> {
    let s = std::str::from_utf8(name.as_bytes()).ok()?;
    let stem = s.strip_suffix(".jsonl")?;
    let (pid, start) = stem.split_once('.')?;
    Some((pid.parse().ok()?, start.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_placeholder_is_made_recorded_and_removed_only_while_it_is_terras() {
        let base = tempfile::tempdir().unwrap();
        let ws = base.path().join("ws");
        fs::create_dir(&ws).unwrap();
        let target = ws.join("secrets/token");
        let mut ph = Placeholders::default();
        ph.make(&target).unwrap();
        let st = fs::symlink_metadata(&target).unwrap();
        assert!(st.is_file() && st.len() == 0);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(st.permissions().mode() & 0o7777, 0);
        assert!(ws.join("secrets").is_dir());
        // Made twice: it exists now, refused.
        assert!(Placeholders::default().make(&target).is_err());
        ph.remove();
        assert!(!ws.join("secrets").exists(), "nothing is left");
        // A placeholder someone replaced is left alone.
        let mut ph = Placeholders::default();
        ph.make(&ws.join(".env")).unwrap();
        fs::remove_file(ws.join(".env")).unwrap();
        fs::write(ws.join(".env"), b"").unwrap();
        ph.remove();
        assert!(ws.join(".env").exists(), "not terra's any more");
    }

    #[test]
    fn a_symlink_on_the_way_is_not_followed() {
        let base = tempfile::tempdir().unwrap();
        let ws = base.path().join("ws");
        let elsewhere = base.path().join("elsewhere");
        fs::create_dir(&ws).unwrap();
        fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, ws.join("link")).unwrap();
        let mut ph = Placeholders::default();
        assert!(ph.make(&ws.join("link/new")).is_err());
        assert!(!elsewhere.join("new").exists());
    }

    #[test]
    fn record_names_parse() {
        assert_eq!(
            parse_record_name(OsStr::new("123.456.jsonl")),
            Some((123, "456".into()))
        );
        assert_eq!(parse_record_name(OsStr::new("x.jsonl")), None);
    }

    /// A pid no process has now.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    fn line(path: &Path, dir: bool, temp: bool, at: Option<&fs::Metadata>) -> String {
        use std::os::unix::fs::MetadataExt;
        serde_json::to_string(&Made {
            path: path.to_path_buf(),
            dir,
            temp,
            dev: at.map(|m| m.dev()),
            ino: at.map(|m| m.ino()),
        })
        .unwrap()
    }

    #[test]
    fn a_forged_record_removes_nothing_that_is_not_terras() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        let records = base.path().join("records");
        let host = base.path().join("host");
        fs::create_dir_all(&records).unwrap();
        fs::create_dir_all(host.join("empty-dir")).unwrap();
        fs::create_dir_all(host.join("terra-tmp-0-zz")).unwrap();
        let file = host.join("empty-mode-0");
        fs::write(&file, b"").unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o000)).unwrap();
        let dir_meta = fs::symlink_metadata(host.join("empty-dir")).unwrap();
        let uid = nix::unistd::geteuid().as_raw();
        // A directory named like a temp directory of another uid, or not hex.
        let lookalike = host.join(format!("terra-tmp-{}-ab", uid + 1));
        fs::create_dir(&lookalike).unwrap();
        let lookalike_meta = fs::symlink_metadata(&lookalike).unwrap();
        let forged = [
            // Intent lines: never a removal.
            line(&host.join("empty-dir"), true, false, None),
            line(&file, false, false, None),
            // A recorded directory: a placeholder's parent, left in place.
            line(&host.join("empty-dir"), true, false, Some(&dir_meta)),
            // The temp directory of the record: not named as terra names them.
            line(&host.join("empty-dir"), true, true, Some(&dir_meta)),
            line(&lookalike, true, true, Some(&lookalike_meta)),
            // The right name, the wrong inode.
            line(&host.join("terra-tmp-0-zz"), true, true, Some(&dir_meta)),
        ]
        .join("\n");
        let name = format!("{}.1.jsonl", dead_pid());
        fs::write(records.join(&name), forged).unwrap();
        // A record that is a symlink is neither followed nor used.
        let elsewhere = base.path().join("elsewhere.jsonl");
        fs::write(&elsewhere, line(&file, false, false, None)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, records.join(format!("{}.2.jsonl", dead_pid())))
            .unwrap();
        clean_stale_in(&OutDir::open(&records, Follow::Nothing).unwrap());
        assert!(host.join("empty-dir").is_dir());
        assert!(host.join("terra-tmp-0-zz").is_dir());
        assert!(lookalike.is_dir());
        assert!(fs::symlink_metadata(&file).is_ok());
        assert!(elsewhere.exists());
    }

    #[test]
    fn a_killed_runs_placeholder_and_temp_directory_are_removed() {
        let base = tempfile::tempdir().unwrap();
        let records = base.path().join("records");
        let ws = base.path().join("ws");
        fs::create_dir_all(&records).unwrap();
        fs::create_dir_all(&ws).unwrap();
        let uid = nix::unistd::geteuid().as_raw();
        let temp = crate::state::new_private_dir(base.path(), &format!("terra-tmp-{uid}")).unwrap();
        fs::create_dir(temp.join("sub")).unwrap();
        fs::write(temp.join("sub/f"), b"x").unwrap();
        let mut ph = Placeholders::default();
        ph.make(&ws.join("secrets/token")).unwrap();
        let mut lines = vec![line(
            &temp,
            true,
            true,
            Some(&fs::symlink_metadata(&temp).unwrap()),
        )];
        lines.extend(ph.made.iter().map(|m| serde_json::to_string(m).unwrap()));
        // A live run's record (this process) is left alone.
        let me = std::process::id();
        let live = format!("{me}.{}.jsonl", start_time(me).unwrap());
        fs::write(records.join(&live), lines.join("\n")).unwrap();
        clean_stale_in(&OutDir::open(&records, Follow::Nothing).unwrap());
        assert!(
            temp.exists() && ws.join("secrets/token").exists(),
            "a live run's"
        );
        assert!(records.join(&live).exists());
        fs::remove_file(records.join(&live)).unwrap();
        let name = format!("{}.1.jsonl", dead_pid());
        fs::write(records.join(&name), lines.join("\n")).unwrap();
        clean_stale_in(&OutDir::open(&records, Follow::Nothing).unwrap());
        assert!(!temp.exists());
        assert!(!ws.join("secrets/token").exists());
        assert!(ws.join("secrets").is_dir(), "a parent terra made stays");
        assert!(!records.join(&name).exists(), "the record is gone");
    }

    #[test]
    fn temp_names() {
        assert!(is_temp_name(OsStr::new("terra-tmp-0-0a1b"), 0));
        for bad in [
            "terra-tmp-0-",
            "terra-tmp-0-xy",
            "terra-tmp-1-ab",
            "x-terra-tmp-0-ab",
        ] {
            assert!(!is_temp_name(OsStr::new(bad), 0), "{bad}");
        }
    }
}
