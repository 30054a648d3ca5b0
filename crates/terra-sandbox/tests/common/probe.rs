//! In-box probes: the test binary itself is executed inside the box (its path
//! granted read-only) with TERRA_PROBE=name,name,... and prints one
//! `PROBE name=result` line per probe.
//!
//! A probe whose call has a safe `nix` wrapper that reaches the same libc
//! function with the same arguments uses it; every raw-number probe
//! (`libc::syscall(SYS_..., ...)`) stays raw, because the seccomp filters
//! under test match raw syscall numbers and argument bits, and its `unsafe`
//! block says why the call is sound.
#![allow(dead_code)]

use std::io::Read;

use nix::fcntl::OFlag;
use nix::sys::stat::{Mode, SFlag};

fn errno_name(e: i32) -> String {
    match e {
        libc::EPERM => "EPERM".into(),
        libc::ENOSYS => "ENOSYS".into(),
        libc::EBADF => "EBADF".into(),
        libc::EINVAL => "EINVAL".into(),
        libc::EFAULT => "EFAULT".into(),
        libc::EACCES => "EACCES".into(),
        libc::ECONNREFUSED => "ECONNREFUSED".into(),
        libc::ENETUNREACH => "ENETUNREACH".into(),
        libc::ENOTTY => "ENOTTY".into(),
        libc::EAFNOSUPPORT => "EAFNOSUPPORT".into(),
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT".into(),
        n => format!("errno{n}"),
    }
}

fn last() -> String {
    errno_name(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

fn rc(r: libc::c_long) -> String {
    if r < 0 {
        last()
    } else {
        "ok".into()
    }
}

/// "ok" or the errno of a `nix` call.
fn nix_rc<T>(r: nix::Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => errno_name(e as i32),
    }
}

/// Closes a descriptor a raw probe call returned (its result is not probed).
fn close_own(fd: libc::c_long) {
    if let Ok(fd) = i32::try_from(fd) {
        let _ = nix::unistd::close(fd);
    }
}

/// Opens `path` with `flags` and `mode` (closing what it opened): "ok" or the
/// errno. `nix::fcntl::open` calls `libc::open(path, flags, mode)`.
fn open_rc(path: &std::ffi::CStr, flags: libc::c_int, mode: libc::c_uint) -> String {
    let r = nix::fcntl::open(
        path,
        OFlag::from_bits_retain(flags),
        Mode::from_bits_retain(mode as libc::mode_t),
    );
    if let Ok(fd) = r {
        let _ = nix::unistd::close(fd);
    }
    nix_rc(r)
}

/// A fresh path under /tmp for one probe (the box's /tmp is writable).
fn scratch(name: &str) -> std::ffi::CString {
    let p = format!("/tmp/terra-probe-{name}-{}", std::process::id());
    let _ = std::fs::remove_file(&p);
    let _ = std::fs::remove_dir(&p);
    std::ffi::CString::new(p).unwrap()
}

/// A fresh regular file, mode 0644, for the chmod probes.
fn scratch_file(name: &str) -> std::ffi::CString {
    let p = scratch(name);
    std::fs::write(p.to_str().unwrap(), b"x").unwrap();
    std::fs::set_permissions(
        p.to_str().unwrap(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    p
}

/// A socket of (family, type, protocol), closed at once; family and type are
/// passed as 64-bit values so high garbage bits can be tried.
fn socket(family: u64, ty: u64, proto: u64) -> String {
    // SAFETY: socket(2) takes three integers and no pointer, so no memory of
    // ours is read or written; it only creates a descriptor in this process,
    // which is closed below.
    let fd = unsafe { libc::syscall(libc::SYS_socket, family, ty, proto) };
    if fd >= 0 {
        close_own(fd);
    }
    rc(fd)
}

fn socketpair(family: u64) -> String {
    let mut sv = [0i32; 2];
    // SAFETY: the only pointer is `sv`, a live local `[i32; 2]` that outlives
    // the call and has room for the two descriptors the kernel writes; the
    // descriptors belong to this process and are closed below.
    let r = unsafe {
        libc::syscall(
            libc::SYS_socketpair,
            family,
            libc::SOCK_STREAM,
            0,
            sv.as_mut_ptr(),
        )
    };
    if r == 0 {
        let _ = nix::unistd::close(sv[0]);
        let _ = nix::unistd::close(sv[1]);
    }
    rc(r)
}

/// Runs a raw clone with `flags`; the child exits at once.
fn clone_with(flags: u64) -> String {
    // SAFETY: a fork-like raw clone: no new stack, no tid or tls pointers
    // (all zero), SIGCHLD as exit signal. The child runs on a copy of this
    // process's memory and only calls `_exit`, so no lock or allocator state
    // copied from other threads is touched; the parent's memory is untouched.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags | libc::SIGCHLD as u64,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if pid == 0 {
        // SAFETY: in the cloned child: `_exit` ends it at once without running
        // atexit handlers or destructors of state copied from the parent.
        unsafe { libc::_exit(0) };
    }
    if pid < 0 {
        return last();
    }
    // Reaps our own child: `waitpid(pid, &status, 0)`.
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None);
    "ok".into()
}

pub fn probe(name: &str) -> String {
    match name {
        // getppid cannot fail, so a -1 here is a seccomp errno (nix passes the
        // raw value through).
        "getppid" => rc(nix::unistd::getppid().as_raw() as libc::c_long),
        "unshare" => nix_rc(nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER)),
        // mount("tmpfs", "/tmp", "tmpfs", 0, NULL).
        "mount" => nix_rc(nix::mount::mount(
            Some("tmpfs"),
            "/tmp",
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )),
        // SAFETY: keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0)
        // takes integers only and returns a keyring id: no memory of ours is
        // read or written.
        "keyctl" => rc(unsafe { libc::syscall(libc::SYS_keyctl, 0, -3i64, 0) }),
        // SAFETY: bpf with an unknown command (9999), a null attr pointer and
        // size 0: the kernel reads no memory of ours and writes none.
        "bpf" => rc(unsafe { libc::syscall(libc::SYS_bpf, 9999, 0usize, 0) }),
        // SAFETY: PTRACE_TRACEME ignores pid, addr and data (all zero, no
        // pointer used); it only marks this probe process as traced by its
        // parent.
        "ptrace" => rc(unsafe { libc::syscall(libc::SYS_ptrace, libc::PTRACE_TRACEME, 0, 0, 0) }),
        "io_uring" => {
            // SAFETY: io_uring_setup(1, NULL): the params pointer is null, so
            // the kernel fails with EFAULT (or the filter first) and writes no
            // memory of ours; a returned ring descriptor is closed.
            let r = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1, 0usize) };
            if r >= 0 {
                close_own(r);
            }
            rc(r)
        }
        "tiocsti" => {
            let ch = b'x';
            // SAFETY: TIOCSTI on fd 0 reads one byte through the pointer, which
            // points to the live local `ch` for the whole call; nothing is
            // written to our memory.
            rc(unsafe { libc::syscall(libc::SYS_ioctl, 0, 0x5412u64, &ch as *const u8) })
        }
        "tiocsti_high_bits" => {
            let ch = b'x';
            // SAFETY: as for "tiocsti": the kernel reads at most the one byte of
            // the live local `ch`; the high garbage bits only change the
            // request number the filter sees.
            rc(unsafe {
                libc::syscall(
                    libc::SYS_ioctl,
                    0,
                    0xffff_ffff_0000_5412u64,
                    &ch as *const u8,
                )
            })
        }
        "tiocgwinsz_badfd" => {
            let mut ws = libc::winsize {
                ws_row: 0,
                ws_col: 0,
                ws_xpixel: 0,
                ws_ypixel: 0,
            };
            // SAFETY: TIOCGWINSZ writes one `winsize` through the pointer, which
            // points to the live, writable local `ws` of that type for the whole
            // call (here fd -1 makes it fail with EBADF before any write).
            rc(unsafe {
                libc::syscall(
                    libc::SYS_ioctl,
                    -1,
                    libc::TIOCGWINSZ,
                    &mut ws as *mut libc::winsize,
                )
            })
        }
        "clone_newns" => clone_with(libc::CLONE_NEWNS as u64),
        "clone_newuser" => clone_with(libc::CLONE_NEWUSER as u64),
        "clone_plain" => clone_with(0),
        // SAFETY: clone3(NULL, 0): a size below the smallest clone_args makes
        // the kernel fail with EINVAL before it reads the (null) pointer; no
        // process is created and no memory of ours is touched.
        "clone3" => rc(unsafe { libc::syscall(libc::SYS_clone3, 0usize, 0usize) }),
        // Set-id modes (negative) and ordinary modes (twins). nix has no
        // chmod(2) wrapper (its fchmodat makes another syscall), so chmod stays
        // the libc call.
        "chmod_setuid" => {
            let f = scratch_file("chmod-suid");
            // SAFETY: `f` is a NUL-terminated CString alive for the whole call;
            // chmod only reads it and changes the mode of this probe's scratch file.
            rc(unsafe { libc::chmod(f.as_ptr(), 0o4755) } as libc::c_long)
        }
        "chmod_plain" => {
            let f = scratch_file("chmod-plain");
            // SAFETY: `f` is a NUL-terminated CString alive for the whole call;
            // chmod only reads it and changes the mode of this probe's scratch file.
            rc(unsafe { libc::chmod(f.as_ptr(), 0o755) } as libc::c_long)
        }
        "chmod_sticky_dir" => {
            let d = scratch("sticky");
            // mkdir(d, 0755); its result shows in the chmod below.
            let _ = nix::unistd::mkdir(d.as_c_str(), Mode::from_bits_retain(0o755));
            // SAFETY: `d` is a NUL-terminated CString alive for the whole call;
            // chmod only reads it and changes the mode of this probe's scratch dir.
            rc(unsafe { libc::chmod(d.as_ptr(), 0o1777) } as libc::c_long)
        }
        "fchmod_setgid" => {
            let f = scratch_file("fchmod-sgid");
            // open(f, O_RDONLY | O_CLOEXEC) (the mode nix passes is unused
            // without O_CREAT), then fchmod(fd, 02755).
            let fd = match nix::fcntl::open(
                f.as_c_str(),
                OFlag::O_RDONLY | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                Err(e) => return format!("open-failed-{}", errno_name(e as i32)),
            };
            let r = nix_rc(nix::sys::stat::fchmod(fd, Mode::from_bits_retain(0o2755)));
            let _ = nix::unistd::close(fd);
            r
        }
        "fchmodat2_setgid" => {
            let f = scratch_file("fchmodat2-sgid");
            // SAFETY: fchmodat2(AT_FDCWD, f, 02755, 0): the only pointer is `f`,
            // a NUL-terminated CString alive for the whole call, which the
            // kernel only reads; it changes this probe's scratch file only.
            rc(unsafe {
                libc::syscall(452, libc::AT_FDCWD, f.as_ptr(), 0o2755, 0) // fchmodat2
            })
        }
        "fchmodat_setuid_high_bits" => {
            // The kernel reads the mode as 32 bits: garbage above them must not hide S_ISUID.
            let f = scratch_file("fchmodat-high");
            // SAFETY: the only pointer is `f`, a NUL-terminated CString alive
            // for the whole call, which the kernel only reads; it changes this
            // probe's scratch file only.
            rc(unsafe {
                libc::syscall(
                    libc::SYS_fchmodat,
                    libc::AT_FDCWD,
                    f.as_ptr(),
                    0xffff_0000_0000_09edu64,
                )
            })
        }
        "openat_creat_setuid" => {
            let f = scratch("creat-suid");
            open_rc(&f, libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC, 0o4755)
        }
        "openat_tmpfile_setgid" => {
            let d = std::ffi::CString::new("/tmp").unwrap();
            open_rc(
                &d,
                libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC,
                0o2755,
            )
        }
        "openat_creat_plain" => {
            let f = scratch("creat-plain");
            open_rc(&f, libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC, 0o755)
        }
        "openat_nocreat_modebits" => {
            // Without O_CREAT or O_TMPFILE the mode is ignored, and so not checked.
            let f = scratch_file("nocreat");
            open_rc(&f, libc::O_RDONLY | libc::O_CLOEXEC, 0o6755)
        }
        "mkdirat_setgid" => {
            let d = scratch("mkdir-sgid");
            // mkdirat(AT_FDCWD, d, 02755).
            nix_rc(nix::sys::stat::mkdirat(
                Some(libc::AT_FDCWD),
                d.as_c_str(),
                Mode::from_bits_retain(0o2755),
            ))
        }
        "mknodat_setuid" => {
            let f = scratch("mknod-suid");
            // mknodat(AT_FDCWD, f, S_IFREG | 04755, 0).
            nix_rc(nix::sys::stat::mknodat(
                Some(libc::AT_FDCWD),
                f.as_c_str(),
                SFlag::S_IFREG,
                Mode::from_bits_retain(0o4755),
                0,
            ))
        }
        "openat2" => {
            let f = scratch("openat2");
            let how: [u64; 3] = [(libc::O_CREAT | libc::O_WRONLY) as u64, 0o644, 0];
            // SAFETY: `f` is a NUL-terminated CString and `how` a 24-byte
            // `[u64; 3]` laid out as struct open_how {flags, mode, resolve}, both
            // live locals for the whole call, which the kernel only reads; a
            // returned descriptor belongs to this process and is closed.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_openat2,
                    libc::AT_FDCWD,
                    f.as_ptr(),
                    how.as_ptr(),
                    24usize,
                )
            };
            if r >= 0 {
                close_own(r);
            }
            rc(r)
        }
        // Socket families (negative) and the plan's (twins).
        "socket_vsock" => socket(libc::AF_VSOCK as u64, libc::SOCK_STREAM as u64, 0),
        "socket_packet" => socket(libc::AF_PACKET as u64, libc::SOCK_DGRAM as u64, 0),
        "socket_alg" => socket(libc::AF_ALG as u64, libc::SOCK_SEQPACKET as u64, 0),
        "socket_vsock_high_bits" => socket(
            0xffff_ffff_0000_0000 | libc::AF_VSOCK as u64,
            libc::SOCK_STREAM as u64,
            0,
        ),
        "socket_netlink_audit" => socket(
            libc::AF_NETLINK as u64,
            libc::SOCK_RAW as u64,
            libc::NETLINK_AUDIT as u64,
        ),
        "socket_netlink_route" => socket(
            libc::AF_NETLINK as u64,
            (libc::SOCK_RAW | libc::SOCK_CLOEXEC) as u64,
            libc::NETLINK_ROUTE as u64,
        ),
        "socket_unix_flags" => socket(
            libc::AF_UNIX as u64,
            (libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u64,
            0,
        ),
        "socket_inet" => socket(libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0),
        "socketpair_inet" => socketpair(libc::AF_INET as u64),
        "socketpair_vsock" => socketpair(libc::AF_VSOCK as u64),
        "socketpair_unix" => socketpair(libc::AF_UNIX as u64),
        // The supplementary groups, comma-separated ("" when none).
        // (nix::unistd::getgroups sizes its buffer from sysconf, not from the
        // count, so the two libc calls stay.)
        "groups" => {
            // SAFETY: getgroups(0, NULL) only returns the count and writes nothing.
            let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
            let mut v = vec![0 as libc::gid_t; n.max(0) as usize];
            // SAFETY: `v` is a live Vec of exactly `n` gid_t (n >= 0 here, or
            // the call fails with EINVAL on -1 before writing); the kernel writes
            // at most `n` entries into it.
            let m = unsafe { libc::getgroups(n, v.as_mut_ptr()) };
            v.truncate(m.max(0) as usize);
            v.iter()
                .map(|g| g.to_string())
                .collect::<Vec<_>>()
                .join(",")
        }
        other => {
            if let Some(addr) = other.strip_prefix("connect:") {
                return match std::net::TcpStream::connect(addr) {
                    Ok(mut s) => {
                        let mut buf = String::new();
                        let _ = s.read_to_string(&mut buf);
                        format!("ok:{}", buf.trim())
                    }
                    Err(e) => errno_name(e.raw_os_error().unwrap_or(0)),
                };
            }
            format!("unknown-probe-{other}")
        }
    }
}

/// Parses `PROBE name=result` lines.
pub fn parse(out: &str) -> std::collections::BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.find("PROBE ").map(|i| &l[i + 6..]))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
