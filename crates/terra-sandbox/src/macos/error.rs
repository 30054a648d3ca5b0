//! Why the launcher refused: every refusal names what and why.

use std::io;

/// A refusal of `terra __sandbox_launcher` (exit 125, nothing exec'd).
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The command line, the launch spec or the activation plan.
    #[error("{0}")]
    Seatbelt(#[from] terra_seatbelt::Error),
    /// The launch spec's descriptor.
    #[error("launch spec descriptor {fd}: {what}")]
    SpecFd { fd: i32, what: String },
    /// The status pipe's descriptor.
    #[error("status descriptor {fd}: {what}")]
    StatusFd { fd: i32, what: String },
    /// The canary did not open before confinement: its refusal afterwards
    /// would prove nothing.
    #[error("activation check: the canary {canary} must open before confinement: {error}")]
    CanaryClosed { canary: String, error: io::Error },
    /// A probe the profile must deny succeeded.
    #[error("activation check: {probe} succeeded under the profile")]
    Allowed { probe: String },
    /// A probe the profile must deny failed otherwise than with a
    /// permission error.
    #[error("activation check: {probe} failed with {error}, not with a permission error")]
    NotDenied { probe: String, error: io::Error },
    /// A probe the profile must allow (the broker's port) failed.
    #[error(
        "activation check: {probe} failed with {error}: the workload's profile must reach the network broker's port"
    )]
    Unreachable { probe: String, error: io::Error },
    /// libsandbox refused the profile, or it could not be handed over.
    #[error("sandbox_init_with_parameters refused the profile: {0}")]
    Apply(String),
    /// The terminal hand-over or the signal mask.
    #[error("{what}: {error}")]
    Terminal {
        what: &'static str,
        error: nix::errno::Errno,
    },
    /// terra run closed the status pipe before the role's exec.
    #[error("terra run is gone (its status pipe is closed): the role is not started")]
    SupervisorGone,
    /// Nothing to exec.
    #[error("no command after --")]
    NoCommand,
}
