//! From a SandboxPlan to a workload launch spec, and what the macos backend
//! declares (docs/sandbox-macos.md explains each capability).

use terra_policy::{Access, Capability, CapabilitySet, NetworkMode, SandboxPlan};

use crate::error::{Error, Result};
use crate::path::seatbelt_path;
use crate::spec::{Grant, GrantKind, LaunchSpec, Network, Role, Scope};

/// The capabilities Seatbelt enforces for a whole process tree. Not
/// declared: process-tree (a descendant that calls setsid and forks again
/// outlives the supervisor: macOS has no PID namespace or cgroup to end it),
/// root-ephemeral-write (no overlay), fs-protect-create (not verified on a
/// Mac yet). The mediated bits come with the broker.
pub fn declared_capabilities(broker: bool) -> CapabilitySet {
    let mut set = CapabilitySet::EMPTY
        .with(Capability::FsRead)
        .with(Capability::FsWrite)
        .with(Capability::FsDeny)
        .with(Capability::FsDenyWrite)
        .with(Capability::NetworkNone)
        .with(Capability::NetworkDirect);
    if broker {
        set.insert(Capability::NetworkMediated);
    }
    set
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
        grants,
    })
}
