//! The Landlock rules of the `landlock` backend, derived from the plan alone
//! (pure, unit-tested), and their application to the calling process.
//!
//! Without a mount namespace Landlock is the whole filesystem boundary: the
//! workload sees the host's tree, and may open only what a rule here allows.
//! Landlock rules only add access, so a `deny` inside a grant, or a
//! `deny-write` inside a write grant, cannot be expressed: such a plan is
//! refused (the backend does not declare `fs-deny`/`fs-deny-write`, and
//! [`fs_rules`] checks again).

use landlock::{
    Access, AccessFs, AccessNet, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope as LlScope, ABI,
};
use terra_policy::{Access as RuleAccess, Capability, NetworkMode, ResolvedRule, Scope};

use super::super::error::SandboxError;
use super::super::landlock::{kernel_abi, rights_for, FsAccess};

/// The lowest kernel ABI this backend runs on: 6 (Linux 6.12) is the first
/// that scopes signals and abstract Unix sockets to the Landlock domain.
/// Below it the workload could signal every host process of its uid and
/// reach every abstract socket, so the backend refuses instead.
pub const MIN_ABI: i32 = 6;
/// The ABI whose rights terra asks for: 9 adds `LANDLOCK_ACCESS_FS_RESOLVE_UNIX`
/// (connecting to a pathname Unix socket needs a rule).
const TARGET: ABI = ABI::V9;
/// The first ABI with `RESOLVE_UNIX`; below it pathname sockets are closed
/// by seccomp instead (see `filter.rs`).
pub const RESOLVE_UNIX_ABI: i32 = 9;

/// Device nodes every workload may read and write (as the linux box has them).
pub const DEV_NODES: [&str; 6] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// Host files the name service reads, readable with network `direct` only.
pub const RESOLVER_FILES: [&str; 5] = [
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
];

/// Whether `inner` is `outer` or lies below it (whole path components).
fn within(inner: &str, outer: &str) -> bool {
    outer == "/"
        || inner == outer
        || inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The rules for `plan_rules` with the run's temp directory, in order.
///
/// - a `read` grant: read and execute; a `write` grant: everything;
/// - an exact-scope grant of a directory gives nothing (its entries are not
///   granted, and a Landlock rule on a directory always covers its subtree);
/// - the temp directory: everything; `/proc`: read; [`DEV_NODES`]: read-write;
///   with network `direct` the [`RESOLVER_FILES`] (and their targets): read;
/// - a `deny` overlapping any grant, or a `deny-write` overlapping a write
///   grant, is refused with its capability; one outside every grant is what
///   Landlock does anyway and adds nothing.
///
/// `is_dir` tells a directory from a file (`None`: missing, skipped).
pub fn fs_rules(
    plan_rules: &[ResolvedRule],
    network: NetworkMode,
    temp_dir: &str,
    is_dir: &dyn Fn(&str) -> Option<bool>,
) -> Result<Vec<(String, FsAccess)>, SandboxError> {
    let grants: Vec<&ResolvedRule> = plan_rules
        .iter()
        .filter(|r| matches!(r.access, RuleAccess::Read | RuleAccess::Write))
        .collect();
    for r in plan_rules {
        let (capability, conflicting): (Capability, Vec<&&ResolvedRule>) = match r.access {
            RuleAccess::Deny => (
                Capability::FsDeny,
                grants
                    .iter()
                    .filter(|g| within(&g.path, &r.path) || within(&r.path, &g.path))
                    .collect(),
            ),
            RuleAccess::DenyWrite => (
                Capability::FsDenyWrite,
                grants
                    .iter()
                    .filter(|g| g.access == RuleAccess::Write)
                    .filter(|g| within(&g.path, &r.path) || within(&r.path, &g.path))
                    .collect(),
            ),
            _ => continue,
        };
        if let Some(g) = conflicting.first() {
            return Err(SandboxError::UnsupportedCapability {
                capability,
                why: format!(
                    "the landlock backend cannot apply `{} {} {}` inside `{} {} {}`: Landlock grants only add \
                     access (use --backend linux)",
                    r.access.name(),
                    r.scope.name(),
                    r.path,
                    g.access.name(),
                    g.scope.name(),
                    g.path
                ),
            });
        }
    }
    let mut out = Vec::new();
    for g in grants {
        if g.protect_create {
            continue;
        }
        if g.scope == Scope::Exact && is_dir(&g.path) == Some(true) {
            continue;
        }
        out.push((
            g.path.clone(),
            if g.access == RuleAccess::Write {
                FsAccess::ReadWrite
            } else {
                FsAccess::Read
            },
        ));
    }
    if !out
        .iter()
        .any(|(p, a)| p == temp_dir && *a == FsAccess::ReadWrite)
    {
        out.push((temp_dir.to_string(), FsAccess::ReadWrite));
    }
    out.push(("/proc".to_string(), FsAccess::ReadData));
    for d in DEV_NODES {
        out.push((d.to_string(), FsAccess::ReadWrite));
    }
    if network == NetworkMode::Direct {
        for f in RESOLVER_FILES {
            out.push((f.to_string(), FsAccess::ReadData));
        }
    }
    Ok(out)
}

/// What the workload may do over TCP, by Landlock, on top of seccomp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpRule {
    /// network `none`: no TCP bind or connect at all.
    Nothing,
    /// network `direct`: not restricted.
    Unrestricted,
}

/// Restricts the calling process to `fs` (paths that do not exist are
/// skipped), `tcp`, and the signal and abstract-socket scopes. Returns the
/// ABI enforced; refuses a kernel below [`MIN_ABI`].
pub fn apply(fs: &[(String, FsAccess)], tcp: TcpRule) -> Result<i32, SandboxError> {
    let kabi = kernel_abi().unwrap_or(0);
    if kabi < MIN_ABI {
        return Err(SandboxError::Unsupported(format!(
            "the landlock backend needs Landlock ABI {MIN_ABI} (Linux 6.12) or later to keep the workload \
             from signalling host processes and reaching abstract sockets; this kernel has {}",
            if kabi == 0 {
                "no Landlock".to_string()
            } else {
                format!("ABI {kabi}")
            }
        )));
    }
    let mut rs = Ruleset::default().handle_access(AccessFs::from_all(TARGET))?;
    if tcp == TcpRule::Nothing {
        rs = rs.handle_access(AccessNet::from_all(TARGET))?;
    }
    rs = rs.scope(LlScope::from_all(TARGET))?;
    let mut created = rs.create()?;
    for (path, access) in fs {
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        let rights = rights_for(*access, meta.is_dir(), TARGET);
        let fd = PathFd::new(path).map_err(|source| SandboxError::LandlockPath {
            path: path.clone(),
            source,
        })?;
        created = created.add_rule(PathBeneath::new(fd, rights))?;
    }
    let status = created.restrict_self()?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err(SandboxError::Unsupported(
            "the kernel did not enforce the Landlock ruleset".into(),
        ));
    }
    Ok(kabi.min(TARGET as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(access: RuleAccess, scope: Scope, path: &str) -> ResolvedRule {
        ResolvedRule::host(access, scope, path)
    }

    fn dirs(p: &str) -> Option<bool> {
        Some(!p.ends_with(".txt"))
    }

    #[test]
    fn grants_become_rules_with_the_fixed_extras() {
        let rules = [
            rule(RuleAccess::Read, Scope::Tree, "/usr"),
            rule(RuleAccess::Write, Scope::Tree, "/work/ws"),
            rule(RuleAccess::Read, Scope::Exact, "/etc"),
            rule(RuleAccess::Read, Scope::Exact, "/etc/motd.txt"),
        ];
        let out = fs_rules(&rules, NetworkMode::None, "/tmp/t", &dirs).unwrap();
        let has = |p: &str, a: FsAccess| out.iter().any(|(q, b)| q == p && *b == a);
        assert!(has("/usr", FsAccess::Read));
        assert!(has("/work/ws", FsAccess::ReadWrite));
        assert!(has("/tmp/t", FsAccess::ReadWrite));
        assert!(has("/proc", FsAccess::ReadData));
        assert!(has("/dev/null", FsAccess::ReadWrite));
        assert!(has("/etc/motd.txt", FsAccess::Read));
        // An exact grant of a directory would cover its subtree: nothing.
        assert!(!out.iter().any(|(p, _)| p == "/etc"));
        // No resolver files without the host network.
        assert!(!out.iter().any(|(p, _)| p == "/etc/resolv.conf"));
        // Nothing grants / or a listing of it.
        assert!(!out.iter().any(|(p, _)| p == "/"));
        let direct = fs_rules(&rules, NetworkMode::Direct, "/tmp/t", &dirs).unwrap();
        assert!(direct
            .iter()
            .any(|(p, a)| p == "/etc/resolv.conf" && *a == FsAccess::ReadData));
    }

    #[test]
    fn a_deny_inside_or_over_a_grant_is_refused_with_its_capability() {
        for (deny, access, cap) in [
            ("/work/ws/.git", RuleAccess::Deny, Capability::FsDeny),
            ("/work", RuleAccess::Deny, Capability::FsDeny),
            (
                "/work/ws/.git",
                RuleAccess::DenyWrite,
                Capability::FsDenyWrite,
            ),
        ] {
            let rules = [
                rule(RuleAccess::Write, Scope::Tree, "/work/ws"),
                rule(access, Scope::Tree, deny),
            ];
            match fs_rules(&rules, NetworkMode::None, "/tmp/t", &dirs) {
                Err(SandboxError::UnsupportedCapability { capability, why }) => {
                    assert_eq!(capability, cap);
                    assert!(why.contains(deny) && why.contains("/work/ws"), "{why}");
                }
                other => panic!("{deny}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_deny_outside_every_grant_or_a_deny_write_in_a_read_grant_adds_nothing() {
        let rules = [
            rule(RuleAccess::Read, Scope::Tree, "/usr"),
            rule(RuleAccess::Write, Scope::Tree, "/work/ws"),
            rule(RuleAccess::Deny, Scope::Tree, "/home/me/.ssh"),
            rule(RuleAccess::Deny, Scope::Tree, "/work/wsx"),
            rule(RuleAccess::DenyWrite, Scope::Tree, "/usr/lib"),
        ];
        let out = fs_rules(&rules, NetworkMode::None, "/tmp/t", &dirs).unwrap();
        assert!(!out.iter().any(|(p, _)| p.starts_with("/home")));
        assert!(out.iter().any(|(p, a)| p == "/usr" && *a == FsAccess::Read));
    }
}
