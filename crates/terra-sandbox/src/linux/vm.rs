//! `terra __vm`: the box's init, exec'd by its clone straight after the
//! namespaces were made (see `mod.rs`, `spawn_spec`). Its input is
//! descriptors at fixed numbers; its configuration, a [`VmConfig`] as JSON,
//! is read from [`CONFIG_FD`].
//!
//! | fd | what |
//! |---|---|
//! | 3 | the configuration (a pipe, read to its end) |
//! | 4 | the status pipe (JSON lines to the caller) |
//! | 5 | the result pipe (how the workload ended, 2 bytes) |
//! | 6 | the caller's liveness (a pidfd of it, or a pipe only it writes) |
//! | 7 | mediated only: the box end of the broker socketpair |
//! | 8 | the canary gate (one byte once the canary exists) |
//! | 9 | the box's terminal channel, when it has a terminal |

use std::ffi::CString;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd, RawFd};

use serde::{Deserialize, Serialize};

use super::error::SandboxError;
use super::exe::{adopt, read_config, role_start};
use super::init::{self, BoxPrep};
use super::landlock::{LandlockPlan, NetRule};
use super::lower::MountOp;
use super::status::{self, Status};
use super::terminal::{TerminalPrep, TerminalWire};
use super::workload::WorkloadPrep;
use super::{seccomp, sys, BoxService};
use crate::EXIT_REFUSED;

pub(crate) const CONFIG_FD: RawFd = 3;
pub(crate) const STATUS_FD: RawFd = 4;
pub(crate) const RESULT_FD: RawFd = 5;
pub(crate) const PARENT_FD: RawFd = 6;
pub(crate) const BROKER_FD: RawFd = 7;
pub(crate) const GATE_FD: RawFd = 8;
pub(crate) const TERMINAL_FD: RawFd = 9;

/// Largest configuration accepted (the environment and argv dominate).
const CONFIG_LIMIT: usize = 16 << 20;

/// The box as its init is handed it: the lowered mount program and the
/// workload's checked strings, computed by the caller before the clone.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct VmConfig {
    pub new_net: bool,
    pub hostname: String,
    pub ops: Vec<MountOp>,
    /// Root mode ephemeral-write (the Landlock program follows the mounts).
    pub root_writable: bool,
    /// Mediated networking: where the in-box service listens.
    pub proxy: Option<SocketAddr>,
    pub workload: WorkloadWire,
    pub terminal: Option<TerminalWire>,
    /// The vm backend: run QEMU on the box's tree instead of the workload
    /// (vmhost.rs).
    pub vm: Option<terra_vm::Boot>,
}

/// The workload's strings as bytes (checked free of NUL by the caller).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct WorkloadWire {
    pub candidates: Vec<Vec<u8>>,
    pub argv: Vec<Vec<u8>>,
    pub envp: Vec<Vec<u8>>,
    pub cwd: String,
    pub canary_path: Vec<u8>,
    pub canary_tcp: Option<SocketAddr>,
    /// Whether a canary gate is on [`GATE_FD`].
    pub gate: bool,
    pub rlimits: super::Rlimits,
}

/// The body of `terra __vm`; never returns. `service` is the in-box
/// service of mediated networking (the binary hands it in:
/// `terra_netd::box_service` for terra).
pub fn main(service: BoxService) -> ! {
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
    let config: VmConfig = match adopt(CONFIG_FD)
        .ok_or_else(|| SandboxError::InvalidRequest("no configuration on fd 3".into()))
        .and_then(|fd| read_config(fd, CONFIG_LIMIT))
    {
        Ok(c) => c,
        Err(e) => refuse(format!("the box's configuration: {e}")),
    };
    let held = match Held::adopt(&config) {
        Ok(h) => h,
        Err(e) => refuse(e.to_string()),
    };
    if config.vm.is_some() {
        super::vmhost::main(config, held.broker, held.gate, service, status, result)
    }
    let prep = match box_prep(config, &held, service) {
        Ok(p) => p,
        Err(e) => refuse(e.to_string()),
    };
    if let Err(e) = set_up_namespaces(&prep) {
        refuse(e.to_string())
    }
    init::init(&prep, status, result)
}

/// The descriptors the configuration says are there (owned by `main`'s
/// frame, which never ends; the box's processes borrow them).
struct Held {
    broker: Option<OwnedFd>,
    gate: Option<OwnedFd>,
}

impl Held {
    fn adopt(config: &VmConfig) -> Result<Held, SandboxError> {
        let want = |on: bool, n: RawFd, what: &str| -> Result<Option<OwnedFd>, SandboxError> {
            if !on {
                return Ok(None);
            }
            adopt(n)
                .map(Some)
                .ok_or_else(|| SandboxError::InvalidRequest(format!("{what} is not on fd {n}")))
        };
        Ok(Held {
            broker: want(config.proxy.is_some(), BROKER_FD, "the broker socket")?,
            gate: want(config.workload.gate, GATE_FD, "the canary gate")?,
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
        new_net: c.new_net,
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
        service,
        service_seccomp: seccomp::box_service()?,
        init_seccomp: seccomp::box_init()?,
        terminal,
    })
}

/// The host name, and the loopback interface of a new network namespace
/// (the uid/gid maps were written before the exec).
fn set_up_namespaces(prep: &BoxPrep) -> Result<(), SandboxError> {
    sys::sethostname(&prep.hostname)?;
    if prep.new_net {
        sys::loopback_up()?;
    }
    Ok(())
}
