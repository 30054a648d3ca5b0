//! The launch spec: what `terra __sandbox_launcher` reads from its
//! descriptor before it confines itself.
//!
//! A small line format, one field per line, paths in lowercase hex (a path
//! may hold any byte but NUL and newline; hex keeps the framing trivial):
//!
//! ```text
//! terra-seatbelt-launch 1
//! role workload|broker
//! network none|direct|mediated PORT
//! exec HEX
//! mark HEX                                             (workload: at most once)
//! tty HEX                                              (workload: zero or more)
//! grant read|write|deny|deny-write tree|exact HEX      (zero or more)
//! end
//! ```
//!
//! Decoding is strict: the only accepted bytes for a spec are exactly what
//! [`LaunchSpec::encode`] produces for it, every path already in the form
//! Seatbelt matches (see [`crate::path`]).

use crate::error::{Error, Result};
use crate::path::seatbelt_path;

const MAGIC: &str = "terra-seatbelt-launch 1";
/// The most bytes a spec may have; the launcher reads no more.
pub const MAX_SPEC_LEN: usize = 1 << 20;
/// The most grants a spec may carry (each becomes profile rules).
pub const MAX_GRANTS: usize = 4096;
/// The most terminal devices a spec may name (the caller's standard
/// input, output and error).
pub const MAX_TERMINALS: usize = 3;

/// Which trusted role the launcher starts under its profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The box: the user's command.
    Workload,
    /// The network broker (`terra __network`).
    Broker,
}

/// The workload's network under Seatbelt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Network {
    /// No socket may connect, bind or listen on IP.
    None,
    /// Only a TCP connect to the broker's loopback port.
    Mediated { port: u16 },
    /// Any network access.
    Direct,
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

/// One filesystem rule on a canonical path in Seatbelt form.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Grant {
    pub kind: GrantKind,
    pub scope: Scope,
    pub path: String,
}

/// Everything the launcher needs to confine one role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    pub role: Role,
    pub network: Network,
    /// The program the launcher execs after confinement (canonical).
    pub executable: String,
    /// The run's mark (workload only): a path in the run's private
    /// directory that this profile alone lets its processes look up, so
    /// that terra can tell the run's processes from every other process
    /// (`sandbox_check`), also after they left the process group
    /// (docs/sandbox-macos.md, "The process tree").
    pub mark: Option<String>,
    /// The caller's terminal devices (workload only): the workload gets
    /// read, write and ioctl on exactly these, so shells keep job control
    /// and raw mode on the terminal terra run was started from.
    pub terminals: Vec<String>,
    pub grants: Vec<Grant>,
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

impl LaunchSpec {
    /// Checks what decoding checks: paths in Seatbelt form, the grant limit,
    /// a mediated port that is not 0.
    pub fn validate(&self) -> Result<()> {
        check_path(&self.executable)?;
        if self.grants.len() > MAX_GRANTS {
            return Err(Error::Spec(format!(
                "{} grants, more than the {MAX_GRANTS} allowed",
                self.grants.len()
            )));
        }
        for g in &self.grants {
            check_path(&g.path)?;
        }
        if self.terminals.len() > MAX_TERMINALS {
            return Err(Error::Spec(format!(
                "{} terminals, more than the {MAX_TERMINALS} allowed",
                self.terminals.len()
            )));
        }
        for t in self.mark.iter().chain(&self.terminals) {
            check_path(t)?;
        }
        if self.role == Role::Broker && (self.mark.is_some() || !self.terminals.is_empty()) {
            return Err(spec_err(
                "the broker role has no mark and no terminal (they are the workload's)",
            ));
        }
        if self.network == (Network::Mediated { port: 0 }) {
            return Err(Error::Spec("mediated network with broker port 0".into()));
        }
        Ok(())
    }

    /// The canonical bytes of this spec.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = String::new();
        s.push_str(MAGIC);
        s.push('\n');
        s.push_str(&format!("role {}\n", self.role.name()));
        match self.network {
            Network::None => s.push_str("network none\n"),
            Network::Direct => s.push_str("network direct\n"),
            Network::Mediated { port } => s.push_str(&format!("network mediated {port}\n")),
        }
        s.push_str(&format!("exec {}\n", hex(&self.executable)));
        if let Some(m) = &self.mark {
            s.push_str(&format!("mark {}\n", hex(m)));
        }
        for t in &self.terminals {
            s.push_str(&format!("tty {}\n", hex(t)));
        }
        for g in &self.grants {
            s.push_str(&format!(
                "grant {} {} {}\n",
                g.kind.name(),
                g.scope.name(),
                hex(&g.path)
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
                "wrong magic line (not a terra-seatbelt-launch 1 spec)",
            ));
        }
        let role = match lines.next() {
            Some("role workload") => Role::Workload,
            Some("role broker") => Role::Broker,
            _ => return Err(spec_err("second line is not a known role")),
        };
        let network = match lines.next().and_then(|l| l.strip_prefix("network ")) {
            Some("none") => Network::None,
            Some("direct") => Network::Direct,
            Some(m) => match m.strip_prefix("mediated ") {
                Some(port) => Network::Mediated {
                    port: parse_port(port)?,
                },
                None => return Err(spec_err("unknown network line")),
            },
            None => return Err(spec_err("third line is not a network line")),
        };
        let executable = match lines.next().and_then(|l| l.strip_prefix("exec ")) {
            Some(h) => unhex(h)?,
            None => return Err(spec_err("fourth line is not an exec line")),
        };
        let mut mark = None;
        let mut terminals = Vec::new();
        let mut grants = Vec::new();
        for line in lines {
            // `body` ends with the newline before `end`, so the last piece is empty.
            if line.is_empty() {
                continue;
            }
            // Order and repetition are checked by the canonical re-encoding below.
            if let Some(h) = line.strip_prefix("mark ") {
                if mark.replace(unhex(h)?).is_some() {
                    return Err(spec_err("more than one mark line"));
                }
            } else if let Some(h) = line.strip_prefix("tty ") {
                terminals.push(unhex(h)?);
            } else {
                grants.push(parse_grant(line)?);
            }
        }
        let spec = LaunchSpec {
            role,
            network,
            executable,
            mark,
            terminals,
            grants,
        };
        spec.validate()?;
        if spec.encode() != bytes {
            return Err(spec_err("not in canonical form"));
        }
        Ok(spec)
    }
}

fn spec_err(what: &str) -> Error {
    Error::Spec(what.to_string())
}

fn check_path(path: &str) -> Result<()> {
    if seatbelt_path(path)? != path {
        return Err(Error::Spec(format!(
            "path {path:?} is not in the form Seatbelt matches (/tmp, /var and /etc live under /private)"
        )));
    }
    Ok(())
}

fn parse_port(text: &str) -> Result<u16> {
    let canonical =
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && !text.starts_with('0');
    match text.parse::<u16>() {
        Ok(p) if canonical => Ok(p),
        _ => Err(spec_err("broker port is not a decimal number 1..=65535")),
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

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(h: &str) -> Result<String> {
    if h.is_empty() || !h.len().is_multiple_of(2) {
        return Err(spec_err("a path is not non-empty even-length hex"));
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err(spec_err("a path is not lowercase hex")),
    };
    let bytes = h
        .as_bytes()
        .chunks(2)
        .map(|p| Ok(digit(p[0])? << 4 | digit(p[1])?))
        .collect::<Result<Vec<u8>>>()?;
    String::from_utf8(bytes).map_err(|_| spec_err("a path is not UTF-8"))
}
