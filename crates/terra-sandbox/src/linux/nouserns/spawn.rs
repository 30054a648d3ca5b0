//! Starting the workload without namespaces: one fork of the (single-threaded)
//! caller, which confines itself and executes the command.
//!
//! The child, in order: default signal dispositions and an empty mask; the
//! parent-death signal (and a check that the parent is still the caller);
//! every descriptor above 2 closed but the status pipe and the canary gate;
//! `chdir`; capabilities (uid 0: every set emptied and securebits locked, as
//! in the linux box; another uid: the ambient set cleared, so with
//! no_new_privs it has none after exec); no_new_privs; Landlock; seccomp
//! (the box's workload filter, then this backend's closures); the
//! activation check; execve. It stays in the caller's process group and
//! session: it shares the caller's terminal, as any child would, and the
//! terminal's own signals reach it directly.

use std::os::fd::{AsFd, BorrowedFd};

use nix::unistd::{ForkResult, Pid};
use terra_policy::{NetworkMode, RootMode};

use super::super::landlock::{FsAccess, LandlockPlan, NetRule};
use super::super::prepare::{exec_strings, ExecStrings};
use super::super::status::{self, Status};
use super::super::workload::{self, WorkloadPrep};
use super::super::{seccomp, sys, BoxHandle, BoxSpec, SandboxError};
use super::filter::{self, Closures};
use super::rules::{self, TcpRule};

/// Everything the child needs, computed before the fork.
pub struct Prepared<'a> {
    pub workload: WorkloadPrep<'a>,
    pub fs: Vec<(String, FsAccess)>,
    pub tcp: TcpRule,
}

fn is_dir(p: &str) -> Option<bool> {
    std::fs::metadata(p).ok().map(|m| m.is_dir())
}

/// The closures a plan gets on this kernel.
pub fn closures(network: NetworkMode, kernel_abi: Option<i32>) -> Closures {
    Closures {
        inet: network == NetworkMode::None,
        unix_paths: kernel_abi.unwrap_or(0) < rules::RESOLVE_UNIX_ABI,
    }
}

/// Checks the plan against what this backend can enforce and derives its
/// Landlock rules.
pub fn plan_rules(spec: &BoxSpec) -> Result<(Vec<(String, FsAccess)>, TcpRule), SandboxError> {
    let tcp = match spec.plan.network {
        NetworkMode::None => TcpRule::Nothing,
        NetworkMode::Direct => TcpRule::Unrestricted,
        NetworkMode::Mediated => {
            return Err(SandboxError::UnsupportedCapability {
                capability: terra_policy::Capability::NetworkMediated,
                why: format!(
                    "{}. Instead: {}",
                    super::missing_reason(terra_policy::Capability::NetworkMediated),
                    super::MEDIATED_INSTEAD
                ),
            })
        }
    };
    if spec.plan.root_mode == RootMode::EphemeralWrite {
        return Err(SandboxError::UnsupportedCapability {
            capability: terra_policy::Capability::RootEphemeralWrite,
            why: "the landlock backend has no private root to discard; use --backend linux".into(),
        });
    }
    let temp = std::fs::canonicalize(&spec.temp_dir)
        .map_err(|e| SandboxError::io_at("realpath", &e, spec.temp_dir.display().to_string()))?;
    let temp = temp
        .to_str()
        .ok_or_else(|| SandboxError::Unsupported(format!("{} is not UTF-8", temp.display())))?;
    let fs = rules::fs_rules(&spec.plan.rules, spec.plan.network, temp, &is_dir)?;
    Ok((fs, tcp))
}

pub fn prepare(spec: &BoxSpec) -> Result<Prepared<'_>, SandboxError> {
    if spec.mediated.is_some() {
        return Err(SandboxError::InvalidRequest(
            "the landlock backend takes no broker socket".into(),
        ));
    }
    let (fs, tcp) = plan_rules(spec)?;
    let ExecStrings {
        candidates,
        argv,
        envp,
        cwd,
    } = exec_strings(&spec.argv, &spec.env, &spec.cwd)?;
    let mut filters = seccomp::build()?;
    let kabi = super::super::landlock::kernel_abi();
    filters.extend(filter::build(closures(spec.plan.network, kabi))?);
    let canary_path = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(
        spec.canary_path.as_os_str(),
    ))
    .map_err(|_| SandboxError::InvalidRequest("the canary path holds a NUL byte".into()))?;
    Ok(Prepared {
        workload: WorkloadPrep {
            candidates,
            argv,
            envp,
            cwd,
            canary_path,
            canary_tcp: spec.canary_tcp,
            canary_gate: spec.canary_gate.as_ref().map(|fd| fd.as_fd()),
            rlimits: spec.rlimits,
            // Unused by this backend's child (it applies `fs` itself); kept
            // so the shared activation and exec code takes one type.
            landlock: LandlockPlan {
                fs: Vec::new(),
                net: NetRule::Unrestricted,
            },
            seccomp: filters,
            notify_seccomp: None,
        },
        fs,
        tcp,
    })
}

/// Forks the workload. The caller must be single-threaded (the supervisor).
pub fn spawn(spec: &BoxSpec) -> Result<BoxHandle, SandboxError> {
    let prep = prepare(spec)?;
    let (status_r, status_w) = sys::pipe_cloexec()?;
    let caller = nix::unistd::getpid();
    // SAFETY: the child only makes system calls and allocates (the
    // allocator's lock is reset at fork(3), see `sys::fork`) and ends with
    // execve or `exit_now`; it never returns here.
    let pid = match unsafe { sys::fork() }? {
        ForkResult::Child => {
            drop(status_r);
            child(&prep, status_w.as_fd(), caller)
        }
        ForkResult::Parent { child } => child,
    };
    drop(status_w);
    Ok(BoxHandle {
        pid: pid.as_raw(),
        status: status_r,
        result: None,
        _life: None,
        terminal: None,
    })
}

fn refuse(fd: BorrowedFd<'_>, before: Vec<Status>, why: String) -> ! {
    let mut all = before;
    all.push(Status::Refused(why));
    status::send_all(fd, &all);
    sys::exit_now(crate::EXIT_REFUSED.into())
}

/// Without a user namespace a non-root workload cannot set securebits; it
/// clears its ambient set instead (with no_new_privs, exec then grants it no
/// capability). uid 0 drops everything, as in the linux box.
fn drop_capabilities() -> Result<(), SandboxError> {
    if nix::unistd::geteuid().is_root() {
        return sys::drop_all_capabilities();
    }
    // SAFETY: integer arguments only; clears this thread's ambient set.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if rc != 0 {
        return Err(SandboxError::sys(
            "prctl(PR_CAP_AMBIENT_CLEAR_ALL)",
            nix::errno::Errno::last(),
        ));
    }
    sys::no_new_privs()
}

/// The scope check: the workload must not be able to signal its parent, a
/// process outside its Landlock domain (signal 0 only checks permission).
fn signal_scope_holds() -> Result<(), SandboxError> {
    match nix::sys::signal::kill(nix::unistd::getppid(), None) {
        Err(nix::errno::Errno::EPERM) => Ok(()),
        Ok(()) => Err(SandboxError::Activation(
            "the workload could signal a process outside its Landlock domain (its parent)".into(),
        )),
        Err(e) => Err(SandboxError::Activation(format!(
            "signalling the parent failed with {e}, not EPERM"
        ))),
    }
}

/// The closure check: changing the limits of another process must fail with
/// EPERM (the `host` closure). Pid -1 names no process, so the call has no
/// effect either way: without the closure the kernel answers ESRCH.
fn process_closure_holds() -> Result<(), SandboxError> {
    let limit = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` outlives the call, which only reads it; the old-limit
    // pointer is null.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            -1 as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &limit as *const libc::rlimit64,
            std::ptr::null_mut::<libc::rlimit64>(),
        )
    };
    match (rc, nix::errno::Errno::last()) {
        (-1, nix::errno::Errno::EPERM) => Ok(()),
        (-1, e) => Err(SandboxError::Activation(format!(
            "changing another process's limits failed with {e}, not EPERM: the seccomp filter that guards host processes is missing"
        ))),
        _ => Err(SandboxError::Activation(
            "changing another process's limits did not fail: the seccomp filter that guards host processes is missing".into(),
        )),
    }
}

fn child(prep: &Prepared, status_fd: BorrowedFd<'_>, caller: Pid) -> ! {
    sys::reset_signals();
    if !sys::die_with_parent(caller) {
        sys::exit_now(crate::EXIT_REFUSED.into());
    }
    let w = &prep.workload;
    let mut keep = vec![sys::raw(&status_fd)];
    keep.extend(w.canary_gate.as_ref().map(sys::raw));
    // SAFETY: this child never returns (it execs or exits), so no owner of a
    // closed descriptor is used or dropped again.
    unsafe { sys::close_fds_except(&keep) };
    if let Err(e) = sys::chdir(&w.cwd) {
        refuse(
            status_fd,
            vec![],
            format!("working directory {} is not granted: {e}", w.cwd),
        );
    }
    if let Err(e) = drop_capabilities() {
        refuse(status_fd, vec![], e.to_string());
    }
    if let Err(e) = super::super::rlimits::apply(&w.rlimits) {
        refuse(status_fd, vec![], format!("resource limits: {e}"));
    }
    let abi = match rules::apply(&prep.fs, prep.tcp) {
        Ok(abi) => abi,
        Err(e) => refuse(status_fd, vec![Status::Landlock(None)], e.to_string()),
    };
    let landlock = Status::Landlock(Some(abi));
    if let Err(e) = seccomp::install(&w.seccomp) {
        refuse(status_fd, vec![landlock], e.to_string());
    }
    if let Err(e) = workload::activation(w)
        .and_then(|()| signal_scope_holds())
        .and_then(|()| process_closure_holds())
    {
        let why = match &e {
            SandboxError::Activation(why) => why.clone(),
            other => other.to_string(),
        };
        refuse(
            status_fd,
            vec![landlock, Status::Activation(why)],
            e.to_string(),
        );
    }
    status::send_all(status_fd, &[landlock, Status::Activation("passed".into())]);
    workload::exec(w, status_fd)
}
