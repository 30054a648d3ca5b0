//! `terra __vm`: the box's init, exec'd by its clone straight after the
//! namespaces were made (see `mod.rs`, `EarlyBox`), possibly before the run
//! is known. Its input is descriptors at fixed numbers; the run's own
//! descriptors and its configuration, a [`VmConfig`] as JSON, come later
//! on [`CONFIG_FD`].
//!
//! | fd | what |
//! |---|---|
//! | 3 | the config socket: one byte naming the run's descriptors, which ride on it (SCM_RIGHTS), then the configuration to its end |
//! | 4 | the status pipe (JSON lines to the caller) |
//! | 5 | the result pipe (how the workload ended, 2 bytes) |
//! | 6 | the caller's liveness (a pidfd of it, or a pipe only it writes) |
//! | 7 | from the config socket, mediated only: the box end of the broker socketpair |
//! | 8 | from the config socket: the canary gate (one byte once the canary exists) |
//! | 9 | from the config socket: the box's terminal channel, when it has a terminal |
//! | 10 | from the config socket, network none: where the box's DNS stub says each name it refused (a pipe the caller reads) |

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::config::VmConfig;
use super::error::SandboxError;
use super::exe::{adopt, read_config, role_start};
use super::init::{self, BoxPrep};
use super::landlock::{LandlockPlan, NetRule};
use super::mounts;
use super::status::{self, Status};
use super::terminal::TerminalPrep;
use super::workload::WorkloadPrep;
use super::{seccomp, sys, BoxService};
use crate::EXIT_REFUSED;

pub(crate) const CONFIG_FD: RawFd = 3;
pub(crate) const STATUS_FD: RawFd = 4;
pub(crate) const RESULT_FD: RawFd = 5;
pub(crate) const PARENT_FD: RawFd = 6;
pub(crate) const BROKER_FD: RawFd = 7;
pub(crate) const GATE_FD: RawFd = 8;
pub(crate) const DNS_REPORT_FD: RawFd = 10;
pub(crate) const TERMINAL_FD: RawFd = 9;

/// argv[2] of `terra __vm` when the box gets a network namespace of its own.
pub(crate) const OWN_NET_ARG: &std::ffi::CStr = c"net";

/// Makes the box's network namespace (its loopback up) on init's own
/// thread, first thing. A thread of its own (with setns back into what it
/// made) was meant to overlap the root's building, but on a busy machine it
/// waited about 1 ms for a CPU before it even began (sched tracepoints,
/// 2 vCPUs): the config arrived before the namespace existed.
fn make_own_net() -> Result<(), SandboxError> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|errno| SandboxError::sys("unshare(CLONE_NEWNET)", errno))?;
    sys::loopback_up()
}

/// Largest configuration accepted (the environment and argv dominate).
const CONFIG_LIMIT: usize = 16 << 20;

/// The run's descriptors an early box is handed with its configuration.
pub(crate) struct RunFds<'a> {
    pub broker: Option<BorrowedFd<'a>>,
    pub gate: Option<BorrowedFd<'a>>,
    pub terminal: Option<BorrowedFd<'a>>,
    pub dns_report: Option<BorrowedFd<'a>>,
}

/// Where each of [`RunFds`] goes in the box's init, with its bit in the
/// byte that announces them.
const RUN_FDS: [(u8, RawFd); 4] = [
    (1, BROKER_FD),
    (2, GATE_FD),
    (4, TERMINAL_FD),
    (8, DNS_REPORT_FD),
];

/// Sends `fds` on the config socket: one byte with a bit per descriptor
/// present, the descriptors attached in [`RUN_FDS`] order.
pub(crate) fn send_run_fds(sock: BorrowedFd<'_>, fds: &RunFds<'_>) -> Result<(), SandboxError> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let present = [fds.broker, fds.gate, fds.terminal, fds.dns_report];
    let mut mask = 0u8;
    let mut raw = Vec::new();
    for ((bit, _), fd) in RUN_FDS.iter().zip(present) {
        if let Some(fd) = fd {
            mask |= bit;
            raw.push(fd.as_raw_fd());
        }
    }
    let byte = [mask];
    let iov = [std::io::IoSlice::new(&byte)];
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage] = if raw.is_empty() { &[] } else { &cmsg };
    match sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::empty(), None) {
        Ok(1) => Ok(()),
        Ok(_) => Err(SandboxError::Launch(
            "the box's descriptors were not sent".into(),
        )),
        Err(errno) => Err(SandboxError::sys("sendmsg (the box's descriptors)", errno)),
    }
}

/// In the init: receives the run's descriptors from the config socket and
/// places each at its fixed number (adopted later like the others).
fn receive_run_fds(sock: BorrowedFd<'_>) -> Result<(), SandboxError> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut byte = [0u8; 1];
    let mut space = nix::cmsg_space!([RawFd; 4]);
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(|errno| SandboxError::sys("recvmsg (the box's descriptors)", errno))?;
    let mut got: Vec<OwnedFd> = Vec::new();
    for c in msg
        .cmsgs()
        .map_err(|errno| SandboxError::sys("recvmsg", errno))?
    {
        if let ControlMessageOwned::ScmRights(v) = c {
            // SAFETY: descriptors just received are this process's own.
            got.extend(v.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
        }
    }
    let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
    if msg.bytes != 1 || truncated {
        return Err(SandboxError::InvalidRequest(
            "the box's descriptors did not arrive".into(),
        ));
    }
    let mask = byte[0];
    let wanted: Vec<RawFd> = RUN_FDS
        .iter()
        .filter(|(bit, _)| mask & bit != 0)
        .map(|(_, n)| *n)
        .collect();
    if mask & !15 != 0 || wanted.len() != got.len() {
        return Err(SandboxError::InvalidRequest(format!(
            "the box was announced {} descriptor(s) and got {}",
            wanted.len(),
            got.len()
        )));
    }
    // Moved above the fixed numbers first: a received descriptor may sit on
    // the number another one is bound for.
    let mut high = Vec::with_capacity(got.len());
    for fd in got {
        high.push(
            nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(64))
                .map_err(|errno| SandboxError::sys("fcntl(F_DUPFD_CLOEXEC)", errno))?,
        );
    }
    for (fd, number) in high.into_iter().zip(wanted) {
        // SAFETY: `fd` was just made by F_DUPFD_CLOEXEC and is ours alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // dup2 leaves the copy without close-on-exec; adopt() sets it again.
        nix::unistd::dup2(fd.as_raw_fd(), number)
            .map_err(|errno| SandboxError::sys("dup2", errno))?;
    }
    Ok(())
}

/// The body of `terra __vm` (`own_net`: its argv said [`OWN_NET_ARG`]);
/// never returns. `service` is the in-box
/// service of mediated networking (the binary hands it in:
/// `terra_netd::box_service` for terra).
pub fn main(service: BoxService, own_net: bool) -> ! {
    let parent = adopt(PARENT_FD);
    role_start(parent.as_ref());
    if parent.is_none() || nix::unistd::getpid().as_raw() != 1 {
        eprintln!(
            "terra __vm: this is the box's init, started by terra inside new namespaces; \
             it is not run by hand"
        );
        sys::exit_now(EXIT_REFUSED.into())
    }
    drop(parent);
    let (Some(status), Some(result)) = (adopt(STATUS_FD), adopt(RESULT_FD)) else {
        eprintln!("terra __vm: its status and result descriptors are not open");
        sys::exit_now(EXIT_REFUSED.into())
    };
    let refuse = |why: String| -> ! {
        status::send(status.as_fd(), &Status::Refused(why));
        init::report_and_exit(result.as_fd(), false, EXIT_REFUSED.into())
    };
    // The network namespace (asked for in argv), the staging root (a tmpfs
    // with the host under it) and the box's /proc and /dev (used if the
    // program has them) need nothing from the run: made while the caller
    // still prepares the configuration. The namespace comes first: before
    // any socket or child of the box, and before the run's descriptors take
    // their numbers.
    if own_net {
        if let Err(e) = make_own_net() {
            refuse(format!("the box's network namespace: {e}"))
        }
    }
    if let Err(e) = mounts::enter_staging() {
        refuse(format!("box root: {e}"))
    }
    let prebuilt = mounts::prebuild();
    let config: VmConfig = match adopt(CONFIG_FD)
        .ok_or_else(|| SandboxError::InvalidRequest("no configuration on fd 3".into()))
        .and_then(|fd| receive_run_fds(fd.as_fd()).map(|()| fd))
        .and_then(|fd| read_config(fd, CONFIG_LIMIT))
    {
        Ok(c) => c,
        Err(e) => refuse(format!("the box's configuration: {e}")),
    };
    let held = match Held::adopt(&config) {
        Ok(h) => h,
        Err(e) => refuse(e.to_string()),
    };
    if config.new_net != own_net {
        refuse(format!(
            "the box was started {} a network namespace of its own and configured {}",
            if own_net { "with" } else { "without" },
            if config.new_net {
                "with one"
            } else {
                "without"
            }
        ))
    }
    if config.vm.is_some() {
        super::vmhost::main(
            config,
            prebuilt,
            held.broker,
            held.gate,
            service,
            status,
            result,
        )
    }
    let prep = match box_prep(config, &held, service) {
        Ok(p) => p,
        Err(e) => refuse(e.to_string()),
    };
    if let Err(e) = set_up_namespaces(&prep) {
        refuse(e.to_string())
    }
    init::init(&prep, prebuilt, status, result)
}

/// The descriptors the configuration says are there (owned by `main`'s
/// frame, which never ends; the box's processes borrow them).
struct Held {
    broker: Option<OwnedFd>,
    gate: Option<OwnedFd>,
    dns_report: Option<OwnedFd>,
}

impl Held {
    fn adopt(config: &VmConfig) -> Result<Held, SandboxError> {
        let want = |on: bool, n: RawFd, what: &str| -> Result<Option<OwnedFd>, SandboxError> {
            if !on {
                // Sent but not configured: refused, never left open.
                return match adopt(n) {
                    Some(_) => Err(SandboxError::InvalidRequest(format!(
                        "{what} was sent on fd {n} but the configuration has none"
                    ))),
                    None => Ok(None),
                };
            }
            adopt(n)
                .map(Some)
                .ok_or_else(|| SandboxError::InvalidRequest(format!("{what} is not on fd {n}")))
        };
        if config.terminal.is_none() {
            want(false, TERMINAL_FD, "a terminal channel")?;
        }
        Ok(Held {
            broker: want(config.proxy.is_some(), BROKER_FD, "the broker socket")?,
            gate: want(config.workload.gate, GATE_FD, "the canary gate")?,
            dns_report: want(config.dns_report, DNS_REPORT_FD, "the DNS report pipe")?,
        })
    }
}

fn cstring(b: Vec<u8>) -> Result<CString, SandboxError> {
    CString::new(b).map_err(|_| SandboxError::InvalidRequest("a string holds a NUL byte".into()))
}

fn cstrings(v: Vec<Vec<u8>>) -> Result<Vec<CString>, SandboxError> {
    v.into_iter().map(cstring).collect()
}

/// The in-process form of the box from its configuration: C strings, the
/// Landlock program over the mounts, the seccomp filters.
fn box_prep(c: VmConfig, held: &Held, service: BoxService) -> Result<BoxPrep<'_>, SandboxError> {
    let landlock = LandlockPlan::from_ops(&c.ops, c.root_writable, NetRule::Unrestricted);
    let filters = seccomp::build()?;
    let w = c.workload;
    // The channel belongs to the terminal's prep: init closes it once the
    // master was sent.
    let terminal = match c.terminal {
        Some(t) => {
            let channel = adopt(TERMINAL_FD).ok_or_else(|| {
                SandboxError::InvalidRequest(format!(
                    "the terminal channel is not on fd {TERMINAL_FD}"
                ))
            })?;
            Some(TerminalPrep::from_wire(t, channel)?)
        }
        None => None,
    };
    Ok(BoxPrep {
        hostname: c.hostname,
        ops: c.ops,
        workload: WorkloadPrep {
            candidates: cstrings(w.candidates)?,
            argv: cstrings(w.argv)?,
            envp: cstrings(w.envp)?,
            cwd: w.cwd,
            canary_path: cstring(w.canary_path)?,
            canary_tcp: w.canary_tcp,
            canary_gate: held.gate.as_ref().map(|f| f.as_fd()),
            rlimits: w.rlimits,
            landlock,
            seccomp: filters,
            // Every box with a network namespace of its own (none, mediated):
            // the workload's connect() calls go through the network service
            // (the AF_UNIX rule; mediated: the hand-off). With network
            // direct the box shares the host's network, abstract sockets
            // included, and connect() is the kernel's.
            notify_seccomp: match c.new_net {
                true => Some(seccomp::workload_notify()?),
                false => None,
            },
        },
        mediated: match (c.proxy, &held.broker) {
            (Some(addr), Some(fd)) => Some((fd.as_fd(), addr)),
            _ => None,
        },
        dns_report: held.dns_report.as_ref().map(|f| f.as_fd()),
        service,
        service_seccomp: seccomp::box_service()?,
        init_seccomp: seccomp::box_init()?,
        terminal,
    })
}

/// The host name (the uid/gid maps were written before the exec; the
/// network namespace, its loopback up, was entered in `main`).
fn set_up_namespaces(prep: &BoxPrep) -> Result<(), SandboxError> {
    sys::sethostname(&prep.hostname)
}
