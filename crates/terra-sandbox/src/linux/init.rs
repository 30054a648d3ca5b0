//! The process chain of a box, from its init onwards:
//!
//! ```text
//! caller ── init: clone(2) straight into new user/mount/PID/IPC/UTS[/net]
//!           │     namespaces, then exec of `terra __vm` (vm.rs); PID 1 of the
//!           │     new PID namespace: builds the root; reaps; forwards
//!           │     signals; reports how the workload ended
//!           ├─ network service (forked: the workload's connect() calls;
//!           │   mediated: also the proxy and the DNS stub; none: a DNS
//!           │   stub that refuses every question)
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

use super::lower::MountOp;
use super::status::{self, Status};
use super::terminal::{self, TerminalPrep};
use super::workload::{self, WorkloadPrep};
use super::{mounts, sys, BoxService, MediatedFds, RefusingDnsFds, SandboxError, ServiceFds};
use crate::EXIT_REFUSED;

/// Everything the chain needs, built by `terra __vm` from its configuration.
pub struct BoxPrep<'a> {
    pub hostname: String,
    pub ops: Vec<MountOp>,
    pub workload: WorkloadPrep<'a>,
    /// The box end of the broker socketpair (owned by `vm::main`'s frame,
    /// which never ends), address, service.
    pub mediated: Option<(BorrowedFd<'a>, SocketAddr)>,
    /// Network none: where the DNS stub says each name it refused (owned
    /// by `vm::main`'s frame); None: init's standard error.
    pub dns_report: Option<BorrowedFd<'a>>,
    /// The box's network service (every box: the workload's connect()
    /// calls go through it; with mediated networking also the proxy and the
    /// DNS stub).
    pub service: BoxService,
    /// The box proxy service's allowlist.
    pub service_seccomp: Vec<BpfProgram>,
    /// init's own allowlist, installed once the workload runs.
    pub init_seccomp: Vec<BpfProgram>,
    /// The box's own terminal (see `terminal.rs`), when the caller's stdio has one.
    pub terminal: Option<TerminalPrep>,
}

/// The namespaces the box's init is cloned into; its network namespace it
/// makes itself (vm.rs, first thing, while the caller prepares the run).
pub fn box_namespaces() -> libc::c_int {
    libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
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
pub(crate) fn init(
    prep: &BoxPrep,
    prebuilt: mounts::Prebuilt,
    status: OwnedFd,
    res_w: OwnedFd,
) -> ! {
    let refuse = |why: String| -> ! {
        status::send(status.as_fd(), &Status::Refused(why));
        report_and_exit(res_w.as_fd(), false, EXIT_REFUSED.into())
    };
    // (The staging root was entered before the configuration came: vm.rs.)
    if let Err(e) = mounts::apply(&prep.ops, prebuilt).and_then(|_| mounts::enter_new_root()) {
        refuse(format!("box root: {e}"));
    }
    // Before any child: from here on no process of the box holds the caller's terminal.
    if let Some(t) = &prep.terminal {
        if let Err(e) = terminal::open_in_box(t) {
            refuse(format!("the box's terminal: {e}"));
        }
    }
    // The network service's descriptors are made here, inside the box,
    // before any child. The workload is forked first: its setup does not
    // wait for the service (the listener it hands over waits in the
    // socket), so the service's fork is off the workload's path. The
    // workload closes every descriptor but its own first thing.
    let parts = match prep.workload.notify_seccomp.is_some() {
        true => {
            match ServiceParts::open(prep.mediated.as_ref().map(|(_, a)| *a), prep.dns_report) {
                Ok(p) => Some(p),
                Err(e) => refuse(format!("the box's network service: {e}")),
            }
        }
        false => None,
    };
    let handover = parts.as_ref().map(|p| p.workload_end.as_fd());
    // SAFETY: init has one thread (a fresh exec, no thread started).
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
            workload::run(&prep.workload, status.as_fd(), handover)
        }
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => refuse(e.to_string()),
    };
    if let Some(parts) = parts {
        // SAFETY: as above, init has one thread.
        match unsafe { sys::fork() } {
            Ok(ForkResult::Child) => run_service(
                prep.service,
                &prep.service_seccomp,
                parts,
                prep.mediated.as_ref().map(|(b, _)| *b),
            ),
            Ok(ForkResult::Parent { .. }) => {}
            Err(e) => {
                let _ = kill(workload_pid, Signal::SIGKILL);
                refuse(e.to_string())
            }
        }
    }
    drop(status);
    let inherited = prep.mediated.as_ref().map(|(fd, _)| sys::raw(fd));
    for fd in inherited
        .into_iter()
        .chain(prep.dns_report.as_ref().map(sys::raw))
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
                // What is left of the box (the service, anything the
                // workload left behind) dies with init anyway; killed now,
                // its teardown overlaps init's report and exit.
                let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
                report_and_exit(res_w.as_fd(), signaled, value);
            }
        }
    }
}

/// What init opens for the box's network service, inside the box: the
/// notification hand-over pair and the box's /proc; with mediated
/// networking also the proxy listener, the DNS stub's sockets on port 53 of
/// the same loopback address and the relay listener.
struct ServiceParts {
    service_end: OwnedFd,
    workload_end: OwnedFd,
    proc_dir: OwnedFd,
    net: Option<NetParts>,
    /// Network none: the refusing DNS stub's sockets and report descriptor
    /// (None when port 53 could not be bound: the box then has no name
    /// service at all, as before the stub).
    refusing: Option<RefusingParts>,
}

/// Network none: UDP and TCP on 127.0.0.1:53, and a copy of init's
/// standard error, where the service says each name the box asked.
struct RefusingParts {
    dns_udp: OwnedFd,
    dns_tcp: OwnedFd,
    report: OwnedFd,
}

impl RefusingParts {
    fn open(report: Option<BorrowedFd<'_>>) -> Option<RefusingParts> {
        let dns = SocketAddr::from(([127, 0, 0, 1], 53));
        let dns_udp = std::net::UdpSocket::bind(dns).ok()?;
        let dns_tcp = std::net::TcpListener::bind(dns).ok()?;
        let to = report.map_or(2, |r| r.as_raw_fd());
        let report = fcntl(to, FcntlArg::F_DUPFD_CLOEXEC(3)).ok()?;
        Some(RefusingParts {
            dns_udp: dns_udp.into(),
            dns_tcp: dns_tcp.into(),
            // SAFETY: F_DUPFD_CLOEXEC returned a new descriptor owned by nobody else.
            report: unsafe { OwnedFd::from_raw_fd(report) },
        })
    }
}

struct NetParts {
    proxy: OwnedFd,
    dns_udp: OwnedFd,
    dns_tcp: OwnedFd,
    relay: OwnedFd,
}

impl NetParts {
    fn open(addr: SocketAddr) -> Result<NetParts, SandboxError> {
        let socket = |what, addr| move |source| SandboxError::Socket { what, addr, source };
        let proxy = std::net::TcpListener::bind(addr).map_err(socket("cannot listen on", addr))?;
        let dns = SocketAddr::new(addr.ip(), 53);
        let dns_udp =
            std::net::UdpSocket::bind(dns).map_err(socket("DNS stub: cannot bind UDP", dns))?;
        let dns_tcp = std::net::TcpListener::bind(dns)
            .map_err(socket("DNS stub: cannot listen on TCP", dns))?;
        let any_port = SocketAddr::new(addr.ip(), 0);
        let relay = std::net::TcpListener::bind(any_port)
            .map_err(socket("relayed sockets: cannot listen on", any_port))?;
        Ok(NetParts {
            proxy: proxy.into(),
            dns_udp: dns_udp.into(),
            dns_tcp: dns_tcp.into(),
            relay: relay.into(),
        })
    }
}

impl ServiceParts {
    fn open(
        mediated: Option<SocketAddr>,
        report: Option<BorrowedFd<'_>>,
    ) -> Result<ServiceParts, SandboxError> {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        let net = mediated.map(NetParts::open).transpose()?;
        let refusing = match mediated {
            None => RefusingParts::open(report),
            Some(_) => None,
        };
        let (service_end, workload_end) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|errno| SandboxError::sys("socketpair", errno))?;
        let proc_dir = nix::fcntl::open(
            "/proc",
            nix::fcntl::OFlag::O_PATH
                | nix::fcntl::OFlag::O_DIRECTORY
                | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|errno| SandboxError::sys_at("open", errno, "/proc"))?;
        Ok(ServiceParts {
            service_end,
            workload_end,
            // SAFETY: open returned a new descriptor owned by nobody else.
            proc_dir: unsafe { OwnedFd::from_raw_fd(proc_dir) },
            net,
            refusing,
        })
    }
}

/// capability.h: CAP_SYS_PTRACE.
const CAP_SYS_PTRACE: u32 = 19;

/// The fixed descriptor numbers of the network service: the hand-over and
/// /proc, then (mediated) the proxy, the broker, the DNS stub's UDP and TCP
/// sockets and the relay listener.
const SERVICE_FDS: [RawFd; 2] = [12, 13];
const MEDIATED_FDS: [RawFd; 5] = [6, 7, 10, 11, 14];
/// Network none: the refusing DNS stub's UDP and TCP sockets (the numbers
/// mediated uses for its stub) and its report descriptor.
const REFUSING_FDS: [RawFd; 3] = [10, 11, 15];

/// The box's network service: a child of init with CAP_SYS_PTRACE in the
/// box's user namespace only (to read the workload's connect() arguments and
/// copy its socket, also from a workload that made itself non-dumpable),
/// not dumpable itself (the workload cannot read or trace it), no_new_privs
/// and its seccomp allowlist. It has no Landlock domain: a Landlock domain
/// may only trace processes inside it, and the workload's domain is not;
/// its filesystem access is closed by seccomp instead (files open only
/// relative to the box's /proc).
fn run_service(
    service: BoxService,
    service_seccomp: &[BpfProgram],
    parts: ServiceParts,
    broker: Option<BorrowedFd<'_>>,
) -> ! {
    sys::reset_signals();
    if !sys::die_with_parent(Pid::from_raw(1)) {
        sys::exit_now(EXIT_REFUSED.into());
    }
    let mut moves: Vec<(RawFd, RawFd)> = vec![
        (parts.service_end.as_raw_fd(), SERVICE_FDS[0]),
        (parts.proc_dir.as_raw_fd(), SERVICE_FDS[1]),
    ];
    if let (Some(net), Some(broker)) = (&parts.net, broker) {
        let from = [
            net.proxy.as_raw_fd(),
            broker.as_raw_fd(),
            net.dns_udp.as_raw_fd(),
            net.dns_tcp.as_raw_fd(),
            net.relay.as_raw_fd(),
        ];
        moves.extend(from.into_iter().zip(MEDIATED_FDS));
    } else if let Some(r) = &parts.refusing {
        let from = [
            r.dns_udp.as_raw_fd(),
            r.dns_tcp.as_raw_fd(),
            r.report.as_raw_fd(),
        ];
        moves.extend(from.into_iter().zip(REFUSING_FDS));
    }
    // Every descriptor first moves above 100, so no dup2 to a fixed number
    // can clobber another that still waits to move.
    let mut high = Vec::with_capacity(moves.len());
    for (from, to) in &moves {
        match fcntl(*from, FcntlArg::F_DUPFD_CLOEXEC(100)) {
            Ok(h) => high.push((h, *to)),
            Err(_) => sys::exit_now(EXIT_REFUSED.into()),
        }
    }
    for (h, to) in high {
        if dup2(h, to).is_err() {
            sys::exit_now(EXIT_REFUSED.into());
        }
    }
    let keep: Vec<RawFd> = moves.iter().map(|(_, to)| *to).collect();
    let mediated = keep.contains(&MEDIATED_FDS[0]);
    let refusing = keep.contains(&REFUSING_FDS[2]);
    // SAFETY: this child never returns to init's code (it ends in `service`
    // or `exit_now`); the fixed descriptors are owned below.
    unsafe { sys::close_fds_except(&keep) };
    if sys::drop_capabilities_keeping(Some(CAP_SYS_PTRACE)).is_err()
        || nix::sys::prctl::set_dumpable(false).is_err()
        || super::seccomp::install(service_seccomp).is_err()
    {
        sys::exit_now(EXIT_REFUSED.into());
    }
    // SAFETY: the fixed descriptors are open (dup2 above) and owned by nobody
    // else in this process.
    let fds = unsafe {
        ServiceFds {
            notify_channel: OwnedFd::from_raw_fd(12),
            proc_dir: OwnedFd::from_raw_fd(13),
            refusing_dns: refusing.then(|| RefusingDnsFds {
                dns_udp: std::net::UdpSocket::from_raw_fd(REFUSING_FDS[0]),
                dns_tcp: std::net::TcpListener::from_raw_fd(REFUSING_FDS[1]),
                report: OwnedFd::from_raw_fd(REFUSING_FDS[2]),
            }),
            mediated: mediated.then(|| MediatedFds {
                proxy: std::net::TcpListener::from_raw_fd(6),
                broker: OwnedFd::from_raw_fd(7),
                dns_udp: std::net::UdpSocket::from_raw_fd(10),
                dns_tcp: std::net::TcpListener::from_raw_fd(11),
                relay: std::net::TcpListener::from_raw_fd(14),
            }),
        }
    };
    service(fds)
}

/// The vm backend's box: the network service of mediated networking alone
/// (the proxy on `addr` of the box's loopback, the DNS stub, asking the
/// broker over `broker`), with no workload on this side to hand it a
/// connect-notification listener (its channel ends at once). Forked from
/// init, which has one thread.
pub(crate) fn start_service(
    service: BoxService,
    broker: BorrowedFd<'_>,
    addr: SocketAddr,
) -> Result<(), SandboxError> {
    let parts = ServiceParts::open(Some(addr), None)?;
    let filters = super::seccomp::box_service()?;
    // SAFETY: init has one thread (a fresh exec, no thread started).
    match unsafe { sys::fork() }? {
        ForkResult::Child => run_service(service, &filters, parts, Some(broker)),
        ForkResult::Parent { .. } => Ok(()),
    }
}
