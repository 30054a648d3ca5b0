//! The box's configuration as its init (`vm.rs`) reads it from its config
//! socket, and as the caller (`prepare.rs`) and the vm backend's host side
//! (`vmhost.rs`) see it: plain data, below all three.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::lower::MountOp;
use super::terminal::TerminalWire;
use super::Rlimits;

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
    /// Network none: a DNS report pipe is on the vm role's DNS report descriptor.
    #[serde(default)]
    pub dns_report: bool,
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
    /// Whether a canary gate is on `vm::GATE_FD`.
    pub gate: bool,
    pub rlimits: Rlimits,
}
