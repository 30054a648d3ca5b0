//! A confined host role (the broker): own user, PID, mount, IPC and UTS
//! namespaces, host network; a tmpfs root holding only the given files
//! read-only; cleared environment, no capabilities, no_new_privs; then `main`
//! runs in process (no exec) as PID 1 of its namespace.

use std::os::fd::IntoRawFd;

use super::lower::MountOp;
use super::{init, mounts, sys, RoleConfig, SandboxError};

struct RolePrep {
    uid: u32,
    gid: u32,
    ops: Vec<MountOp>,
    /// (current fd, wanted number)
    fds: Vec<(i32, i32)>,
}

pub fn spawn(config: RoleConfig, main: fn() -> i32) -> Result<i32, SandboxError> {
    let mut ops = Vec::new();
    let mut files: Vec<String> = Vec::new();
    for f in &config.read_only_files {
        let c = std::fs::canonicalize(f)
            .map_err(|e| SandboxError::Io(format!("{}: {e}", f.display())))?;
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
            return Err(SandboxError::Launch(format!(
                "invalid descriptor number {n}"
            )));
        }
    }
    // SAFETY: geteuid/getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let fds: Vec<(i32, i32)> = config
        .keep_fds
        .into_iter()
        .map(|(fd, n)| (fd.into_raw_fd(), n))
        .collect();
    let prep = RolePrep { uid, gid, ops, fds };
    // SAFETY: getpid has no preconditions.
    let caller = unsafe { libc::getpid() };
    let res = match sys::fork() {
        Ok(0) => outer(&prep, caller, main),
        Ok(pid) => Ok(pid),
        Err(e) => Err(SandboxError::Launch(e)),
    };
    for (fd, _) in &prep.fds {
        sys::close(*fd);
    }
    res
}

fn fail(what: &str, e: String) -> ! {
    let msg = format!("terra role: {what}: {e}\n");
    sys::write_all_fd(2, msg.as_bytes());
    sys::exit_now(125)
}

/// The role's launcher: namespaces, then PID 1 of them.
fn outer(prep: &RolePrep, caller: libc::pid_t, main: fn() -> i32) -> ! {
    if !sys::die_with_parent(caller) {
        sys::exit_now(125);
    }
    let keep: Vec<i32> = prep.fds.iter().map(|(fd, _)| *fd).collect();
    sys::close_fds_except(&keep);
    let flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS;
    // SAFETY: unshare with namespace flags only affects this process.
    if unsafe { libc::unshare(flags) } != 0 {
        fail(
            "unshare",
            sys::errno_str("unshare", "user, mount, pid, ipc, uts"),
        );
    }
    if let Err(e) = sys::write_id_maps(prep.uid, prep.gid) {
        fail("uid/gid maps", e);
    }
    let (life_r, life_w) = sys::pipe_cloexec().unwrap_or_else(|e| fail("pipe", e));
    let sigs = sys::block_forwarded();
    let child = match sys::fork() {
        Ok(0) => {
            sys::close(life_w);
            inner(prep, life_r, main)
        }
        Ok(pid) => pid,
        Err(e) => fail("fork", e),
    };
    sys::close(life_r);
    for fd in &keep {
        sys::close(*fd);
    }
    init::supervise_child(child, &sigs, None)
}

fn inner(prep: &RolePrep, life_r: i32, main: fn() -> i32) -> ! {
    init::arm_parent_death(life_r);
    sys::reset_signals();
    if let Err(e) = mounts::enter_staging()
        .and_then(|_| mounts::apply(&prep.ops))
        .and_then(|_| mounts::enter_new_root())
    {
        fail("root", e);
    }
    // Move kept descriptors above every wanted number first, so no dup2 clobbers another.
    let high: Vec<(i32, i32)> = prep
        .fds
        .iter()
        .map(|(fd, n)| {
            // SAFETY: duplicating a descriptor we own.
            let h = unsafe { libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 1024) };
            if h < 0 {
                fail("fcntl", sys::errno_str("F_DUPFD", &fd.to_string()));
            }
            (h, *n)
        })
        .collect();
    for (h, n) in &high {
        // SAFETY: dup2 onto the wanted number; the result is not close-on-exec.
        if unsafe { libc::dup2(*h, *n) } < 0 {
            fail("dup2", sys::errno_str("dup2", &n.to_string()));
        }
    }
    let wanted: Vec<i32> = high.iter().map(|(_, n)| *n).collect();
    sys::close_fds_except(&wanted);
    // SAFETY: clearenv only touches this process's environment; the process is
    // single-threaded here (a fresh fork child).
    unsafe { libc::clearenv() };
    if let Err(e) = sys::drop_all_capabilities() {
        fail("capabilities", e);
    }
    let code = main();
    sys::exit_now(code)
}
