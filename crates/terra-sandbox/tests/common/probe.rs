//! In-box probes: the test binary itself is executed inside the box (its path
//! granted read-only) with TERRA_PROBE=name,name,... and prints one
//! `PROBE name=result` line per probe.
#![allow(dead_code)]
// TODO(issue 11): a `// SAFETY:` line for each raw syscall below (34 blocks),
// then drop this allow (the workspace lint denies undocumented unsafe).
#![allow(clippy::undocumented_unsafe_blocks)]

use std::io::Read;

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

/// Opens `path` with `flags` and `mode` (closing what it opened): "ok" or the errno.
fn open_rc(path: &std::ffi::CStr, flags: libc::c_int, mode: libc::c_uint) -> String {
    // SAFETY: `path` is a NUL-terminated string; a returned descriptor is closed.
    let fd = unsafe { libc::open(path.as_ptr(), flags, mode) };
    if fd >= 0 {
        // SAFETY: closing the descriptor just opened.
        unsafe { libc::close(fd) };
    }
    rc(fd as libc::c_long)
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
    // SAFETY: socket takes integers; a returned descriptor is closed.
    let fd = unsafe { libc::syscall(libc::SYS_socket, family, ty, proto) };
    if fd >= 0 {
        // SAFETY: our own descriptor.
        unsafe { libc::close(fd as i32) };
    }
    rc(fd)
}

fn socketpair(family: u64) -> String {
    let mut sv = [0i32; 2];
    // SAFETY: sv has room for the two descriptors, closed on success.
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
        // SAFETY: our own descriptors.
        unsafe {
            libc::close(sv[0]);
            libc::close(sv[1]);
        }
    }
    rc(r)
}

/// Runs a raw clone with `flags`; the child exits at once.
fn clone_with(flags: u64) -> String {
    // SAFETY: a fork-like raw clone (no new stack): the child only calls _exit.
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
        // SAFETY: in the child.
        unsafe { libc::_exit(0) };
    }
    if pid < 0 {
        return last();
    }
    let mut st = 0;
    // SAFETY: our own child.
    unsafe { libc::waitpid(pid as i32, &mut st, 0) };
    "ok".into()
}

pub fn probe(name: &str) -> String {
    let c = |s: &str| std::ffi::CString::new(s).unwrap();
    // SAFETY (all blocks below): raw system calls with valid or deliberately
    // invalid (null / -1) arguments; none writes to memory we own except where noted.
    match name {
        "getppid" => rc(unsafe { libc::getppid() } as libc::c_long),
        "unshare" => rc(unsafe { libc::unshare(libc::CLONE_NEWUSER) } as libc::c_long),
        "mount" => {
            let (t, f) = (c("/tmp"), c("tmpfs"));
            rc(
                unsafe { libc::mount(f.as_ptr(), t.as_ptr(), f.as_ptr(), 0, std::ptr::null()) }
                    as libc::c_long,
            )
        }
        "keyctl" => rc(unsafe { libc::syscall(libc::SYS_keyctl, 0, -3i64, 0) }),
        "bpf" => rc(unsafe { libc::syscall(libc::SYS_bpf, 9999, 0usize, 0) }),
        "ptrace" => rc(unsafe { libc::syscall(libc::SYS_ptrace, libc::PTRACE_TRACEME, 0, 0, 0) }),
        "io_uring" => rc(unsafe { libc::syscall(libc::SYS_io_uring_setup, 1, 0usize) }),
        "tiocsti" => {
            let ch = b'x';
            rc(unsafe { libc::syscall(libc::SYS_ioctl, 0, 0x5412u64, &ch as *const u8) })
        }
        "tiocsti_high_bits" => {
            let ch = b'x';
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
            let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
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
        "clone3" => rc(unsafe { libc::syscall(libc::SYS_clone3, 0usize, 0usize) }),
        // Set-id modes (negative) and ordinary modes (twins).
        "chmod_setuid" => {
            let f = scratch_file("chmod-suid");
            rc(unsafe { libc::chmod(f.as_ptr(), 0o4755) } as libc::c_long)
        }
        "chmod_plain" => {
            let f = scratch_file("chmod-plain");
            rc(unsafe { libc::chmod(f.as_ptr(), 0o755) } as libc::c_long)
        }
        "chmod_sticky_dir" => {
            let d = scratch("sticky");
            unsafe { libc::mkdir(d.as_ptr(), 0o755) };
            rc(unsafe { libc::chmod(d.as_ptr(), 0o1777) } as libc::c_long)
        }
        "fchmod_setgid" => {
            let f = scratch_file("fchmod-sgid");
            let fd = unsafe { libc::open(f.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            let r = rc(unsafe { libc::fchmod(fd, 0o2755) } as libc::c_long);
            unsafe { libc::close(fd) };
            r
        }
        "fchmodat2_setgid" => {
            let f = scratch_file("fchmodat2-sgid");
            rc(unsafe {
                libc::syscall(452, libc::AT_FDCWD, f.as_ptr(), 0o2755, 0) // fchmodat2
            })
        }
        "fchmodat_setuid_high_bits" => {
            // The kernel reads the mode as 32 bits: garbage above them must not hide S_ISUID.
            let f = scratch_file("fchmodat-high");
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
            rc(unsafe { libc::mkdirat(libc::AT_FDCWD, d.as_ptr(), 0o2755) } as libc::c_long)
        }
        "mknodat_setuid" => {
            let f = scratch("mknod-suid");
            rc(
                unsafe { libc::mknodat(libc::AT_FDCWD, f.as_ptr(), libc::S_IFREG | 0o4755, 0) }
                    as libc::c_long,
            )
        }
        "openat2" => {
            let f = scratch("openat2");
            let how: [u64; 3] = [(libc::O_CREAT | libc::O_WRONLY) as u64, 0o644, 0];
            rc(unsafe {
                libc::syscall(
                    libc::SYS_openat2,
                    libc::AT_FDCWD,
                    f.as_ptr(),
                    how.as_ptr(),
                    24usize,
                )
            })
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
        "groups" => {
            let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
            let mut v = vec![0 as libc::gid_t; n.max(0) as usize];
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
