//! From a SandboxPlan to a workload launch spec, and what the macos backend
//! declares (docs/sandbox-macos.md explains each capability).

use terra_policy::{Access, Capability, CapabilitySet, NetworkMode, SandboxPlan};

use crate::error::{Error, Result};
use crate::path::seatbelt_path;
use crate::spec::{Grant, GrantKind, LaunchSpec, Network, Role, Scope};

/// The capabilities Seatbelt enforces for a whole process tree, and
/// process-tree: every descendant carries the workload's profile, which
/// cannot be shed, and at the run's end terra kills every process carrying
/// it, found by the run's mark (`crate::tree`), also one that called setsid
/// and forked again. Not declared: root-ephemeral-write (no overlay),
/// fs-protect-create (not verified on a Mac yet).
///
/// With `broker` (the macOS build, which starts `terra __network` under the
/// broker profile): network-mediated, because the workload's profile lets
/// it reach nothing but the broker's loopback port; and
/// network-require-tls-sni and network-private-addresses, because every
/// connection the workload can make is a proxy request that terra-netd's
/// broker judges with the same code as on Linux (the ClientHello read
/// before connecting, the resolved addresses classified before
/// connecting).
pub fn declared_capabilities(broker: bool) -> CapabilitySet {
    let mut set = CapabilitySet::EMPTY
        .with(Capability::FsRead)
        .with(Capability::FsWrite)
        .with(Capability::FsDeny)
        .with(Capability::FsDenyWrite)
        .with(Capability::NetworkNone)
        .with(Capability::NetworkDirect)
        .with(Capability::ProcessTree);
    if broker {
        set.insert(Capability::NetworkMediated);
        set.insert(Capability::NetworkRequireTlsSni);
        set.insert(Capability::NetworkPrivateAddresses);
    }
    set
}

/// Where macOS keeps the resolver files the broker reads (their resolved
/// paths: /etc/resolv.conf links to /var/run/resolv.conf). What a dry run
/// renders; a run on a Mac uses what `terra_netd::resolver_sources` finds.
pub const MACOS_RESOLVER_FILES: [&str; 2] = ["/private/var/run/resolv.conf", "/private/etc/hosts"];

/// The broker's launch spec: `executable` (terra itself, exec'd as `terra
/// __network`), the loopback `port` terra run bound for it, and read-only
/// grants on exactly the resolver files it reads (canonical paths).
pub fn lower_broker(executable: &str, port: u16, resolver_files: &[&str]) -> Result<LaunchSpec> {
    let grants = resolver_files
        .iter()
        .map(|p| {
            Ok(Grant {
                kind: GrantKind::Read,
                scope: Scope::Exact,
                path: seatbelt_path(p)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(LaunchSpec {
        role: Role::Broker,
        network: Network::Mediated { port },
        executable: seatbelt_path(executable)?,
        mark: None,
        terminals: Vec::new(),
        grants,
    })
}

/// The workload's launch spec for `plan`, exec'ing `executable`;
/// `broker_port` is the broker's loopback port for a mediated plan (`None`
/// in a dry run, rendered as port 0).
pub fn lower_plan(
    plan: &SandboxPlan,
    executable: &str,
    broker_port: Option<u16>,
) -> Result<LaunchSpec> {
    let mut grants = Vec::new();
    for rule in plan.rules() {
        if rule.protect_create {
            return Err(Error::Unsupported(format!(
                "rule on {:?} protects a path from creation (fs-protect-create), which the macos backend does not declare",
                rule.path
            )));
        }
        grants.push(Grant {
            kind: match rule.access {
                Access::Read => GrantKind::Read,
                Access::Write => GrantKind::Write,
                Access::Deny => GrantKind::Deny,
                Access::DenyWrite => GrantKind::DenyWrite,
            },
            scope: match rule.scope {
                terra_policy::Scope::Tree => Scope::Tree,
                terra_policy::Scope::Exact => Scope::Exact,
            },
            path: seatbelt_path(&rule.path)?,
        });
    }
    let network = match plan.network() {
        NetworkMode::None => Network::None,
        NetworkMode::Direct => Network::Direct,
        NetworkMode::Mediated => Network::Mediated {
            port: broker_port.unwrap_or(0),
        },
    };
    Ok(LaunchSpec {
        role: Role::Workload,
        network,
        executable: seatbelt_path(executable)?,
        mark: None,
        terminals: Vec::new(),
        grants,
    })
}
