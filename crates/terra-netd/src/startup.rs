//! The startup message the supervisor writes to the broker's fd 8:
//!
//! ```text
//! "TNET1\n"                      6 bytes, magic and version
//! u32 big-endian N, N bytes      canonical MIR v3 bytes (N <= 1 MiB)
//! u32 big-endian M, M bytes      StartupConfig as JSON (M <= 64 KiB)
//! ```
//!
//! The broker reads exactly these bytes (it does not wait for end of file),
//! re-validates the MIR with `Mir::decode` (byte-identical re-encode) and
//! refuses anything but a mediated policy.

use std::io::Read;

use serde::{Deserialize, Serialize};
use terra_policy::{Mir, NetworkMode};

use crate::broker::Limits;

const MAGIC: &[u8; 6] = b"TNET1\n";
const MAX_MIR: usize = 1024 * 1024;
const MAX_CONFIG: usize = 64 * 1024;

/// Run configuration of the broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartupConfig {
    pub limits: Limits,
    /// Descriptor of the already-open receipt (write-only, append). None: fd
    /// 9 if open, else receipts are discarded.
    pub receipt_fd: Option<i32>,
    /// Time one name lookup may take.
    pub resolve_timeout_ms: u64,
    /// Most name lookups in flight.
    pub max_resolves: usize,
    /// Where the broker reads resolv.conf and hosts (canonical host paths,
    /// which its root holds; `resolve::resolver_sources`). None: no file.
    #[serde(default)]
    pub resolv_conf: Option<String>,
    #[serde(default)]
    pub hosts: Option<String>,
    /// Descriptors of the broker's own listeners: the loopback sockets terra
    /// run bound and the workload reaches directly (the macOS broker,
    /// `standalone`). Empty for the Linux broker, which takes its
    /// connections from the box over fd 7 and refuses listeners.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listen_fds: Vec<i32>,
}

impl Default for StartupConfig {
    /// The defaults, with the host's resolver files (their canonical paths).
    fn default() -> Self {
        let (resolv_conf, hosts) = crate::resolve::resolver_sources();
        StartupConfig {
            limits: Limits::default(),
            receipt_fd: Some(crate::RECEIPT_FD),
            resolve_timeout_ms: 5_000,
            max_resolves: 64,
            resolv_conf: resolv_conf.and_then(|p| p.to_str().map(str::to_owned)),
            hosts: hosts.and_then(|p| p.to_str().map(str::to_owned)),
            listen_fds: Vec::new(),
        }
    }
}

/// Why the startup message was refused.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("startup message: bad magic")]
    BadMagic,
    #[error("startup message: {what} of {len} bytes (at most {max})")]
    TooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("startup message: config: {0}")]
    Config(serde_json::Error),
    #[error("startup message: config: caps must be at least 1")]
    ZeroCap,
    #[error("startup message: policy refused: {0}")]
    Policy(#[from] terra_policy::PolicyError),
    #[error("startup message: the broker serves only a mediated policy (got {0})")]
    NotMediated(NetworkMode),
    #[error("startup message: read failed: {0}")]
    Io(#[from] std::io::Error),
    /// Listeners where the broker takes none, or none where it needs them.
    #[error("startup message: {0}")]
    Listeners(&'static str),
}

/// The bytes the supervisor writes to fd 8.
pub fn encode_startup(mir_bytes: &[u8], config: &StartupConfig) -> Vec<u8> {
    let json = serde_json::to_vec(config).expect("config serializes");
    let mut out = Vec::with_capacity(14 + mir_bytes.len() + json.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(mir_bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(mir_bytes);
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(&json);
    out
}

fn read_block(r: &mut impl Read, max: usize, what: &'static str) -> Result<Vec<u8>, StartupError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(StartupError::TooLarge { what, len, max });
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    Ok(buf)
}

/// Reads and validates the startup message.
pub fn read_startup(r: &mut impl Read) -> Result<(Mir, StartupConfig), StartupError> {
    let mut magic = [0u8; 6];
    r.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(StartupError::BadMagic);
    }
    let mir_bytes = read_block(r, MAX_MIR, "MIR")?;
    let config_bytes = read_block(r, MAX_CONFIG, "config")?;
    let mir = Mir::decode(&mir_bytes)?;
    if mir.network() != NetworkMode::Mediated {
        return Err(StartupError::NotMediated(mir.network()));
    }
    let config: StartupConfig =
        serde_json::from_slice(&config_bytes).map_err(StartupError::Config)?;
    if config.limits.max_flows == 0 || config.max_resolves == 0 {
        return Err(StartupError::ZeroCap);
    }
    Ok((mir, config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use terra_policy::MirBuilder;

    fn mediated() -> Mir {
        let mut b = MirBuilder::new();
        b.set_network(NetworkMode::Mediated);
        b.add_destination("api.example.com", 443, true, false)
            .unwrap();
        b.build().unwrap()
    }

    #[test]
    fn round_trip() {
        let mir = mediated();
        let cfg = StartupConfig::default();
        let bytes = encode_startup(mir.bytes(), &cfg);
        let (m, c) = read_startup(&mut bytes.as_slice()).unwrap();
        assert_eq!(m, mir);
        assert_eq!(c, cfg);
    }

    #[test]
    fn refusals() {
        let cfg = StartupConfig::default();
        // Not mediated.
        let none = MirBuilder::new().build().unwrap();
        let bytes = encode_startup(none.bytes(), &cfg);
        assert!(matches!(
            read_startup(&mut bytes.as_slice()),
            Err(StartupError::NotMediated(_))
        ));
        // Damaged MIR.
        let mut mir = mediated().bytes().to_vec();
        let last = mir.len() - 1;
        mir[last] = b'A'; // uppercase host: non-canonical
        let bytes = encode_startup(&mir, &cfg);
        assert!(matches!(
            read_startup(&mut bytes.as_slice()),
            Err(StartupError::Policy(_))
        ));
        // Truncated, bad magic, unknown config key.
        let good = encode_startup(mediated().bytes(), &cfg);
        assert!(matches!(
            read_startup(&mut &good[..good.len() - 1]),
            Err(StartupError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof
        ));
        let mut bad = good.clone();
        bad[0] = b'X';
        assert!(matches!(
            read_startup(&mut bad.as_slice()),
            Err(StartupError::BadMagic)
        ));
        let mut odd = MAGIC.to_vec();
        let m = mediated();
        odd.extend_from_slice(&(m.bytes().len() as u32).to_be_bytes());
        odd.extend_from_slice(m.bytes());
        let json = br#"{"limits":{"max_flows":1,"max_refusers":1,"handshake_timeout_ms":1,"idle_timeout_ms":1,"connect_timeout_ms":1},"receipt_fd":null,"resolve_timeout_ms":1,"max_resolves":1,"extra":1}"#;
        odd.extend_from_slice(&(json.len() as u32).to_be_bytes());
        odd.extend_from_slice(json);
        assert!(matches!(
            read_startup(&mut odd.as_slice()),
            Err(StartupError::Config(_))
        ));
        // A cap of zero.
        let zero = StartupConfig {
            max_resolves: 0,
            ..StartupConfig::default()
        };
        let bytes = encode_startup(mediated().bytes(), &zero);
        assert!(matches!(
            read_startup(&mut bytes.as_slice()),
            Err(StartupError::ZeroCap)
        ));
        // Oversized length prefix.
        let mut big = MAGIC.to_vec();
        big.extend_from_slice(&(2u32 << 20).to_be_bytes());
        assert!(matches!(
            read_startup(&mut big.as_slice()),
            Err(StartupError::TooLarge { what: "MIR", .. })
        ));
    }
}
