//! Placeholders for denied paths that do not exist yet (fs-protect-create).
//!
//! A policy that denies `.env` or `secrets/` inside a writable grant must
//! stop the box from creating that name. A mount can only cover a name that
//! exists, so for the run's duration terra creates it on the host: the
//! missing directories, then an empty file of mode 0 (`O_EXCL`), each
//! recorded in the user's state directory *before* it is made. The box's
//! deny mount covers the placeholder (the box can neither read, create,
//! replace, rename onto nor link to the name: it is a mount point). After the
//! run each is removed only if it is still what terra made (same device and
//! inode; the file empty; a directory empty). A run killed with SIGKILL
//! leaves its record: the next `terra run` of the user removes the
//! placeholders of records whose process is gone.
//!
//! Every path is walked from `/` without following a symbolic link
//! (`files::OutDir`, `Follow::Nothing`): a workspace a previous box wrote
//! into is hostile input.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::files::{Follow, OutDir};

/// One thing terra made: a directory or the placeholder file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Made {
    path: PathBuf,
    dir: bool,
    /// None in an intent line (written before the thing was made).
    dev: Option<u64>,
    ino: Option<u64>,
}

/// The placeholders of one run, removed by [`Placeholders::remove`].
#[derive(Debug, Default)]
pub struct Placeholders {
    made: Vec<Made>,
    record: Option<PathBuf>,
}

/// Where records live: `$XDG_STATE_HOME/terra/placeholders` (or
/// `~/.local/state/...`), made owner-only. The state directory, not the
/// runtime one: placeholders are on disk and outlive a reboot, and so must
/// their records.
fn record_dir(make: bool) -> Option<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|h| h.join(".local/state"))
        })?;
    let terra = base.join("terra");
    let dir = terra.join("placeholders");
    if make {
        fs::create_dir_all(&base).ok()?;
        for d in [&terra, &dir] {
            // Owner-only, as terra's state directories are (state.rs checks
            // the same of `terra`).
            match fs::DirBuilder::new().mode(0o700).create(d) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(_) => return None,
            }
        }
    }
    let meta = fs::symlink_metadata(&dir).ok()?;
    let uid = nix::unistd::geteuid().as_raw();
    (meta.is_dir() && meta.uid() == uid && meta.mode() & 0o077 == 0).then_some(dir)
}

/// This process's start time (field 22 of /proc/self/stat): a record names
/// its process by pid and start time, so a reused pid is not taken for it.
fn start_time(pid: u32) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19).map(str::to_owned)
}

fn io_err(what: &str, path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Host(format!(
        "placeholder for the denied path {}: {what}: {e}",
        path.display()
    ))
}

/// Makes the placeholders `paths` need (see
/// `terra_sandbox::linux::lower::placeholders`). `writable` are the plan's
/// writable grants: the record must not be where the box could rewrite it.
pub fn create(paths: &[String], writable: &[&Path]) -> Result<Placeholders> {
    let mut ph = Placeholders::default();
    if paths.is_empty() {
        return Ok(ph);
    }
    let dir = record_dir(true).ok_or_else(|| {
        Error::Host(
            "a denied path that does not exist needs a placeholder, and its record needs a \
             state directory ($XDG_STATE_HOME or ~/.local/state) of this user, owner-only; \
             none is usable"
                .into(),
        )
    })?;
    let real = fs::canonicalize(&dir).map_err(|e| io_err("record", &dir, e))?;
    if let Some(g) = writable.iter().find(|g| real.starts_with(g)) {
        return Err(Error::Host(format!(
            "the record of the placeholders would be in {}, inside the writable grant {}; \
             set XDG_STATE_HOME outside it",
            real.display(),
            g.display()
        )));
    }
    let pid = std::process::id();
    let name = format!("{pid}.{}.jsonl", start_time(pid).unwrap_or_default());
    ph.record = Some(dir.join(name));
    for p in paths {
        if let Err(e) = ph.make(Path::new(p)) {
            ph.remove();
            return Err(e);
        }
    }
    Ok(ph)
}

impl Placeholders {
    fn note(&self, m: &Made) -> Result<()> {
        let Some(rec) = &self.record else {
            return Ok(());
        };
        let mut line = serde_json::to_vec(m).map_err(|e| io_err("record", &m.path, e))?;
        line.push(b'\n');
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(rec)
            .map_err(|e| io_err("record", rec, e))?;
        f.write_all(&line)
            .and_then(|_| f.sync_data())
            .map_err(|e| io_err("record", rec, e))
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
            self.note(&Made {
                path: cur.clone(),
                dir: !last,
                dev: None,
                ino: None,
            })?;
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
                dev: Some(st.st_dev),
                ino: Some(st.st_ino),
            };
            self.note(&m)?;
            self.made.push(m);
        }
        Ok(())
    }

    /// Removes what is still terra's, deepest first, then the record.
    pub fn remove(self) {
        remove_made(&self.made);
        if let Some(r) = &self.record {
            let _ = fs::remove_file(r);
        }
    }
}

/// Removes each entry that is still what terra made (deepest first).
fn remove_made(made: &[Made]) {
    for m in made.iter().rev() {
        let (Some(parent), Some(name)) = (m.path.parent(), m.path.file_name()) else {
            continue;
        };
        let Ok(dir) = OutDir::open(parent, Follow::Nothing) else {
            continue;
        };
        let Ok(st) = rustix::fs::statat(dir.fd(), name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let kind = FileType::from_raw_mode(st.st_mode);
        let same = match (m.dev, m.ino) {
            (Some(d), Some(i)) => st.st_dev == d && st.st_ino == i,
            // An intent line: made (maybe) but never recorded; only an empty
            // mode-0 file or an empty directory of this user can be it.
            _ => {
                st.st_uid == nix::unistd::geteuid().as_raw() && (m.dir || st.st_mode & 0o7777 == 0)
            }
        };
        if !same {
            continue;
        }
        if m.dir && kind == FileType::Directory {
            let _ = rustix::fs::unlinkat(dir.fd(), name, AtFlags::REMOVEDIR); // fails unless empty
        } else if !m.dir
            && kind == FileType::RegularFile
            && st.st_size == 0
            && st.st_mode & 0o7777 == 0
        {
            // Still empty and mode 0 (a freed inode number can come back for
            // a file someone else made).
            let _ = rustix::fs::unlinkat(dir.fd(), name, AtFlags::empty());
        }
    }
}

/// Removes the placeholders of runs whose process is gone (killed before
/// it could clean up), and their records.
pub fn clean_stale() {
    let Some(dir) = record_dir(false) else {
        return;
    };
    let Ok(entries) = fs::read_dir(&dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some((pid, start)) = parse_record_name(&name) else {
            continue;
        };
        if start_time(pid).is_some_and(|s| s == start) {
            continue; // still running
        }
        let path = e.path();
        let Ok(text) = crate::input::read_capped(&path, 1 << 20) else {
            continue;
        };
        let mut made: Vec<Made> = Vec::new();
        for line in String::from_utf8_lossy(&text).lines() {
            if let Ok(m) = serde_json::from_str::<Made>(line) {
                // A recorded line supersedes the intent line before it.
                made.retain(|x| x.path != m.path);
                made.push(m);
            }
        }
        remove_made(&made);
        let _ = fs::remove_file(&path);
    }
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
}
