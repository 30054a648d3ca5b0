//! The ledger on disk (`terra_appcontainer::ledger` is its format): where
//! it lives, its atomic rewrite and who owns it. Undoing what it records is
//! `cleanup`'s (which uses the ACL and profile code, both of which record
//! here).

use super::error::Error;
use std::os::windows::io::AsRawHandle;
use std::path::{Path, PathBuf};

use terra_appcontainer::ledger::{Ledger, Owner, Record};
use windows_sys::Win32::Foundation::FILETIME;
use windows_sys::Win32::System::Threading::{
    GetCurrentProcess, GetProcessTimes, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
};

use super::util::{last_error, owned};

/// terra's state directory for ledgers: `%LOCALAPPDATA%\terra\state\ledger`.
pub fn dir() -> Result<PathBuf, Error> {
    let base = std::env::var_os("LOCALAPPDATA")
        .filter(|b| !b.is_empty())
        .ok_or("LOCALAPPDATA is not set: terra has no state directory for its ledger")?;
    Ok(PathBuf::from(base)
        .join("terra")
        .join("state")
        .join("ledger"))
}

fn filetime(t: FILETIME) -> u64 {
    (u64::from(t.dwHighDateTime) << 32) | u64::from(t.dwLowDateTime)
}

/// The creation time of the process behind `h`.
fn start_of(h: windows_sys::Win32::Foundation::HANDLE) -> Result<u64, Error> {
    let zero = FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut c, mut e, mut k, mut u) = (zero, zero, zero, zero);
    // SAFETY: `h` is a valid process handle; the four FILETIMEs are writable.
    if unsafe { GetProcessTimes(h, &mut c, &mut e, &mut k, &mut u) } == 0 {
        return Err(last_error("GetProcessTimes"));
    }
    Ok(filetime(c))
}

/// This process as a ledger owner.
pub fn me() -> Result<Owner, Error> {
    // SAFETY: the pseudo handle of this process is always valid.
    let start = start_of(unsafe { GetCurrentProcess() })?;
    Ok(Owner {
        pid: std::process::id(),
        start,
    })
}

/// True when `owner` still runs: the same process id with the same
/// creation time (a process id alone may have been reused).
pub fn running(owner: Owner) -> bool {
    // SAFETY: plain call; a null result means no such process we may query.
    let h = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, owner.pid) };
    match owned(h, "OpenProcess") {
        Ok(h) => start_of(h.as_raw_handle()).is_ok_and(|s| s == owner.start),
        // Access denied: a process we cannot query is not one of our
        // launchers (they run as this user); gone otherwise.
        Err(_) => false,
    }
}

/// This launcher's ledger file: written before each change.
pub struct File {
    path: PathBuf,
    pub ledger: Ledger,
}

impl File {
    pub fn create() -> Result<File, Error> {
        let dir = dir()?;
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create the ledger directory {}: {e}", dir.display()))?;
        let ledger = Ledger::new(me()?);
        let f = File {
            path: dir.join(ledger.owner.file_name()),
            ledger,
        };
        f.write()?;
        Ok(f)
    }

    /// Records `r` on disk; only then may the caller make the change.
    pub fn record(&mut self, r: Record) -> Result<(), Error> {
        self.ledger.push(r).map_err(|e| e.to_string())?;
        self.write()
    }

    fn write(&self) -> Result<(), Error> {
        write_atomic(&self.path, &self.ledger.encode())
    }

    /// Everything recorded was undone: the ledger goes.
    pub fn remove(self) -> Result<(), Error> {
        std::fs::remove_file(&self.path).map_err(|e| Error::Os {
            call: format!("remove the ledger {}", self.path.display()),
            source: e,
        })
    }
}

/// Writes `bytes` to `path` through a temporary file, flushed to disk and
/// renamed over it (MoveFileExW with MOVEFILE_REPLACE_EXISTING), so a
/// reader sees the old ledger or the new one, never half of one.
pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    use std::io::Write;
    let tmp = path.with_extension("ledger.tmp");
    let mut f = std::fs::File::create(&tmp)
        .map_err(|e| format!("cannot write the ledger {}: {e}", tmp.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("cannot write the ledger {}: {e}", tmp.display()))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| Error::Os {
        call: format!("replace the ledger {}", path.display()),
        source: e,
    })
}
