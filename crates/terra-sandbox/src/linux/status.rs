//! The status pipe: the box reports setup results to the caller as small JSON
//! lines; the write end is close-on-exec, so a successful exec shows as EOF.

use std::os::fd::BorrowedFd;

use serde::{Deserialize, Serialize};

use super::sys;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The Landlock ABI enforced (None: no Landlock on this kernel).
    Landlock(Option<i32>),
    /// "passed", or why the activation check failed.
    Activation(String),
    /// Setup or activation failure: the workload was not started.
    Refused(String),
    /// execve failed: 126 cannot execute, 127 not found.
    ExecFailed { code: i32, reason: String },
}

pub fn send(fd: BorrowedFd<'_>, s: &Status) {
    send_all(fd, std::slice::from_ref(s));
}

/// Sends several reports with one write (one wake-up of the reader).
pub fn send_all(fd: BorrowedFd<'_>, all: &[Status]) {
    let mut buf = Vec::new();
    for s in all {
        if let Ok(line) = serde_json::to_vec(s) {
            buf.extend_from_slice(&line);
            buf.push(b'\n');
        }
    }
    if !buf.is_empty() {
        sys::write_all_fd(fd, &buf);
    }
}

/// Reads every status line until EOF.
pub fn read_all(fd: BorrowedFd<'_>) -> Vec<Status> {
    use std::os::fd::AsRawFd;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match nix::unistd::read(fd.as_raw_fd(), &mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    buf.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect()
}
