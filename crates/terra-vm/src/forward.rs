//! `terra __vm_forward ADDR`: what QEMU's user networking spawns for each
//! guest connection to the one endpoint it forwards (`guestfwd ... cmd:`),
//! inside the box, with the connection on its standard input and output.
//! It connects to the box's proxy on the box's own loopback (ADDR) and
//! copies both ways; the broker behind the proxy judges every request.
//! It refuses any ADDR but a loopback one, and a standard input that is not
//! a socket (started by hand).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::ExitCode;

fn copy(mut from: impl Read, mut to: impl Write, done: impl FnOnce()) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    done();
}

pub fn main(args: Vec<std::ffi::OsString>) -> ExitCode {
    let addr: Option<SocketAddr> = match args.as_slice() {
        [a] => a.to_str().and_then(|s| s.parse().ok()),
        _ => None,
    };
    let Some(addr) = addr.filter(|a| a.ip().is_loopback()) else {
        eprintln!(
            "terra __vm_forward: takes one loopback address (it is spawned by QEMU in the vm box)"
        );
        return ExitCode::from(125);
    };
    let is_socket =
        nix::sys::stat::fstat(0).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFSOCK);
    if !is_socket {
        eprintln!(
            "terra __vm_forward: standard input is not a socket: QEMU starts this, not a person"
        );
        return ExitCode::from(125);
    }
    let Ok(upstream) = TcpStream::connect(addr) else {
        return ExitCode::from(1);
    };
    // SAFETY: descriptor 0 is this process's, open (checked above), and
    // used only through this owner from here on.
    let guest = std::os::unix::net::UnixStream::from(unsafe { OwnedFd::from_raw_fd(0) });
    let (Ok(g2), Ok(u2)) = (guest.try_clone(), upstream.try_clone()) else {
        return ExitCode::from(1);
    };
    let t = std::thread::spawn(move || {
        copy(&g2, &u2, || {
            let _ = u2.shutdown(Shutdown::Write);
        })
    });
    copy(&upstream, &guest, || {
        let _ = guest.shutdown(Shutdown::Write);
    });
    let _ = t.join();
    let _ = guest.as_raw_fd();
    ExitCode::SUCCESS
}
