//! The workload's connect() on an AF_UNIX socket (issue 13), run by the box
//! service on the workload's own socket.
//!
//! A pathname socket is reachable only when its inode sits on a writable
//! mount of the box (a writable grant, the workspace, the run's /tmp,
//! /dev/shm): a read grant or the read-only root may hold a host service's
//! socket (docker.sock, D-Bus, an agent), and the kernel checks no mount
//! flag on connect. The service resolves the path as the workload would
//! (relative to the workload's root or cwd, through the box's /proc), looks
//! at what it opened, and connects the workload's socket to exactly that
//! inode (`/proc/self/fd/N`), so what it judged is what is reached.
//!
//! Nothing here lets the kernel run the workload's call again: another
//! thread of the workload can rewrite the sockaddr (an abstract name into a
//! path) or the descriptor number at any moment, so every outcome is the
//! service's own connect, on the socket copied out of the workload
//! (pidfd_getfd: the same open file, so its bound address, options and
//! O_NONBLOCK are the workload's, and the kernel's own errors come back).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{FileType, Mode, OFlags, StatVfsMountFlags};
use rustix::net::SocketAddrUnix;

/// `offsetof(struct sockaddr_un, sun_path)` and `sizeof(struct sockaddr_un)`.
const SUN_PATH_OFFSET: usize = 2;
const SOCKADDR_UN_LEN: usize = SUN_PATH_OFFSET + 108;

/// What the workload's sockaddr names, read as the kernel reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnixAddr<'a> {
    /// A filesystem path (up to the first NUL; never empty).
    Path(&'a [u8]),
    /// An abstract name (after the leading NUL, to the address's length):
    /// the box's own network namespace holds them.
    Abstract(&'a [u8]),
    /// AF_UNSPEC: a datagram socket's disconnect.
    Unspec,
    /// Too short, too long, or another family: the kernel's EINVAL.
    Invalid,
}

/// How a workload's AF_UNIX connect() ended.
#[derive(Debug, PartialEq, Eq)]
pub enum UnixOutcome {
    /// The call fails with this errno (a refusal, or the kernel's own
    /// error from the service's connect).
    Refuse(i32),
    /// The workload's socket is connected; the call returns 0.
    Connected,
}

/// Reads a `sockaddr_un` of `b.len()` bytes (the connect's addrlen).
pub fn parse_sockaddr_un(b: &[u8]) -> UnixAddr<'_> {
    let (Some(&lo), Some(&hi)) = (b.first(), b.get(1)) else {
        return UnixAddr::Invalid;
    };
    match i32::from(u16::from_ne_bytes([lo, hi])) {
        libc::AF_UNSPEC => return UnixAddr::Unspec,
        libc::AF_UNIX => {}
        _ => return UnixAddr::Invalid,
    }
    // The kernel refuses an empty sun_path and one longer than the struct.
    if b.len() <= SUN_PATH_OFFSET || b.len() > SOCKADDR_UN_LEN {
        return UnixAddr::Invalid;
    }
    let sun_path = &b[SUN_PATH_OFFSET..];
    if sun_path[0] == 0 {
        return UnixAddr::Abstract(&sun_path[1..]);
    }
    let end = sun_path
        .iter()
        .position(|&c| c == 0)
        .unwrap_or(sun_path.len());
    UnixAddr::Path(&sun_path[..end])
}

/// The workload's connect(`sock`, `sockaddr`) on an AF_UNIX socket, run by
/// the service. `proc_dir` is the box's /proc (the service's fd 13: the
/// only directory its seccomp lets it open relative to), `tid` the calling
/// thread, `tgid` its process, `sock` a pidfd_getfd copy of its socket.
pub fn connect_unix(
    proc_dir: BorrowedFd<'_>,
    tid: u32,
    tgid: u32,
    sockaddr: &[u8],
    sock: &OwnedFd,
) -> UnixOutcome {
    let result = match parse_sockaddr_un(sockaddr) {
        UnixAddr::Invalid => return UnixOutcome::Refuse(libc::EINVAL),
        UnixAddr::Unspec => rustix::net::connect_unspec(sock),
        UnixAddr::Abstract(name) => SocketAddrUnix::new_abstract_name(name)
            .and_then(|addr| rustix::net::connect(sock, &addr)),
        UnixAddr::Path(path) => {
            let target = match open_as_workload(proc_dir, tid, tgid, path) {
                Ok(t) => t,
                Err(errno) => return UnixOutcome::Refuse(errno),
            };
            if let Err(errno) = judge(&target).and_then(|()| on_box_mount(proc_dir, tid, &target)) {
                return UnixOutcome::Refuse(errno);
            }
            connect_to_opened(sock, &target)
        }
    };
    match result {
        Ok(()) => UnixOutcome::Connected,
        Err(e) => UnixOutcome::Refuse(e.raw_os_error()),
    }
}

/// Opens (O_PATH) what `path` names for thread `tid`: an absolute path under
/// its root, a relative one under its cwd, both through the box's /proc
/// (`TID/root`, `TID/cwd`). `/proc/self` and `/proc/thread-self` at the
/// start of the path are the workload's, not the service's.
fn open_as_workload(
    proc_dir: BorrowedFd<'_>,
    tid: u32,
    tgid: u32,
    path: &[u8],
) -> Result<OwnedFd, i32> {
    let full = workload_view(tid, tgid, path);
    // Symlinks inside the box are followed, as the kernel's own connect
    // follows them; O_PATH needs no permission on the socket itself (the
    // connect checks write permission, with the service's uid, which is the
    // workload's).
    rustix::fs::openat(
        proc_dir,
        full.as_slice(),
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| e.raw_os_error())
}

/// `path` of thread `tid` (process `tgid`) as a path relative to the box's
/// /proc.
fn workload_view(tid: u32, tgid: u32, path: &[u8]) -> Vec<u8> {
    let Some(abs) = path.strip_prefix(b"/") else {
        let mut full = format!("{tid}/cwd/").into_bytes();
        full.extend_from_slice(path);
        return full;
    };
    let mut full = format!("{tid}/root/").into_bytes();
    let abs = trim_slashes(abs);
    if let Some(rest) = strip_dir(abs, b"proc/thread-self") {
        full.extend_from_slice(format!("proc/{tgid}/task/{tid}").as_bytes());
        full.extend_from_slice(rest);
    } else if let Some(rest) = strip_dir(abs, b"proc/self") {
        full.extend_from_slice(format!("proc/{tgid}").as_bytes());
        full.extend_from_slice(rest);
    } else {
        full.extend_from_slice(abs);
    }
    full
}

fn trim_slashes(mut p: &[u8]) -> &[u8] {
    while let Some(rest) = p.strip_prefix(b"/") {
        p = rest;
    }
    p
}

/// What follows directory `dir` in `p` (starting with '/' or empty), if `p`
/// starts with it as whole components.
fn strip_dir<'a>(p: &'a [u8], dir: &[u8]) -> Option<&'a [u8]> {
    let rest = p.strip_prefix(dir)?;
    (rest.is_empty() || rest[0] == b'/').then_some(rest)
}

/// The rule: a socket, on a mount the box may write.
fn judge(target: &OwnedFd) -> Result<(), i32> {
    let st = rustix::fs::fstat(target).map_err(|e| e.raw_os_error())?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Socket {
        return Err(libc::ECONNREFUSED);
    }
    let vfs = rustix::fs::fstatvfs(target).map_err(|e| e.raw_os_error())?;
    if vfs.f_flag.contains(StatVfsMountFlags::RDONLY) {
        return Err(libc::EACCES);
    }
    Ok(())
}

/// The mount `target` is on is one of the box's: listed in the workload's
/// mountinfo (its mount namespace, under its root). A descriptor that
/// entered the box from outside (a host directory as the caller's standard
/// input, still open in the box's init or the workload) names a mount of
/// the host's namespace, which no rule of the box made: EACCES.
fn on_box_mount(proc_dir: BorrowedFd<'_>, tid: u32, target: &OwnedFd) -> Result<(), i32> {
    let fdinfo = read_proc(
        proc_dir,
        &format!("self/fdinfo/{}", target.as_raw_fd()),
        FDINFO_MAX,
    )?;
    let mnt_id = field(&fdinfo, "mnt_id:").ok_or(libc::ECONNREFUSED)?;
    let mountinfo = read_proc(proc_dir, &format!("{tid}/mountinfo"), MOUNTINFO_MAX)?;
    if mount_listed(&mountinfo, mnt_id) {
        Ok(())
    } else {
        Err(libc::EACCES)
    }
}

/// Most bytes read of one fdinfo file, and of a mountinfo file (a box has
/// tens of mounts, each line under a few hundred bytes; more is refused).
const FDINFO_MAX: usize = 4096;
const MOUNTINFO_MAX: usize = 1 << 20;

/// The value after `key` on its line of a /proc text file.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
}

/// Whether mount `id` (decimal, as fdinfo writes it) has a line in
/// `mountinfo` (its first field).
fn mount_listed(mountinfo: &str, id: &str) -> bool {
    !id.is_empty() && mountinfo.lines().any(|l| l.split(' ').next() == Some(id))
}

/// A whole /proc file of at most `max` bytes (ECONNREFUSED when longer).
fn read_proc(proc_dir: BorrowedFd<'_>, path: &str, max: usize) -> Result<String, i32> {
    let fd = rustix::fs::openat(
        proc_dir,
        path,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .map_err(|e| e.raw_os_error())?;
    let mut buf = vec![0u8; max + 1];
    let mut len = 0;
    loop {
        let n = rustix::io::read(&fd, &mut buf[len..]).map_err(|e| e.raw_os_error())?;
        if n == 0 {
            break;
        }
        len += n;
        if len > max {
            return Err(libc::ECONNREFUSED);
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(|_| libc::ECONNREFUSED)
}

/// Connects `sock` to the very inode `target` holds: the kernel follows
/// `/proc/self/fd/N` to the opened file, whatever the path names by now. The
/// service is not dumpable, but its own /proc/self/fd stays open to it (the
/// kernel lets a thread group into its own fd directory and links).
fn connect_to_opened(sock: &OwnedFd, target: &OwnedFd) -> rustix::io::Result<()> {
    let link = format!("/proc/self/fd/{}", target.as_fd().as_raw_fd());
    let addr = SocketAddrUnix::new(link.as_str())?;
    rustix::net::connect(sock, &addr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::{AddressFamily, SocketType};
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;

    fn sun(path: &[u8]) -> Vec<u8> {
        let mut b = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        b.extend_from_slice(path);
        b
    }

    #[test]
    fn pathnames_end_at_the_first_nul_within_the_length() {
        assert_eq!(
            parse_sockaddr_un(&sun(b"/run/a.sock\0junk")),
            UnixAddr::Path(b"/run/a.sock")
        );
        // No NUL: the whole length is the path (as the kernel terminates it).
        assert_eq!(parse_sockaddr_un(&sun(b"rel")), UnixAddr::Path(b"rel"));
        let full = vec![b'a'; 108];
        assert_eq!(parse_sockaddr_un(&sun(&full)), UnixAddr::Path(&full[..]));
        // A length that cuts the buffer short cuts the path.
        let b = sun(b"/tmp/x.sock\0");
        assert_eq!(parse_sockaddr_un(&b[..7]), UnixAddr::Path(b"/tmp/"));
    }

    #[test]
    fn abstract_unspec_and_invalid_addresses() {
        assert_eq!(
            parse_sockaddr_un(&sun(b"\0name\0x")),
            UnixAddr::Abstract(b"name\0x")
        );
        assert_eq!(parse_sockaddr_un(&sun(b"\0")), UnixAddr::Abstract(b""));
        let unspec = (libc::AF_UNSPEC as u16).to_ne_bytes();
        assert_eq!(parse_sockaddr_un(&unspec), UnixAddr::Unspec);
        // Only the family: no sun_path at all.
        assert_eq!(parse_sockaddr_un(&sun(b"")), UnixAddr::Invalid);
        assert_eq!(parse_sockaddr_un(&sun(&[b'a'; 109])), UnixAddr::Invalid);
        assert_eq!(parse_sockaddr_un(&[1]), UnixAddr::Invalid);
        assert_eq!(parse_sockaddr_un(&[]), UnixAddr::Invalid);
        let mut inet = vec![0u8; 16];
        inet[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        assert_eq!(parse_sockaddr_un(&inet), UnixAddr::Invalid);
    }

    #[test]
    fn paths_are_the_workloads_view_through_proc() {
        let v = |p: &[u8]| String::from_utf8(workload_view(7, 5, p)).unwrap();
        assert_eq!(v(b"/run/a.sock"), "7/root/run/a.sock");
        assert_eq!(v(b"//run/a.sock"), "7/root/run/a.sock");
        assert_eq!(v(b"s.sock"), "7/cwd/s.sock");
        assert_eq!(v(b"/proc/self/fd/4"), "7/root/proc/5/fd/4");
        assert_eq!(v(b"/proc/thread-self/fd/4"), "7/root/proc/5/task/7/fd/4");
        assert_eq!(v(b"/proc/selfish/x"), "7/root/proc/selfish/x");
        assert_eq!(v(b"/"), "7/root/");
    }

    #[test]
    fn a_mount_is_the_boxs_when_its_mountinfo_lists_it() {
        let info = "22 1 0:21 / / ro,nosuid - tmpfs tmpfs ro\n\
                    230 22 8:1 /srv /srv rw - ext4 /dev/sda1 rw\n";
        assert!(mount_listed(info, "22"));
        assert!(mount_listed(info, "230"));
        assert!(!mount_listed(info, "23"));
        assert!(!mount_listed(info, "2"));
        assert!(!mount_listed(info, ""));
        assert_eq!(field("pos:\t0\nmnt_id:\t230\n", "mnt_id:"), Some("230"));
        assert_eq!(field("pos:\t0\n", "mnt_id:"), None);
    }

    fn proc_dir() -> OwnedFd {
        rustix::fs::open(
            "/proc",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap()
    }

    fn unix_socket(kind: SocketType) -> OwnedFd {
        rustix::net::socket(AddressFamily::UNIX, kind, None).unwrap()
    }

    /// The service's own view of a process (this test's): a socket in a
    /// writable directory is connected through /proc/self/fd/N, also when
    /// the process is not dumpable (as the service is); anything else is
    /// refused with the kernel's errno.
    #[test]
    fn a_socket_on_a_writable_mount_is_connected_through_its_opened_inode() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("s.sock");
        let listener = UnixListener::bind(&at).unwrap();
        let me = std::process::id();
        let proc = proc_dir();
        nix::sys::prctl::set_dumpable(false).unwrap();
        let sock = unix_socket(SocketType::STREAM);
        let addr = sun(at.to_str().unwrap().as_bytes());
        assert_eq!(
            connect_unix(proc.as_fd(), me, me, &addr, &sock),
            UnixOutcome::Connected
        );
        let (mut served, _) = listener.accept().unwrap();
        let mut client = std::os::unix::net::UnixStream::from(sock);
        client.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        served.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        // Connected already: the kernel's own EISCONN.
        let again = client.try_clone().unwrap().into();
        assert_eq!(
            connect_unix(proc.as_fd(), me, me, &addr, &again),
            UnixOutcome::Refuse(libc::EISCONN)
        );
        nix::sys::prctl::set_dumpable(true).unwrap();

        let file = dir.path().join("plain");
        std::fs::write(&file, b"x").unwrap();
        let fresh = unix_socket(SocketType::STREAM);
        let plain = sun(file.to_str().unwrap().as_bytes());
        assert_eq!(
            connect_unix(proc.as_fd(), me, me, &plain, &fresh),
            UnixOutcome::Refuse(libc::ECONNREFUSED)
        );
        let gone = sun(dir.path().join("gone").to_str().unwrap().as_bytes());
        assert_eq!(
            connect_unix(proc.as_fd(), me, me, &gone, &fresh),
            UnixOutcome::Refuse(libc::ENOENT)
        );
        // A stream socket to a datagram server: the kernel's EPROTOTYPE.
        let dg = dir.path().join("d.sock");
        let _dgram = std::os::unix::net::UnixDatagram::bind(&dg).unwrap();
        let dga = sun(dg.to_str().unwrap().as_bytes());
        assert_eq!(
            connect_unix(proc.as_fd(), me, me, &dga, &fresh),
            UnixOutcome::Refuse(libc::EPROTOTYPE)
        );
        let d = unix_socket(SocketType::DGRAM);
        assert_eq!(
            connect_unix(proc.as_fd(), me, me, &dga, &d),
            UnixOutcome::Connected
        );
        assert_eq!(
            connect_unix(proc.as_fd(), me, me, &sun(b""), &fresh),
            UnixOutcome::Refuse(libc::EINVAL)
        );
    }

    /// An abstract name is the box's own (its network namespace): it is
    /// connected as the kernel would. (The read-only refusal needs a mount
    /// and is proven end to end, tests/network_e2e/handoff.rs.)
    #[test]
    fn abstract_names_are_connected_in_the_services_namespace() {
        let name = format!("terra-unixconn-test-{}", std::process::id());
        let srv = unix_socket(SocketType::STREAM);
        let addr = SocketAddrUnix::new_abstract_name(name.as_bytes()).unwrap();
        rustix::net::bind(&srv, &addr).unwrap();
        rustix::net::listen(&srv, 1).unwrap();
        let me = std::process::id();
        let proc = proc_dir();
        let mut raw = vec![0u8];
        raw.extend_from_slice(name.as_bytes());
        let sock = unix_socket(SocketType::STREAM);
        assert_eq!(
            connect_unix(proc.as_fd(), me, me, &sun(&raw), &sock),
            UnixOutcome::Connected
        );
        assert!(rustix::net::accept(&srv).is_ok());
    }
}
