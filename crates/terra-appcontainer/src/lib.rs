//! Windows AppContainer launches for terra's roles, as ordinary Rust.
//!
//! Nothing here calls the OS. [`lower_plan`] turns a `SandboxPlan` into a
//! [`LaunchPlan`]: the worker's role and capabilities ([`launch`]), its jobs
//! and creation flags ([`job`]), its mitigation policy ([`mitigation`]), the
//! DACL entries of its grants ([`dacl`], with the rights in [`rights`]),
//! and [`spec`] encodes what the launcher reads. [`objects`] finds the
//! objects with protected DACLs below granted trees through a
//! [`objects::Tree`] the launcher implements; [`ledger`] records every ACE
//! and profile a launch adds, for cleanup; [`env`] is the workload's
//! environment; [`relay`] is the console relay's filter,
//! [`sockets`] the broker wrapper's ledger, [`render`] the dry run.
//! docs/sandbox-windows.md describes the design; the native half is
//! `terra-sandbox/src/windows/`.
#![forbid(unsafe_code)]

mod bits;
pub mod cmdline;
pub mod dacl;
pub mod env;
pub mod error;
pub mod job;
pub mod launch;
pub mod ledger;
pub mod mitigation;
pub mod objects;
pub mod path;
pub mod relay;
pub mod render;
pub mod rights;
pub mod sockets;
pub mod spec;

pub use dacl::{DaclEntry, Origin, PACKAGE_SID_PLACEHOLDER};
pub use error::{Error, Result};
pub use launch::{
    declared_capabilities, lower_plan, role_capabilities, Console, Host, LaunchPlan, ProgramAccess,
    WorkerSettings,
};
pub use objects::{scan, Kind, Objects, Tree};
pub use path::PathStyle;
pub use relay::Relay;
pub use spec::{Grant, GrantKind, LaunchSpec, Peer, Proto, Role, Scope};
