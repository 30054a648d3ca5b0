//! The native Linux launcher. This is the contract the supervisor and the broker
//! build on; the implementation lives in the submodules.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use terra_policy::{CapabilitySet, SandboxPlan};

/// Why the launcher refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("unsupported on this host: {0}")]
    Unsupported(String),
    #[error("launcher failed: {0}")]
    Launch(String),
    #[error("activation check failed: {0}")]
    Activation(String),
    #[error("io error: {0}")]
    Io(String),
}

/// A service that runs inside the box (in a child of the box init, after the
/// box's namespaces, root and filters are in place) before the workload starts:
/// the box-side proxy of mediated networking. It receives a listener already
/// bound inside the box's network namespace and the box end of the fd 7
/// socketpair, and never returns.
pub type BoxService = fn(listener: std::net::TcpListener, broker: OwnedFd) -> !;

/// Everything the launcher needs to start one box.
pub struct BoxConfig {
    /// The resolved, capability-checked plan (never grant more than it says).
    pub plan: SandboxPlan,
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
    /// Mediated networking: the box end of the fd 7 socketpair, the loopback
    /// address the service listens on inside the box, and the service.
    pub mediated: Option<(OwnedFd, SocketAddr, BoxService)>,
    /// Host name inside the box's UTS namespace.
    pub hostname: String,
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
pub fn declared_capabilities(broker_available: bool) -> CapabilitySet {
    let _ = broker_available;
    CapabilitySet::EMPTY
}

/// A running box.
pub struct BoxHandle {
    pid: i32,
}

impl BoxHandle {
    /// Pid (in the caller's namespace) of the launcher/box process to signal.
    pub fn pid(&self) -> i32 {
        self.pid
    }
    /// Waits for the box to end.
    pub fn wait(self) -> Result<BoxReport, SandboxError> {
        Err(SandboxError::Unsupported(
            "the Linux launcher is not built yet".into(),
        ))
    }
}

/// Starts a box. The caller must be single-threaded (the launcher forks).
pub fn spawn_box(config: BoxConfig) -> Result<BoxHandle, SandboxError> {
    let _ = config;
    Err(SandboxError::Unsupported(
        "the Linux launcher is not built yet".into(),
    ))
}

/// The mount and filter program `spawn_box` would apply, for `terra run --dry-run`.
pub fn describe(config: &BoxConfig) -> String {
    let _ = config;
    String::new()
}

/// Everything needed to start a confined host role (the broker).
pub struct RoleConfig {
    /// Host files bound read-only at the same path (only these exist in its root).
    pub read_only_files: Vec<PathBuf>,
    /// Descriptors the role keeps, moved to these fixed numbers (e.g. 7 and 8).
    pub keep_fds: Vec<(OwnedFd, i32)>,
}

/// A running confined role.
pub struct RoleHandle {
    pid: i32,
}

impl RoleHandle {
    pub fn pid(&self) -> i32 {
        self.pid
    }
    /// Waits for the role; returns its exit code (128+N for signal N).
    pub fn wait(self) -> Result<i32, SandboxError> {
        Err(SandboxError::Unsupported(
            "the Linux launcher is not built yet".into(),
        ))
    }
}

/// Starts a host role under its own user, PID, mount, IPC and UTS namespaces on
/// the host network, with no /dev and no /tmp, a cleared environment, all
/// capabilities dropped and no_new_privs; then runs `main` inside (in process,
/// no exec), which applies its own seccomp/Landlock and returns an exit code.
pub fn spawn_confined_role(
    config: RoleConfig,
    main: fn() -> i32,
) -> Result<RoleHandle, SandboxError> {
    let _ = (config, main);
    Err(SandboxError::Unsupported(
        "the Linux launcher is not built yet".into(),
    ))
}

/// What this host offers the Linux backend, for `terra doctor` and `terra backends`.
#[derive(Debug, Clone, Default)]
pub struct HostSupport {
    /// Each check: name, ok, detail (what to change when not ok).
    pub checks: Vec<(String, bool, String)>,
    pub landlock_abi: Option<i32>,
}

pub fn host_support() -> HostSupport {
    HostSupport::default()
}
