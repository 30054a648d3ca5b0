//! The native Linux launcher. This is the contract the supervisor and the broker
//! build on; the implementation lives in the submodules.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use terra_policy::{Capability, CapabilitySet, SandboxPlan};

mod config;
mod error;
mod exe;
mod init;
mod landlock;
pub mod lower;
mod mounts;
pub mod nouserns;
mod prepare;
mod rlimits;
mod role;
mod seccomp;
mod spec;
mod status;
mod support;
mod sys;
mod terminal;
mod vm;
mod vmhost;
mod workload;

pub use landlock::{restrict_self as landlock_restrict_self, FsAccess, LandlockPlan, NetRule};
pub use lower::{MountOp, NodeKind};
pub use rlimits::Rlimits;

pub use terminal::{set_window_size, window_size, BoxTerminal, TerminalChannel, WindowSize};
// Hand-made plans (rules not taken from a checked plan) are for the tests
// only: with the `test-support` feature, which only dev-dependencies enable.
#[cfg(feature = "test-support")]
pub use spec::{BoxSpec, PlanView};
#[cfg(not(feature = "test-support"))]
use spec::{BoxSpec, PlanView};

pub use error::SandboxError;
pub use exe::{set_name, RoleExe};

/// The body of `terra __vm` (the box's init); never returns. See `vm.rs`.
pub fn vm_main(service: BoxService, own_net: bool) -> ! {
    vm::main(service, own_net)
}

// The box service's descriptors and entry live in terra-kernel, which
// terra-netd (the service) also uses.
pub use terra_kernel::service::{BoxService, MediatedFds, RefusingDnsFds, ServiceFds};

/// Everything the launcher needs to start one box. `P` is the plan: the
/// resolved, capability-checked [`SandboxPlan`] (the only one `spawn_box`
/// takes), or in the tests the launcher's view of a hand-made one.
pub struct BoxConfig<P = SandboxPlan> {
    /// The resolved, capability-checked plan (never grant more than it says).
    pub plan: P,
    /// The workload: argv[0] is looked up on the box's PATH.
    pub argv: Vec<OsString>,
    /// Working directory inside the box (the workspace, at its real path).
    pub cwd: PathBuf,
    /// The complete environment of the workload (already filtered by the caller).
    pub env: Vec<(OsString, OsString)>,
    /// Fresh private host directory bound at /tmp.
    pub temp_dir: PathBuf,
    /// A host-only file outside every grant: opening it inside must fail.
    pub canary_path: PathBuf,
    /// A host loopback listener: with network none, connecting to it must fail.
    pub canary_tcp: Option<SocketAddr>,
    /// Read end of a pipe on which the caller writes one byte once the canary
    /// exists, so it can create the canary while the box builds its root. The
    /// workload waits for that byte right before the activation check; end of
    /// file instead refuses the run. None: the canary exists already.
    pub canary_gate: Option<OwnedFd>,
    /// Mediated networking: the box end of the fd 7 socketpair, the loopback
    /// address the service listens on inside the box, and the service.
    pub mediated: Option<(OwnedFd, SocketAddr, BoxService)>,
    /// Network none (a box with its own network namespace): the write end
    /// of a pipe where the box's DNS stub says each name it refused, one
    /// line each; None: it says them on the box's standard error.
    pub dns_report: Option<OwnedFd>,
    /// Host name inside the box's UTS namespace.
    pub hostname: String,
    /// Resource limits the workload sets on itself before exec.
    pub rlimits: Rlimits,
    /// The vm backend: the box runs QEMU with this boot configuration on
    /// the box's tree (exported over 9p) instead of the workload.
    pub vm: Option<terra_vm::Boot>,
}

impl<P> BoxConfig<P> {
    /// The same box over another plan.
    fn with_plan<Q>(self, plan: Q) -> BoxConfig<Q> {
        BoxConfig {
            plan,
            argv: self.argv,
            cwd: self.cwd,
            env: self.env,
            temp_dir: self.temp_dir,
            canary_path: self.canary_path,
            canary_tcp: self.canary_tcp,
            canary_gate: self.canary_gate,
            mediated: self.mediated,
            dns_report: self.dns_report,
            hostname: self.hostname,
            rlimits: self.rlimits,
            vm: self.vm,
        }
    }
}

/// How the box ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoxExit {
    /// The workload exited with this code.
    Code(i32),
    /// The workload was killed by this signal.
    Signal(i32),
    /// The box refused to start the workload (setup or activation failure).
    Refused(String),
    /// The workload could not be executed (126) or was not found (127).
    ExecFailed { code: i32, reason: String },
    /// The box's init itself died by SIGSYS before reporting the workload's
    /// end: its seccomp allowlist killed it (taking the box with it).
    InitKilledBySeccomp,
}

/// What happened, for the receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoxReport {
    pub exit: BoxExit,
    /// Landlock ABI enforced, None when the kernel has no Landlock.
    pub landlock_abi: Option<i32>,
    /// Activation check outcome ("passed", or why it failed).
    pub activation: String,
}

/// Capabilities the Linux backend enforces (network-mediated and its flags
/// only when `broker_available`).
///
/// fs-protect-create: an absent denied path inside a writable host bind is
/// held by a placeholder terra makes on the host for the run
/// ([`lower::placeholders`]; terra-supervisor's `placeholders`), covered by
/// the deny mount.
pub fn declared_capabilities(broker_available: bool) -> CapabilitySet {
    let mut caps: CapabilitySet = [
        Capability::FsRead,
        Capability::FsWrite,
        Capability::FsDeny,
        Capability::FsDenyWrite,
        Capability::FsProtectCreate,
        Capability::NetworkNone,
        Capability::NetworkDirect,
        Capability::ProcessTree,
        Capability::RootEphemeralWrite,
    ]
    .into_iter()
    .collect();
    if broker_available {
        caps.insert(Capability::NetworkMediated);
        caps.insert(Capability::NetworkRequireTlsSni);
        caps.insert(Capability::NetworkPrivateAddresses);
    }
    caps
}

/// A running box.
pub struct BoxHandle {
    pid: i32,
    status: OwnedFd,
    /// Read end of init's result pipe (how the workload ended).
    result: Option<OwnedFd>,
    /// On a kernel without pidfd_open: the only write end of the
    /// pipe init watches to learn that the caller is gone (closed with the handle).
    _life: Option<OwnedFd>,
    /// A box with its own terminal: where its master side arrives.
    terminal: Option<TerminalChannel>,
}

impl BoxHandle {
    /// Pid (in the caller's namespace) of the box init, which forwards
    /// signals to the workload.
    pub fn pid(&self) -> i32 {
        self.pid
    }
    /// A box started with a [`BoxTerminal`]: the channel on which its
    /// terminal's master side arrives (once; None afterwards or without one).
    pub fn take_terminal(&mut self) -> Option<TerminalChannel> {
        self.terminal.take()
    }
    /// Waits for the box to end: its init reaped, every process of the box gone.
    pub fn wait(self) -> Result<BoxReport, SandboxError> {
        let (report, reap) = self.wait_reported()?;
        reap.wait()?;
        Ok(report)
    }

    /// Reads the box's status reports until the workload was executed (or
    /// the box ended), then returns how the workload ended as soon as init
    /// said so, before init's exit (the kernel then kills what is left in
    /// the box and tears down its namespaces, which takes a while): the
    /// caller writes its receipt meanwhile and reaps the box with
    /// [`BoxReap::wait`] before it relies on the box being gone. Without
    /// that word (init died, or a box without an init of its own), init is
    /// reaped here first.
    pub fn wait_reported(self) -> Result<(BoxReport, BoxReap), SandboxError> {
        let reports = status::read_all(self.status.as_fd());
        if let Some(fd) = &self.result {
            let mut b = [0u8; 2];
            // Two bytes, or end of file once init (and every process that
            // holds the pipe) is gone without writing them.
            if sys::read_full(fd.as_fd(), &mut b) == 2 {
                let result = Some((b[0] == 1, b[1] as i32));
                let report = prepare::report(&reports, (false, 0), result, true);
                return Ok((
                    report,
                    BoxReap {
                        pid: Some(self.pid),
                    },
                ));
            }
        }
        let ended = wait_for(self.pid)?;
        let report = prepare::report(&reports, ended, None, self.result.is_some());
        Ok((report, BoxReap { pid: None }))
    }
}

/// A box whose init reported the workload's end and may still be exiting.
#[must_use = "the box is gone only once reaped"]
pub struct BoxReap {
    pid: Option<i32>,
}

impl BoxReap {
    /// Reaps the box's init: when this returns, no process of the box is left.
    pub fn wait(self) -> Result<(), SandboxError> {
        match self.pid {
            Some(pid) => wait_for(pid).map(|_| ()),
            None => Ok(()),
        }
    }
}

/// How the caller's child `pid` ended: (signaled, exit code or signal).
fn wait_for(pid: i32) -> Result<(bool, i32), SandboxError> {
    let pid = nix::unistd::Pid::from_raw(pid);
    match sys::wait_child(pid, false)? {
        Some((_, ended)) => Ok(ended),
        None => Err(SandboxError::Io(format!(
            "waitpid({pid}) returned no status"
        ))),
    }
}

/// Starts a box: its init is cloned into the box's namespaces and execs
/// `terra __vm` from `exe` at once (see `vm.rs`). Any caller, also a
/// multi-threaded one: the clone's child makes only system calls until then.
pub fn spawn_box(exe: &RoleExe, config: BoxConfig) -> Result<BoxHandle, SandboxError> {
    spawn_spec(exe, config.into(), None)
}

/// [`spawn_box`], and with `terminal` the box gets its own pseudo-terminal
/// (see `terminal.rs`); its master side arrives on
/// [`BoxHandle::take_terminal`].
pub fn spawn_box_with_terminal(
    exe: &RoleExe,
    config: BoxConfig,
    terminal: Option<BoxTerminal>,
) -> Result<BoxHandle, SandboxError> {
    spawn_spec(exe, config.into(), terminal)
}

/// Starts a box from a [`BoxSpec`]: a hand-made plan (test-support only).
#[cfg(feature = "test-support")]
pub fn spawn_box_spec(exe: &RoleExe, spec: BoxSpec) -> Result<BoxHandle, SandboxError> {
    spawn_spec(exe, spec, None)
}

fn spawn_spec(
    exe: &RoleExe,
    spec: BoxSpec,
    terminal: Option<BoxTerminal>,
) -> Result<BoxHandle, SandboxError> {
    let new_net = spec.plan.network != terra_policy::NetworkMode::Direct;
    EarlyBox::spawn(exe, new_net)?.start_spec(exe, spec, terminal)
}

/// A box's init cloned into the box's namespaces and exec'd (`terra __vm`)
/// before its configuration exists; it waits for it on its config socket.
/// The namespaces (a network namespace above all) and the exec are most of
/// a box's start and need nothing from the run, so the supervisor makes
/// them while it reads and checks the request ([`EarlyBox::start`] hands
/// the configuration). Dropped unused, the init is killed and reaped.
pub struct EarlyBox {
    pid: Option<nix::unistd::Pid>,
    new_net: bool,
    /// Our end of the config socket: the descriptors of the run (SCM_RIGHTS),
    /// then the configuration (JSON) to its end.
    config: Option<OwnedFd>,
    status: Option<OwnedFd>,
    result: Option<OwnedFd>,
    /// On a kernel without pidfd_open: the only write end of the pipe init
    /// watches to learn that the caller is gone.
    life: Option<OwnedFd>,
}

impl EarlyBox {
    /// Clones the init (with a network namespace of its own when `new_net`)
    /// and execs `terra __vm` from `exe`. Any caller, also a multi-threaded
    /// one: the clone's child makes only system calls until then.
    pub fn spawn(exe: &RoleExe, new_net: bool) -> Result<EarlyBox, SandboxError> {
        let (status_r, status_w) = sys::pipe_cloexec()?;
        let (res_r, res_w) = sys::pipe_cloexec()?;
        let (config_ours, config_theirs) = sys::socketpair_cloexec()?;
        // How init learns that the caller is gone before its parent-death
        // signal was armed.
        let (parent_fd, life_w) = sys::caller_liveness()?;
        let mut launch = exe::Launch::new(exe, c"__vm");
        launch.give(sys::raw(&config_theirs), vm::CONFIG_FD)?;
        launch.give(sys::raw(&status_w), vm::STATUS_FD)?;
        launch.give(sys::raw(&res_w), vm::RESULT_FD)?;
        launch.give(sys::raw(&parent_fd), vm::PARENT_FD)?;
        launch.report_to(vm::STATUS_FD);
        // The network namespace is the init's to make while the caller
        // prepares the run (creating one is most of the clone's time): only
        // the word travels in argv.
        if new_net {
            launch.arg(vm::OWN_NET_ARG);
        }
        let pid = spawn_role(&launch, init::box_namespaces(), "the box")?;
        Ok(EarlyBox {
            pid: Some(pid),
            new_net,
            config: Some(config_ours),
            status: Some(status_r),
            result: Some(res_r),
            life: life_w,
        })
    }

    /// Host pid of the init (0 once it was handed on or ended).
    pub fn pid(&self) -> i32 {
        self.pid.map_or(0, |p| p.as_raw())
    }

    /// [`EarlyBox::start`] with a hand-made plan (test-support only).
    #[cfg(feature = "test-support")]
    pub fn start_box_spec(self, exe: &RoleExe, spec: BoxSpec) -> Result<BoxHandle, SandboxError> {
        self.start_spec(exe, spec, None)
    }

    /// Hands the box its configuration and the run's descriptors. A box
    /// whose network namespace does not match the plan's (network direct
    /// shares the host's) is ended and a fresh one started.
    pub fn start(
        self,
        exe: &RoleExe,
        config: BoxConfig,
        terminal: Option<BoxTerminal>,
    ) -> Result<BoxHandle, SandboxError> {
        self.start_spec(exe, config.into(), terminal)
    }

    fn start_spec(
        mut self,
        exe: &RoleExe,
        spec: BoxSpec,
        terminal: Option<BoxTerminal>,
    ) -> Result<BoxHandle, SandboxError> {
        let mut config = prepare::vm_config(&spec)?;
        if config.new_net != self.new_net {
            drop(self);
            return EarlyBox::spawn(exe, config.new_net)?.start_spec(exe, spec, terminal);
        }
        let mut channel = None;
        let mut box_terminal = None;
        if let Some(t) = &terminal {
            let (ours, theirs) = terminal::prepare(t)?;
            channel = Some(ours);
            config.terminal = Some(theirs.wire());
            box_terminal = Some(theirs);
        }
        let fds = vm::RunFds {
            broker: spec.mediated.as_ref().map(|(fd, _, _)| fd.as_fd()),
            gate: spec.canary_gate.as_ref().map(|fd| fd.as_fd()),
            terminal: box_terminal.as_ref().map(|t| t.channel.as_fd()),
            dns_report: spec.dns_report.as_ref().map(|fd| fd.as_fd()),
        };
        let (Some(sock), Some(status)) = (self.config.take(), self.status.take()) else {
            return Err(SandboxError::Launch(
                "the early box was started before".into(),
            ));
        };
        let sent =
            vm::send_run_fds(sock.as_fd(), &fds).and_then(|()| exe::write_config(sock, &config));
        // The box holds its own copies now: close ours.
        drop((box_terminal, spec));
        if let Err(e) = sent {
            // An init that refused before its configuration came (its root)
            // said why on the status pipe, which the handle reads; one that
            // is still there gets end of file and refuses the run.
            tracing::debug!("the box's configuration was not handed over: {e}");
        }
        let Some(pid) = self.pid.take() else {
            return Err(SandboxError::Launch(
                "the early box was started before".into(),
            ));
        };
        Ok(BoxHandle {
            pid: pid.as_raw(),
            status,
            result: self.result.take(),
            _life: self.life.take(),
            terminal: channel,
        })
    }
}

impl Drop for EarlyBox {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            let _ = sys::wait_child(pid, false);
        }
    }
}

/// Clones `launch` into the namespaces `flags`, with the forwarded signals
/// and SIGCHLD blocked (the role starts with them queued, not lost) and
/// without the calling thread's supplementary groups (which a process can
/// no longer drop inside its user namespace); the caller gets both back.
fn spawn_role(
    launch: &exe::Launch<'_>,
    flags: libc::c_int,
    what: &str,
) -> Result<nix::unistd::Pid, SandboxError> {
    let mask = sys::block_init_signals();
    let groups = match sys::drop_thread_groups() {
        Ok(g) => g,
        Err(e) => {
            sys::set_mask(&mask);
            return Err(e);
        }
    };
    let cloned = launch.spawn(flags);
    let restored = groups.map(|g| sys::set_thread_groups(&g));
    sys::set_mask(&mask);
    let pid = cloned.map_err(|e| {
        SandboxError::Unsupported(format!(
            "cannot create the namespaces of {what}: {e} (`terra doctor` says what blocks user namespaces \
             here; `--backend auto` takes the landlock backend where they are unavailable)"
        ))
    })?;
    if let Some(Err(e)) = restored {
        // The caller lost its own groups: end the role rather than go on changed.
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = sys::wait_child(pid, false);
        return Err(SandboxError::Launch(format!(
            "cannot restore the caller's supplementary groups: {e}"
        )));
    }
    Ok(pid)
}

/// The mount and filter program `spawn_box` would apply, for `terra run --dry-run`.
pub fn describe(config: &BoxConfig) -> String {
    prepare::describe(
        &PlanView::of(&config.plan),
        &config.temp_dir,
        &config.hostname,
        config.mediated.as_ref().map(|(_, a, _)| *a),
    )
}

/// [`describe`] over a [`BoxSpec`]: a hand-made plan (test-support only).
#[cfg(feature = "test-support")]
pub fn describe_spec(spec: &BoxSpec) -> String {
    prepare::describe(
        &spec.plan,
        &spec.temp_dir,
        &spec.hostname,
        spec.mediated.as_ref().map(|(_, a, _)| *a),
    )
}

/// Everything needed to start a confined host role (the broker).
pub struct RoleConfig {
    /// Host files bound read-only at the same path (only these exist in its root).
    pub read_only_files: Vec<PathBuf>,
    /// Descriptors the role keeps, moved to these fixed numbers (e.g. 7 and
    /// 8); 3 and 6 are the role's own (see `role.rs`).
    pub keep_fds: Vec<(OwnedFd, i32)>,
}

/// A running confined role.
pub struct RoleHandle {
    pid: i32,
    /// On a kernel without pidfd_open: the only write end of the pipe the
    /// role watches to learn that the caller is gone.
    _life: Option<OwnedFd>,
}

impl RoleHandle {
    pub fn pid(&self) -> i32 {
        self.pid
    }
    /// Waits for the role; returns its exit code (128+N for signal N).
    pub fn wait(self) -> Result<i32, SandboxError> {
        let (signaled, v) = wait_for(self.pid)?;
        Ok(if signaled { 128 + v } else { v })
    }
}

/// Starts the host role `role` (a role name `exe` dispatches, e.g.
/// `__network`) as PID 1 of its own user, PID, mount, IPC and UTS namespaces
/// on the host network: cloned, then `exe` exec'd at once. In the role,
/// [`enter_confined_role`] builds its root (a tmpfs with only the given files,
/// no /dev, no /tmp), drops every capability and sets no_new_privs; the role
/// then applies its own seccomp and Landlock.
pub fn spawn_confined_role(
    exe: &RoleExe,
    role: &'static std::ffi::CStr,
    config: RoleConfig,
) -> Result<RoleHandle, SandboxError> {
    role::spawn(exe, role, config)
}

/// The first call of a confined role after its exec (see `role.rs`): its
/// root, no capabilities, no_new_privs, then the role's own code runs.
pub fn enter_confined_role() -> Result<(), SandboxError> {
    role::enter()
}

pub use support::{CheckId, HostCheck, ProbeFailure};

/// What this host offers the Linux backend, for `terra doctor` and `terra backends`.
#[derive(Debug, Clone, Default)]
pub struct HostSupport {
    /// Each check once, in a fixed order.
    pub checks: Vec<HostCheck>,
    pub landlock_abi: Option<i32>,
}

impl HostSupport {
    /// Whether the check ran and passed.
    pub fn passed(&self, id: CheckId) -> bool {
        self.checks.iter().any(|c| c.id == id && c.ok)
    }

    /// Whether boxes can start here: every required check passed.
    pub fn usable(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c.ok || !c.id.required())
    }
}

pub fn host_support() -> HostSupport {
    support::check()
}
