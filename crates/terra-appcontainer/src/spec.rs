//! The launch spec: what `terra __sandbox_launcher` reads on its standard
//! input before it makes anything.
//!
//! A line format, one field per line, paths and host names in lowercase hex
//! of their UTF-8 (any character may appear in a name; hex keeps the
//! framing trivial):
//!
//! ```text
//! terra-appcontainer-launch 1
//! role workload|broker
//! exec HEX
//! cwd HEX                                               (plain X:\..., never \\?\)
//! grant read|write|deny|deny-write tree|exact HEX      (zero or more)
//! peer tcp|udp PORT public|private HEX                  (broker only)
//! end
//! ```
//!
//! Decoding is strict: the only bytes accepted for a spec are exactly what
//! [`LaunchSpec::encode`] produces for it, every path already in the
//! canonical Windows form ([`crate::path::windows_path`]). The spec names no
//! capability, job limit or mitigation: those follow from the role alone
//! (`crate::launch`), so no spec can ask for more.

use crate::error::{Error, Result};
use crate::path::windows_path;

const MAGIC: &str = "terra-appcontainer-launch 1";
/// The most bytes a spec may have; the launcher reads no more.
pub const MAX_SPEC_LEN: usize = 1 << 20;
/// The most grants a spec may carry.
pub const MAX_GRANTS: usize = 4096;
/// The most peers a broker spec may carry.
pub const MAX_PEERS: usize = 1024;
/// The longest peer host name, in bytes (a DNS name's limit).
pub const MAX_HOST_LEN: usize = 253;

/// Which worker the launcher starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The user's command.
    Workload,
    /// The network broker: no network capability of its own; its wrapper
    /// opens the sockets its policy approved (`crate::sockets`).
    Broker,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GrantKind {
    Read,
    Write,
    Deny,
    DenyWrite,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// The path and everything below it.
    Tree,
    /// The path itself.
    Exact,
}

/// One filesystem rule on a canonical Windows path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Grant {
    pub kind: GrantKind,
    pub scope: Scope,
    pub path: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proto {
    Tcp,
    Udp,
}

/// A destination the broker's policy may approve (the plan's destinations).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Peer {
    pub proto: Proto,
    pub port: u16,
    /// Private, loopback and link-local addresses allowed for this peer.
    pub allow_private: bool,
    pub host: String,
}

/// Everything the launcher needs for one launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    pub role: Role,
    /// The program the worker runs (canonical Windows path).
    pub executable: String,
    /// The worker's working directory (canonical Windows path: plain).
    pub cwd: String,
    pub grants: Vec<Grant>,
    pub peers: Vec<Peer>,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Workload => "workload",
            Role::Broker => "broker",
        }
    }
}

impl GrantKind {
    pub fn name(self) -> &'static str {
        match self {
            GrantKind::Read => "read",
            GrantKind::Write => "write",
            GrantKind::Deny => "deny",
            GrantKind::DenyWrite => "deny-write",
        }
    }
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Tree => "tree",
            Scope::Exact => "exact",
        }
    }
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

impl LaunchSpec {
    /// Checks what decoding checks: canonical Windows paths, the limits,
    /// peers only for the broker, read grants only for the broker.
    pub fn validate(&self) -> Result<()> {
        check_path(&self.executable)?;
        check_path(&self.cwd)?;
        if self.grants.len() > MAX_GRANTS {
            return Err(Error::Spec(format!(
                "{} grants, more than the {MAX_GRANTS} allowed",
                self.grants.len()
            )));
        }
        for g in &self.grants {
            check_path(&g.path)?;
        }
        if self.peers.len() > MAX_PEERS {
            return Err(Error::Spec(format!(
                "{} peers, more than the {MAX_PEERS} allowed",
                self.peers.len()
            )));
        }
        match self.role {
            Role::Workload if !self.peers.is_empty() => {
                return Err(spec_err(
                    "a workload spec names peers; only the broker's wrapper opens sockets",
                ))
            }
            Role::Broker => {
                if let Some(g) = self.grants.iter().find(|g| g.kind != GrantKind::Read) {
                    return Err(Error::Spec(format!(
                        "the broker gets read grants only, not {} on {:?}",
                        g.kind.name(),
                        g.path
                    )));
                }
            }
            Role::Workload => {}
        }
        for p in &self.peers {
            check_host(&p.host)?;
            if p.port == 0 {
                return Err(spec_err("a peer with port 0"));
            }
        }
        Ok(())
    }

    /// The canonical bytes of this spec.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = String::new();
        s.push_str(MAGIC);
        s.push('\n');
        s.push_str(&format!("role {}\n", self.role.name()));
        s.push_str(&format!("exec {}\n", hex(&self.executable)));
        s.push_str(&format!("cwd {}\n", hex(&self.cwd)));
        for g in &self.grants {
            s.push_str(&format!(
                "grant {} {} {}\n",
                g.kind.name(),
                g.scope.name(),
                hex(&g.path)
            ));
        }
        for p in &self.peers {
            s.push_str(&format!(
                "peer {} {} {} {}\n",
                p.proto.name(),
                p.port,
                if p.allow_private { "private" } else { "public" },
                hex(&p.host)
            ));
        }
        s.push_str("end\n");
        s.into_bytes()
    }

    /// Parses canonical bytes; anything else is an [`Error::Spec`].
    pub fn decode(bytes: &[u8]) -> Result<LaunchSpec> {
        if bytes.len() > MAX_SPEC_LEN {
            return Err(Error::Spec(format!(
                "{} bytes, more than the {MAX_SPEC_LEN} allowed",
                bytes.len()
            )));
        }
        let text = std::str::from_utf8(bytes).map_err(|_| spec_err("not UTF-8"))?;
        let body = text
            .strip_suffix("end\n")
            .ok_or_else(|| spec_err("does not end with the end line"))?;
        let mut lines = body.split('\n');
        if lines.next() != Some(MAGIC) {
            return Err(spec_err(
                "wrong magic line (not a terra-appcontainer-launch 1 spec)",
            ));
        }
        let role = match lines.next() {
            Some("role workload") => Role::Workload,
            Some("role broker") => Role::Broker,
            _ => return Err(spec_err("second line is not a known role")),
        };
        let executable = match lines.next().and_then(|l| l.strip_prefix("exec ")) {
            Some(h) => unhex(h)?,
            None => return Err(spec_err("third line is not an exec line")),
        };
        let cwd = match lines.next().and_then(|l| l.strip_prefix("cwd ")) {
            Some(h) => unhex(h)?,
            None => return Err(spec_err("fourth line is not a cwd line")),
        };
        let mut grants = Vec::new();
        let mut peers = Vec::new();
        for line in lines {
            // `body` ends with the newline before `end`: the last piece is empty.
            if line.is_empty() {
                continue;
            }
            if line.starts_with("grant ") {
                if !peers.is_empty() {
                    return Err(spec_err("a grant line after a peer line"));
                }
                if grants.len() == MAX_GRANTS {
                    return Err(Error::Spec(format!("more than {MAX_GRANTS} grants")));
                }
                grants.push(parse_grant(line)?);
            } else if line.starts_with("peer ") {
                if peers.len() == MAX_PEERS {
                    return Err(Error::Spec(format!("more than {MAX_PEERS} peers")));
                }
                peers.push(parse_peer(line)?);
            } else {
                return Err(spec_err("a line that is neither grant nor peer"));
            }
        }
        let spec = LaunchSpec {
            role,
            executable,
            cwd,
            grants,
            peers,
        };
        spec.validate()?;
        if spec.encode() != bytes {
            return Err(spec_err("not in canonical form"));
        }
        Ok(spec)
    }
}

/// The AppContainer profile name of one launch: `terra.` and 32 lowercase
/// hex digits of fresh randomness. Never reused: the launcher refuses a
/// name whose profile already exists.
pub fn profile_name(random: &[u8; 16]) -> String {
    format!(
        "terra.{}",
        random
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    )
}

/// True for exactly the names [`profile_name`] makes.
pub fn is_profile_name(name: &str) -> bool {
    name.strip_prefix("terra.")
        .is_some_and(|h| h.len() == 32 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

fn spec_err(what: &str) -> Error {
    Error::Spec(what.to_string())
}

fn check_path(path: &str) -> Result<()> {
    match windows_path(path) {
        Ok(p) if p == path => Ok(()),
        Ok(p) => Err(Error::Spec(format!(
            "path {path:?} is not in canonical Windows form ({p:?})"
        ))),
        Err(e) => Err(Error::Spec(e.to_string())),
    }
}

fn check_host(host: &str) -> Result<()> {
    let ok = !host.is_empty()
        && host.len() <= MAX_HOST_LEN
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'_'));
    if ok {
        Ok(())
    } else {
        Err(Error::Spec(format!(
            "peer host {host:?} is not a DNS name or an IP literal of at most {MAX_HOST_LEN} bytes"
        )))
    }
}

fn parse_grant(line: &str) -> Result<Grant> {
    let mut f = line.split(' ');
    let (Some("grant"), Some(kind), Some(scope), Some(path), None) =
        (f.next(), f.next(), f.next(), f.next(), f.next())
    else {
        return Err(spec_err("a grant line is not `grant KIND SCOPE HEX`"));
    };
    let kind = match kind {
        "read" => GrantKind::Read,
        "write" => GrantKind::Write,
        "deny" => GrantKind::Deny,
        "deny-write" => GrantKind::DenyWrite,
        _ => return Err(spec_err("unknown grant kind")),
    };
    let scope = match scope {
        "tree" => Scope::Tree,
        "exact" => Scope::Exact,
        _ => return Err(spec_err("unknown grant scope")),
    };
    Ok(Grant {
        kind,
        scope,
        path: unhex(path)?,
    })
}

fn parse_peer(line: &str) -> Result<Peer> {
    let mut f = line.split(' ');
    let (Some("peer"), Some(proto), Some(port), Some(private), Some(host), None) =
        (f.next(), f.next(), f.next(), f.next(), f.next(), f.next())
    else {
        return Err(spec_err(
            "a peer line is not `peer PROTO PORT public|private HEX`",
        ));
    };
    let proto = match proto {
        "tcp" => Proto::Tcp,
        "udp" => Proto::Udp,
        _ => return Err(spec_err("unknown peer protocol")),
    };
    let canonical =
        !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && !port.starts_with('0');
    let port = match port.parse::<u16>() {
        Ok(p) if canonical => p,
        _ => return Err(spec_err("a peer port is not a decimal number 1..=65535")),
    };
    let allow_private = match private {
        "private" => true,
        "public" => false,
        _ => return Err(spec_err("a peer is neither public nor private")),
    };
    Ok(Peer {
        proto,
        port,
        allow_private,
        host: unhex(host)?,
    })
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(h: &str) -> Result<String> {
    if h.is_empty() || !h.len().is_multiple_of(2) {
        return Err(spec_err("a field is not non-empty even-length hex"));
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err(spec_err("a field is not lowercase hex")),
    };
    let bytes = h
        .as_bytes()
        .chunks(2)
        .map(|p| Ok((digit(p[0])? << 4) | digit(p[1])?))
        .collect::<Result<Vec<u8>>>()?;
    String::from_utf8(bytes).map_err(|_| spec_err("a field is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appcontainer_profile_names_are_fresh_shaped() {
        let n = profile_name(&[0xab; 16]);
        assert_eq!(n, format!("terra.{}", "ab".repeat(16)));
        assert!(is_profile_name(&n));
        for bad in [
            "terra.",
            "terra.AB",
            &format!("terra.{}", "g".repeat(32)),
            &format!("x.{}", "a".repeat(32)),
        ] {
            assert!(!is_profile_name(bad), "{bad}");
        }
    }
}
