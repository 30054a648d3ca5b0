//! The `landlock` backend: for hosts where user namespaces are unavailable
//! (Ubuntu's AppArmor restriction, container runtimes' seccomp profiles,
//! `user.max_user_namespaces = 0`). No namespace at all: the workload runs
//! on the host's filesystem, process table and network stack, confined by
//! Landlock (files, TCP, signal, abstract-socket and ptrace scopes), the
//! box's seccomp filter plus this backend's closures (sockets, other
//! processes' limits and scheduling, SysV and POSIX IPC), and the
//! supervisor as child subreaper (terra-supervisor's `reaper`). See
//! docs/sandbox-landlock.md.
//!
//! It declares only what it enforces ([`declared_capabilities`]).

mod diagnose;
mod filter;
mod rules;
mod spawn;

use std::fmt::Write as _;

use terra_policy::{Capability, CapabilitySet, NetworkMode};

pub use super::support::ProbeFailure;
pub use diagnose::{diagnose, nothing_restricts_userns, observe, Cause, Observed};
pub use rules::{MIN_ABI, RESOLVE_UNIX_ABI};

use super::{landlock, seccomp, BoxConfig, BoxHandle, BoxSpec, SandboxError};

/// The backend's name, as `--backend` and receipts spell it.
pub const NAME: &str = "landlock";

/// What this backend enforces. Not fs-deny / fs-deny-write (Landlock rules
/// only add access), not root-ephemeral-write (no private root), not
/// network-mediated and its flags (no private loopback; connect()
/// interception is not built), not fs-protect-create.
pub fn declared_capabilities() -> CapabilitySet {
    [
        Capability::FsRead,
        Capability::FsWrite,
        Capability::NetworkNone,
        Capability::NetworkDirect,
        Capability::ProcessTree,
    ]
    .into_iter()
    .collect()
}

/// What the workload can still see or do to the host under this backend
/// (no namespace hides it, and neither Landlock nor the closures reach it),
/// for `terra backends`, `terra doctor` and docs/sandbox-landlock.md.
pub const NOT_CONFINED: [&str; 6] = [
    "it sees the host's process list, command lines and states (/proc), its network interfaces, \
     sockets and connections (/proc/net, netlink) and the keys and owners of its SysV IPC objects \
     (/proc/sysvipc)",
    "it sees the names and metadata (stat) of host files, and can watch with inotify or fanotify the \
     host files its user may read",
    "it reads, but cannot change, the limits, priority, CPU affinity, scheduling and I/O priority of \
     host processes of its user (as /proc shows them)",
    "it can chmod, utime and set extended attributes on its user's files outside the grants \
     (as uid 0: root's files)",
    "it shares the caller's terminal: it reads what is typed there while it runs (TIOCSTI, \
     TIOCLINUX and TIOCSETD are refused)",
    "its daemons outlive the run if the supervisor itself is killed with SIGKILL",
];

/// Why a capability the linux backend has is missing here, for refusals and
/// `terra backends`.
pub fn missing_reason(c: Capability) -> &'static str {
    match c {
        Capability::FsDeny | Capability::FsDenyWrite => {
            "Landlock grants only add access: a deny inside a grant (or a deny-write inside a write grant) \
             cannot be expressed"
        }
        Capability::RootEphemeralWrite => "there is no private root to write and discard",
        Capability::NetworkMediated
        | Capability::NetworkRequireTlsSni
        | Capability::NetworkPrivateAddresses => {
            "mediated networking needs the broker's private loopback (a network namespace) or connect() \
             interception with descriptor hand-off, which this backend does not have yet"
        }
        Capability::FsProtectCreate => "an absent denied path cannot be protected",
        _ => "not enforced by this backend",
    }
}

/// Why this kernel cannot run the landlock backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    #[error("the kernel lacks seccomp filters (CONFIG_SECCOMP_FILTER)")]
    NoSeccompFilter,
    #[error(
        "Landlock ABI {abi} is older than {MIN_ABI} (Linux 6.12), the first that keeps a process \
         from signalling host processes and reaching abstract sockets"
    )]
    OldLandlock { abi: i32 },
    #[error("the kernel has no Landlock (Linux >= 6.12 with landlock in `lsm=` is needed)")]
    NoLandlock,
}
/// What a run that needs mediated networking can do where only this
/// backend runs (a container's seccomp profile or masked /proc, a sysctl),
/// for the refusal of `--allow-net`.
pub const MEDIATED_INSTEAD: &str = "(1) let terra create user namespaces, and `--backend auto` takes the \
     linux backend, whose broker mediates: `terra doctor` names what blocks them here; in a container \
     that is usually its seccomp profile and masked /proc: docker `--security-opt seccomp=unconfined \
     --security-opt systempaths=unconfined`, podman `--security-opt seccomp=unconfined --security-opt \
     unmask=ALL`, each with `--security-opt apparmor=unconfined` where AppArmor confines \
     containers (see docs/ci.md); (2) fetch before terra (`cargo fetch`, `pip download -d DIR`, `npm ci`) \
     and run the rest offline under terra; (3) a policy with network mode \"direct\" gives the workload \
     the host's network unfiltered and unrecorded";

/// Whether this kernel can run the backend: Ok(ABI), or why not.
pub fn usable() -> Result<i32, Unusable> {
    if super::sys::seccomp_mode().is_none() {
        return Err(Unusable::NoSeccompFilter);
    }
    match landlock::kernel_abi() {
        Some(v) if v >= MIN_ABI => Ok(v),
        Some(abi) => Err(Unusable::OldLandlock { abi }),
        None => Err(Unusable::NoLandlock),
    }
}

/// Starts the workload under this backend (single-threaded caller only: the
/// supervisor). The handle is the linux box's: its pid is the workload's.
pub fn spawn_box(config: BoxConfig) -> Result<BoxHandle, SandboxError> {
    if !super::sys::single_threaded() {
        return Err(SandboxError::Launch(
            "the landlock backend forks from a single-threaded caller only".into(),
        ));
    }
    let spec: BoxSpec = config.into();
    spawn::spawn(&spec)
}

/// What [`spawn_box`] would apply, for `terra run --dry-run`.
pub fn describe(config: &BoxConfig) -> String {
    let spec = BoxSpec {
        plan: super::PlanView::of(&config.plan),
        argv: config.argv.clone(),
        cwd: config.cwd.clone(),
        env: config.env.clone(),
        temp_dir: config.temp_dir.clone(),
        canary_path: config.canary_path.clone(),
        canary_tcp: config.canary_tcp,
        canary_gate: None,
        mediated: None,
        dns_report: None,
        hostname: config.hostname.clone(),
        rlimits: config.rlimits,
        vm: None,
    };
    let mut s = String::new();
    s.push_str("namespaces none: the host's filesystem, processes and network stack\n");
    s.push_str("process: forked by the supervisor (child subreaper); every descendant is killed and reaped at the end\n");
    s.push_str("workload: capabilities dropped (uid 0) or ambient set cleared, no_new_privs, fds > 2 closed, env exactly as given\n");
    let kabi = landlock::kernel_abi();
    match spawn::plan_rules(&spec) {
        Ok((fs, tcp)) => {
            let _ = writeln!(
                s,
                "landlock abi  kernel {}, at least {MIN_ABI} required",
                kabi.map_or("none".to_string(), |v| v.to_string())
            );
            for (p, a) in &fs {
                let a = match a {
                    landlock::FsAccess::ListDir => "list-dir",
                    landlock::FsAccess::ReadData => "read",
                    landlock::FsAccess::Read => "read+execute",
                    landlock::FsAccess::ReadWrite => "read+write+execute",
                    landlock::FsAccess::RemoveDirs => "remove-dirs",
                };
                let _ = writeln!(s, "landlock fs   {a:<19} {p}");
            }
            s.push_str("landlock fs   nothing else (no listing of /; stat and path walks are not restricted by Landlock)\n");
            let _ = writeln!(
                s,
                "landlock net  {}",
                match tcp {
                    rules::TcpRule::Nothing => "no TCP bind or connect",
                    rules::TcpRule::Unrestricted => "TCP not restricted (network direct)",
                }
            );
            s.push_str(
                "landlock scope signal, abstract-unix-socket (outside the workload's domain)\n",
            );
            s.push_str(&seccomp::describe());
            s.push_str(&filter::describe(spawn::closures(spec.plan.network, kabi)));
            s.push_str("activation: the canary must fail to open, the host canary TCP listener must refuse, signalling the supervisor must fail with EPERM, and so must changing another process's limits\n");
        }
        Err(e) => {
            let _ = writeln!(s, "refused: {e}");
        }
    }
    if spec.plan.network == NetworkMode::Direct {
        s.push_str("network direct: the host's network stack\n");
    }
    s
}

/// Whether this host can create the namespaces the linux backend needs (the
/// functional probe `terra doctor` runs: one fork): Ok, or why not.
pub fn user_namespaces_work() -> Result<(), super::ProbeFailure> {
    super::support::userns_probe()
}
