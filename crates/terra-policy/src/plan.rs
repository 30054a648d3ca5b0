//! The SandboxPlan: one decision resolved for one host and checked against one
//! backend. Immutable once built (no setters, no interior mutability), so it is
//! safe to share between threads.
//!
//! Resolution (`resolve`), capability checks and evaluation live in their own
//! modules; this module holds the plan's shape.

use std::path::PathBuf;

use crate::capability::CapabilitySet;
use crate::model::{Access, Destination, NetworkMode, ProcessTree, RootKind, RootMode, Scope};

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

/// A grant whose target was missing with `missing: skip`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OmittedGrant {
    pub access: Access,
    /// The candidate path that did not exist.
    pub path: String,
    pub source_rule: usize,
}

/// The immutable plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPlan {
    pub(crate) rules: Vec<ResolvedRule>,
    pub(crate) omitted: Vec<OmittedGrant>,
    pub(crate) network: NetworkMode,
    pub(crate) mediator: Option<String>,
    pub(crate) destinations: Vec<Destination>,
    pub(crate) root_mode: RootMode,
    pub(crate) process_tree: ProcessTree,
    pub(crate) required: CapabilitySet,
    pub(crate) decision_digest: String,
    pub(crate) mir_bytes: Vec<u8>,
}

impl SandboxPlan {
    /// Resolved rules in plan order: grants, then deny-writes, then denies;
    /// within a group shorter path first, then bytes, tree before exact, read before write.
    pub fn rules(&self) -> &[ResolvedRule] {
        &self.rules
    }
    pub fn omitted(&self) -> &[OmittedGrant] {
        &self.omitted
    }
    pub fn network(&self) -> NetworkMode {
        self.network
    }
    pub fn mediator(&self) -> Option<&str> {
        self.mediator.as_deref()
    }
    pub fn destinations(&self) -> &[Destination] {
        &self.destinations
    }
    pub fn root_mode(&self) -> RootMode {
        self.root_mode
    }
    pub fn process_tree(&self) -> ProcessTree {
        self.process_tree
    }
    pub fn required_capabilities(&self) -> CapabilitySet {
        self.required
    }
    /// Decision digest of the MIR this plan was resolved from.
    pub fn decision_digest(&self) -> &str {
        &self.decision_digest
    }
    /// Canonical MIR bytes this plan was resolved from (what travels to roles).
    pub fn mir_bytes(&self) -> &[u8] {
        &self.mir_bytes
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn plan_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<super::SandboxPlan>();
    }
}
