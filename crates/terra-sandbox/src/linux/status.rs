//! The status pipe: the box reports setup results to the caller as small JSON
//! lines; the write end is close-on-exec, so a successful exec shows as EOF.

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

pub fn send(fd: i32, s: &Status) {
    send_all(fd, std::slice::from_ref(s));
}

/// Sends several reports with one write (one wake-up of the reader).
pub fn send_all(fd: i32, all: &[Status]) {
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
pub fn read_all(fd: i32) -> Vec<Status> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        // SAFETY: the buffer is valid for its length.
        let n = unsafe { libc::read(fd, chunk.as_mut_ptr() as *mut libc::c_void, chunk.len()) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if n <= 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n as usize]);
    }
    buf.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect()
}
