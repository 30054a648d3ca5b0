//! The run request: what `terra run` hands the supervisor over an inherited pipe.
//!
//! The plan itself does not travel: the canonical MIR bytes do, with the host
//! bindings and the capabilities the CLI checked against. The supervisor decodes
//! the bytes (byte-identical re-encode), compares the decision digest and
//! resolves the plan again on its side.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Version of the request layout; the supervisor refuses any other.
pub const REQUEST_VERSION: u32 = 1;
/// Largest request accepted on the pipe (MIR is at most 1 MiB, hex doubles it).
pub const MAX_REQUEST_LEN: usize = 8 << 20;

/// Where the policy came from, for the receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyOrigin {
    /// "default" for the embedded default, otherwise the policy file's path.
    pub source: String,
    /// `json` or `mir`.
    pub format: String,
    /// Lowercase hex SHA-256 of the policy bytes (the file, or the default source).
    pub artifact_digest: String,
    /// Rules the command line added (`--read`, `--write`, `--deny`, `--allow-net`).
    pub overlay: Vec<String>,
}

/// What this host bound the policy's roots to, as the CLI bound them (the
/// receipt records it as `hostBindings`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Bindings {
    pub workspace: PathBuf,
    /// The fresh private temp directory the CLI made for this run.
    pub temp: PathBuf,
    pub minimal_roots: Vec<PathBuf>,
    pub mediator: Option<String>,
}

impl Bindings {
    /// The bindings the policy resolves against.
    pub fn host_bindings(&self) -> terra_policy::HostBindings {
        terra_policy::HostBindings {
            workspace: Some(self.workspace.clone()),
            temp: Some(self.temp.clone()),
            minimal_roots: self.minimal_roots.clone(),
            mediator: self.mediator.clone(),
        }
    }
}

/// One run, as the CLI resolved it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunRequest {
    pub version: u32,
    /// The pid of `terra run`, which the supervisor checks is its parent
    /// (here, not on the supervisor's command line: the box's init shows that).
    pub parent_pid: i32,
    /// The backend chosen (`linux` or `landlock`, never `auto`).
    pub backend: String,
    /// Why that backend (`--backend` named it, or what `auto` found).
    pub backend_reason: String,
    /// Canonical MIR v3 bytes, lowercase hex.
    pub mir_hex: String,
    pub decision_digest: String,
    pub policy: PolicyOrigin,
    pub bindings: Bindings,
    /// Capability names the backend declared when the CLI checked the plan.
    pub declared: Vec<String>,
    /// Working directory inside the box.
    pub cwd: PathBuf,
    /// The workload's argv, each argument hex-encoded (arguments are bytes).
    pub argv_hex: Vec<String>,
    /// The workload's complete environment, hex-encoded name and value.
    pub env_hex: Vec<(String, String)>,
    pub timeout_ms: Option<u64>,
    /// Extra copy of the receipt: an absolute path, or `-` for standard output.
    pub receipt: Option<PathBuf>,
    pub keep_temp: bool,
    /// The resource limits with the mechanism of each and their cgroups
    /// (made by the CLI, re-checked by the supervisor).
    pub limits: crate::limits::LimitPlan,
    /// The vm backend: what the guest boots with (QEMU, the cached vmlinux
    /// and initramfs, the accelerator), prepared by the CLI.
    #[serde(default)]
    pub vm: Option<terra_vm::Boot>,
}

impl RunRequest {
    /// The request as JSON with every environment value emptied (names kept):
    /// what the run leaves on disk, since `--env` values may be secrets.
    pub fn without_env_values(&self) -> Vec<u8> {
        let mut r = self.clone();
        for (_, value) in &mut r.env_hex {
            value.clear();
        }
        serde_json::to_vec(&r).unwrap_or_default()
    }

    pub fn argv(&self) -> Result<Vec<OsString>> {
        self.argv_hex
            .iter()
            .map(|a| unhex(a).map(OsString::from_vec))
            .collect()
    }

    pub fn env(&self) -> Result<Vec<(OsString, OsString)>> {
        self.env_hex
            .iter()
            .map(|(k, v)| Ok((OsString::from_vec(unhex(k)?), OsString::from_vec(unhex(v)?))))
            .collect()
    }

    pub fn mir_bytes(&self) -> Result<Vec<u8>> {
        unhex(&self.mir_hex)
    }

    /// The argv as text for receipts (lossy for non-UTF-8 bytes).
    pub fn argv_display(&self) -> Vec<String> {
        self.argv()
            .unwrap_or_default()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }
}

pub use crate::hex::hex;

/// Hex of an OS string's bytes.
pub fn hex_os(s: &OsStr) -> String {
    hex(s.as_bytes())
}

/// Bytes of lowercase hex; anything else is refused.
pub fn unhex(s: &str) -> Result<Vec<u8>> {
    fn val(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    let b = s.as_bytes();
    if b.len() & 1 == 1 {
        return Err(Error::Request("hex string of odd length".into()));
    }
    b.chunks(2)
        .map(|p| match (val(p[0]), val(p[1])) {
            (Some(h), Some(l)) => Ok(h << 4 | l),
            _ => Err(Error::Request("invalid hex digit".into())),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> RunRequest {
        RunRequest {
            version: REQUEST_VERSION,
            parent_pid: 1,
            backend: "linux".into(),
            backend_reason: "--backend linux".into(),
            mir_hex: hex(b"MMIR"),
            decision_digest: "d".into(),
            policy: PolicyOrigin {
                source: "default".into(),
                format: "json".into(),
                artifact_digest: "a".into(),
                overlay: vec!["read /x".into()],
            },
            bindings: Bindings {
                workspace: "/w".into(),
                temp: "/t".into(),
                minimal_roots: vec!["/usr".into()],
                mediator: None,
            },
            declared: vec!["fs-read".into()],
            cwd: "/w".into(),
            argv_hex: vec![hex(b"true")],
            env_hex: vec![(hex(b"K"), hex(b"secret"))],
            timeout_ms: None,
            receipt: None,
            keep_temp: false,
            limits: Default::default(),
            vm: None,
        }
    }

    #[test]
    fn request_round_trips_and_unknown_fields_are_refused() {
        let r = request();
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(
            serde_json::from_value::<RunRequest>(json.clone()).unwrap(),
            r
        );
        let b = r.bindings.host_bindings();
        assert_eq!(b.workspace.as_deref(), Some(std::path::Path::new("/w")));
        assert_eq!(b.temp.as_deref(), Some(std::path::Path::new("/t")));
        for (outer, inner) in [(true, false), (false, true)] {
            let mut j = json.clone();
            if outer {
                j["extra"] = 1.into();
            }
            if inner {
                j["bindings"]["extra"] = 1.into();
            }
            assert!(serde_json::from_value::<RunRequest>(j).is_err());
        }
        // What stays on disk keeps the names, never the values.
        let kept = String::from_utf8(r.without_env_values()).unwrap();
        assert!(kept.contains(&hex(b"K")) && !kept.contains(&hex(b"secret")));
        assert_eq!(r.env().unwrap(), [("K".into(), "secret".into())]);
    }

    #[test]
    fn hex_round_trip() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(&hex(&bytes)).unwrap(), bytes);
        assert!(unhex("abc").is_err());
        assert!(unhex("AB").is_err());
        assert!(matches!(unhex("zz"), Err(Error::Request(_))));
    }
}
