//! terra-test-roles: the executable the box tests hand `spawn_box` and
//! `spawn_confined_role` (a test harness is not terra, so its own
//! /proc/self/exe cannot be exec'd as a role). It dispatches `__vm` the way
//! terra's `src/main.rs` does, with a test service for mediated networking,
//! and `__probe_role`, a confined role that reports what it sees. Built only
//! with the `test-support` feature; the tests find it as
//! `CARGO_BIN_EXE_terra-test-roles`.

use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match args.first().and_then(|a| a.to_str()) {
        Some("__vm") => terra_sandbox::vm_role_main(args[1..].to_vec(), proxy_service),
        Some("__probe_role") => probe_role(),
        _ => {
            eprintln!("terra-test-roles: roles are __vm and __probe_role");
            ExitCode::from(2)
        }
    }
}

/// The mediated box's service in the tests: says it is up on the broker
/// socket, lets every workload connect() run in the box (terra's service
/// judges them; this one only answers), and greets every connection to the
/// proxy address.
fn proxy_service(fds: terra_sandbox::linux::ServiceFds) -> ! {
    let channel = fds.notify_channel;
    let mediated = fds.mediated;
    std::thread::spawn(move || {
        use std::os::fd::{AsFd, AsRawFd};
        use terra_kernel::notify;
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
        let mut byte = [0u8; 1];
        let mut iov = [std::io::IoSliceMut::new(&mut byte)];
        let Ok(msg) = nix::sys::socket::recvmsg::<()>(
            channel.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            nix::sys::socket::MsgFlags::MSG_CMSG_CLOEXEC,
        ) else {
            return;
        };
        let Some(fd) = msg.cmsgs().ok().and_then(|mut c| {
            c.find_map(|c| match c {
                nix::sys::socket::ControlMessageOwned::ScmRights(v) => v.first().copied(),
                _ => None,
            })
        }) else {
            return;
        };
        // SAFETY: received with SCM_RIGHTS just now; owned by nobody else.
        let listener = unsafe { OwnedFd::from_raw_fd(fd) };
        while let Ok(n) = notify::receive(listener.as_fd()) {
            let _ = notify::reply_continue(listener.as_fd(), n.id);
        }
    });
    let Some(m) = mediated else {
        loop {
            std::thread::park();
        }
    };
    let _ = std::fs::File::from(m.broker).write_all(b"service-up\n");
    let listener = m.proxy;
    loop {
        if let Ok((s, _)) = listener.accept() {
            // write(2), as a File: the service runs under the box service's
            // allowlist, which has no send(2) (the real service only hands
            // sockets on with sendmsg).
            let _ = std::fs::File::from(OwnedFd::from(s)).write_all(b"hello-from-proxy\n");
        }
    }
}

/// A confined role: enters its root, then reports on fd 7 what it sees.
/// fd 8 brings two lines: the granted file and a file not granted.
fn probe_role() -> ExitCode {
    if let Err(e) = terra_sandbox::linux::enter_confined_role() {
        eprintln!("terra-test-roles __probe_role: {e}");
        return ExitCode::from(125);
    }
    // SAFETY: fd 8 was handed to this role (keep_fds) and nothing else owns it.
    let input = unsafe { std::fs::File::from_raw_fd(8) };
    let mut names = std::io::BufReader::new(&input).lines();
    let granted = names.next().and_then(Result::ok).unwrap_or_default();
    let other = names.next().and_then(Result::ok).unwrap_or_default();
    let mut lines = Vec::new();
    lines.push(format!(
        "granted={}",
        std::fs::read_to_string(&granted).unwrap_or_else(|e| format!("ERR {e}"))
    ));
    lines.push(format!("other={}", Path::new(&other).exists()));
    for p in ["/dev", "/tmp", "/proc", "/etc"] {
        lines.push(format!("{p}={}", Path::new(p).exists()));
    }
    lines.push(format!("env={}", std::env::vars_os().count()));
    lines.push(format!(
        "argv={}",
        std::env::args().collect::<Vec<_>>().join(" ")
    ));
    // SAFETY: plain queries of this process.
    unsafe {
        lines.push(format!("pid={}", libc::getpid()));
        lines.push(format!(
            "cap_sys_admin={}",
            libc::prctl(libc::PR_CAPBSET_READ, 21, 0, 0, 0)
        ));
        lines.push(format!(
            "nnp={}",
            libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
        ));
        lines.push(format!(
            "dumpable={}",
            libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0)
        ));
        lines.push(format!("fd8={}", libc::fcntl(8, libc::F_GETFD) >= 0));
        let open_other = (3..256)
            .filter(|fd| ![7, 8].contains(fd) && libc::fcntl(*fd, libc::F_GETFD) >= 0)
            .count();
        lines.push(format!("open_other={open_other}"));
    }
    let mut comm = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes into `comm`.
    unsafe { libc::prctl(libc::PR_GET_NAME, comm.as_mut_ptr(), 0, 0, 0) };
    let end = comm.iter().position(|b| *b == 0).unwrap_or(16);
    lines.push(format!("comm={}", String::from_utf8_lossy(&comm[..end])));
    // SAFETY: fd 7 was handed to this role as the report channel.
    let mut report = unsafe { std::fs::File::from_raw_fd(7) };
    let _ = report.write_all(lines.join("\n").as_bytes());
    ExitCode::from(42)
}
