//! The tables as programs: each compiles for every architecture terra
//! supports, starts with the architecture check and the x32 refusal, and
//! does what it says when installed — a role's allowlist kills the process
//! on a call off its list, on an x32 number and on a call through another
//! ABI, while the calls it lists still work. Each check runs in a forked
//! child that installs the filters and reports through its exit status.
#![cfg(target_os = "linux")]

use terra_seccomp::{allowed, compile, compile_for, describe, Program, Table, TargetArch};

const ROLES: [Table; 5] = [
    Table::Supervisor,
    Table::Broker,
    Table::BoxInit,
    Table::BoxService,
    Table::VmHost,
];

/// How a forked child that installed `programs` and ran `body` ended:
/// Ok(exit code) or Err(signal).
fn in_child(programs: &[Program], body: fn() -> i32) -> Result<i32, i32> {
    // SAFETY: the child only calls prctl/seccomp (install) and raw system
    // calls, then _exit; the programs were compiled before the fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = match terra_seccomp::install(programs) {
            Ok(()) => body(),
            Err(_) => 100,
        };
        // SAFETY: ends the forked child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid);
    if libc::WIFSIGNALED(status) {
        Err(libc::WTERMSIG(status))
    } else {
        Ok(libc::WEXITSTATUS(status))
    }
}

/// A call on every allowlist (getpid), checked by its result.
fn call_getpid() -> i32 {
    // SAFETY: getpid has no arguments and no effect.
    let pid = unsafe { libc::syscall(libc::SYS_getpid) };
    if pid > 0 {
        0
    } else {
        1
    }
}

/// A call on no allowlist: mount(2) with null arguments (EFAULT if it ran).
fn call_mount() -> i32 {
    // SAFETY: null pointers make the kernel fail the call; nothing is mounted.
    unsafe { libc::syscall(libc::SYS_mount, 0usize, 0usize, 0usize, 0usize, 0usize) };
    0
}

/// getpid through its x32 number.
#[cfg(target_arch = "x86_64")]
fn call_x32_getpid() -> i32 {
    // SAFETY: an x32 number for getpid; without a filter the kernel runs it
    // or answers ENOSYS (x32 disabled).
    let r = unsafe { libc::syscall(terra_seccomp::X32_SYSCALL_BIT as i64 | libc::SYS_getpid) };
    if r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM) {
        3
    } else {
        0
    }
}

/// getpid through the i386 ABI (int 0x80; number 20 there).
#[cfg(target_arch = "x86_64")]
fn call_i386_getpid() -> i32 {
    let ret: i64;
    // SAFETY: int 0x80 with eax = 20 (getpid on i386) reads and writes no
    // memory; the kernel clobbers only eax (and r8-r11 are saved).
    unsafe {
        std::arch::asm!("int 0x80", inlateout("rax") 20i64 => ret, out("r8") _, out("r9") _, out("r10") _, out("r11") _);
    }
    i32::from(ret <= 0)
}

fn socket_unix() -> i32 {
    // SAFETY: creates (and leaks, the child exits at once) one socket.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) };
    i32::from(fd < 0)
}

#[test]
fn every_table_compiles_for_every_architecture() {
    for t in Table::ALL {
        for arch in [TargetArch::x86_64, TargetArch::aarch64] {
            let p = compile_for(t, arch, None).unwrap_or_else(|e| panic!("{e}"));
            assert!(!p.is_empty(), "{}", t.name());
        }
    }
}

#[test]
fn the_build_compiled_exactly_the_tables() {
    for t in Table::ALL {
        let built = compile(t).unwrap();
        let now = compile_for(t, terra_seccomp::native_arch(), None).unwrap();
        assert_eq!(built.len(), now.len(), "{}", t.name());
        for (b, n) in built.iter().zip(&now) {
            assert_eq!(b.name, n.name);
            assert_eq!(b.bpf, n.bpf, "{}", b.name);
        }
    }
    assert!(terra_seccomp::compile_only(Table::LandlockClosures, &["nope"]).is_err());
}

#[test]
fn every_x86_64_program_refuses_x32_right_after_the_arch_check() {
    for t in Table::ALL {
        for p in compile_for(t, TargetArch::x86_64, None).unwrap() {
            // 0-2: arch check (kill), 3-5: nr >= 0x40000000 -> refusal.
            assert_eq!(p.bpf[2].k, libc::SECCOMP_RET_KILL_PROCESS, "{}", p.name);
            assert_eq!(p.bpf[4].k, terra_seccomp::X32_SYSCALL_BIT, "{}", p.name);
            let refusal = p.bpf[5].k & libc::SECCOMP_RET_ACTION_FULL;
            assert_ne!(refusal, libc::SECCOMP_RET_ALLOW, "{}", p.name);
            // A program with an allowlist in it kills x32 calls.
            if ROLES.contains(&t) {
                assert_eq!(refusal, libc::SECCOMP_RET_KILL_PROCESS, "{}", p.name);
            }
        }
    }
}

#[test]
fn role_allowlists_list_the_calls_every_process_needs_and_nothing_dangerous() {
    for t in ROLES {
        let a = allowed(t, "x86_64").unwrap();
        for needed in ["exit_group", "write", "rt_sigreturn"] {
            assert!(a.contains(needed), "{} lacks {needed}", t.name());
        }
        for never in [
            "execve",
            "execveat",
            "fork",
            "vfork",
            "ptrace",
            "mount",
            "bind",
            "listen",
            "unshare",
            "setns",
            "setuid",
            "bpf",
            "chroot",
            "pivot_root",
            "io_uring_setup",
        ] {
            // The box's service binds each socket the broker hands to the
            // workload to a port by number (so the workload can never bind
            // it anew); it never listens.
            if t == Table::BoxService && never == "bind" {
                continue;
            }
            assert!(!a.contains(never), "{} allows {never}", t.name());
        }
    }
}

#[test]
fn a_role_that_calls_off_its_list_is_killed() {
    for t in ROLES {
        let programs = compile(t).unwrap();
        assert_eq!(
            in_child(&programs, call_getpid),
            Ok(0),
            "{}: getpid (listed) must work",
            t.name()
        );
        assert_eq!(
            in_child(&programs, call_mount),
            Err(libc::SIGSYS),
            "{}: mount (off the list) must kill",
            t.name()
        );
    }
    // Conditions hold too: the broker may create only AF_INET/AF_INET6 sockets.
    let broker = compile(Table::Broker).unwrap();
    assert_eq!(in_child(&broker, socket_unix), Err(libc::SIGSYS));
    assert_eq!(in_child(&[], socket_unix), Ok(0), "the unfiltered twin");
}

fn open_etc_passwd() -> i32 {
    // SAFETY: a NUL-terminated path; the descriptor, if any, dies with the child.
    let fd = unsafe { libc::open(c"/etc/passwd".as_ptr(), libc::O_RDONLY) };
    if fd < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EACCES) {
        4
    } else {
        0
    }
}

#[test]
fn the_broker_and_the_service_open_no_file_and_are_not_killed_for_trying() {
    for t in [Table::Broker, Table::BoxService] {
        let programs = compile(t).unwrap();
        assert_eq!(in_child(&programs, open_etc_passwd), Ok(4), "{}", t.name());
    }
    assert_eq!(in_child(&[], open_etc_passwd), Ok(0), "the unfiltered twin");
}

#[cfg(target_arch = "x86_64")]
#[test]
fn x32_and_i386_calls_are_killed_in_every_role_and_refused_in_the_workload() {
    for t in ROLES {
        let programs = compile(t).unwrap();
        assert_eq!(
            in_child(&programs, call_x32_getpid),
            Err(libc::SIGSYS),
            "{}: x32",
            t.name()
        );
        assert_eq!(
            in_child(&programs, call_i386_getpid),
            Err(libc::SIGSYS),
            "{}: int 0x80",
            t.name()
        );
    }
    let workload = compile(Table::Workload).unwrap();
    assert_eq!(
        in_child(&workload, call_x32_getpid),
        Ok(3),
        "the workload's x32 calls fail with EPERM"
    );
    assert_eq!(in_child(&workload, call_i386_getpid), Err(libc::SIGSYS));
    assert_eq!(in_child(&workload, call_getpid), Ok(0));
}

#[test]
fn descriptions_come_from_the_tables() {
    let d = describe(Table::Workload, None).unwrap();
    for needle in [
        "seccomp EPERM ptrace",
        "clone when flags hold CLONE_NEWNS",
        "CLONE_NEWTIME",
        "seccomp ENOSYS clone3 openat2",
        "S_ISUID",
        "NETLINK_ROUTE",
        "TIOCSTI",
        "a call of another architecture kills the process",
    ] {
        assert!(d.contains(needle), "{needle} missing from:\n{d}");
    }
    // x32 exists on x86_64 only.
    assert_eq!(
        d.contains("x32 calls get each filter's refusal"),
        cfg!(target_arch = "x86_64"),
        "{d}"
    );
    let b = describe(Table::Broker, None).unwrap();
    assert!(b.contains("allowlist of"), "{b}");
    assert!(
        b.contains("any other call of terra __network kills the process"),
        "{b}"
    );
    let only = describe(Table::LandlockClosures, Some(&["inet"])).unwrap();
    assert!(
        only.contains("AF_INET") && !only.contains("AF_UNIX"),
        "{only}"
    );
}
