//! A confined host role (the broker): own user, PID, mount, IPC and UTS
//! namespaces, host network; a tmpfs root holding only the given files
//! read-only; cleared environment, no capabilities, no_new_privs; then `main`
//! runs in process (no exec) as PID 1 of its namespace.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use nix::fcntl::{fcntl, FcntlArg};
use nix::sched::{unshare, CloneFlags};
use nix::unistd::{dup2, ForkResult, Pid};

use super::lower::MountOp;
use super::{init, mounts, sys, RoleConfig, SandboxError};
use crate::EXIT_REFUSED;

struct RolePrep {
    uid: u32,
    gid: u32,
    ops: Vec<MountOp>,
    /// (descriptor, wanted number)
    fds: Vec<(OwnedFd, RawFd)>,
}

pub fn spawn(config: RoleConfig, main: fn() -> i32) -> Result<i32, SandboxError> {
    let mut ops = Vec::new();
    let mut files: Vec<String> = Vec::new();
    for f in &config.read_only_files {
        let c = std::fs::canonicalize(f)
            .map_err(|e| SandboxError::io_at("realpath", &e, f.display().to_string()))?;
        let p = c
            .to_str()
            .ok_or_else(|| SandboxError::Unsupported(format!("{} is not UTF-8", c.display())))?;
        files.push(p.to_string());
    }
    files.sort_by_key(|p| p.matches('/').count());
    for p in files {
        let dir = std::fs::metadata(&p).map(|m| m.is_dir()).unwrap_or(false);
        ops.push(MountOp::Bind {
            path: p,
            dir,
            writable: false,
        });
    }
    ops.push(MountOp::RootReadOnly);
    for (_, n) in &config.keep_fds {
        if *n < 0 {
            return Err(SandboxError::InvalidRequest(format!(
                "invalid descriptor number {n}"
            )));
        }
    }
    let (uid, gid) = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    let prep = RolePrep {
        uid,
        gid,
        ops,
        fds: config.keep_fds,
    };
    let caller = nix::unistd::getpid();
    // SAFETY: the child only makes system calls, allocates (the allocator's
    // lock is reset at fork(3), see `sys::fork`) and ends with `exit_now` or
    // in `supervise_child`; it never returns here.
    match unsafe { sys::fork() }? {
        ForkResult::Child => outer(prep, caller, main),
        // `prep` and the kept descriptors are dropped (closed) here.
        ForkResult::Parent { child } => Ok(child.as_raw()),
    }
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    let msg = format!("terra role: {what}: {e}\n");
    sys::write_all_fd(std::io::stderr().as_fd(), msg.as_bytes());
    sys::exit_now(EXIT_REFUSED.into())
}

/// The role's launcher: namespaces, then PID 1 of them.
fn outer(prep: RolePrep, caller: Pid, main: fn() -> i32) -> ! {
    if !sys::die_with_parent(caller) {
        sys::exit_now(EXIT_REFUSED.into());
    }
    let keep: Vec<RawFd> = prep.fds.iter().map(|(fd, _)| fd.as_raw_fd()).collect();
    // SAFETY: this child never returns to the caller's code (it ends with
    // `exit_now` or in `supervise_child`); what it keeps is in `prep`.
    unsafe { sys::close_fds_except(&keep) };
    let flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    if let Err(errno) = unshare(flags) {
        fail(
            "unshare",
            SandboxError::sys_at("unshare", errno, "user, mount, pid, ipc, uts"),
        );
    }
    if let Err(e) = sys::write_id_maps(prep.uid, prep.gid) {
        fail("uid/gid maps", e);
    }
    let (life_r, life_w) = sys::pipe_cloexec().unwrap_or_else(|e| fail("pipe", e));
    let sigs = sys::block_forwarded();
    // SAFETY: this process has one thread (a fork child of the caller's
    // calling thread); the child ends in `inner`, never returning here.
    let child = match unsafe { sys::fork() } {
        Ok(ForkResult::Child) => {
            drop(life_w);
            inner(prep, life_r, main)
        }
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => fail("fork", e),
    };
    drop(life_r);
    drop(prep);
    init::supervise_child(child, &sigs, None)
}

fn inner(prep: RolePrep, life_r: OwnedFd, main: fn() -> i32) -> ! {
    init::arm_parent_death(life_r);
    sys::reset_signals();
    if let Err(e) = mounts::enter_staging()
        .and_then(|_| mounts::apply(&prep.ops))
        .and_then(|_| mounts::enter_new_root())
    {
        fail("root", e);
    }
    // Move kept descriptors above every wanted number first, so no dup2 clobbers another.
    let high: Vec<(RawFd, RawFd)> = prep
        .fds
        .iter()
        .map(
            |(fd, n)| match fcntl(fd.as_raw_fd(), FcntlArg::F_DUPFD_CLOEXEC(1024)) {
                Ok(h) => (h, *n),
                Err(errno) => fail(
                    "fcntl",
                    SandboxError::sys_at("fcntl(F_DUPFD)", errno, fd.as_raw_fd().to_string()),
                ),
            },
        )
        .collect();
    for (h, n) in &high {
        // dup2 onto the wanted number; the result is not close-on-exec.
        if let Err(errno) = dup2(*h, *n) {
            fail("dup2", SandboxError::sys_at("dup2", errno, n.to_string()));
        }
    }
    let wanted: Vec<RawFd> = high.iter().map(|(_, n)| *n).collect();
    // The kept descriptors now live at their wanted numbers only.
    std::mem::forget(prep.fds);
    // SAFETY: this process never returns (it ends with `exit_now`); the
    // originals of the kept descriptors were given up just above.
    unsafe { sys::close_fds_except(&wanted) };
    // SAFETY: clearenv only touches this process's environment; the process is
    // single-threaded here (a fresh fork child).
    unsafe { libc::clearenv() };
    if let Err(e) = sys::drop_all_capabilities() {
        fail("capabilities", e);
    }
    let code = main();
    sys::exit_now(code)
}
