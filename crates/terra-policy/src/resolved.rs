//! What resolution takes and makes, rule by rule: the trusted host bindings,
//! a rule resolved to a host path, a grant omitted because its target was
//! missing. Below the evaluation, the conflict check, resolution and the
//! plan, which all use them.

use std::path::PathBuf;

use crate::model::{Access, RootKind, Scope};

/// Trusted host bindings (spec section 4).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostBindings {
    pub workspace: Option<PathBuf>,
    pub temp: Option<PathBuf>,
    pub minimal_roots: Vec<PathBuf>,
    pub mediator: Option<String>,
}

/// One rule after resolution: a canonical absolute host path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResolvedRule {
    pub access: Access,
    /// Canonical absolute path (realpath), or for protect-create the existing
    /// canonical prefix plus the absent components as written.
    pub path: String,
    pub scope: Scope,
    /// The target does not exist; the backend must stop its creation.
    pub protect_create: bool,
    /// Index of the MIR rule this came from.
    pub source_rule: usize,
    /// The symbolic root the MIR rule named.
    pub source_root: RootKind,
}

impl ResolvedRule {
    /// A rule on a host path that exists, as MIR rule 0 with root `host`
    /// resolves to (not protect-create). For rule sets written by hand, in
    /// tests and tools; [`crate::resolve()`] makes the rules of a plan.
    pub fn host(access: Access, scope: Scope, path: &str) -> ResolvedRule {
        ResolvedRule {
            access,
            path: path.into(),
            scope,
            protect_create: false,
            source_rule: 0,
            source_root: RootKind::Host,
        }
    }
}

/// A grant whose target was missing with `missing: skip`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OmittedGrant {
    pub access: Access,
    /// The candidate path that did not exist.
    pub path: String,
    pub source_rule: usize,
}
