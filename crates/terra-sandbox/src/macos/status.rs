//! The launcher's status pipe to terra run, and the terminal hand-over.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use terra_seatbelt::Status;

use super::error::LaunchError;

/// The write end of terra run's status pipe, close-on-exec (so the exec of
/// the role closes it: end of file tells terra run the role runs).
pub struct Pipe(File);

impl Pipe {
    /// Adopts descriptor `fd`: it must be open and a pipe.
    pub fn adopt(fd: i32) -> Result<Pipe, LaunchError> {
        let bad = |what: String| LaunchError::StatusFd { fd, what };
        fcntl(fd, FcntlArg::F_GETFD).map_err(|e| bad(e.to_string()))?;
        // SAFETY: the descriptor is open (checked above), terra run handed
        // it to this process for the status, and nothing else here owns or
        // closes it; it is adopted once, at the start.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let is_pipe = file
            .metadata()
            .map(|m| m.file_type().is_fifo())
            .unwrap_or(false);
        if !is_pipe {
            return Err(bad("not a pipe".into()));
        }
        fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
            .map_err(|e| bad(format!("close-on-exec: {e}")))?;
        Ok(Pipe(file))
    }

    /// Writes one status line; false when terra run is gone (its end of
    /// the pipe is closed: EPIPE).
    pub fn say(&mut self, status: &Status) -> bool {
        self.0.write_all(status.line().as_bytes()).is_ok()
    }
}

/// Makes this process's group the foreground group of the terminal on
/// standard input. SIGTTOU is blocked meanwhile (a background group may
/// change the foreground group only then) and unblocked before the exec.
pub fn take_terminal() -> Result<(), LaunchError> {
    let err = |what| move |error| LaunchError::Terminal { what, error };
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let mut old = SigSet::empty();
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut old))
        .map_err(err("cannot block SIGTTOU"))?;
    let stdin = std::io::stdin();
    let r = nix::unistd::tcsetpgrp(stdin.as_fd(), nix::unistd::getpgrp())
        .map_err(err("cannot take the terminal's foreground"));
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None)
        .map_err(err("cannot restore the signal mask"))?;
    r
}
