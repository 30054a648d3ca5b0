//! SBPL profiles for terra's roles.
//!
//! Each profile denies by default, imports Apple's `system.sb` baseline (the
//! system libraries, frameworks and services every process needs), and names
//! every path through `(param "NAME")`: the text is fixed by the role, the
//! rule kinds and the network mode, never by a path, so a path cannot change
//! the profile's syntax. Rule order matters: Seatbelt applies the last rule
//! that matches an operation, so denies and deny-writes come after the grants
//! they carve out of.

use std::collections::BTreeSet;
use std::fmt::Write;

use crate::error::{Error, Result};
use crate::path::ancestors;
use crate::runtime::{
    MACOS_RUNTIME, NEW_PTY_REGEX, SYSCTL_NAMES, SYSCTL_PREFIXES, XCRUN_CACHE_REGEX,
};
use crate::spec::{GrantKind, LaunchSpec, Network, Role, Scope};

/// A rendered profile and the parameters it needs, in the order they appear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub text: String,
    pub parameters: Vec<(String, String)>,
}

/// Devices every workload may read, write and use ioctls on (a shell sets
/// the controlling terminal's modes through /dev/tty), whatever its
/// grants.
const WORKLOAD_DEVICES: [(&str, &str); 3] = [
    ("DEV_NULL", "/dev/null"),
    ("DEV_ZERO", "/dev/zero"),
    ("DEV_TTY", "/dev/tty"),
];
/// The pseudo-terminal multiplexer: opening it makes a new terminal pair.
const DEV_PTMX: (&str, &str) = ("DEV_PTMX", "/dev/ptmx");
/// The parameter naming the broker's loopback port (decimal), in the
/// workload's and the broker's network rules. The port is chosen when the
/// run starts, so it is a parameter like every path.
pub const BROKER_PORT: &str = "BROKER_PORT";

struct Builder {
    text: String,
    parameters: Vec<(String, String)>,
}

impl Builder {
    fn param(&mut self, name: String, value: &str) -> String {
        self.parameters.push((name.clone(), value.to_string()));
        format!("(param \"{name}\")")
    }
    fn line(&mut self, l: &str) {
        self.text.push_str(l);
        self.text.push('\n');
    }
}

fn matcher(scope: Scope, param: &str) -> String {
    match scope {
        Scope::Tree => format!("(subpath {param})"),
        Scope::Exact => format!("(literal {param})"),
    }
}

/// Renders the profile of `spec.role` for `spec`.
pub fn render(spec: &LaunchSpec) -> Result<Profile> {
    let mut b = Builder {
        text: String::new(),
        parameters: Vec::new(),
    };
    b.line("(version 1)");
    b.line("(deny default)");
    b.line("(import \"system.sb\")");
    let exe = b.param("EXECUTABLE".into(), &spec.executable);
    b.line(&format!("(allow file-read* (literal {exe}))"));
    b.line(&format!("(allow process-exec (literal {exe}))"));
    match spec.role {
        Role::Workload => render_workload(&mut b, spec),
        Role::Broker => render_broker(&mut b, spec)?,
    }
    Ok(Profile {
        text: b.text,
        parameters: b.parameters,
    })
}

fn render_workload(b: &mut Builder, spec: &LaunchSpec) {
    // Processes: the workload starts children and reads their state, but
    // signals and inspects only processes under this same profile.
    b.line("(allow process-fork)");
    b.line("(allow signal (target same-sandbox))");
    b.line("(allow process-info* (target same-sandbox))");
    // Named POSIX semaphores (Python's multiprocessing locks, sem_open).
    b.line("(allow ipc-posix-sem)");
    render_sysctls(b);
    for (name, path) in WORKLOAD_DEVICES {
        let p = b.param(name.into(), path);
        b.line(&format!(
            "(allow file-read* file-write-data file-ioctl (literal {p}))"
        ));
    }
    // Terminals: the caller's (job control and raw mode on the terminal
    // terra run was started from), and new pseudo-terminals the workload
    // opens itself (only those: the kernel's pty extension is required).
    for (i, t) in spec.terminals.iter().enumerate() {
        let p = b.param(format!("TTY_{i}"), t);
        b.line(&format!(
            "(allow file-read* file-write-data file-ioctl (literal {p}))"
        ));
    }
    b.line("(allow pseudo-tty)");
    let ptmx = b.param(DEV_PTMX.0.into(), DEV_PTMX.1);
    b.line(&format!(
        "(allow file-read* file-write-data file-ioctl (literal {ptmx}))"
    ));
    b.line(&format!(
        "(allow file-read* file-write-data file-ioctl (require-all (regex #\"{NEW_PTY_REGEX}\") (extension \"com.apple.sandbox.pty\")))"
    ));
    // The macOS runtime, read-only (crate::runtime), before the grants so
    // that the plan's denies, rendered last, carve out of it too.
    for (i, r) in MACOS_RUNTIME.iter().enumerate() {
        let p = b.param(format!("RUNTIME_{i}"), r.path);
        let m = matcher(r.scope, &p);
        b.line(&format!("(allow file-read* {m})"));
        if r.exec {
            b.line(&format!("(allow process-exec {m})"));
        }
    }
    b.line(&format!(
        "(allow file-read* (regex #\"{XCRUN_CACHE_REGEX}\"))"
    ));
    // The run's mark: looked up by terra (sandbox_check) to find this run's
    // processes; nothing else in the profile names the run's directory.
    if let Some(mark) = &spec.mark {
        let p = b.param("RUN_MARK".into(), mark);
        b.line(&format!("(allow file-read-metadata (literal {p}))"));
    }
    // Grants first, then the metadata of their ancestors, then deny-writes
    // and denies, which win over both because they come last.
    let order = [
        GrantKind::Read,
        GrantKind::Write,
        GrantKind::DenyWrite,
        GrantKind::Deny,
    ];
    let mut names = Vec::new();
    for (i, g) in spec.grants.iter().enumerate() {
        names.push(b.param(format!("GRANT_{i}"), &g.path));
    }
    let emit = |b: &mut Builder, kind: GrantKind| {
        for (g, p) in spec
            .grants
            .iter()
            .zip(&names)
            .filter(|(g, _)| g.kind == kind)
        {
            let m = matcher(g.scope, p);
            match kind {
                GrantKind::Read => {
                    b.line(&format!("(allow file-read* {m})"));
                    b.line(&format!("(allow process-exec {m})"));
                }
                GrantKind::Write => {
                    b.line(&format!("(allow file-read* file-write* {m})"));
                    b.line(&format!("(allow process-exec {m})"));
                }
                GrantKind::DenyWrite => b.line(&format!("(deny file-write* {m})")),
                GrantKind::Deny => {
                    b.line(&format!("(deny file-read* file-write* process-exec {m})"))
                }
            }
        }
    };
    emit(b, order[0]);
    emit(b, order[1]);
    let granted = spec
        .grants
        .iter()
        .filter(|g| matches!(g.kind, GrantKind::Read | GrantKind::Write))
        .map(|g| g.path.as_str());
    render_ancestors(b, MACOS_RUNTIME.iter().map(|r| r.path).chain(granted));
    emit(b, order[2]);
    emit(b, order[3]);
    match spec.network {
        Network::None => b.line(
            "; network none: no network rule, so deny default refuses every socket operation",
        ),
        Network::Mediated { port } => {
            let p = b.param(BROKER_PORT.into(), &port.to_string());
            b.line(&format!(
                "(allow network-outbound (remote tcp (string-append \"localhost:\" {p})))"
            ));
        }
        Network::Direct => b.line("(allow network*)"),
    }
}

/// The broker: reads its resolver files (its grants, all read-only), talks
/// to the network as a client and accepts on its loopback port; writes no
/// file, binds nothing, forks nothing and execs nothing (the only
/// `process-exec` rule is the launcher's exec of the broker itself, above).
fn render_broker(b: &mut Builder, spec: &LaunchSpec) -> Result<()> {
    let Network::Mediated { port } = spec.network else {
        return Err(Error::Unsupported(
            "the broker role runs only for a mediated network".into(),
        ));
    };
    if let Some(g) = spec.grants.iter().find(|g| g.kind != GrantKind::Read) {
        return Err(Error::Unsupported(format!(
            "the broker role gets read grants only, not {} on {:?}",
            g.kind.name(),
            g.path
        )));
    }
    let mut read = Vec::new();
    for (i, g) in spec.grants.iter().enumerate() {
        let p = b.param(format!("GRANT_{i}"), &g.path);
        b.line(&format!("(allow file-read* {})", matcher(g.scope, &p)));
        read.push(g.path.clone());
    }
    render_ancestors(b, read.iter().map(String::as_str));
    // Connections to the judged addresses and the queries to the
    // nameservers (internet sockets only, never a Unix socket).
    b.line("(allow network-outbound (remote ip \"*:*\"))");
    // The answers of those queries come back to its connected UDP sockets.
    b.line("(allow network-inbound (local udp \"*:*\"))");
    // Accepting the workload's connections on the listeners terra run bound.
    let p = b.param(BROKER_PORT.into(), &port.to_string());
    b.line(&format!(
        "(allow network-inbound (local tcp (string-append \"localhost:\" {p})))"
    ));
    Ok(())
}

/// One `sysctl-read` rule listing every sysctl of [`crate::runtime`].
fn render_sysctls(b: &mut Builder) {
    let mut rule = String::from("(allow sysctl-read");
    for n in SYSCTL_NAMES {
        rule.push_str(&format!("\n  (sysctl-name \"{n}\")"));
    }
    for n in SYSCTL_PREFIXES {
        rule.push_str(&format!("\n  (sysctl-name-prefix \"{n}\")"));
    }
    rule.push(')');
    b.line(&rule);
}

/// Metadata-only rules on every ancestor of `paths`, each once, root first.
fn render_ancestors<'a>(b: &mut Builder, paths: impl Iterator<Item = &'a str>) {
    let mut seen = BTreeSet::new();
    let mut list = Vec::new();
    for p in paths {
        for a in ancestors(p) {
            if seen.insert(a.clone()) {
                list.push(a);
            }
        }
    }
    for (i, a) in list.iter().enumerate() {
        let p = b.param(format!("ANCESTOR_{i}"), a);
        b.line(&format!("(allow file-read-metadata (literal {p}))"));
    }
}

impl Profile {
    /// The parameters as `NAME=value` lines (the dry run's text form).
    pub fn parameter_lines(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.parameters {
            let _ = writeln!(s, "{k}={v}");
        }
        s
    }
}
