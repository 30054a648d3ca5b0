//! The run receipt: what ran, under which decision, on which host, and how it ended.
//! Written by the supervisor through [`crate::files`] (an anonymous file in the
//! destination's directory, held open since before the run, linked into place).
//! Its times are RFC 3339 UTC from `terra_netd::receipt::rfc3339`, as in the
//! network receipt.

use std::path::PathBuf;

use serde::Serialize;

pub use crate::request::Bindings;
use crate::request::PolicyOrigin;

pub const RECEIPT_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    pub required: Vec<String>,
    pub declared: Vec<String>,
}

/// How the run ended. `exitCode` is what `terra run` exits with.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    pub exit_code: i32,
    /// The signal that killed the workload, if one did.
    pub signal: Option<i32>,
    /// The deadline (`--timeout`) passed and terra ended the box.
    pub timed_out: bool,
    /// terra refused or failed before the workload started: why.
    pub refused: Option<String>,
    /// The workload could not be executed or was not found: why.
    pub exec_failed: Option<String>,
    /// A role of terra (the box's init, the broker) was killed by its seccomp
    /// allowlist: which, and the system call when the kernel's record was
    /// readable ("role terra __network killed by seccomp, syscall 41").
    pub role_killed: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    pub receipt_version: u32,
    pub terra_version: String,
    pub run_id: String,
    pub backend: String,
    /// Why this backend: `--backend NAME`, or what `--backend auto` found.
    pub backend_reason: String,
    pub policy: PolicyOrigin,
    pub decision_digest: String,
    pub capabilities: Capabilities,
    pub host_bindings: Bindings,
    pub landlock_abi: Option<i32>,
    /// The Landlock ABI of the supervisor's own domain once the box and the
    /// broker ran (null: no Landlock, or the run ended before).
    pub supervisor_landlock_abi: Option<i32>,
    /// Activation check result ("passed", or why it failed; "not run" when the box never started).
    pub activation: String,
    pub started_at: String,
    pub ended_at: String,
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    pub timeout_ms: Option<u64>,
    pub outcome: Outcome,
    /// Mediated networking only: the broker and its network receipt.
    pub network: Option<NetworkSummary>,
}

/// The network broker of a mediated run, for the run receipt.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkSummary {
    /// The network receipt (JSON Lines, one line per connection attempt).
    pub receipt: PathBuf,
    /// Lowercase hex SHA-256 of the network receipt as the broker left it.
    pub receipt_sha256: Option<String>,
    /// Lines of the network receipt (connection attempts).
    pub attempts: u64,
    /// Attempts with verdict "allowed".
    pub admitted: u64,
    /// Attempts with verdict "refused".
    pub refused: u64,
    /// Refused attempts per reason.
    pub refused_by_reason: std::collections::BTreeMap<String, u64>,
    /// Lines that are not a receipt line.
    pub unreadable_lines: u64,
    /// Host pid of the broker role.
    pub broker_pid: i32,
    /// The broker's exit status (128+N: killed by signal N).
    pub broker_exit: Option<i32>,
    /// The broker ended while the box was still running.
    pub broker_ended_during_run: bool,
    /// How the broker ended, in words.
    pub broker_ended: String,
}

impl Receipt {
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".into());
        s.push('\n');
        s
    }
}
