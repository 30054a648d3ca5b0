//! The SandboxPlan: one decision resolved for one host and checked against one
//! backend. Immutable once built (no setters, no interior mutability), so it is
//! safe to share between threads.
//!
//! Resolution (`resolve`), capability checks and evaluation live in their own
//! modules; this module holds the plan's shape and [`compile_plan`].

use crate::capability::CapabilitySet;
use crate::error::{PolicyError, Result};
use crate::evaluate::Evaluation;
use crate::model::{Destination, Mir, NetworkMode, ProcessTree, RootMode};
use crate::resolve::{resolve, Resolution};
pub use crate::resolved::{HostBindings, OmittedGrant, ResolvedRule};

/// The immutable plan: a [`Resolution`] whose required capabilities the
/// backend declared. Made only by [`compile_plan`] or [`Resolution::into_plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPlan {
    pub(crate) resolution: Resolution,
    pub(crate) declared: CapabilitySet,
}

impl SandboxPlan {
    /// Resolved rules in plan order: grants, then deny-writes, then denies;
    /// within a group shorter path first, then bytes, tree before exact, read before write.
    pub fn rules(&self) -> &[ResolvedRule] {
        self.resolution.rules()
    }
    pub fn omitted(&self) -> &[OmittedGrant] {
        self.resolution.omitted()
    }
    pub fn network(&self) -> NetworkMode {
        self.resolution.network()
    }
    pub fn mediator(&self) -> Option<&str> {
        self.resolution.mediator()
    }
    pub fn destinations(&self) -> &[Destination] {
        self.resolution.destinations()
    }
    pub fn root_mode(&self) -> RootMode {
        self.resolution.root_mode()
    }
    pub fn process_tree(&self) -> ProcessTree {
        self.resolution.process_tree()
    }
    pub fn required_capabilities(&self) -> CapabilitySet {
        self.resolution.required_capabilities()
    }
    /// What the backend declared when the plan was made (a superset of the required set).
    pub fn declared_capabilities(&self) -> CapabilitySet {
        self.declared
    }
    /// Decision digest of the MIR this plan was resolved from.
    pub fn decision_digest(&self) -> &str {
        self.resolution.decision_digest()
    }
    /// Canonical MIR bytes this plan was resolved from (what travels to roles).
    pub fn mir_bytes(&self) -> &[u8] {
        self.resolution.mir_bytes()
    }
    /// The resolution this plan was made from (what the comparisons take).
    pub fn resolution(&self) -> &Resolution {
        &self.resolution
    }
    /// Contract-2 permission of a canonical absolute path (spec section 5).
    pub fn evaluate(&self, path: &str) -> Result<Evaluation> {
        self.resolution.evaluate(path)
    }
}

impl Resolution {
    /// Checks the backend's declared capabilities; every missing one is named
    /// in one unsupported error, and no plan is returned.
    pub fn into_plan(self, declared: CapabilitySet) -> Result<SandboxPlan> {
        let missing = self.missing_capabilities(declared);
        if !missing.is_empty() {
            let names: Vec<&str> = missing.iter().map(|c| c.name()).collect();
            return Err(PolicyError::Unsupported(format!(
                "the backend lacks {} capabilit{} the plan requires: {}",
                missing.len(),
                if missing.len() == 1 { "y" } else { "ies" },
                names.join(", ")
            )));
        }
        Ok(SandboxPlan {
            resolution: self,
            declared,
        })
    }
}

/// Resolves `mir` on this host, checks conflicts and the backend's declared
/// capabilities. Every missing capability is reported at once (unsupported);
/// no plan is returned after any failure.
pub fn compile_plan(
    mir: &Mir,
    bindings: &HostBindings,
    declared: CapabilitySet,
) -> Result<SandboxPlan> {
    resolve(mir, bindings)?.into_plan(declared)
}

#[cfg(test)]
mod tests {
    #[test]
    fn plan_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<super::SandboxPlan>();
        assert_send_sync::<super::Resolution>();
    }
}
