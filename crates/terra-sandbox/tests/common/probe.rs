//! In-box probes: the test binary itself is executed inside the box (its path
//! granted read-only) with TERRA_PROBE=name,name,... and prints one
//! `PROBE name=result` line per probe.
#![allow(dead_code)]

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
