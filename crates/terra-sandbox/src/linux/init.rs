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
use std::os::fd::{FromRawFd, OwnedFd};

use seccompiler::BpfProgram;

use super::landlock::{self, LandlockPlan, NetRule};
use super::lower::MountOp;
use super::status::{self, Status};
use super::terminal::{self, TerminalPrep};
use super::workload::{self, WorkloadPrep};
use super::{mounts, sys, BoxService};

/// Everything the chain needs, prepared by the caller before forking.
pub struct BoxPrep {
    pub uid: u32,
    pub gid: u32,
    pub new_net: bool,
    pub hostname: String,
    pub ops: Vec<MountOp>,
    pub workload: WorkloadPrep,
    /// Raw fd of the box end of the broker socketpair, address, service.
    pub mediated: Option<(i32, SocketAddr, BoxService)>,
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
fn set_up_namespaces(prep: &BoxPrep) -> Result<(), String> {
    sys::write_id_maps(prep.uid, prep.gid).map_err(|e| format!("uid/gid maps: {e}"))?;
    // Only now: a non-dumpable process cannot write its own /proc/self maps.
    sys::not_dumpable();
    sys::sethostname(&prep.hostname)?;
    if prep.new_net {
        sys::loopback_up()?;
    }
    Ok(())
}

/// The launcher (first child of a multi-threaded caller). Never returns.
pub fn launcher(prep: &BoxPrep, status_fd: i32, caller: libc::pid_t) -> ! {
    if !sys::die_with_parent(caller) {
        sys::exit_now(125);
    }
    let mut keep = vec![status_fd];
    keep.extend(box_fds(prep));
    sys::close_fds_except(&keep);
    let refuse = |why: String| -> ! {
        status::send(status_fd, &Status::Refused(why));
        sys::exit_now(125)
    };
    // Inside the new user namespace the groups can no longer be dropped.
    if let Err(e) = sys::drop_thread_groups() {
        refuse(e);
    }
    // SAFETY: unshare with namespace flags only affects this process.
    if unsafe { libc::unshare(box_namespaces(prep)) } != 0 {
        refuse(sys::errno_str(
            "unshare",
            "user, mount, pid, ipc, uts, net namespaces",
        ));
    }
    if let Err(e) = set_up_namespaces(prep) {
        refuse(e);
    }
    let ((life_r, life_w), (res_r, res_w)) = match (sys::pipe_cloexec(), sys::pipe_cloexec()) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => refuse(e),
    };
    let sigs = sys::block_forwarded();
    let init_pid = match sys::fork() {
        Ok(0) => {
            sys::close(life_w);
            sys::close(res_r);
            arm_parent_death(life_r);
            sys::not_dumpable();
            init(prep, status_fd, res_w)
        }
        Ok(pid) => pid,
        Err(e) => refuse(e),
    };
    sys::close(life_r);
    sys::close(res_w);
    sys::close(status_fd);
    for fd in box_fds(prep) {
        sys::close(fd);
    }
    supervise_child(init_pid, &sigs, Some(res_r))
}

/// The box init in the child of `clone(box_namespaces)` (a single-threaded
/// caller): PID 1 of the new PID namespace, already in all the new
/// namespaces. `parent_fd` becomes readable when the caller is gone (a pidfd
/// of the caller, or a pipe whose only writer the caller holds). Never returns.
pub fn cloned_init(prep: &BoxPrep, status_fd: i32, res_w: i32, parent_fd: i32) -> ! {
    // First close the caller's descriptors: with the pipe fallback, this
    // copy of the pipe's write end would otherwise keep it from ever hanging up.
    let mut keep = vec![status_fd, res_w, parent_fd];
    keep.extend(box_fds(prep));
    sys::close_fds_except(&keep);
    arm_parent_death(parent_fd);
    if let Err(e) = set_up_namespaces(prep) {
        status::send(status_fd, &Status::Refused(e));
        report_and_exit(res_w, false, 125)
    }
    init(prep, status_fd, res_w)
}

/// The caller's descriptors the box keeps: the broker socket (for the
/// service), the canary gate (for the workload) and the terminal channel
/// (for init).
fn box_fds(prep: &BoxPrep) -> Vec<i32> {
    let mut v = Vec::new();
    if let Some((fd, _, _)) = &prep.mediated {
        v.push(*fd);
    }
    v.extend(prep.workload.canary_gate);
    v.extend(prep.terminal.as_ref().map(|t| t.channel));
    v
}

/// Arms SIGKILL on the parent's death, then exits at once if the parent is
/// already gone (`parent_fd` readable: its only writer closed, or a pidfd of
/// an exited process), and closes `parent_fd`. getppid() cannot tell: a PID
/// namespace init's parent is outside its namespace, so it reads 0.
pub fn arm_parent_death(parent_fd: i32) {
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
    if sys::peer_gone(parent_fd) {
        sys::exit_now(125);
    }
    sys::close(parent_fd);
}

/// Forwards signals to `child` until it ends, then ends the same way. With a
/// result pipe, the child's report (how the workload ended) wins over its own
/// exit status.
pub fn supervise_child(child: libc::pid_t, sigs: &libc::sigset_t, result_fd: Option<i32>) -> ! {
    loop {
        let (sig, from_kernel) = sys::wait_signal(sigs);
        if sig != libc::SIGCHLD {
            if !from_kernel {
                // SAFETY: signalling our own child.
                unsafe { libc::kill(child, sig) };
            }
            continue;
        }
        let mut st = 0;
        // SAFETY: waiting for our own child without blocking.
        let rc = unsafe { libc::waitpid(child, &mut st, libc::WNOHANG) };
        if rc != child {
            continue;
        }
        let (mut signaled, mut value) = sys::decode_status(st);
        if let Some(fd) = result_fd {
            let mut b = [0u8; 2];
            // SAFETY: reading into a 2-byte buffer.
            if unsafe { libc::read(fd, b.as_mut_ptr() as *mut libc::c_void, 2) } == 2 {
                signaled = b[0] == 1;
                value = b[1] as i32;
            }
        }
        sys::mirror_exit(signaled, value)
    }
}

fn report_and_exit(res_w: i32, signaled: bool, value: i32) -> ! {
    sys::write_all_fd(res_w, &[signaled as u8, value as u8]);
    sys::exit_now(if signaled { 128 + value } else { value })
}

/// PID 1 of the box, from the root onwards. Never returns.
fn init(prep: &BoxPrep, status_fd: i32, res_w: i32) -> ! {
    let refuse = |why: String| -> ! {
        status::send(status_fd, &Status::Refused(why));
        report_and_exit(res_w, false, 125)
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
    let mut service_fds: Vec<i32> = Vec::new();
    if let Some((broker_fd, addr, service)) = &prep.mediated {
        let listener = match std::net::TcpListener::bind(addr) {
            Ok(l) => l,
            Err(e) => refuse(format!(
                "mediated networking: cannot listen on {addr} inside the box: {e}"
            )),
        };
        let lfd = std::os::fd::IntoRawFd::into_raw_fd(listener);
        match sys::fork() {
            Ok(0) => run_service(prep, *service, lfd, *broker_fd),
            Ok(_) => {}
            Err(e) => refuse(e),
        }
        service_fds = vec![lfd, *broker_fd];
    }
    let workload_pid = match sys::fork() {
        Ok(0) => {
            sys::reset_signals();
            if !sys::die_with_parent(1) {
                sys::exit_now(125);
            }
            if let Some(e) = prep
                .terminal
                .as_ref()
                .and_then(|t| terminal::take_as_controlling(t).err())
            {
                status::send(
                    status_fd,
                    &Status::Refused(format!("the box's terminal: {e}")),
                );
                sys::exit_now(125);
            }
            workload::run(&prep.workload, status_fd)
        }
        Ok(pid) => pid,
        Err(e) => refuse(e),
    };
    sys::close(status_fd);
    for fd in service_fds {
        sys::close(fd);
    }
    if let Some(gate) = prep.workload.canary_gate {
        sys::close(gate);
    }
    let sigs = sys::block_forwarded();
    loop {
        let (sig, from_kernel) = sys::wait_signal(&sigs);
        if sig != libc::SIGCHLD {
            if !from_kernel {
                // SAFETY: signalling our own child.
                unsafe { libc::kill(workload_pid, sig) };
            }
            continue;
        }
        loop {
            let mut st = 0;
            // SAFETY: reaping any child without blocking.
            let pid = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
            if pid == workload_pid {
                let (signaled, value) = sys::decode_status(st);
                report_and_exit(res_w, signaled, value);
            }
        }
    }
}

/// The mediated-networking service: a child of init, capabilities dropped,
/// no_new_privs and the workload's seccomp filter.
fn run_service(prep: &BoxPrep, service: BoxService, listener: i32, broker: i32) -> ! {
    sys::reset_signals();
    if !sys::die_with_parent(1) {
        sys::exit_now(125);
    }
    // Move the broker end to fd 7 (the fixed number) and the listener beside it.
    // SAFETY: fcntl/dup2 on descriptors this freshly forked child owns; both
    // are first moved above 100 so neither dup2 can clobber the other.
    unsafe {
        let b = libc::fcntl(broker, libc::F_DUPFD_CLOEXEC, 100);
        let l = libc::fcntl(listener, libc::F_DUPFD_CLOEXEC, 100);
        libc::dup2(b, 7);
        libc::dup2(l, 6);
    }
    sys::close_fds_except(&[6, 7]);
    // No filesystem access and no TCP connect (Landlock), no capabilities, the seccomp list.
    let no_fs = LandlockPlan {
        fs: Vec::new(),
        net: NetRule::NoConnect,
    };
    if sys::drop_all_capabilities().is_err()
        || landlock::apply(&no_fs).is_err()
        || super::seccomp::install(&prep.service_seccomp).is_err()
    {
        sys::exit_now(125);
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
