//! The broker's own confinement, applied by [`crate::broker_main`] after its
//! descriptors are adopted and before it serves anything.
//!
//! Both filters are built from the tables below, and [`describe`] (what
//! `terra run --dry-run` prints) is written from the same tables, so the
//! description cannot drift from what is installed.
//!
//! Landlock: every filesystem access is handled and only reading the files
//! passed to [`apply`] is granted; the broker passes none (it has read
//! resolv.conf and hosts already, and the receipt descriptor is open), so
//! nothing can be opened, created or written; TCP bind is handled and never
//! granted; abstract UNIX sockets and signals are scoped.
//!
//! seccomp: terra-seccomp's `broker` table, an allowlist whose default kills
//! the process (sockets of AF_INET/AF_INET6 only, connect but no bind,
//! listen or accept — the kernel picks every local port, for its TCP
//! connections and its resolver's UDP sockets alike —, no exec, no new
//! process, no file opened), with clone3 answered ENOSYS so the C library
//! falls back to clone, whose flags the allowlist checks (threads only).

use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, AccessNet, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetError, RulesetStatus, Scope, ABI,
};
use terra_seccomp::Table;

/// What confinement was applied.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// Landlock status ("fully enforced", "partially enforced", "not enforced").
    pub landlock: String,
}

/// Why the broker could not confine itself (its start is refused).
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The broker's seccomp table could not be compiled or installed.
    #[error("{0}")]
    Seccomp(#[from] terra_seccomp::Error),
    /// The Landlock ruleset could not be created or enforced.
    #[error("landlock: {0}")]
    Landlock(#[from] RulesetError),
    /// A file to grant could not be opened or added to the ruleset.
    #[error("landlock: {}: {source}", path.display())]
    Grant { path: PathBuf, source: RulesetError },
}

/// The Landlock ABI the ruleset is written for (older kernels enforce what
/// they know: best effort).
const LANDLOCK_ABI: ABI = ABI::V6;

/// The IPC scopes the broker's Landlock domain restricts.
const LANDLOCK_SCOPES: &[(&str, Scope)] = &[
    ("abstract UNIX sockets", Scope::AbstractUnixSocket),
    ("signals", Scope::Signal),
];

/// The files the broker keeps reading once confined: none (resolv.conf and
/// hosts are read before, the receipt descriptor is already open).
pub const BROKER_READABLE: &[&str] = &[];

/// Applies Landlock (best effort: the kernel may lack it), granting only
/// reading `readable`, and then seccomp (required) to the whole process.
pub fn apply(readable: &[PathBuf]) -> Result<Confinement, ConfineError> {
    let landlock = apply_landlock(readable)?;
    let programs = terra_seccomp::compile(Table::Broker)?;
    terra_seccomp::install_all_threads(&programs)?;
    Ok(Confinement { landlock })
}

/// The broker's confinement: [`apply`] granting [`BROKER_READABLE`].
pub fn apply_broker() -> Result<Confinement, ConfineError> {
    let readable: Vec<PathBuf> = BROKER_READABLE.iter().map(PathBuf::from).collect();
    apply(&readable)
}

fn apply_landlock(files: &[PathBuf]) -> Result<String, ConfineError> {
    let scopes = LANDLOCK_SCOPES
        .iter()
        .fold(landlock::BitFlags::<Scope>::EMPTY, |acc, (_, s)| acc | *s);
    let mut created = Ruleset::default()
        .handle_access(AccessFs::from_all(LANDLOCK_ABI))
        .and_then(|r| r.handle_access(AccessNet::BindTcp))
        .and_then(|r| r.scope(scopes))
        .and_then(|r| r.create())?;
    for f in files {
        // A file that cannot be opened is not granted (nothing to read).
        let Ok(fd) = PathFd::new(f) else { continue };
        created = created
            .add_rule(PathBeneath::new(fd, AccessFs::ReadFile))
            .map_err(grant_err(f))?;
    }
    let status = created.restrict_self()?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => "fully enforced",
        RulesetStatus::PartiallyEnforced => "partially enforced",
        RulesetStatus::NotEnforced => "not enforced",
    }
    .to_owned())
}

fn grant_err(path: &Path) -> impl Fn(RulesetError) -> ConfineError + '_ {
    move |source| ConfineError::Grant {
        path: path.to_owned(),
        source,
    }
}

fn names<T>(table: &[(&'static str, T)]) -> Vec<&'static str> {
    table.iter().map(|(n, _)| *n).collect()
}

/// What [`apply_broker`] installs, one line per rule, written from the same
/// tables the filters are built from.
pub fn describe() -> String {
    let mut s = String::new();
    let granted = if BROKER_READABLE.is_empty() {
        "none granted (resolv.conf and hosts are read before it confines itself)".to_owned()
    } else {
        format!("reading {} granted", BROKER_READABLE.join(" "))
    };
    s.push_str(&format!(
        "landlock (ABI {LANDLOCK_ABI:?}, best effort): all file access handled, {granted}; TCP bind handled, never granted\n"
    ));
    s.push_str(&format!(
        "landlock scoped: {}\n",
        names(LANDLOCK_SCOPES).join(", ")
    ));
    s.push_str(
        &terra_seccomp::describe(Table::Broker, None).unwrap_or_else(|e| format!("seccomp: {e}\n")),
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn description_names_the_landlock_rules_and_the_allowlist() {
        let d = describe();
        assert!(d.contains("TCP bind handled, never granted"), "{d}");
        assert!(d.contains("none granted"), "{d}");
        for (name, _) in LANDLOCK_SCOPES {
            assert!(d.contains(name), "{name} missing from:\n{d}");
        }
        assert!(d.contains("seccomp broker/allow"), "{d}");
        assert!(d.contains("connect"), "{d}");
        assert!(!d.contains(" bind,") && !d.contains("execve"), "{d}");
    }
}
