//! The workload's environment on Windows.
//!
//! Variables copied from terra's environment by name (compared without
//! case, as Windows does), then TEMP, TMP, HOME and USERPROFILE at the
//! run's temp directory, then `--env NAME[=VALUE]`. Every path terra puts
//! there itself is a plain drive path (`C:\...`): a verbatim `\\?\` path
//! from `std::fs::canonicalize` is made plain first, since programs join
//! and compare these as ordinary paths, and cmd.exe refuses to start in a
//! UNC directory (Codex strips the prefix for the same reason:
//! codex-rs/windows-sandbox-rs/src/path_normalization.rs).

use crate::error::{Error, Result};
use crate::path::PathStyle;

/// Variables copied from terra's environment into the workload's.
pub const ALLOWLIST: &[&str] = &[
    "PATH",
    "PATHEXT",
    "SystemRoot",
    "SystemDrive",
    "windir",
    "ComSpec",
    "NUMBER_OF_PROCESSORS",
    "PROCESSOR_ARCHITECTURE",
    "OS",
    "TZ",
    "LANG",
    "TERM",
    "NO_COLOR",
    "ProgramFiles",
    "ProgramFiles(x86)",
    "ProgramW6432",
    "CommonProgramFiles",
    "ProgramData",
];

/// The variables naming the run's temp directory.
pub const TEMP_VARS: [&str; 4] = ["TEMP", "TMP", "HOME", "USERPROFILE"];

/// The workload's environment, sorted. `host` is terra's environment;
/// `temp` the run's temp directory (verbatim or plain); `extra` the
/// `--env` values, each `NAME=VALUE` or `NAME` (copied from `host`).
pub fn workload_env(
    style: PathStyle,
    host: &[(String, String)],
    temp: &str,
    extra: &[String],
) -> Result<Vec<(String, String)>> {
    let temp = style.canonical(temp)?;
    let mut env: Vec<(String, String)> = Vec::new();
    let mut set = |k: String, v: String| {
        env.retain(|(n, _)| !n.eq_ignore_ascii_case(&k));
        env.push((k, v));
    };
    for (k, v) in host {
        if ALLOWLIST.iter().any(|a| k.eq_ignore_ascii_case(a)) {
            set(k.clone(), v.clone());
        }
    }
    for name in TEMP_VARS {
        set(name.to_string(), temp.clone());
    }
    for text in extra {
        let (name, value) = match text.split_once('=') {
            Some((n, v)) => (n.to_string(), v.to_string()),
            None => {
                let v = host
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(text))
                    .map(|(_, v)| v.clone())
                    .ok_or_else(|| {
                        Error::Unsupported(format!(
                            "--env {text}: not set in terra's environment (use NAME=VALUE)"
                        ))
                    })?;
                (text.clone(), v)
            }
        };
        if name.is_empty() || text.contains('\0') {
            return Err(Error::Unsupported(format!(
                "--env {text:?}: invalid name or value"
            )));
        }
        set(name, value);
    }
    env.sort();
    Ok(env)
}
