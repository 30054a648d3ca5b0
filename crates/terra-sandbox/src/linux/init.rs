//! The process chain of a box, in one of two shapes:
//!
//! ```text
//! single-threaded caller (the supervisor):
//! caller ── init: clone(2) straight into new user/mount/PID/IPC/UTS[/net]
//!           │     namespaces, PID 1 of the new PID namespace (builds the root;
//!           │     reaps; forwards signals; reports how the workload ended)
//!           ├─ service (mediated networking only)
//!           └─ workload (caps dropped, Landlock, seccomp, exec)
//!
//! multi-threaded caller (e.g. a test harness):
//! caller ── launcher (fork(3); unshares the namespaces; forwards signals; mirrors the exit)
//!             └─ init, PID 1 of the new PID namespace (as above)
//! ```
//!
//! Why two shapes: a raw clone(2) saves a process (about 1.5 ms a run), but
//! libc does not prepare its locks for such a child, so it is only safe when
//! no other thread can hold one (the caller has exactly one thread). fork(3)
//! is safe in any caller.
//!
//! Every child sets PR_SET_PDEATHSIG(SIGKILL) and then checks that its parent
//! still lives, so killing the caller at any moment kills the whole chain; and
//! when init exits the kernel kills everything left in the PID namespace.
//!
//! A PID-namespace init cannot die by a signal it sends itself, so init does
//! not mirror the workload's end: it writes it (2 bytes) to a result pipe,
//! read by the launcher or, in the cloned shape, by `BoxHandle::wait`.

use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::fcntl::{fcntl, FcntlArg};
use nix::sched::{unshare, CloneFlags};
use nix::sys::signal::{kill, SigSet, Signal};
use nix::unistd::{dup2, ForkResult, Pid};
use seccompiler::BpfProgram;

use super::error::SandboxError;
use super::landlock::{self, LandlockPlan, NetRule};
use super::lower::MountOp;
use super::status::{self, Status};
use super::terminal::{self, TerminalPrep};
use super::workload::{self, WorkloadPrep};
use super::{mounts, sys, BoxService};
use crate::EXIT_REFUSED;

/// Everything the chain needs, prepared by the caller before forking.
pub struct BoxPrep<'a> {
    pub uid: u32,
    pub gid: u32,
    pub new_net: bool,
    pub hostname: String,
    pub ops: Vec<MountOp>,
    pub workload: WorkloadPrep<'a>,
    /// The box end of the broker socketpair (the caller's descriptor, owned
    /// by its `BoxSpec` and inherited by the box), address, service.
    pub mediated: Option<(BorrowedFd<'a>, SocketAddr, BoxService)>,
    pub service_seccomp: Vec<BpfProgram>,
    /// The box's own terminal (see `terminal.rs`), when the caller's stdio has one.
    pub terminal: Option<TerminalPrep>,
}

/// The namespace flags of a box (`CLONE_NEWNET` unless the network is direct).
pub fn box_namespaces(prep: &BoxPrep) -> libc::c_int {
    let mut flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS;
    if prep.new_net {
        flags |= libc::CLONE_NEWNET;
    }
    flags
}

/// What a process does first in the box's fresh namespaces: the uid/gid maps,
/// the host name, and the loopback interface of a new network namespace.
fn set_up_namespaces(prep: &BoxPrep) -> Result<(), SandboxError> {
    sys::write_id_maps(prep.uid, prep.gid).map_err(|e| e.context("uid/gid maps"))?;
    // Only now: a non-dumpable process cannot write its own /proc/self maps.
    sys::not_dumpable();
    sys::sethostname(&prep.hostname)?;
    if prep.new_net {
        sys::loopback_up()?;
    }
    Ok(())
}

/// The launcher (first child of a multi-threaded caller). Never returns.
pub fn launcher(prep: &BoxPrep, status: OwnedFd, caller: Pid) -> ! {
    if !sys::die_with_parent(caller) {
        sys::exit_now(EXIT_REFUSED.into());
    }
    let mut keep = vec![sys::raw(&status)];
    keep.extend(box_fds(prep));
    // SAFETY: this child never returns to the caller's code (it ends with
    // `exit_now` or in `supervise_child`), so no owner of a closed
    // descriptor is used or dropped again.
    unsafe { sys::close_fds_except(&keep) };
    let refuse = |why: String| -> ! {
        status::send(status.as_fd(), &Status::Refused(why));
        sys::exit_now(EXIT_REFUSED.into())
    };
    // Inside the new user namespace the groups can no longer be dropped.
    if let Err(e) = sys::drop_thread_groups() {
        refuse(e.to_string());
    }
    if let Err(errno) = unshare(CloneFlags::from_bits_retain(box_namespaces(prep))) {
        refuse(SandboxError::sys_at("unshare", errno, NAMESPACES).to_string());
    }
    if let Err(e) = set_up_namespaces(prep) {
        refuse(e.to_string());
    }
    let ((life_r, life_w), (res_r, res_w)) = match (sys::pipe_cloexec(), sys::pipe_cloexec()) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => refuse(e.to_string()),
    };
    let sigs = sys::block_forwarded();
    // SAFETY: the launcher has one thread (the fork child of its caller's
    // one calling thread).
    let init_pid = match unsafe { sys::fork() } {
        Ok(ForkResult::Child) => {
            drop(life_w);
            drop(res_r);
            arm_parent_death(life_r);
            sys::not_dumpable();
            init(prep, status, res_w)
        }
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => refuse(e.to_string()),
    };
    drop(life_r);
    drop(res_w);
    drop(status);
    for fd in box_fds(prep) {
        // SAFETY: the caller's descriptors the box keeps, inherited; this
        // process only supervises from here on and never returns.
        unsafe { sys::close_inherited(fd) };
    }
    supervise_child(init_pid, &sigs, Some(res_r))
}

/// The namespaces of a box, in words (for an error).
const NAMESPACES: &str = "user, mount, pid, ipc, uts, net namespaces";

/// The box init in the child of `clone(box_namespaces)` (a single-threaded
/// caller): PID 1 of the new PID namespace, already in all the new
/// namespaces. `parent` becomes readable when the caller is gone (a pidfd
/// of the caller, or a pipe whose only writer the caller holds). Never returns.
pub fn cloned_init(prep: &BoxPrep, status: OwnedFd, res_w: OwnedFd, parent: OwnedFd) -> ! {
    // First close the caller's descriptors: with the pipe fallback, this
    // copy of the pipe's write end would otherwise keep it from ever hanging up.
    let mut keep = vec![sys::raw(&status), sys::raw(&res_w), sys::raw(&parent)];
    keep.extend(box_fds(prep));
    // SAFETY: this child never returns to the caller's code (it ends in
    // `init` or `report_and_exit`), so no owner of a closed descriptor is
    // used or dropped again.
    unsafe { sys::close_fds_except(&keep) };
    arm_parent_death(parent);
    if let Err(e) = set_up_namespaces(prep) {
        status::send(status.as_fd(), &Status::Refused(e.to_string()));
        report_and_exit(res_w.as_fd(), false, EXIT_REFUSED.into())
    }
    init(prep, status, res_w)
}

/// The caller's descriptors the box keeps: the broker socket (for the
/// service), the canary gate (for the workload) and the terminal channel
/// (for init).
fn box_fds(prep: &BoxPrep) -> Vec<RawFd> {
    let mut v = Vec::new();
    if let Some((fd, _, _)) = &prep.mediated {
        v.push(sys::raw(fd));
    }
    v.extend(prep.workload.canary_gate.as_ref().map(sys::raw));
    v.extend(prep.terminal.as_ref().map(|t| sys::raw(&t.channel)));
    v
}

/// Arms SIGKILL on the parent's death, then exits at once if the parent is
/// already gone (`parent` readable: its only writer closed, or a pidfd of
/// an exited process), and closes `parent`. getppid() cannot tell: a PID
/// namespace init's parent is outside its namespace, so it reads 0.
pub fn arm_parent_death(parent: OwnedFd) {
    sys::kill_with_parent();
    if sys::peer_gone(parent.as_fd()) {
        sys::exit_now(EXIT_REFUSED.into());
    }
}

/// Forwards signals to `child` until it ends, then ends the same way. With a
/// result pipe, the child's report (how the workload ended) wins over its own
/// exit status.
pub fn supervise_child(child: Pid, sigs: &SigSet, result: Option<OwnedFd>) -> ! {
    loop {
        let (sig, from_kernel) = sys::wait_signal(sigs);
        if sig != libc::SIGCHLD {
            if !from_kernel {
                forward(child, sig);
            }
            continue;
        }
        let Ok(Some((_, (mut signaled, mut value)))) = sys::wait_child(child, true) else {
            continue;
        };
        if let Some(fd) = &result {
            let mut b = [0u8; 2];
            if sys::read_full(fd.as_fd(), &mut b) == 2 {
                signaled = b[0] == 1;
                value = b[1] as i32;
            }
        }
        sys::mirror_exit(signaled, value)
    }
}

/// Sends one of the forwarded signals to `child` (best effort: it may be gone).
fn forward(child: Pid, sig: libc::c_int) {
    if let Ok(sig) = Signal::try_from(sig) {
        let _ = kill(child, sig);
    }
}

fn report_and_exit(res_w: BorrowedFd<'_>, signaled: bool, value: i32) -> ! {
    sys::write_all_fd(res_w, &[signaled as u8, value as u8]);
    sys::exit_now(if signaled { 128 + value } else { value })
}

/// PID 1 of the box, from the root onwards. Never returns.
fn init(prep: &BoxPrep, status: OwnedFd, res_w: OwnedFd) -> ! {
    let refuse = |why: String| -> ! {
        status::send(status.as_fd(), &Status::Refused(why));
        report_and_exit(res_w.as_fd(), false, EXIT_REFUSED.into())
    };
    if let Err(e) = mounts::enter_staging()
        .and_then(|_| mounts::apply(&prep.ops))
        .and_then(|_| mounts::enter_new_root())
    {
        refuse(format!("box root: {e}"));
    }
    // Before any child: from here on no process of the box holds the caller's terminal.
    if let Some(t) = &prep.terminal {
        if let Err(e) = terminal::open_in_box(t) {
            refuse(format!("the box's terminal: {e}"));
        }
    }
    let mut service_listener: Option<OwnedFd> = None;
    if let Some((broker_fd, addr, service)) = &prep.mediated {
        let listener = match std::net::TcpListener::bind(addr) {
            Ok(l) => OwnedFd::from(l),
            Err(e) => refuse(format!(
                "mediated networking: cannot listen on {addr} inside the box: {e}"
            )),
        };
        // SAFETY: init has one thread (the launcher's fork child, or the
        // clone child of a single-threaded caller).
        match unsafe { sys::fork() } {
            Ok(ForkResult::Child) => run_service(prep, *service, listener.as_fd(), *broker_fd),
            Ok(ForkResult::Parent { .. }) => {}
            Err(e) => refuse(e.to_string()),
        }
        service_listener = Some(listener);
    }
    // SAFETY: as above, init has one thread.
    let workload_pid = match unsafe { sys::fork() } {
        Ok(ForkResult::Child) => {
            sys::reset_signals();
            if !sys::die_with_parent(Pid::from_raw(1)) {
                sys::exit_now(EXIT_REFUSED.into());
            }
            if let Some(e) = prep
                .terminal
                .as_ref()
                .and_then(|t| terminal::take_as_controlling(t).err())
            {
                status::send(
                    status.as_fd(),
                    &Status::Refused(format!("the box's terminal: {e}")),
                );
                sys::exit_now(EXIT_REFUSED.into());
            }
            workload::run(&prep.workload, status.as_fd())
        }
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => refuse(e.to_string()),
    };
    drop(status);
    drop(service_listener);
    let inherited = prep.mediated.as_ref().map(|(fd, _, _)| sys::raw(fd));
    for fd in inherited
        .into_iter()
        .chain(prep.workload.canary_gate.as_ref().map(sys::raw))
    {
        // SAFETY: the caller's descriptors, inherited; init never returns
        // into the caller's code, and only its children use them.
        unsafe { sys::close_inherited(fd) };
    }
    let sigs = sys::block_forwarded();
    loop {
        let (sig, from_kernel) = sys::wait_signal(&sigs);
        if sig != libc::SIGCHLD {
            if !from_kernel {
                forward(workload_pid, sig);
            }
            continue;
        }
        // Reap every child without blocking; the workload's end ends the box.
        while let Ok(Some((pid, (signaled, value)))) = sys::wait_child(Pid::from_raw(-1), true) {
            if pid == workload_pid {
                report_and_exit(res_w.as_fd(), signaled, value);
            }
        }
    }
}

/// The mediated-networking service: a child of init, capabilities dropped,
/// no_new_privs and the workload's seccomp filter.
fn run_service(
    prep: &BoxPrep,
    service: BoxService,
    listener: BorrowedFd<'_>,
    broker: BorrowedFd<'_>,
) -> ! {
    sys::reset_signals();
    if !sys::die_with_parent(Pid::from_raw(1)) {
        sys::exit_now(EXIT_REFUSED.into());
    }
    // Move the broker end to fd 7 (the fixed number) and the listener beside
    // it; both are first moved above 100 so neither dup2 can clobber the other.
    let high = |fd: RawFd| fcntl(fd, FcntlArg::F_DUPFD_CLOEXEC(100));
    match (high(broker.as_raw_fd()), high(listener.as_raw_fd())) {
        (Ok(b), Ok(l)) if dup2(b, 7).is_ok() && dup2(l, 6).is_ok() => {}
        _ => sys::exit_now(EXIT_REFUSED.into()),
    }
    // SAFETY: this child never returns to init's code (it ends in `service`
    // or `exit_now`); fds 6 and 7 are kept and owned below.
    unsafe { sys::close_fds_except(&[6, 7]) };
    // No filesystem access and no TCP connect (Landlock), no capabilities, the seccomp list.
    let no_fs = LandlockPlan {
        fs: Vec::new(),
        net: NetRule::NoConnect,
    };
    if sys::drop_all_capabilities().is_err()
        || landlock::apply(&no_fs).is_err()
        || super::seccomp::install(&prep.service_seccomp).is_err()
    {
        sys::exit_now(EXIT_REFUSED.into());
    }
    // SAFETY: fds 6 and 7 are open and owned by nobody else in this process.
    let (l, b) = unsafe {
        (
            std::net::TcpListener::from_raw_fd(6),
            OwnedFd::from_raw_fd(7),
        )
    };
    service(l, b)
}
