//! The run receipt: what ran, under which decision, on which host, and how it ended.
//! Written by the supervisor through [`crate::files`] (an anonymous file in the
//! destination's directory, held open since before the run, linked into place).
//! Its times are RFC 3339 UTC from `terra_netd::receipt::rfc3339`, as in the
//! network receipt.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::files::{split_output, Existing, Follow, OutDir};
pub use crate::request::Bindings;
use crate::request::{PolicyOrigin, RunRequest};
use terra_netd::receipt::rfc3339;

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
    /// A resource limit acted (an OOM kill, refused forks, SIGXFSZ): what it did.
    pub limit_reached: Option<String>,
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
    /// Network none on the linux backend only: the names the box's DNS
    /// stub refused, each once, in the order asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_refused: Option<Vec<String>>,
    /// The vm backend only: the engine, the accelerator and the kernel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vm: Option<VmSummary>,
    /// How long the run took, on which host, under which limits.
    #[serde(flatten)]
    pub applied: Applied,
    /// The macos backend: how the sweep for the run's processes ended (how
    /// many it found, or why none ran). Absent elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_tree: Option<String>,
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

/// What a supervisor learned while running the request, for its receipt.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    pub run_id: &'a str,
    /// The capabilities the plan required (names).
    pub required: &'a [String],
    pub started: SystemTime,
    pub landlock_abi: Option<i32>,
    pub supervisor_landlock_abi: Option<i32>,
    /// "passed", why the activation check failed, or "not run".
    pub activation: &'a str,
    pub network: Option<NetworkSummary>,
    pub host_name: Option<String>,
}

/// The vm backend's guest, for the run receipt.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VmSummary {
    /// `qemu`.
    pub engine: String,
    /// QEMU's version line.
    pub engine_version: String,
    /// `kvm` or `tcg`, and why.
    pub accelerator: String,
    pub accelerator_reason: String,
    /// The kernel image, its SHA-256 and release.
    pub kernel: String,
    pub kernel_sha256: String,
    pub kernel_release: String,
    pub memory_mib: u32,
    pub cpus: u32,
}

impl VmSummary {
    pub fn of(b: &terra_vm::Boot) -> VmSummary {
        VmSummary {
            engine: "qemu".into(),
            engine_version: b.qemu_version.clone(),
            accelerator: b.accel.name().into(),
            accelerator_reason: b.accel_reason.clone(),
            kernel: b.kernel.clone(),
            kernel_sha256: b.kernel_sha256.clone(),
            kernel_release: b.kernel_release.clone(),
            memory_mib: b.memory_mib,
            cpus: b.cpus,
        }
    }
}

impl Receipt {
    /// The receipt of `req`, ended at `ended` with `outcome`.
    pub fn new(
        req: &RunRequest,
        seen: Observed<'_>,
        outcome: Outcome,
        ended: SystemTime,
    ) -> Receipt {
        let mediated = seen.network.is_some();
        Receipt {
            receipt_version: RECEIPT_VERSION,
            terra_version: env!("CARGO_PKG_VERSION").into(),
            run_id: seen.run_id.to_string(),
            backend: req.backend.clone(),
            backend_reason: req.backend_reason.clone(),
            policy: req.policy.clone(),
            decision_digest: req.decision_digest.clone(),
            capabilities: Capabilities {
                required: seen.required.to_vec(),
                declared: req.declared.clone(),
            },
            host_bindings: req.bindings.clone(),
            landlock_abi: seen.landlock_abi,
            supervisor_landlock_abi: seen.supervisor_landlock_abi,
            activation: seen.activation.to_string(),
            started_at: rfc3339(seen.started),
            ended_at: rfc3339(ended),
            argv: req.argv_display(),
            cwd: req.cwd.clone(),
            timeout_ms: req.timeout_ms,
            outcome,
            network: seen.network,
            dns_refused: None,
            vm: req.vm.as_ref().map(VmSummary::of),
            applied: Applied::collect(
                seen.started,
                ended,
                seen.host_name,
                req.timeout_ms,
                mediated,
                &req.limits,
            ),
            process_tree: None,
        }
    }

    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".into());
        s.push('\n');
        s
    }
}

/// What applied to a run beside its policy, for the receipt: how long it
/// took, on which host, under which limits (flattened into [`Receipt`]:
/// `durationMs`, `hostName`, `limits`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Applied {
    /// From `startedAt` to `endedAt`, in milliseconds.
    pub duration_ms: u64,
    /// The host's name (the box has its own: `terra`).
    pub host_name: Option<String>,
    pub limits: AppliedLimits,
}

/// The limits a run ran under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedLimits {
    /// `--timeout`, if given.
    pub timeout_ms: Option<u64>,
    /// Between SIGTERM and SIGKILL once the deadline passed.
    pub timeout_grace_ms: u64,
    /// The network broker's bounds (mediated runs only).
    pub network: Option<terra_netd::broker::Limits>,
    /// `--memory`, `--pids`, `--cpus`, `--max-file-size`: each as asked,
    /// with the mechanism that enforced it ("none": nothing could).
    pub memory: Option<crate::limits::Limit>,
    pub pids: Option<crate::limits::Limit>,
    pub cpus: Option<crate::limits::Limit>,
    pub max_file_size: Option<crate::limits::Limit>,
}

impl Applied {
    /// For a run from `started` to `ended`; `host_name` read before the
    /// supervisor confined itself (see [`host_name`]).
    pub fn collect(
        started: SystemTime,
        ended: SystemTime,
        host_name: Option<String>,
        timeout_ms: Option<u64>,
        mediated: bool,
        limits: &crate::limits::LimitPlan,
    ) -> Applied {
        Applied {
            duration_ms: ended
                .duration_since(started)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            host_name,
            limits: AppliedLimits {
                timeout_ms,
                timeout_grace_ms: u64::try_from(crate::TIMEOUT_GRACE.as_millis()).unwrap_or(0),
                network: mediated.then(terra_netd::broker::Limits::default),
                memory: limits.memory.clone(),
                pids: limits.pids.clone(),
                cpus: limits.cpus.clone(),
                max_file_size: limits.max_file_size.clone(),
            },
        }
    }
}

/// Where `--receipt` goes, opened before the box starts.
pub enum ReceiptOut {
    /// `--receipt -`: standard output, after the workload's output.
    Stdout,
    /// A file: its directory held open, the final name.
    File(OutDir, OsString),
}

impl ReceiptOut {
    /// Opens the receipt's directory (no symlink in any component) and checks
    /// the name: absent or a regular file (which is replaced).
    pub fn open(path: &Path) -> Result<ReceiptOut> {
        let flag = || format!("--receipt {}", path.display());
        if path == Path::new("-") {
            return match nix::sys::stat::fstat(1) {
                Ok(_) => Ok(ReceiptOut::Stdout),
                Err(e) => Err(Error::sys("standard output is not open", e).context(flag())),
            };
        }
        let opened = split_output(path).and_then(|(dir, name)| {
            let dir = OutDir::open(&dir, Follow::Nothing)?;
            dir.check(&name, Existing::ReplaceRegular)
                .map_err(|e| match e {
                    crate::files::OutError::NotRegular(m) => crate::files::OutError::NotRegular(
                        format!("{m} (`--receipt -` writes it to standard output)"),
                    ),
                    e => e,
                })?;
            Ok(ReceiptOut::File(dir, name))
        });
        opened.map_err(|e| Error::Output(e).context(flag()))
    }

    pub fn write(&self, json: &str) -> Result<()> {
        match self {
            ReceiptOut::Stdout => {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                out.write_all(json.as_bytes())
                    .and_then(|_| out.flush())
                    .map_err(|e| Error::op("cannot write the receipt to standard output", e))
            }
            ReceiptOut::File(dir, name) => dir
                .write(
                    name,
                    json.as_bytes(),
                    0o600,
                    Existing::ReplaceRegular,
                    false,
                )
                .map_err(|e| Error::Output(e).context("cannot write the receipt")),
        }
    }
}

/// Longest network receipt line read as one; a longer one counts as unreadable.
pub const MAX_RECEIPT_LINE: usize = 64 << 10;

/// Counts the network receipt line by line and hashes it, in memory bounded
/// by [`MAX_RECEIPT_LINE`] whatever its size.
pub fn count_network_receipt(file: &std::fs::File, s: &mut NetworkSummary) -> std::io::Result<()> {
    use sha2::{Digest, Sha256};
    use std::io::BufRead;
    let mut hasher = Sha256::new();
    let mut reader = std::io::BufReader::with_capacity(64 << 10, file);
    let mut line = Vec::new();
    loop {
        line.clear();
        let mut overlong = false;
        // One line, at most MAX_RECEIPT_LINE bytes kept.
        let ended = loop {
            let buf = reader.fill_buf()?;
            if buf.is_empty() {
                break line.is_empty() && !overlong;
            }
            let (chunk, found) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (&buf[..=i], true),
                None => (buf, false),
            };
            hasher.update(chunk);
            if line.len() + chunk.len() <= MAX_RECEIPT_LINE + 1 {
                line.extend_from_slice(chunk);
            } else {
                overlong = true;
            }
            let n = chunk.len();
            reader.consume(n);
            if found {
                break false;
            }
        };
        if ended {
            break;
        }
        if overlong {
            s.unreadable_lines += 1;
            continue;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        if text.is_empty() {
            continue;
        }
        let v: serde_json::Value = match serde_json::from_slice(text) {
            Ok(v) => v,
            Err(_) => {
                s.unreadable_lines += 1;
                continue;
            }
        };
        s.attempts += 1;
        match v["verdict"].as_str() {
            Some("allowed") => s.admitted += 1,
            Some("refused") => {
                s.refused += 1;
                let reason = v["reason"].as_str().unwrap_or("unknown").to_string();
                *s.refused_by_reason.entry(reason).or_default() += 1;
            }
            _ => s.unreadable_lines += 1,
        }
    }
    s.receipt_sha256 = Some(crate::hex::hex(&hasher.finalize()));
    Ok(())
}

/// This host's name (`uname -n`), or None when it is not UTF-8 or cannot be read.
pub fn host_name() -> Option<String> {
    nix::unistd::gethostname().ok()?.into_string().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, Write};
    use std::time::Duration;

    fn counted(bytes: &[u8]) -> NetworkSummary {
        let mut f = tempfile_in_tmp();
        f.write_all(bytes).unwrap();
        f.rewind().unwrap();
        let mut s = NetworkSummary::default();
        count_network_receipt(&f, &mut s).unwrap();
        s
    }

    fn tempfile_in_tmp() -> std::fs::File {
        tempfile::tempfile().unwrap()
    }

    #[test]
    fn network_receipt_counts_and_digest() {
        let text = b"{\"verdict\":\"allowed\"}\n{\"verdict\":\"refused\",\"reason\":\"not-allowed\"}\nnot json\n\n";
        let s = counted(text);
        assert_eq!(
            (s.attempts, s.admitted, s.refused, s.unreadable_lines),
            (2, 1, 1, 1)
        );
        assert_eq!(s.refused_by_reason.get("not-allowed"), Some(&1));
        assert_eq!(
            s.receipt_sha256.as_deref(),
            Some(terra_policy::digest::artifact_digest(text).as_str())
        );
        // A last line without a newline counts too.
        assert_eq!(counted(b"{\"verdict\":\"allowed\"}").admitted, 1);
    }

    #[test]
    fn an_overlong_line_is_unreadable_not_buffered() {
        let mut text = vec![b'x'; MAX_RECEIPT_LINE * 3];
        text.extend_from_slice(b"\n{\"verdict\":\"allowed\"}\n");
        let s = counted(&text);
        assert_eq!((s.attempts, s.admitted, s.unreadable_lines), (1, 1, 1));
        assert_eq!(
            s.receipt_sha256.as_deref(),
            Some(terra_policy::digest::artifact_digest(&text).as_str())
        );
    }

    #[test]
    fn applied_fields() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let a = Applied::collect(
            t0,
            t0 + Duration::from_millis(1500),
            host_name(),
            Some(30_000),
            true,
            &Default::default(),
        );
        assert_eq!(a.duration_ms, 1500);
        assert!(a.host_name.as_deref().is_some_and(|h| !h.is_empty()));
        let v = serde_json::to_value(&a).unwrap();
        assert_eq!(v["limits"]["timeoutMs"], 30_000);
        assert_eq!(v["limits"]["timeoutGraceMs"], 2000);
        assert_eq!(v["limits"]["network"]["max_flows"], 1024);
        let none = Applied::collect(t0, t0, None, None, false, &Default::default());
        assert_eq!(
            serde_json::to_value(&none).unwrap()["limits"]["network"],
            serde_json::Value::Null
        );
        // A clock that went back gives 0, not a wrap.
        assert_eq!(
            Applied::collect(
                t0,
                t0 - Duration::from_secs(1),
                None,
                None,
                false,
                &Default::default()
            )
            .duration_ms,
            0
        );
    }
}
