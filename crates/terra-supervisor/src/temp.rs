//! The run's private temp directory once the run is over. `terra run`
//! decides, after the supervisor ended (so no process of the box is left):
//! it is removed, whatever the run's outcome, unless `--keep-temp` keeps it
//! (its path is in the receipt). `--rm-temp` names the default. A run killed
//! before it could remove it leaves a record that the user's next run acts
//! on (see `placeholders::clean_stale`).

use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, CWD};

/// What happens to the temp directory after the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TempAfterRun {
    /// Removed (the default; `--rm-temp` says so explicitly).
    #[default]
    Remove,
    /// Kept (`--keep-temp`).
    Keep,
}

/// Deepest directory nesting opened up for removal.
const MAX_DEPTH: usize = 256;

/// Keeps or removes `temp` after a run; returns the line to print on
/// stderr, if any (only a failed removal).
pub fn after_run(temp: &Path, mode: TempAfterRun) -> Option<String> {
    if mode == TempAfterRun::Keep {
        return None;
    }
    remove_tree(temp).err().map(|e| {
        format!(
            "terra: cannot remove the run's temp directory {}: {e}",
            temp.display()
        )
    })
}

/// Why the temp directory was not removed.
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    #[error("not a directory")]
    NotADirectory,
    #[error("names no directory")]
    NoName,
    /// A call on the directory, or its parent, failed.
    #[error("{call}: {source}")]
    Io {
        call: &'static str,
        source: std::io::Error,
    },
}

/// Removes `path` and everything in it, never following a symlink (std's
/// `remove_dir_all` unlinks links, it does not follow them). When that fails
/// (the workload left directories without write or search permission), the
/// directories are opened up to 0700 one by one through descriptors and the
/// removal is tried again. Only called when no process of the box is left.
pub fn remove_tree(path: &Path) -> Result<(), RemoveError> {
    let io = |call| move |source| RemoveError::Io { call, source };
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io("lstat")(e)),
        Ok(m) if !m.is_dir() => return Err(RemoveError::NotADirectory),
        Ok(_) => {}
    }
    if std::fs::remove_dir_all(path).is_ok() {
        return Ok(());
    }
    let (parent, name) = match (path.parent(), path.file_name()) {
        (Some(p), Some(n)) => (p, n),
        _ => return Err(RemoveError::NoName),
    };
    let parent = rustix::fs::openat(
        CWD,
        parent,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io("open the parent")(e.into()))?;
    open_up(&parent, name, 0);
    std::fs::remove_dir_all(path).map_err(io("remove"))
}

/// chmod 0700 the directory `name` of `parent` and, below it, every directory.
fn open_up(parent: &OwnedFd, name: impl rustix::path::Arg + Copy, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let is_dir = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
    if !is_dir {
        return;
    }
    // fchmodat follows a final symlink, but the entry was just seen to be a
    // directory and no process of the run is left to swap it.
    let _ = rustix::fs::chmodat(parent, name, Mode::RWXU, AtFlags::empty());
    let Ok(fd) = rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let Ok(dir) = rustix::fs::Dir::read_from(&fd) else {
        return;
    };
    let names: Vec<std::ffi::CString> = dir
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type() == FileType::Directory || e.file_type() == FileType::Unknown)
        .map(|e| e.file_name().to_owned())
        .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
        .collect();
    for n in &names {
        open_up(&fd, n.as_c_str(), depth + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("terra-temp-test-{}-{name}", std::process::id()));
        let _ = remove_tree(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn removed_after_any_run_unless_kept() {
        // A failure that left files: removed all the same.
        let d = scratch("fail");
        fs::write(d.join("npm-debug.log"), "x").unwrap();
        assert_eq!(after_run(&d, TempAfterRun::Remove), None);
        assert!(!d.exists());
        assert_eq!(TempAfterRun::default(), TempAfterRun::Remove);
        // --keep-temp keeps it, without a note.
        let d = scratch("keep");
        fs::write(d.join("f"), "x").unwrap();
        assert_eq!(after_run(&d, TempAfterRun::Keep), None);
        assert!(d.join("f").exists());
        remove_tree(&d).unwrap();
    }

    #[test]
    fn removal_opens_up_closed_directories_and_never_follows_a_symlink() {
        let outside = scratch("outside");
        fs::write(outside.join("keep"), "x").unwrap();
        let d = scratch("closed");
        fs::create_dir_all(d.join("a/b")).unwrap();
        fs::write(d.join("a/b/f"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, d.join("a/link")).unwrap();
        fs::set_permissions(d.join("a/b"), fs::Permissions::from_mode(0o500)).unwrap();
        fs::set_permissions(d.join("a"), fs::Permissions::from_mode(0o000)).unwrap();
        remove_tree(&d).unwrap();
        assert!(!d.exists());
        assert!(outside.join("keep").exists(), "the link's target survived");
        assert_eq!(
            fs::metadata(&outside).unwrap().permissions().mode() & 0o777,
            0o777 & !umask()
        );
        remove_tree(&outside).unwrap();
    }

    fn umask() -> u32 {
        let m = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
        nix::sys::stat::umask(m);
        m.bits()
    }
}
