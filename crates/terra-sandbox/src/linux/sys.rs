//! Thin wrappers over the raw system calls the launcher needs. Every function
//! returns `Err(String)` naming the call and the path, so a setup failure can be
//! reported to the caller as it is.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub type SysResult<T> = Result<T, String>;

/// A C string of a path (paths never hold NUL: they come from the OS or from a
/// validated plan, but refuse rather than panic).
pub fn cpath(p: impl AsRef<Path>) -> SysResult<CString> {
    CString::new(p.as_ref().as_os_str().as_bytes())
        .map_err(|_| format!("path {:?} holds a NUL byte", p.as_ref()))
}

pub fn errno_str(call: &str, what: &str) -> String {
    format!("{call}({what}): {}", io::Error::last_os_error())
}

fn check(rc: libc::c_int, call: &str, what: &str) -> SysResult<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(errno_str(call, what))
    }
}

pub fn mount(
    src: Option<&str>,
    target: &str,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> SysResult<()> {
    let src_c = src.map(cpath).transpose()?;
    let target_c = cpath(target)?;
    let fs_c = fstype.map(cpath).transpose()?;
    let data_c = data.map(cpath).transpose()?;
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is either null or a valid NUL-terminated string that
    // outlives the call.
    let rc = unsafe {
        libc::mount(
            ptr(&src_c),
            target_c.as_ptr(),
            ptr(&fs_c),
            flags,
            ptr(&data_c) as *const libc::c_void,
        )
    };
    check(
        rc,
        "mount",
        &format!("{} -> {target}", src.unwrap_or(fstype.unwrap_or("none"))),
    )
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

/// Adds nosuid and nodev to the mount at `path` and every mount below it
/// (host binds: no set-id programs, no device nodes). Best effort on kernels
/// without mount_setattr (no_new_privs already disables set-id on exec).
pub fn harden(path: &str) -> SysResult<()> {
    match setattr(path, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, true) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => Ok(()),
        Err(e) => Err(format!("mount_setattr(nosuid,nodev, {path}): {e}")),
        Ok(()) => Ok(()),
    }
}

/// `harden` and a recursive `make_readonly` in one mount_setattr(2) call
/// (read-only host binds). On kernels without mount_setattr it behaves like
/// the two calls did: nosuid/nodev are skipped and the read-only step fails.
pub fn harden_readonly(path: &str) -> SysResult<()> {
    match setattr(
        path,
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_RDONLY,
        true,
    ) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => make_readonly(path, true),
        Err(e) => Err(format!("mount_setattr(ro,nosuid,nodev, {path}): {e}")),
    }
}

fn setattr(path: &str, attr_set: u64, recursive: bool) -> io::Result<()> {
    let c = cpath(path).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 };
    // SAFETY: `c` is a valid C string, `attr` a valid mount_attr of the size passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c.as_ptr(),
            flags as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes the mount at `path` (and with `recursive` every mount below it)
/// read-only. Uses mount_setattr(2), which keeps the locked flags of mounts
/// inherited from the host; falls back to a remount on old kernels.
pub fn make_readonly(path: &str, recursive: bool) -> SysResult<()> {
    let err = match setattr(path, MOUNT_ATTR_RDONLY, recursive) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    if err.raw_os_error() != Some(libc::ENOSYS) || recursive {
        return Err(format!("mount_setattr(ro, {path}): {err}"));
    }
    let st = nix::sys::statvfs::statvfs(path).map_err(|e| format!("statvfs({path}): {e}"))?;
    let keep = st.flags().bits() as libc::c_ulong
        & (libc::MS_NOSUID
            | libc::MS_NODEV
            | libc::MS_NOEXEC
            | libc::MS_NOATIME
            | libc::MS_NODIRATIME
            | libc::MS_RELATIME);
    mount(
        None,
        path,
        None,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | keep,
        None,
    )
}

pub fn pivot_root(new_root: &str, put_old: &str) -> SysResult<()> {
    let n = cpath(new_root)?;
    let o = cpath(put_old)?;
    // SAFETY: both are valid C strings.
    let rc = unsafe { libc::syscall(libc::SYS_pivot_root, n.as_ptr(), o.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(errno_str("pivot_root", new_root))
    }
}

pub fn umount_detach(path: &str) -> SysResult<()> {
    let c = cpath(path)?;
    // SAFETY: valid C string.
    check(
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) },
        "umount2",
        path,
    )
}

pub fn chdir(path: &str) -> SysResult<()> {
    let c = cpath(path)?;
    // SAFETY: valid C string.
    check(unsafe { libc::chdir(c.as_ptr()) }, "chdir", path)
}

pub fn mkdir(path: &str, mode: libc::mode_t) -> SysResult<()> {
    let c = cpath(path)?;
    // SAFETY: valid C string.
    let rc = unsafe { libc::mkdir(c.as_ptr(), mode) };
    if rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
        Ok(())
    } else {
        Err(errno_str("mkdir", path))
    }
}

/// Creates an empty file (a mount point or a placeholder).
pub fn touch(path: &str, mode: libc::mode_t) -> SysResult<()> {
    let c = cpath(path)?;
    // SAFETY: valid C string; the returned descriptor is closed right away.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            mode,
        )
    };
    if fd < 0 {
        return Err(errno_str("open(O_CREAT)", path));
    }
    // SAFETY: fd was just opened by us.
    unsafe { libc::close(fd) };
    Ok(())
}

pub fn symlink(target: &str, path: &str) -> SysResult<()> {
    let t = cpath(target)?;
    let p = cpath(path)?;
    // SAFETY: valid C strings.
    check(
        unsafe { libc::symlink(t.as_ptr(), p.as_ptr()) },
        "symlink",
        path,
    )
}

pub fn write_file(path: &str, data: &[u8]) -> SysResult<()> {
    std::fs::write(path, data).map_err(|e| format!("write({path}): {e}"))
}

/// lstat: None when the path does not exist.
pub fn lstat(path: &str) -> SysResult<Option<libc::stat>> {
    let c = cpath(path)?;
    // SAFETY: zeroed stat is a valid out-parameter; `c` a valid C string.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe { libc::lstat(c.as_ptr(), &mut st) };
    if rc == 0 {
        return Ok(Some(st));
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => Ok(None),
        _ => Err(errno_str("lstat", path)),
    }
}

pub fn is_dir(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// Closes every descriptor >= 3 except those in `keep`.
pub fn close_fds_except(keep: &[i32]) {
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
    // SAFETY: close_range only closes descriptors; the caller owns the process.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    if rc != 0 {
        // Old kernels: close one by one up to a sane bound.
        let hi = last.min(65_535);
        for fd in first..=hi {
            // SAFETY: closing a possibly invalid descriptor is harmless.
            unsafe { libc::close(fd as i32) };
        }
    }
}

/// Writes all of `data` to `fd`, retrying on EINTR; errors are ignored (the
/// reader is gone).
pub fn write_all_fd(fd: i32, data: &[u8]) {
    let mut off = 0;
    while off < data.len() {
        // SAFETY: the slice is valid for the given length.
        let n = unsafe {
            libc::write(
                fd,
                data[off..].as_ptr() as *const libc::c_void,
                data.len() - off,
            )
        };
        if n < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        }
        off += n as usize;
    }
}

/// A pipe whose both ends are close-on-exec.
pub fn pipe_cloexec() -> SysResult<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid 2-element array.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if rc != 0 {
        return Err(errno_str("pipe2", ""));
    }
    Ok((fds[0], fds[1]))
}

pub fn close(fd: i32) {
    if fd >= 0 {
        // SAFETY: closing a descriptor this process owns.
        unsafe { libc::close(fd) };
    }
}

/// Sets the parent-death signal to SIGKILL; returns false when the expected
/// parent is already gone (then the caller must exit).
pub fn die_with_parent(expected_parent: libc::pid_t) -> bool {
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() == expected_parent }
}

/// True when the other end of `read_fd` (held only by our parent) is closed.
pub fn peer_gone(read_fd: i32) -> bool {
    let mut p = libc::pollfd {
        fd: read_fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    let rc = unsafe { libc::poll(&mut p, 1, 0) };
    rc > 0 && (p.revents & (libc::POLLHUP | libc::POLLIN)) != 0
}

/// Blocks until one byte arrives on `fd`; false on end of file or an error.
pub fn read_byte(fd: i32) -> bool {
    let mut b = [0u8; 1];
    loop {
        // SAFETY: reading into a 1-byte buffer from a descriptor we own.
        let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) };
        if n == 1 {
            return true;
        }
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return false;
    }
}

pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and skips atexit handlers (correct after fork).
    unsafe { libc::_exit(code) }
}

pub fn fork() -> SysResult<libc::pid_t> {
    // SAFETY: the caller is single-threaded (documented contract) or only uses
    // async-signal-safe-ish operations in the child (no std locks).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        Err(errno_str("fork", ""))
    } else {
        Ok(pid)
    }
}

/// clone(2) into new namespaces with fork semantics (no CLONE_VM, no new
/// stack: the child continues on a copy of the caller's memory) and SIGCHLD
/// as exit signal. Returns 0 in the child, the child's pid in the caller.
///
/// Only for a single-threaded caller (see `single_threaded`): libc does not
/// learn about the child, so a lock another thread held at the clone would
/// stay locked in the child forever (init's later fork(3) takes every malloc
/// lock). The child must not rely on libc's cached thread id (pthread
/// mutexes, raise); the box init only makes system calls, allocates, forks
/// (which refreshes that cache in its own children) and _exits.
pub fn clone_into(flags: libc::c_int) -> SysResult<libc::pid_t> {
    let flags = (flags | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: without CLONE_VM and with a null stack the child gets its own
    // copy of the address space, like fork; the caller checked it has one
    // thread, so no lock is held by another thread.
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
    if pid < 0 {
        Err(errno_str(
            "clone",
            "user, mount, pid, ipc, uts, net namespaces",
        ))
    } else {
        Ok(pid as libc::pid_t)
    }
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

/// A close-on-exec pidfd of this process (Linux >= 5.3), readable once it
/// has exited; None when the kernel has no pidfd_open.
pub fn pidfd_self() -> Option<i32> {
    // SAFETY: getpid has no preconditions; pidfd_open takes a pid and flags.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0u32) };
    (fd >= 0).then_some(fd as i32)
}

pub fn sethostname(name: &str) -> SysResult<()> {
    // SAFETY: pointer and length describe `name`.
    let rc = unsafe { libc::sethostname(name.as_ptr() as *const libc::c_char, name.len()) };
    check(rc, "sethostname", name)
}

/// The supplementary groups of the calling thread.
pub fn thread_groups() -> SysResult<Vec<libc::gid_t>> {
    // SAFETY: a count of 0 with a null list only asks for the number.
    let n = unsafe { libc::syscall(libc::SYS_getgroups, 0, std::ptr::null_mut::<libc::gid_t>()) };
    if n < 0 {
        return Err(errno_str("getgroups", "supplementary groups"));
    }
    let mut v: Vec<libc::gid_t> = vec![0; n as usize];
    // SAFETY: the buffer holds `n` entries; the kernel writes at most that many.
    let m = unsafe { libc::syscall(libc::SYS_getgroups, n, v.as_mut_ptr()) };
    if m < 0 {
        return Err(errno_str("getgroups", "supplementary groups"));
    }
    v.truncate(m as usize);
    Ok(v)
}

/// setgroups(2) for the calling thread only: the raw system call, not libc's
/// wrapper, which changes every thread of the process.
pub fn set_thread_groups(groups: &[libc::gid_t]) -> io::Result<()> {
    // SAFETY: pointer and count describe `groups`.
    let rc = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Clears the calling thread's supplementary groups, so a box created from it
/// starts without them; returns the groups to restore, or None when they
/// were already empty or cannot be dropped (EPERM: no CAP_SETGID, as for an
/// unprivileged caller, whose box then keeps them; see SECURITY.md).
pub fn drop_thread_groups() -> SysResult<Option<Vec<libc::gid_t>>> {
    let groups = thread_groups()?;
    if groups.is_empty() {
        return Ok(None);
    }
    match set_thread_groups(&[]) {
        Ok(()) => Ok(Some(groups)),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok(None),
        Err(e) => Err(format!("setgroups(0): {e}")),
    }
}

/// Writes the uid/gid maps of the current process's new user namespace so the
/// caller's ids stay the same inside.
pub fn write_id_maps(uid: u32, gid: u32) -> SysResult<()> {
    // setgroups may be missing on very old kernels; deny is required for an
    // unprivileged gid_map and harmless as root.
    if Path::new("/proc/self/setgroups").exists() {
        write_file("/proc/self/setgroups", b"deny")?;
    }
    write_file("/proc/self/uid_map", format!("{uid} {uid} 1\n").as_bytes())?;
    write_file("/proc/self/gid_map", format!("{gid} {gid} 1\n").as_bytes())
}

/// Brings the loopback interface of the current network namespace up.
pub fn loopback_up() -> SysResult<()> {
    // SAFETY: plain socket call.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(errno_str("socket", "loopback"));
    }
    // SAFETY: zeroed ifreq is valid; the name fits in IFNAMSIZ.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS take a pointer to an ifreq.
    let rc = unsafe { libc::ioctl(s, libc::SIOCGIFFLAGS as _, &mut req) };
    if rc != 0 {
        close(s);
        return Err(errno_str("ioctl(SIOCGIFFLAGS)", "lo"));
    }
    // SAFETY: the union member ifru_flags is the one SIOCGIFFLAGS filled.
    unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    // SAFETY: as above.
    let rc = unsafe { libc::ioctl(s, libc::SIOCSIFFLAGS as _, &req) };
    close(s);
    check(rc, "ioctl(SIOCSIFFLAGS)", "lo")
}

/// Drops every capability: bounding set, ambient set, then the effective,
/// permitted and inheritable sets; sets securebits so uid 0 gains nothing on exec.
pub fn drop_all_capabilities() -> SysResult<()> {
    // SECBIT_NOROOT | NOROOT_LOCKED | NO_SETUID_FIXUP | NO_SETUID_FIXUP_LOCKED |
    // KEEP_CAPS_LOCKED | NO_CAP_AMBIENT_RAISE | NO_CAP_AMBIENT_RAISE_LOCKED.
    let bits: libc::c_ulong = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80;
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) } != 0 {
        return Err(errno_str("prctl", "PR_SET_SECUREBITS"));
    }
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments; EINVAL past the last capability.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if rc != 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            return Err(errno_str("prctl", "PR_CAPBSET_DROP"));
        }
    }
    // SAFETY: prctl with integer arguments.
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
        return Err(errno_str("prctl", "PR_CAP_AMBIENT_CLEAR_ALL"));
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
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset v3 takes a header and two data structs.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &hdr as *const Header, data.as_ptr()) };
    if rc != 0 {
        return Err(errno_str("capset", "0"));
    }
    no_new_privs()
}

pub fn no_new_privs() -> SysResult<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(errno_str("prctl", "PR_SET_NO_NEW_PRIVS"));
    }
    Ok(())
}

/// The signals init forwards to the workload.
pub const FORWARDED: [i32; 7] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
];

extern "C" fn noop_handler(_: libc::c_int) {}

/// Installs no-op handlers for the forwarded signals and SIGCHLD and blocks
/// them, so `wait_signal` can take them synchronously. A PID-namespace init
/// only receives signals it handles, hence the handlers.
pub fn block_forwarded() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local, zeroed set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in FORWARDED.iter().chain([libc::SIGCHLD].iter()) {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = noop_handler as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(*s, &sa, std::ptr::null_mut());
            libc::sigaddset(&mut set, *s);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Blocks the forwarded signals and SIGCHLD in the calling thread; returns
/// the previous mask (for `set_mask`). Used around the clone of the box init,
/// which inherits the mask: until init waits for them, those signals queue
/// instead of being lost (a PID-namespace init drops a signal it has no
/// handler for, and an unblocked SIGCHLD with the default disposition is
/// discarded, which would leave init waiting for a child that already ended).
pub fn block_init_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on local, zeroed sets.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in FORWARDED.iter().chain([libc::SIGCHLD].iter()) {
            libc::sigaddset(&mut set, *s);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old);
        old
    }
}

/// Sets the calling thread's signal mask.
pub fn set_mask(mask: &libc::sigset_t) {
    // SAFETY: `mask` is a valid signal set.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, mask, std::ptr::null_mut()) };
}

/// Restores default dispositions of every signal (the caller may ignore some,
/// e.g. SIGPIPE, and ignored dispositions survive exec) and an empty mask, in
/// a child before it continues toward exec or the service.
pub fn reset_signals() {
    // SAFETY: sigset manipulation on a local set; SIG_DFL is always valid
    // (SIGKILL/SIGSTOP and reserved signals simply fail with EINVAL).
    unsafe {
        for s in 1..libc::SIGRTMAX() {
            libc::signal(s, libc::SIG_DFL);
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// Waits for one of `set`. Returns the signal and whether it came from the
/// kernel (e.g. a terminal's SIGINT/SIGWINCH, which reaches the whole
/// foreground process group and so must not be forwarded a second time).
pub fn wait_signal(set: &libc::sigset_t) -> (i32, bool) {
    loop {
        // SAFETY: `set` is a valid signal set; `info` a valid out-parameter.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let s = unsafe { libc::sigwaitinfo(set, &mut info) };
        if s > 0 {
            return (s, info.si_code == libc::SI_KERNEL);
        }
    }
}

/// Makes this process non-dumpable: its /proc files are not reachable by the
/// workload (which runs under the same uid).
pub fn not_dumpable() {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
}

/// Exit status of a child as (signaled, value).
pub fn decode_status(status: i32) -> (bool, i32) {
    if libc::WIFSIGNALED(status) {
        (true, libc::WTERMSIG(status))
    } else {
        (false, libc::WEXITSTATUS(status))
    }
}

/// Ends this process the way a child ended: the same exit code, or the same
/// signal (re-raised with its default action; no core file).
pub fn mirror_exit(signaled: bool, value: i32) -> ! {
    if signaled {
        let lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: plain libc calls on our own process.
        unsafe {
            libc::setrlimit(libc::RLIMIT_CORE, &lim);
            libc::signal(value, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, value);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), value);
        }
        exit_now(128 + value)
    }
    exit_now(value)
}

pub fn cstr_lossy(c: &CStr) -> String {
    c.to_string_lossy().into_owned()
}
