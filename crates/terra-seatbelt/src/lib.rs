//! Seatbelt (the macOS sandbox) for terra's roles, as ordinary Rust.
//!
//! Nothing here calls the OS: [`lower`] turns a `SandboxPlan` into a
//! [`LaunchSpec`] (role, network, canonical grants), [`spec`] encodes that
//! spec for the launcher's descriptor, and [`profile`] renders the role's SBPL
//! profile plus the parameters `sandbox_init_with_parameters` receives. Every
//! path travels as a parameter, so no path text ever enters a profile.
//! docs/sandbox-macos.md describes the design.
#![forbid(unsafe_code)]

pub mod activation;
pub mod error;
pub mod launcher;
pub mod lower;
pub mod path;
pub mod profile;
pub mod runtime;
pub mod spec;
pub mod tree;

pub use activation::{probes, Probe};
pub use error::{Error, Result};
pub use launcher::{read_report, LauncherArgs, Report, Status};
pub use lower::{declared_capabilities, lower_broker, lower_plan, MACOS_RESOLVER_FILES};
pub use profile::{render, Profile, BROKER_PORT};
pub use spec::{Grant, GrantKind, LaunchSpec, Network, Role, Scope};
pub use tree::{sweep, RunMark, SweepReport, Verdict};
