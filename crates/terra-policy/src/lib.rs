//! terra's policy compiler: JSON source v3 -> canonical MIR v3 -> decision digest
//! -> host resolution -> capability match -> an immutable SandboxPlan.
//!
//! It refuses; it never guesses. No function returns a partially built object.
#![forbid(unsafe_code)]

pub mod codec;
pub mod digest;
pub mod error;
pub mod host;
pub mod model;

pub use error::{ErrorClass, PolicyError, Result};
pub use model::{
    Access, Destination, Mir, MirBuilder, Missing, NetworkMode, ProcessTree, RootKind, RootMode,
    Rule, Scope, Target,
};

pub mod capability;
pub mod plan;

pub use capability::{Capability, CapabilitySet};
pub use plan::{HostBindings, OmittedGrant, ResolvedRule, SandboxPlan};
