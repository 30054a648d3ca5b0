//! The run receipt: what ran, under which decision, on which host, and how it ended.
//! Written by the supervisor through [`crate::files`] (an anonymous file in the
//! destination's directory, held open since before the run, linked into place).

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::request::PolicyOrigin;

pub const RECEIPT_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    pub required: Vec<String>,
    pub declared: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Bindings {
    pub workspace: Option<PathBuf>,
    pub temp: Option<PathBuf>,
    pub minimal_roots: Vec<PathBuf>,
    pub mediator: Option<String>,
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
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    pub receipt_version: u32,
    pub terra_version: String,
    pub run_id: String,
    pub backend: String,
    pub policy: PolicyOrigin,
    pub decision_digest: String,
    pub capabilities: Capabilities,
    pub host_bindings: Bindings,
    pub landlock_abi: Option<i32>,
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

/// RFC 3339 UTC with millisecond precision, e.g. `2026-12-01T22:05:22.123Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, day) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(951_782_400_500); // leap day 2000
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00.500Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_796_162_722);
        assert_eq!(rfc3339(t), "2026-12-01T22:05:22.000Z");
    }
}
