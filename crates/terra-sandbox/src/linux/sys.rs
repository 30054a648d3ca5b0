//! Thin wrappers over the raw system calls the launcher needs, on top of
//! `nix` where it wraps a call safely. Every function names the call, its
//! errno and the path in a [`SandboxError::Sys`], so a setup failure can be
//! reported as it is and callers can match the errno.
//!
//! Many of these run in a child between fork/clone and exec or `_exit`:
//! nix's wrappers of plain system calls do not allocate, and its path
//! arguments are copied to a stack buffer (paths here are short).

use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags};
use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, SigmaskHow, Signal};
use nix::sys::stat::{FileStat, Mode};
use nix::unistd::{ForkResult, Pid};
use nix::NixPath;

use super::error::{Result, SandboxError};

pub fn mount(
    src: Option<&str>,
    target: &str,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<()> {
    nix::mount::mount(src, target, fstype, flags, data).map_err(|errno| {
        SandboxError::sys_at(
            "mount",
            errno,
            format!("{} -> {target}", src.unwrap_or(fstype.unwrap_or("none"))),
        )
    })
}

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}
const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;
const MOUNT_ATTR_NOEXEC: u64 = 0x0000_0008;

/// Adds nosuid and nodev to the mount at `path` and every mount below it
/// (host binds: no set-id programs, no device nodes). Best effort on kernels
/// without mount_setattr (no_new_privs already disables set-id on exec).
pub fn harden(path: &str) -> Result<()> {
    match setattr(
        "mount_setattr(nosuid,nodev)",
        path,
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        true,
    ) {
        // A kernel without mount_setattr.
        Err(SandboxError::Sys {
            errno: Errno::ENOSYS,
            ..
        }) => Ok(()),
        r => r,
    }
}

/// A device node's bind: nosuid and noexec, read-only unless `writable`, and
/// *not* nodev (the node must open). Not recursive: a node has no mounts below.
pub fn harden_device(path: &str, writable: bool) -> Result<()> {
    let mut attr = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC;
    if !writable {
        attr |= MOUNT_ATTR_RDONLY;
    }
    setattr(
        "mount_setattr(device: nosuid,noexec[,ro])",
        path,
        attr,
        false,
    )
}

/// `harden` and a recursive `make_readonly` in one mount_setattr(2) call
/// (read-only host binds). On kernels without mount_setattr it behaves like
/// the two calls did: nosuid/nodev are skipped and the read-only step fails.
pub fn harden_readonly(path: &str) -> Result<()> {
    match setattr(
        "mount_setattr(ro,nosuid,nodev)",
        path,
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_RDONLY,
        true,
    ) {
        Err(SandboxError::Sys {
            errno: Errno::ENOSYS,
            ..
        }) => make_readonly(path, true),
        r => r,
    }
}

fn setattr(call: &'static str, path: &str, attr_set: u64, recursive: bool) -> Result<()> {
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 };
    let rc = path
        .with_nix_path(|c| {
            // SAFETY: `c` is a valid C string and `attr` a valid mount_attr of
            // the size passed; both outlive the call.
            unsafe {
                libc::syscall(
                    libc::SYS_mount_setattr,
                    libc::AT_FDCWD,
                    c.as_ptr(),
                    flags as libc::c_uint,
                    &attr as *const MountAttr,
                    std::mem::size_of::<MountAttr>(),
                )
            }
        })
        .map_err(|errno| SandboxError::sys_at(call, errno, path))?;
    if rc == 0 {
        Ok(())
    } else {
        Err(SandboxError::sys_at(call, Errno::last(), path))
    }
}

/// Makes the mount at `path` (and with `recursive` every mount below it)
/// read-only. Uses mount_setattr(2), which keeps the locked flags of mounts
/// inherited from the host; falls back to a remount on old kernels.
pub fn make_readonly(path: &str, recursive: bool) -> Result<()> {
    match setattr("mount_setattr(ro)", path, MOUNT_ATTR_RDONLY, recursive) {
        Err(SandboxError::Sys {
            errno: Errno::ENOSYS,
            ..
        }) if !recursive => {}
        r => return r,
    }
    let st = nix::sys::statvfs::statvfs(path)
        .map_err(|errno| SandboxError::sys_at("statvfs", errno, path))?;
    let keep = MsFlags::from_bits_truncate(st.flags().bits() as libc::c_ulong)
        & (MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV
            | MsFlags::MS_NOEXEC
            | MsFlags::MS_NOATIME
            | MsFlags::MS_NODIRATIME
            | MsFlags::MS_RELATIME);
    mount(
        None,
        path,
        None,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | keep,
        None,
    )
}

pub fn pivot_root(new_root: &str, put_old: &str) -> Result<()> {
    nix::unistd::pivot_root(new_root, put_old)
        .map_err(|errno| SandboxError::sys_at("pivot_root", errno, new_root))
}

pub fn umount_detach(path: &str) -> Result<()> {
    nix::mount::umount2(path, MntFlags::MNT_DETACH)
        .map_err(|errno| SandboxError::sys_at("umount2", errno, path))
}

pub fn chdir(path: &str) -> Result<()> {
    nix::unistd::chdir(path).map_err(|errno| SandboxError::sys_at("chdir", errno, path))
}

/// Creates a directory; one that exists already is fine.
pub fn mkdir(path: &str, mode: libc::mode_t) -> Result<()> {
    match nix::unistd::mkdir(path, Mode::from_bits_truncate(mode)) {
        Ok(()) | Err(Errno::EEXIST) => Ok(()),
        Err(errno) => Err(SandboxError::sys_at("mkdir", errno, path)),
    }
}

/// Creates an empty file (a mount point or a placeholder).
pub fn touch(path: &str, mode: libc::mode_t) -> Result<()> {
    use nix::fcntl::OFlag;
    let fd = nix::fcntl::open(
        path,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::from_bits_truncate(mode),
    )
    .map_err(|errno| SandboxError::sys_at("open(O_CREAT)", errno, path))?;
    // SAFETY: `fd` was just opened by this call and nothing else refers to it.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    Ok(())
}

pub fn symlink(target: &str, path: &str) -> Result<()> {
    nix::unistd::symlinkat(target, None, path)
        .map_err(|errno| SandboxError::sys_at("symlink", errno, path))
}

/// Creates `path` (which must not exist; never through a symlink), writes
/// `data` and sets `mode` (writable by the owner only while it is written).
pub fn create_file(path: &str, data: &[u8], mode: libc::mode_t) -> Result<()> {
    use nix::fcntl::OFlag;
    use std::io::Write;
    let fd = nix::fcntl::open(
        path,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(|errno| SandboxError::sys_at("open(O_CREAT|O_EXCL)", errno, path))?;
    // SAFETY: `fd` was just opened by this call and nothing else refers to it.
    let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    f.write_all(data)
        .map_err(|e| SandboxError::io_at("write", &e, path))?;
    nix::sys::stat::fchmod(f.as_raw_fd(), Mode::from_bits_truncate(mode))
        .map_err(|errno| SandboxError::sys_at("fchmod", errno, path))
}

pub fn write_file(path: &str, data: &[u8]) -> Result<()> {
    std::fs::write(path, data).map_err(|e| SandboxError::io_at("write", &e, path))
}

/// lstat: None when the path does not exist.
pub fn lstat(path: &str) -> Result<Option<FileStat>> {
    match nix::sys::stat::lstat(path) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT | Errno::ENOTDIR) => Ok(None),
        Err(errno) => Err(SandboxError::sys_at("lstat", errno, path)),
    }
}

pub fn is_dir(st: &FileStat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// Closes every descriptor >= 3 except those in `keep`.
///
/// # Safety
///
/// Every descriptor of this process not in `keep` is closed, whoever owns it:
/// the caller must never again use or drop an `OwnedFd`, `File` or other
/// owner of one of them (a child between fork and exec or `_exit`, which
/// never returns to its parent's code).
pub unsafe fn close_fds_except(keep: &[RawFd]) {
    let mut keep: Vec<u32> = keep
        .iter()
        .filter(|&&f| f >= 3)
        .map(|&f| f as u32)
        .collect();
    keep.sort_unstable();
    keep.dedup();
    let mut from: u32 = 3;
    for k in keep {
        if k > from {
            close_range(from, k - 1);
        }
        from = k + 1;
    }
    close_range(from, u32::MAX);
}

fn close_range(first: u32, last: u32) {
    // SAFETY: close_range only closes descriptors; `close_fds_except`'s
    // caller gave them up.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    if rc != 0 {
        // Old kernels: close one by one up to a sane bound (EBADF for the
        // numbers that are not open).
        let hi = last.min(65_535);
        for fd in first..=hi {
            let _ = nix::unistd::close(fd as RawFd);
        }
    }
}

/// Closes a descriptor this process inherited across fork from a copy of
/// its parent's memory (e.g. a raw descriptor of a [`super::init::BoxPrep`]).
///
/// # Safety
///
/// `fd` must not be used again, and the owner it has in the parent's copy of
/// memory must never be dropped in this process (it never returns there).
pub unsafe fn close_inherited(fd: RawFd) {
    let _ = nix::unistd::close(fd);
}

/// Writes all of `data` to `fd`, retrying on EINTR; errors are ignored (the
/// reader is gone).
pub fn write_all_fd(fd: BorrowedFd<'_>, data: &[u8]) {
    let mut off = 0;
    while off < data.len() {
        match nix::unistd::write(fd, &data[off..]) {
            Ok(n) => off += n,
            Err(Errno::EINTR) => continue,
            Err(_) => return,
        }
    }
}

/// A pipe whose both ends are close-on-exec: (read end, write end).
pub fn pipe_cloexec() -> Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|errno| SandboxError::sys("pipe2", errno))
}

/// A connected pair of stream sockets, close-on-exec.
pub fn socketpair_cloexec() -> Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|errno| SandboxError::sys("socketpair", errno))
}

/// Sets the parent-death signal to SIGKILL.
pub fn kill_with_parent() {
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
}

/// Sets the parent-death signal to SIGKILL; returns false when the expected
/// parent is already gone (then the caller must exit).
pub fn die_with_parent(expected_parent: Pid) -> bool {
    kill_with_parent();
    nix::unistd::getppid() == expected_parent
}

/// True when the other end of `read_fd` (held only by our parent) is closed.
pub fn peer_gone(read_fd: BorrowedFd<'_>) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut p = [PollFd::new(read_fd, PollFlags::POLLIN)];
    let rc = poll(&mut p, PollTimeout::ZERO);
    rc.is_ok_and(|n| n > 0)
        && p[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLIN))
}

/// Reads into `buf` until it is full or end of file, retrying on EINTR;
/// returns how many bytes arrived (fewer on end of file or an error).
pub fn read_full(fd: BorrowedFd<'_>, buf: &mut [u8]) -> usize {
    let mut off = 0;
    while off < buf.len() {
        match nix::unistd::read(fd.as_raw_fd(), &mut buf[off..]) {
            Ok(0) => break,
            Ok(n) => off += n,
            Err(Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    off
}

/// Blocks until one byte arrives on `fd`; false on end of file or an error.
pub fn read_byte(fd: BorrowedFd<'_>) -> bool {
    read_full(fd, &mut [0u8; 1]) == 1
}

/// Ends this process at once (no atexit handlers, no unwinding: correct
/// after fork).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and has no preconditions; it skips atexit
    // handlers and destructors, which is what a fork child needs.
    unsafe { libc::_exit(code) }
}

/// fork(3).
///
/// # Safety
///
/// The child starts with only the calling thread: a lock another thread held
/// at the fork stays held in the child. The caller must have exactly one
/// thread, or the child must only use async-signal-safe functions and locks
/// that fork(3) resets through its atfork handlers (the allocator's: the C
/// library's malloc, and dlmalloc, the terra binary's allocator, registers
/// one) until it execs or `_exit`s.
/// The child must never return into code that unwinds or drops the parent's
/// state (it ends with [`exit_now`] or exec).
pub unsafe fn fork() -> Result<ForkResult> {
    // SAFETY: this function's caller upholds fork's contract (see above).
    unsafe { nix::unistd::fork() }.map_err(|errno| SandboxError::sys("fork", errno))
}

/// clone(2) into new namespaces with fork semantics (no CLONE_VM, no new
/// stack: the child continues on a copy of the caller's memory) and SIGCHLD
/// as exit signal.
///
/// # Safety
///
/// libc does not learn about the child: a lock another thread held at the
/// clone stays held in it, and libc's cached thread id is stale. The child
/// must therefore only make system calls on memory prepared before the clone
/// (no allocation, no lock, no pthread function) until it execs or `_exit`s,
/// and never return into the caller's code.
pub unsafe fn clone_raw(flags: libc::c_int) -> Result<ForkResult> {
    let flags = (flags | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: without CLONE_VM and with a null stack the child gets its own
    // copy of the address space, like fork; the caller upholds the rest.
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
    match pid {
        0 => Ok(ForkResult::Child),
        p if p > 0 => Ok(ForkResult::Parent {
            child: Pid::from_raw(p as libc::pid_t),
        }),
        _ => Err(SandboxError::sys("clone", Errno::last())),
    }
}

/// Marks every descriptor from `first` up close-on-exec (close_range with
/// CLOSE_RANGE_CLOEXEC, Linux >= 5.11; one by one up to a bound before).
/// Only system calls: safe between clone and exec.
pub fn cloexec_from(first: u32) {
    const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, CLOSE_RANGE_CLOEXEC) };
    if rc != 0 {
        for fd in first..65_536 {
            // SAFETY: fcntl on a descriptor number (EBADF when not open).
            unsafe { libc::fcntl(fd as RawFd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
    }
}

/// A close-on-exec pidfd of this process (Linux >= 5.3), readable once it
/// has exited; None when the kernel has no pidfd_open.
pub fn pidfd_self() -> Option<OwnedFd> {
    let me = nix::unistd::getpid().as_raw();
    // SAFETY: pidfd_open takes a pid and flags; it returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, me, 0u32) };
    // SAFETY: a non-negative result is a fresh descriptor owned by nobody else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// How a child learns that this process is gone (before its own
/// parent-death signal is armed): the descriptor to give it, a pidfd of this
/// process, or, without pidfd_open, the read end of a pipe whose write end
/// (the second value) only this process holds.
pub fn caller_liveness() -> Result<(OwnedFd, Option<OwnedFd>)> {
    match pidfd_self() {
        Some(fd) => Ok((fd, None)),
        None => {
            let (r, w) = pipe_cloexec()?;
            Ok((r, Some(w)))
        }
    }
}

/// How a waited-for child ended: (signaled, exit code or signal number).
/// Raw, not nix's `WaitStatus`, which cannot hold a real-time signal.
pub fn wait_child(pid: Pid, nohang: bool) -> Result<Option<(Pid, (bool, i32))>> {
    let mut st = 0;
    let flags = if nohang { libc::WNOHANG } else { 0 };
    loop {
        // SAFETY: `st` is a valid out-parameter; waiting has no other effect
        // than reaping a child of this process.
        let rc = unsafe { libc::waitpid(pid.as_raw(), &mut st, flags) };
        if rc > 0 {
            return Ok(Some((Pid::from_raw(rc), decode_status(st))));
        }
        if rc == 0 {
            return Ok(None);
        }
        match Errno::last() {
            Errno::EINTR => continue,
            errno => return Err(SandboxError::sys_at("waitpid", errno, pid.to_string())),
        }
    }
}

pub fn sethostname(name: &str) -> Result<()> {
    nix::unistd::sethostname(name).map_err(|errno| SandboxError::sys_at("sethostname", errno, name))
}

/// The supplementary groups of the calling thread (getgroups(2) reads the
/// thread's credentials).
pub fn thread_groups() -> Result<Vec<libc::gid_t>> {
    nix::unistd::getgroups()
        .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
        .map_err(|errno| SandboxError::sys("getgroups", errno))
}

/// setgroups(2) for the calling thread only: the raw system call, not libc's
/// wrapper (nor nix's, which calls it), which changes every thread of the
/// process.
pub fn set_thread_groups(groups: &[libc::gid_t]) -> Result<()> {
    // SAFETY: pointer and count describe `groups`.
    let rc = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if rc != 0 {
        return Err(SandboxError::sys("setgroups", Errno::last()));
    }
    Ok(())
}

/// Clears the calling thread's supplementary groups, so a box created from it
/// starts without them; returns the groups to restore, or None when they
/// were already empty or cannot be dropped (EPERM: no CAP_SETGID, as for an
/// unprivileged caller, whose box then keeps them; see SECURITY.md).
pub fn drop_thread_groups() -> Result<Option<Vec<libc::gid_t>>> {
    let groups = thread_groups()?;
    if groups.is_empty() {
        return Ok(None);
    }
    match set_thread_groups(&[]) {
        Ok(()) => Ok(Some(groups)),
        Err(e) if e.errno() == Some(Errno::EPERM) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes the uid/gid maps of the current process's new user namespace so the
/// caller's ids stay the same inside.
pub fn write_id_maps(uid: u32, gid: u32) -> Result<()> {
    // setgroups may be missing on very old kernels; deny is required for an
    // unprivileged gid_map and harmless as root.
    if Path::new("/proc/self/setgroups").exists() {
        write_file("/proc/self/setgroups", b"deny")?;
    }
    write_file("/proc/self/uid_map", format!("{uid} {uid} 1\n").as_bytes())?;
    write_file("/proc/self/gid_map", format!("{gid} {gid} 1\n").as_bytes())
}

/// Brings the loopback interface of the current network namespace up.
pub fn loopback_up() -> Result<()> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
    let s = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|errno| SandboxError::sys_at("socket", errno, "loopback"))?;
    // SAFETY: an all-zero ifreq is a valid value; the name fits in IFNAMSIZ.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS fills the ifreq `req` points to; `s` is open.
    let rc = unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req) };
    if rc != 0 {
        return Err(SandboxError::sys_at(
            "ioctl(SIOCGIFFLAGS)",
            Errno::last(),
            "lo",
        ));
    }
    // SAFETY: the union member ifru_flags is the one SIOCGIFFLAGS filled.
    unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads the ifreq `req` points to; `s` is open.
    let rc = unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS as _, &req) };
    if rc != 0 {
        return Err(SandboxError::sys_at(
            "ioctl(SIOCSIFFLAGS)",
            Errno::last(),
            "lo",
        ));
    }
    Ok(())
}

/// prctl(2) with integer arguments that nix does not wrap.
fn prctl(call: &'static str, option: libc::c_int, arg: libc::c_ulong) -> Result<()> {
    // SAFETY: the options used here take integer arguments only and touch
    // nothing but this thread's credentials.
    if unsafe { libc::prctl(option, arg, 0, 0, 0) } != 0 {
        return Err(SandboxError::sys(call, Errno::last()));
    }
    Ok(())
}

/// This thread's seccomp mode (0 none, 2 filter; strict mode cannot ask),
/// or None when the kernel has no seccomp. One prctl instead of parsing
/// /proc/self/status, which the kernel renders in full for each read.
pub fn seccomp_mode() -> Option<u32> {
    // SAFETY: PR_GET_SECCOMP takes no pointer and changes nothing.
    let rc = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    u32::try_from(rc).ok()
}

/// Drops every capability: bounding set, ambient set, then the effective,
/// permitted and inheritable sets; sets securebits so uid 0 gains nothing on exec.
pub fn drop_all_capabilities() -> Result<()> {
    drop_capabilities_keeping(None)
}

/// Drops every capability but `keep` (effective and permitted; bounding and
/// ambient sets emptied all the same, so nothing is regained).
pub fn drop_capabilities_keeping(keep: Option<u32>) -> Result<()> {
    // SECBIT_NOROOT | NOROOT_LOCKED | NO_SETUID_FIXUP | NO_SETUID_FIXUP_LOCKED |
    // KEEP_CAPS_LOCKED | NO_CAP_AMBIENT_RAISE | NO_CAP_AMBIENT_RAISE_LOCKED.
    let bits: libc::c_ulong = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80;
    prctl("prctl(PR_SET_SECUREBITS)", libc::PR_SET_SECUREBITS, bits)?;
    for cap in 0..64 {
        // EINVAL past the last capability.
        match prctl("prctl(PR_CAPBSET_DROP)", libc::PR_CAPBSET_DROP, cap) {
            Ok(()) => {}
            Err(e) if e.errno() == Some(Errno::EINVAL) => break,
            Err(e) => return Err(e),
        }
    }
    // PR_CAP_AMBIENT takes a sub-command as its first argument.
    // SAFETY: integer arguments only; clears this thread's ambient set.
    if unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    } != 0
    {
        return Err(SandboxError::sys(
            "prctl(PR_CAP_AMBIENT_CLEAR_ALL)",
            Errno::last(),
        ));
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let hdr = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    if let Some(cap) = keep {
        let word = &mut data[(cap / 32) as usize % 2];
        word.effective = 1 << (cap % 32);
        word.permitted = 1 << (cap % 32);
    }
    // SAFETY: capset v3 reads one header and two data structs, all valid here.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &hdr as *const Header, data.as_ptr()) };
    if rc != 0 {
        return Err(SandboxError::sys("capset", Errno::last()));
    }
    no_new_privs()
}

pub fn no_new_privs() -> Result<()> {
    nix::sys::prctl::set_no_new_privs()
        .map_err(|errno| SandboxError::sys("prctl(PR_SET_NO_NEW_PRIVS)", errno))
}

/// The signals init forwards to the workload.
pub const FORWARDED: [Signal; 7] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];

/// The forwarded signals and SIGCHLD.
fn init_signals() -> SigSet {
    let mut set = SigSet::empty();
    for s in FORWARDED.into_iter().chain([Signal::SIGCHLD]) {
        set.add(s);
    }
    set
}

extern "C" fn noop_handler(_: libc::c_int) {}

/// Installs no-op handlers for the forwarded signals and SIGCHLD and blocks
/// them, so `wait_signal` can take them synchronously. A PID-namespace init
/// only receives signals it handles, hence the handlers.
pub fn block_forwarded() -> SigSet {
    let set = init_signals();
    let noop = SigAction::new(
        SigHandler::Handler(noop_handler),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for s in set.iter() {
        // SAFETY: the handler does nothing, so it is async-signal-safe and
        // touches no state the interrupted code could be using.
        let _ = unsafe { signal::sigaction(s, &noop) };
    }
    let _ = signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None);
    set
}

/// Blocks the forwarded signals and SIGCHLD in the calling thread; returns
/// the previous mask (for `set_mask`). Used around the clone of the box init,
/// which inherits the mask: until init waits for them, those signals queue
/// instead of being lost (a PID-namespace init drops a signal it has no
/// handler for, and an unblocked SIGCHLD with the default disposition is
/// discarded, which would leave init waiting for a child that already ended).
pub fn block_init_signals() -> SigSet {
    let mut old = SigSet::empty();
    let _ = signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&init_signals()), Some(&mut old));
    old
}

/// Sets the calling thread's signal mask.
pub fn set_mask(mask: &SigSet) {
    let _ = signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(mask), None);
}

/// Restores default dispositions of every signal (the caller may ignore some,
/// e.g. SIGPIPE, and ignored dispositions survive exec) and an empty mask, in
/// a child before it continues toward exec or the service.
pub fn reset_signals() {
    // Raw numbers: the real-time signals have no `Signal` value.
    for s in 1..libc::SIGRTMAX() {
        // SAFETY: SIG_DFL installs no handler; SIGKILL/SIGSTOP and reserved
        // signals simply fail with EINVAL.
        unsafe { libc::signal(s, libc::SIG_DFL) };
    }
    set_mask(&SigSet::empty());
}

/// Waits for one of `set`. Returns the signal and whether it came from the
/// kernel (e.g. a terminal's SIGINT/SIGWINCH, which reaches the whole
/// foreground process group and so must not be forwarded a second time).
pub fn wait_signal(set: &SigSet) -> (i32, bool) {
    loop {
        // SAFETY: `set` is a valid signal set; `info` a valid out-parameter.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let s = unsafe { libc::sigwaitinfo(set.as_ref(), &mut info) };
        if s > 0 {
            return (s, info.si_code == libc::SI_KERNEL);
        }
    }
}

/// Makes this process non-dumpable: its /proc files are not reachable by the
/// workload (which runs under the same uid).
pub fn not_dumpable() {
    let _ = nix::sys::prctl::set_dumpable(false);
}

/// Exit status of a child as (signaled, value).
pub fn decode_status(status: i32) -> (bool, i32) {
    if libc::WIFSIGNALED(status) {
        (true, libc::WTERMSIG(status))
    } else {
        (false, libc::WEXITSTATUS(status))
    }
}

pub fn cstr_lossy(c: &CStr) -> String {
    c.to_string_lossy().into_owned()
}

/// The raw descriptor of `fd`, for a list of descriptors to keep.
pub fn raw(fd: &impl AsFd) -> RawFd {
    fd.as_fd().as_raw_fd()
}

/// True when this process has exactly one thread (`Threads:` of
/// /proc/self/status); false when it has more or the count cannot be read.
pub fn single_threaded() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .is_some_and(|n| n.trim() == "1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_call_keeps_its_name_errno_and_path() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("missing");
        let m = missing.to_str().expect("UTF-8 temp path");
        match chdir(m) {
            Err(SandboxError::Sys {
                call: "chdir",
                errno: Errno::ENOENT,
                path: Some(p),
            }) => assert_eq!(p, m),
            other => panic!("{other:?}"),
        }
        assert!(lstat(m).expect("lstat").is_none());
        mkdir(m, 0o700).expect("mkdir");
        mkdir(m, 0o700).expect("an existing directory is fine");
        assert!(lstat(m).expect("lstat").is_some_and(|st| is_dir(&st)));
    }

    #[test]
    fn touch_creates_a_file_but_never_follows_a_symlink() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = |n: &str| dir.path().join(n).to_str().expect("UTF-8").to_string();
        touch(&path("plain"), 0o444).expect("a new file");
        assert!(lstat(&path("plain")).expect("lstat").is_some());
        symlink(&path("target"), &path("link")).expect("symlink");
        assert!(matches!(
            touch(&path("link"), 0o444),
            Err(SandboxError::Sys {
                errno: Errno::ELOOP,
                ..
            })
        ));
        assert!(
            lstat(&path("target")).expect("lstat").is_none(),
            "nothing created through the link"
        );
    }

    #[test]
    fn pipe_reads_writes_and_sees_its_peer_go() {
        let (r, w) = pipe_cloexec().expect("pipe");
        assert!(!peer_gone(r.as_fd()), "writer open, nothing written");
        write_all_fd(w.as_fd(), &[1, 42]);
        let mut b = [0u8; 2];
        assert_eq!(read_full(r.as_fd(), &mut b), 2);
        assert_eq!(b, [1, 42]);
        drop(w);
        assert!(peer_gone(r.as_fd()), "writer closed");
        assert!(!read_byte(r.as_fd()), "end of file");
    }
}
