//! Seccomp user notification (seccomp_unotify(2)), the kernel half of
//! mediated networking's connect hand-off: the workload installs a filter
//! whose matched calls wait for a supervising process (the box service),
//! which reads the call's arguments, may copy a descriptor out of the
//! workload (pidfd_getfd) or into it (SECCOMP_IOCTL_NOTIF_ADDFD), and answers
//! with a result, an errno, or "let the kernel run the call".
//!
//! The supervising side trusts nothing it reads from the workload's memory:
//! another thread may change it (or the descriptor table) at any moment. The
//! box service therefore never lets the kernel run a connect (no
//! [`reply_continue`]): an AF_UNIX path reaches past the box's network
//! namespace, and any call could be rewritten into one. It hands over a
//! socket the broker connected, or connects the workload's own socket (a
//! [`take_fd`] copy) with the arguments it read.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use seccompiler::BpfProgram;

/// One pending system call of the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notification {
    /// The kernel's cookie for this call; every answer names it.
    pub id: u64,
    /// The calling thread (in the listener's PID namespace).
    pub pid: u32,
    pub nr: i32,
    pub args: [u64; 6],
}

fn cvt(r: libc::c_long) -> io::Result<libc::c_long> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Installs `prog` on the calling thread and returns its notification
/// listener (close-on-exec). No-new-privs must be set. Where the kernel
/// offers it (5.19), a thread waiting for an answer can then only be
/// interrupted by a fatal signal, so an answer is never lost to a signal
/// handler restarting the call.
pub fn install_listener(prog: &BpfProgram) -> io::Result<OwnedFd> {
    let fprog = libc::sock_fprog {
        len: u16::try_from(prog.len()).map_err(|_| io::Error::other("program too long"))?,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    let mut last = io::Error::from_raw_os_error(libc::EINVAL);
    for flags in [
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
    ] {
        // SAFETY: `fprog` points at `prog`'s instructions, which outlive the
        // call; the kernel copies the program before it returns.
        let r = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                flags,
                &fprog as *const libc::sock_fprog,
            )
        };
        match cvt(r) {
            // SAFETY: the kernel returned a new descriptor that nothing else owns.
            Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// Waits for the next notification. A notification whose caller died before
/// it was read (ENOENT) and interrupted waits are skipped.
pub fn receive(listener: BorrowedFd<'_>) -> io::Result<Notification> {
    loop {
        // SAFETY: seccomp_notif is plain data; the kernel requires it zeroed.
        let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: `n` is a valid, writable seccomp_notif for the ioctl.
        let r = unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV as _,
                &mut n as *mut libc::seccomp_notif,
            )
        };
        if r == 0 {
            return Ok(Notification {
                id: n.id,
                pid: n.pid,
                nr: n.data.nr,
                args: n.data.args,
            });
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            // The caller died before its notification was read, or no
            // process uses the filter any more: the listener then reports
            // POLLHUP, and waiting again would spin.
            Some(libc::ENOENT) if !hung_up(listener) => continue,
            _ => return Err(e),
        }
    }
}

/// Whether every process that used the listener's filter is gone.
fn hung_up(listener: BorrowedFd<'_>) -> bool {
    let mut fds = [nix::poll::PollFd::new(
        listener,
        nix::poll::PollFlags::POLLIN,
    )];
    match nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO) {
        Ok(_) => fds[0]
            .revents()
            .is_some_and(|r| r.contains(nix::poll::PollFlags::POLLHUP)),
        Err(_) => true,
    }
}

/// Whether notification `id` still waits (its caller is still inside that
/// call, so the pid names the same thread and what was read belongs to it).
pub fn id_valid(listener: BorrowedFd<'_>, id: u64) -> bool {
    // SAFETY: the ioctl reads one u64 from a valid pointer.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _,
            &id as *const u64,
        )
    };
    r == 0
}

fn send(listener: BorrowedFd<'_>, id: u64, val: i64, error: i32, flags: u32) -> io::Result<()> {
    let mut resp = libc::seccomp_notif_resp {
        id,
        val,
        error,
        flags,
    };
    // SAFETY: `resp` is a valid seccomp_notif_resp for the ioctl.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND as _,
            &mut resp as *mut libc::seccomp_notif_resp,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The call returns `val` without running.
pub fn reply_value(listener: BorrowedFd<'_>, id: u64, val: i64) -> io::Result<()> {
    send(listener, id, val, 0, 0)
}

/// The call fails with `errno` without running.
pub fn reply_errno(listener: BorrowedFd<'_>, id: u64, errno: i32) -> io::Result<()> {
    send(listener, id, 0, -errno, 0)
}

/// The kernel runs the call itself, with whatever its arguments hold by then
/// (so only for calls whose every outcome is acceptable; the box service
/// uses it for none, see the module comment).
pub fn reply_continue(listener: BorrowedFd<'_>, id: u64) -> io::Result<()> {
    send(
        listener,
        id,
        0,
        0,
        libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
    )
}

/// Puts a duplicate of `src` into the caller at descriptor number `target`,
/// replacing what was there (SECCOMP_ADDFD_FLAG_SETFD; the caller's open file
/// at `target` is closed as by dup2). The call itself still waits for its
/// answer: for connect() that answer must be 0, not the descriptor number
/// SECCOMP_ADDFD_FLAG_SEND would return, so the two steps stay separate.
pub fn add_fd_at(
    listener: BorrowedFd<'_>,
    id: u64,
    src: BorrowedFd<'_>,
    target: RawFd,
    cloexec: bool,
) -> io::Result<()> {
    let mut addfd = libc::seccomp_notif_addfd {
        id,
        flags: libc::SECCOMP_ADDFD_FLAG_SETFD as u32,
        srcfd: src.as_raw_fd() as u32,
        newfd: u32::try_from(target).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?,
        newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
    };
    // SAFETY: `addfd` is a valid seccomp_notif_addfd for the ioctl.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ADDFD as _,
            &mut addfd as *mut libc::seccomp_notif_addfd,
        )
    };
    if r >= 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Copies `len` bytes at `addr` out of process `pid` (process_vm_readv:
/// one copy, no descriptor; needs ptrace access to `pid`). A short read is
/// an error (EFAULT).
pub fn read_memory(pid: u32, addr: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    if len == 0 {
        return Ok(buf);
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` describes `buf`, writable for `len` bytes; the remote
    // address is only read by the kernel, in the other process.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != len {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    Ok(buf)
}

/// A duplicate of descriptor `fd` of process `pid` (pidfd_open, pidfd_getfd;
/// close-on-exec). It shares the open file: status flags and socket options
/// read through it are the workload's.
pub fn take_fd(pid: u32, fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: plain system call with integer arguments.
    let pidfd = cvt(unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) })?;
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    // SAFETY: plain system call with integer arguments.
    let got = cvt(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) })?;
    // SAFETY: as above, a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(got as RawFd) })
}

/// `SO_NETNS_COOKIE` (Linux 5.14; asm-generic, the same number on x86_64
/// and aarch64; the libc crate does not name it).
const SO_NETNS_COOKIE: libc::c_int = 71;

/// The cookie of the network namespace `sock` lives in (getsockopt
/// `SO_NETNS_COOKIE`, no privilege needed): two sockets live in the same
/// namespace exactly when their cookies are equal. A kernel before 5.14
/// answers ENOPROTOOPT.
pub fn netns_cookie(sock: BorrowedFd<'_>) -> io::Result<u64> {
    let mut cookie: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `cookie`, which
    // lives for the call, and stores the length it wrote in `len`.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            (&mut cookie as *mut u64).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != std::mem::size_of::<u64>() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(cookie)
}

/// The process (thread group) of thread `tid`, from `/proc/TID/status`
/// read relative to `proc_dir`: a notification names the calling thread,
/// and pidfd_open takes a process.
pub fn thread_group(proc_dir: BorrowedFd<'_>, tid: u32) -> io::Result<u32> {
    let text = read_proc(proc_dir, &format!("{tid}/status"), 4096)?;
    text.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::other(format!("no Tgid line in /proc/{tid}/status")))
}

/// Up to `max` bytes of a /proc file, in one read with a fixed buffer (no
/// fstat for a size hint).
fn read_proc(proc_dir: BorrowedFd<'_>, path: &str, max: usize) -> io::Result<String> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    let file = openat(
        Some(proc_dir.as_raw_fd()),
        path,
        OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::empty(),
    )
    .map_err(io::Error::from)?;
    // SAFETY: openat returned a new descriptor owned by nobody else.
    let file = unsafe { OwnedFd::from_raw_fd(file) };
    let mut buf = vec![0u8; max];
    let n = nix::unistd::read(file.as_raw_fd(), &mut buf).map_err(io::Error::from)?;
    buf.truncate(n);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Whether descriptor `fd` of `pid` is close-on-exec, from
/// `/proc/PID/fdinfo/FD` read relative to `proc_dir` (the box's /proc, opened
/// before the workload ran): its `flags:` line, in octal, holds O_CLOEXEC.
pub fn fd_is_cloexec(proc_dir: BorrowedFd<'_>, pid: u32, fd: RawFd) -> io::Result<bool> {
    let path = format!("{pid}/fdinfo/{fd}");
    let text = read_proc(proc_dir, &path, 512)?;
    let flags = text
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        .ok_or_else(|| io::Error::other(format!("no flags line in /proc/{path}")))?;
    Ok(flags & libc::O_CLOEXEC as u32 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn sockets_of_one_network_namespace_share_its_cookie() {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let (unix, _) = std::os::unix::net::UnixStream::pair().unwrap();
        let cookie = netns_cookie(tcp.as_fd()).unwrap();
        assert_eq!(netns_cookie(udp.as_fd()).unwrap(), cookie);
        assert_eq!(netns_cookie(unix.as_fd()).unwrap(), cookie);
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        assert_eq!(
            netns_cookie(file.as_fd()).unwrap_err().raw_os_error(),
            Some(libc::ENOTSOCK)
        );
    }

    /// A forked child installs a connect filter and sends the listener back
    /// over a socketpair; the parent answers its connect() with a chosen
    /// errno, and lets a second one run.
    #[test]
    fn a_child_connect_waits_for_the_answer() {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        let prog = terra_seccomp::compile(terra_seccomp::Table::WorkloadNotify)
            .unwrap()
            .remove(0)
            .bpf;
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // SAFETY: the child only makes system calls and exits.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                // SAFETY: prctl with integer arguments.
                unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
                let code = match install_listener(&prog) {
                    Ok(l) => {
                        let fds = [l.as_raw_fd()];
                        let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
                        let iov = [std::io::IoSlice::new(b"l")];
                        let _ = nix::sys::socket::sendmsg::<()>(
                            b.as_raw_fd(),
                            &iov,
                            &cmsg,
                            nix::sys::socket::MsgFlags::empty(),
                            None,
                        );
                        drop(l);
                        let first = std::net::TcpStream::connect(addr)
                            .err()
                            .and_then(|e| e.raw_os_error());
                        let second = std::net::TcpStream::connect(addr).is_ok();
                        if first == Some(libc::EHOSTUNREACH) && second {
                            0
                        } else {
                            1
                        }
                    }
                    Err(_) => 2,
                };
                // SAFETY: leaving the forked child without unwinding.
                unsafe { libc::_exit(code) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                let mut space = nix::cmsg_space!([RawFd; 1]);
                let mut byte = [0u8; 1];
                let mut iov = [std::io::IoSliceMut::new(&mut byte)];
                let msg = nix::sys::socket::recvmsg::<()>(
                    a.as_raw_fd(),
                    &mut iov,
                    Some(&mut space),
                    nix::sys::socket::MsgFlags::empty(),
                )
                .unwrap();
                let fd = msg
                    .cmsgs()
                    .unwrap()
                    .find_map(|c| match c {
                        nix::sys::socket::ControlMessageOwned::ScmRights(v) => v.first().copied(),
                        _ => None,
                    })
                    .expect("the listener");
                // SAFETY: received with SCM_RIGHTS, owned by nobody else.
                let l = unsafe { OwnedFd::from_raw_fd(fd) };
                let n = receive(l.as_fd()).unwrap();
                assert_eq!(n.nr as libc::c_long, libc::SYS_connect);
                assert!(id_valid(l.as_fd(), n.id));
                let sa = read_memory(n.pid, n.args[1], n.args[2] as usize).unwrap();
                assert_eq!(u16::from_ne_bytes([sa[0], sa[1]]), libc::AF_INET as u16);
                assert_eq!(u16::from_be_bytes([sa[2], sa[3]]), addr.port());
                let dup = take_fd(n.pid, n.args[0] as RawFd).unwrap();
                drop(dup);
                reply_errno(l.as_fd(), n.id, libc::EHOSTUNREACH).unwrap();
                let n = receive(l.as_fd()).unwrap();
                reply_continue(l.as_fd(), n.id).unwrap();
                let status = nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(status, nix::sys::wait::WaitStatus::Exited(child, 0));
            }
        }
    }
}
