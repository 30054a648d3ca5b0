//! The caller's standard descriptors (0, 1, 2), checked by `terra run` before
//! it starts anything: the supervisor, the box and the workload inherit them,
//! on every backend, so one check in the CLI holds for all of them.
//!
//! A descriptor is kept when all it gives is bytes: a terminal or another
//! character device, a pipe (FIFO), a regular file, a Unix stream or
//! seqpacket socket that is connected or listening (it cannot choose another
//! peer). Anything that names a place on the host or can reach one is
//! replaced by /dev/null (read-only for 0, write-only for 1 and 2), with one
//! warning line each:
//!
//! - a directory, or any `O_PATH` descriptor: neither can be read, but a
//!   directory lists its entries (getdents) and both stat the names below
//!   them (fstatat), whatever the box's grants;
//! - a block device: the box has no block device a rule does not name;
//! - a socket of any family but Unix (IPv4, IPv6, netlink, ...): it lives in
//!   the host's network namespace and can be re-aimed (`connect(AF_UNSPEC)`
//!   then any address, or `sendto` on a datagram socket) around the policy's
//!   network mode; replaced whatever that mode, as the check runs before the
//!   policy is read;
//! - a Unix datagram socket (it can `sendto` any socket path of the host) or
//!   a Unix stream socket that is neither connected nor listening (it can
//!   `connect` to one);
//! - a regular-looking file that the kernel does not name by a path (a
//!   namespace descriptor, `net:[...]`), and any other kind (an eventfd, a
//!   pidfd, ...).
//!
//! A closed descriptor gets /dev/null too, silently, so no descriptor terra
//! opens later lands on 0, 1 or 2 (Rust's runtime already does this at start
//! on Linux; this keeps it true without relying on it).
//!
//! Every other descriptor the CLI inherited (3 and up) is made close-on-exec:
//! terra starts its supervisor with only 0, 1, 2 and its own pipes. (Rust's
//! runtime takes an `O_PATH` descriptor on 0 for a closed one, as poll calls
//! it invalid, and opens /dev/null on the lowest free number, 3 or above;
//! the supervisor refuses a descriptor on 3, where its run lock goes.)

use std::fmt;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd};
use std::os::unix::fs::FileTypeExt;

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::socket::{self, sockopt, AddressFamily, SockType, SockaddrLike, SockaddrStorage};
use nix::sys::stat::{fstat, SFlag};

use crate::error::{Error, Result};

/// One of the three standard descriptors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StdFd {
    Input,
    Output,
    Error,
}

impl StdFd {
    pub const ALL: [StdFd; 3] = [StdFd::Input, StdFd::Output, StdFd::Error];

    /// Its number: 0, 1 or 2.
    pub fn raw(self) -> i32 {
        match self {
            StdFd::Input => 0,
            StdFd::Output => 1,
            StdFd::Error => 2,
        }
    }

    /// Its name in a message.
    pub fn name(self) -> &'static str {
        match self {
            StdFd::Input => "standard input",
            StdFd::Output => "standard output",
            StdFd::Error => "standard error",
        }
    }

    /// `f` with the descriptor borrowed (std's handles own the numbers).
    fn with<R>(self, f: impl FnOnce(BorrowedFd<'_>) -> R) -> R {
        match self {
            StdFd::Input => f(std::io::stdin().as_fd()),
            StdFd::Output => f(std::io::stdout().as_fd()),
            StdFd::Error => f(std::io::stderr().as_fd()),
        }
    }
}

/// What a replaced descriptor was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unsafe {
    Directory,
    /// Opened with `O_PATH` (Linux).
    PathOnly,
    BlockDevice,
    /// `AF_INET` (4) or `AF_INET6` (6).
    InetSocket(u8),
    UnixDatagram,
    /// A Unix stream or seqpacket socket neither connected nor listening.
    UnixUnconnected,
    /// A socket of another family (its name), or one whose family is unknown.
    OtherSocket(String),
    /// No file type (an eventfd, a pidfd, ...), or typed as a regular file
    /// but not named by a path (a namespace).
    KernelObject,
    /// Any other kind of file (its `st_mode` type bits, in octal).
    Other(String),
}

impl Unsafe {
    /// What it is, then why it may not go into the box when that is not plain.
    fn describe(&self) -> (String, &'static str) {
        match self {
            Unsafe::Directory => ("a directory".into(), ""),
            Unsafe::PathOnly => ("a path-only (O_PATH) descriptor".into(), ""),
            Unsafe::BlockDevice => ("a block device".into(), ""),
            Unsafe::InetSocket(v) => (
                format!("an IPv{v} socket"),
                "which lives in the host's network: the box could re-aim it around the policy",
            ),
            Unsafe::UnixDatagram => (
                "a Unix datagram socket".into(),
                "which could send to any socket of the host",
            ),
            Unsafe::UnixUnconnected => (
                "an unconnected Unix socket".into(),
                "which could connect to any socket of the host",
            ),
            Unsafe::OtherSocket(family) => (
                format!("a socket of family {family}"),
                "which lives in the host's network stack",
            ),
            Unsafe::KernelObject => ("a kernel object, not a file".into(), ""),
            Unsafe::Other(kind) => (format!("a file of type {kind}"), ""),
        }
    }
}

/// One descriptor replaced by /dev/null: the warning `terra run` prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replaced {
    pub fd: StdFd,
    pub was: Unsafe,
    /// What the kernel calls it (a path, `socket:[N]`, addresses), when known.
    pub name: Option<String>,
}

impl fmt::Display for Replaced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, why) = self.was.describe();
        write!(f, "{} is {what}", self.fd.name())?;
        if let Some(name) = &self.name {
            write!(f, " ({})", one_line(name))?;
        }
        if !why.is_empty() {
            write!(f, ", {why}")?;
        }
        write!(f, "; the box gets /dev/null instead")
    }
}

/// `s` with control characters shown as `?`, so a warning stays one line.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// What to do with one descriptor.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Keep,
    Closed,
    Replace(Unsafe),
}

/// Checks 0, 1 and 2 and puts /dev/null on each that is closed or not safe
/// to hand to the box (see the module's comment). Returns the replaced ones,
/// whose warnings the caller prints (after the replacing: standard error may
/// be one of them). Idempotent: a second call finds nothing to replace.
pub fn replace_unsafe() -> Result<Vec<Replaced>> {
    close_others_on_exec();
    let mut replaced = Vec::new();
    for fd in StdFd::ALL {
        match fd.with(classify)? {
            Verdict::Keep => {}
            Verdict::Closed => put_null(fd)?,
            Verdict::Replace(was) => {
                let name = fd.with(|b| name_of(b, &was));
                put_null(fd)?;
                replaced.push(Replaced { fd, was, name });
            }
        }
    }
    Ok(replaced)
}

/// Marks every descriptor above 2 close-on-exec (those this process
/// inherited or leaked; the ones terra hands on are made inheritable after).
fn close_others_on_exec() {
    #[cfg(any(target_os = "linux", target_os = "macos"))]
    {
        let listing = if cfg!(target_os = "linux") {
            "/proc/self/fd"
        } else {
            "/dev/fd"
        };
        // Collected first: the listing's own descriptor is among them.
        let fds: Vec<i32> = match std::fs::read_dir(listing) {
            Ok(entries) => entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .filter(|fd| *fd > 2)
                .collect(),
            Err(_) => return,
        };
        for fd in fds {
            // EBADF for the listing's descriptor, closed by now.
            let _ = fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC));
        }
    }
}

/// What `fd` is and whether it may go into the box.
fn classify(fd: BorrowedFd<'_>) -> Result<Verdict> {
    let raw = fd.as_raw_fd();
    let flags = match fcntl(raw, FcntlArg::F_GETFL) {
        Ok(flags) => flags,
        Err(Errno::EBADF) => return Ok(Verdict::Closed),
        Err(e) => {
            return Err(Error::sys(
                format!("cannot read the flags of descriptor {raw}"),
                e,
            ))
        }
    };
    if is_path_only(flags) {
        return Ok(Verdict::Replace(Unsafe::PathOnly));
    }
    let st = fstat(raw).map_err(|e| Error::sys(format!("cannot stat descriptor {raw}"), e))?;
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    let verdict = if kind == SFlag::S_IFDIR {
        Verdict::Replace(Unsafe::Directory)
    } else if kind == SFlag::S_IFBLK {
        Verdict::Replace(Unsafe::BlockDevice)
    } else if kind == SFlag::S_IFCHR || kind == SFlag::S_IFIFO {
        Verdict::Keep
    } else if kind == SFlag::S_IFREG {
        regular(raw)
    } else if kind == SFlag::S_IFSOCK {
        socket_verdict(fd)
    } else if kind.is_empty() {
        // No file type: an anonymous inode (eventfd, pidfd, epoll, ...).
        Verdict::Replace(Unsafe::KernelObject)
    } else {
        Verdict::Replace(Unsafe::Other(format!("{:#o}", kind.bits())))
    };
    Ok(verdict)
}

/// Whether the flags of an open descriptor hold `O_PATH` (Linux only).
fn is_path_only(flags: i32) -> bool {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        flags & nix::fcntl::OFlag::O_PATH.bits() != 0
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = flags;
        false
    }
}

/// A regular file is kept when the kernel names it by a path; a namespace
/// descriptor (`net:[...]`) or another object typed as a regular file is not
/// a file the caller meant to hand over.
fn regular(raw: i32) -> Verdict {
    #[cfg(target_os = "linux")]
    {
        match std::fs::read_link(format!("/proc/self/fd/{raw}")) {
            Ok(p) if p.is_absolute() => Verdict::Keep,
            _ => Verdict::Replace(Unsafe::KernelObject),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = raw;
        Verdict::Keep
    }
}

/// Only a Unix stream or seqpacket socket that cannot choose its peer again
/// (connected, or listening) is kept.
fn socket_verdict(fd: BorrowedFd<'_>) -> Verdict {
    let raw = fd.as_raw_fd();
    let family = socket::getsockname::<SockaddrStorage>(raw)
        .ok()
        .and_then(|a| a.family());
    match family {
        Some(AddressFamily::Unix) => {}
        Some(AddressFamily::Inet) => return Verdict::Replace(Unsafe::InetSocket(4)),
        Some(AddressFamily::Inet6) => return Verdict::Replace(Unsafe::InetSocket(6)),
        Some(other) => return Verdict::Replace(Unsafe::OtherSocket(format!("{other:?}"))),
        None => return Verdict::Replace(Unsafe::OtherSocket("unknown".into())),
    }
    match socket::getsockopt(&fd, sockopt::SockType) {
        Ok(SockType::Stream | SockType::SeqPacket) => {}
        _ => return Verdict::Replace(Unsafe::UnixDatagram),
    }
    let connected = socket::getpeername::<SockaddrStorage>(raw).is_ok();
    let listening = socket::getsockopt(&fd, sockopt::AcceptConn).unwrap_or(false);
    if connected || listening {
        Verdict::Keep
    } else {
        Verdict::Replace(Unsafe::UnixUnconnected)
    }
}

/// The name a warning gives: an IP socket's addresses, else what the kernel
/// calls the descriptor (Linux: its /proc/self/fd link).
fn name_of(fd: BorrowedFd<'_>, was: &Unsafe) -> Option<String> {
    let raw = fd.as_raw_fd();
    if let Unsafe::InetSocket(_) = was {
        let local = socket::getsockname::<SockaddrStorage>(raw).ok()?;
        return Some(match socket::getpeername::<SockaddrStorage>(raw) {
            Ok(peer) => format!("{local} -> {peer}"),
            Err(_) => local.to_string(),
        });
    }
    #[cfg(target_os = "linux")]
    {
        std::fs::read_link(format!("/proc/self/fd/{raw}"))
            .ok()
            .map(|p| p.to_string_lossy().into_owned())
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Opens /dev/null (read-only for 0, write-only for 1 and 2) on `fd`,
/// inheritable. Refuses a /dev/null that is not a character device.
fn put_null(fd: StdFd) -> Result<()> {
    let null = open_null(fd)?;
    let raw = fd.raw();
    if null.as_raw_fd() == raw {
        // `fd` was closed and the open took its number: keep it, inheritable.
        fcntl(raw, FcntlArg::F_SETFD(FdFlag::empty()))
            .map_err(|e| Error::sys(format!("cannot make descriptor {raw} inheritable"), e))?;
        let _ = null.into_raw_fd();
        return Ok(());
    }
    // dup2's copy is inheritable; the original closes on drop.
    nix::unistd::dup2(null.as_raw_fd(), raw)
        .map_err(|e| Error::sys(format!("cannot put /dev/null on descriptor {raw}"), e))?;
    Ok(())
}

fn open_null(fd: StdFd) -> Result<File> {
    let path = std::path::Path::new("/dev/null");
    let null = OpenOptions::new()
        .read(fd == StdFd::Input)
        .write(fd != StdFd::Input)
        .open(path)
        .map_err(|e| Error::io("cannot open", path, e))?;
    let is_char = null
        .metadata()
        .map_err(|e| Error::io("cannot stat", path, e))?
        .file_type()
        .is_char_device();
    if !is_char {
        return Err(Error::Host(
            "/dev/null is not a character device on this host: terra cannot give the box an \
             empty standard descriptor"
                .into(),
        ));
    }
    Ok(null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::OwnedFd;

    fn verdict(fd: &impl AsFd) -> Verdict {
        classify(fd.as_fd()).unwrap()
    }

    #[test]
    fn bytes_only_descriptors_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        assert_eq!(verdict(&File::open(&file).unwrap()), Verdict::Keep);
        assert_eq!(verdict(&File::open("/dev/null").unwrap()), Verdict::Keep);
        let (r, w) = nix::unistd::pipe().unwrap();
        assert_eq!(verdict(&r), Verdict::Keep);
        assert_eq!(verdict(&w), Verdict::Keep);
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(verdict(&a), Verdict::Keep);
        let listener = std::os::unix::net::UnixListener::bind(dir.path().join("s")).unwrap();
        assert_eq!(verdict(&listener), Verdict::Keep);
    }

    #[test]
    fn descriptors_that_reach_the_host_are_replaced() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            verdict(&File::open(dir.path()).unwrap()),
            Verdict::Replace(Unsafe::Directory)
        );
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert_eq!(verdict(&tcp), Verdict::Replace(Unsafe::InetSocket(4)));
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(verdict(&udp), Verdict::Replace(Unsafe::InetSocket(4)));
        let (d, _e) = std::os::unix::net::UnixDatagram::pair().unwrap();
        assert_eq!(verdict(&d), Verdict::Replace(Unsafe::UnixDatagram));
        let lone: OwnedFd = socket::socket(
            AddressFamily::Unix,
            SockType::Stream,
            socket::SockFlag::empty(),
            None,
        )
        .unwrap();
        assert_eq!(verdict(&lone), Verdict::Replace(Unsafe::UnixUnconnected));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn path_only_and_kernel_objects_are_replaced() {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        for p in [dir.path(), file.as_path()] {
            let o_path = OpenOptions::new()
                .read(true)
                .custom_flags(nix::fcntl::OFlag::O_PATH.bits())
                .open(p)
                .unwrap();
            assert_eq!(
                verdict(&o_path),
                Verdict::Replace(Unsafe::PathOnly),
                "{p:?}"
            );
        }
        // A namespace descriptor is typed as a regular file.
        let ns = File::open("/proc/self/ns/net").unwrap();
        assert_eq!(verdict(&ns), Verdict::Replace(Unsafe::KernelObject));
        let event = nix::sys::eventfd::EventFd::new().unwrap();
        assert_eq!(verdict(&event), Verdict::Replace(Unsafe::KernelObject));
    }

    #[test]
    fn the_warning_names_the_descriptor_what_it_was_and_why() {
        let r = Replaced {
            fd: StdFd::Input,
            was: Unsafe::Directory,
            name: Some("/srv/a\nb".into()),
        };
        assert_eq!(
            r.to_string(),
            "standard input is a directory (/srv/a?b); the box gets /dev/null instead"
        );
        let r = Replaced {
            fd: StdFd::Output,
            was: Unsafe::InetSocket(6),
            name: None,
        };
        assert_eq!(
            r.to_string(),
            "standard output is an IPv6 socket, which lives in the host's network: the box \
             could re-aim it around the policy; the box gets /dev/null instead"
        );
    }
}
