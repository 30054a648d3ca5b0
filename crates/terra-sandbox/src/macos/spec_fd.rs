//! Reading the launch spec from its descriptor: a pipe, or a regular file
//! that only this user can read or write; at most the spec limit plus one
//! byte; the descriptor is closed afterwards.

use std::fs::File;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};

use terra_seatbelt::spec::MAX_SPEC_LEN;
use terra_seatbelt::LaunchSpec;

use super::error::LaunchError;

pub fn read(fd: i32) -> Result<LaunchSpec, LaunchError> {
    let bad = |what: String| LaunchError::SpecFd { fd, what };
    // The descriptor must be open and not yet owned by anything in this
    // process: F_GETFD tells a closed number apart before it is adopted.
    // SAFETY: F_GETFD only reads the descriptor's flags.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(bad(std::io::Error::last_os_error().to_string()));
    }
    // SAFETY: the descriptor is open (checked above), was handed to this
    // process for the spec, and nothing else in it owns or closes it.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let meta = file.metadata().map_err(|e| bad(format!("fstat: {e}")))?;
    let kind = meta.file_type();
    if kind.is_file() {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        if meta.uid() != euid || meta.mode() & 0o077 != 0 {
            return Err(bad(format!(
                "a file of uid {} mode {:o}, not owner-only for uid {euid}",
                meta.uid(),
                meta.mode() & 0o7777
            )));
        }
    } else if !kind.is_fifo() {
        return Err(bad("neither a pipe nor a regular file".into()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_SPEC_LEN as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(format!("read: {e}")))?;
    Ok(LaunchSpec::decode(&bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::IntoRawFd;
    use std::os::unix::fs::OpenOptionsExt;

    fn spec_file(mode: u32) -> (tempfile::TempDir, i32) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("spec");
        let spec = LaunchSpec {
            role: terra_seatbelt::Role::Workload,
            network: terra_seatbelt::Network::None,
            executable: "/usr/bin/true".into(),
            mark: None,
            terminals: Vec::new(),
            grants: Vec::new(),
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&p)
            .unwrap();
        f.write_all(&spec.encode()).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        let fd = File::open(&p).unwrap().into_raw_fd();
        (d, fd)
    }

    #[test]
    fn reads_an_owner_only_file() {
        let (_d, fd) = spec_file(0o600);
        assert_eq!(read(fd).unwrap().executable, "/usr/bin/true");
    }

    #[test]
    fn refuses_a_file_others_may_read() {
        let (_d, fd) = spec_file(0o644);
        let e = read(fd).unwrap_err();
        assert!(e.to_string().contains("not owner-only"), "{e}");
    }

    #[test]
    fn refuses_a_closed_descriptor() {
        let (_d, fd) = spec_file(0o600);
        // SAFETY: fd was just opened above and is owned by nothing else.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
        assert!(read(fd).is_err());
    }
}
