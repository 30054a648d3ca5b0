//! The process chain of a box, from its init onwards:
//!
//! ```text
//! caller ── init: clone(2) straight into new user/mount/PID/IPC/UTS[/net]
//!           │     namespaces, then exec of `terra __vm` (vm.rs); PID 1 of the
//!           │     new PID namespace: builds the root; reaps; forwards
//!           │     signals; reports how the workload ended
//!           ├─ service (mediated networking only; forked)
//!           └─ workload (forked; caps dropped, Landlock, seccomp, exec)
//! ```
//!
//! init and its children set PR_SET_PDEATHSIG(SIGKILL) and then check that
//! their parent still lives, so killing the caller at any moment kills the
//! whole chain; and when init exits the kernel kills everything left in the
//! PID namespace.
//!
//! A PID-namespace init cannot die by a signal it sends itself, so init does
//! not mirror the workload's end: it writes it (2 bytes) to a result pipe,
//! read by `BoxHandle::wait`.

use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::fcntl::{fcntl, FcntlArg};
use nix::sys::signal::{kill, Signal};
use nix::unistd::{dup2, ForkResult, Pid};
use seccompiler::BpfProgram;

use super::landlock::{self, LandlockPlan, NetRule};
use super::lower::MountOp;
use super::status::{self, Status};
use super::terminal::{self, TerminalPrep};
use super::workload::{self, WorkloadPrep};
use super::{mounts, sys, BoxService};
use crate::EXIT_REFUSED;

/// Everything the chain needs, built by `terra __vm` from its configuration.
pub struct BoxPrep<'a> {
    pub new_net: bool,
    pub hostname: String,
    pub ops: Vec<MountOp>,
    pub workload: WorkloadPrep<'a>,
    /// The box end of the broker socketpair (owned by `vm::main`'s frame,
    /// which never ends), address, service.
    pub mediated: Option<(BorrowedFd<'a>, SocketAddr, BoxService)>,
    /// The box proxy service's allowlist.
    pub service_seccomp: Vec<BpfProgram>,
    /// init's own allowlist, installed once the workload runs.
    pub init_seccomp: Vec<BpfProgram>,
    /// The box's own terminal (see `terminal.rs`), when the caller's stdio has one.
    pub terminal: Option<TerminalPrep>,
}

/// The namespace flags of a box (`CLONE_NEWNET` unless the network is direct).
pub fn box_namespaces(new_net: bool) -> libc::c_int {
    let mut flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS;
    if new_net {
        flags |= libc::CLONE_NEWNET;
    }
    flags
}

/// Sends one of the forwarded signals to `child` (best effort: it may be gone).
fn forward(child: Pid, sig: libc::c_int) {
    if let Ok(sig) = Signal::try_from(sig) {
        let _ = kill(child, sig);
    }
}

pub(crate) fn report_and_exit(res_w: BorrowedFd<'_>, signaled: bool, value: i32) -> ! {
    sys::write_all_fd(res_w, &[signaled as u8, value as u8]);
    sys::exit_now(if signaled { 128 + value } else { value })
}

/// PID 1 of the box, from the root onwards. Never returns.
pub(crate) fn init(prep: &BoxPrep, status: OwnedFd, res_w: OwnedFd) -> ! {
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
        // SAFETY: init has one thread (a fresh exec, no thread started).
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
        // SAFETY: owned by `vm::main`'s frame, which never ends (init never
        // returns); only init's children use them.
        unsafe { sys::close_inherited(fd) };
    }
    // Setup is over and the workload forked: what is left is this wait
    // loop, under init's own allowlist (any other call kills init, and with
    // it the box; the supervisor reports it).
    let sigs = sys::block_forwarded();
    if super::seccomp::install(&prep.init_seccomp).is_err() {
        let _ = kill(workload_pid, Signal::SIGKILL);
        report_and_exit(res_w.as_fd(), false, EXIT_REFUSED.into());
    }
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
