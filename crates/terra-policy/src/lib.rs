//! terra's policy compiler: JSON source v3 -> canonical MIR v3 -> decision digest
//! -> host resolution -> capability match -> an immutable SandboxPlan.
//!
//! MIR v3 is the canonical binary policy format (byte-compatible with the
//! public MIR v3 format): one decision has exactly one encoding, and the
//! SHA-256 of those bytes is the decision digest.
//!
//! It refuses; it never guesses. No function returns a partially built object.
#![forbid(unsafe_code)]

/// The exit status of every terra process that refused or failed before the
/// workload started (the CLI, the supervisor, the box's launcher and init, the
/// broker role): 125, like `env`, `chroot` and container runtimes. It lives
/// in this crate because every other terra crate depends on it.
pub const EXIT_REFUSED: u8 = 125;

mod builder;
pub mod codec;
pub mod digest;
mod encode;
pub mod error;
pub mod host;
pub mod inspect;
pub mod model;
pub mod position;
pub mod report;
pub mod source;

pub use error::{ErrorClass, PolicyError, Result};
pub use inspect::inspection_json;

/// terra's default policy (JSON source v3): the workspace writable, the minimal
/// runtime readable, a private temp directory writable, no network, the whole
/// process tree confined, the root read-only. Printed by `terra policy init`.
pub const DEFAULT_POLICY_SOURCE: &str = include_str!("default-policy.json");

/// Compiles a JSON source v3 document into a canonical [`Mir`]
/// ([`source::compile_source`]); every byte offset an error names is
/// followed by its line and column (`byte offset 193, line 7, column 33`).
pub fn compile_source(bytes: &[u8]) -> Result<Mir> {
    source::compile_source(bytes).map_err(|e| position::annotate(e, bytes))
}

/// A policy file's bytes: MIR v3 when they start with the magic `MMIR`, JSON
/// source v3 otherwise.
pub fn load_policy(bytes: &[u8]) -> Result<Mir> {
    if bytes.starts_with(codec::MAGIC) {
        Mir::decode(bytes)
    } else {
        compile_source(bytes)
    }
}

pub use builder::MirBuilder;
pub use model::{
    Access, Destination, Mir, Missing, NetworkMode, ProcessTree, RootKind, RootMode, Rule, Scope,
    Target,
};

pub mod capability;
pub mod plan;
pub mod resolved;

pub use capability::{Capability, CapabilitySet};
pub use plan::{HostBindings, OmittedGrant, ResolvedRule, SandboxPlan};

pub mod compose;
pub mod conflict;
pub mod evaluate;
pub mod resolve;

pub use capability::required_capabilities;
pub use compose::{contains, diff, overlaps, restrict};
pub use conflict::{check_conflicts, find_conflicts, Conflict};
pub use evaluate::{Evaluation, Permission, Reason, RuleSet};
pub use plan::compile_plan;
pub use resolve::{default_minimal_roots, resolve, Resolution};

#[cfg(test)]
mod testing;
