//! Windows AppContainer launches for terra's roles, as ordinary Rust.
//!
//! Nothing here calls the OS. [`lower_plan`] turns a `SandboxPlan` into a
//! [`LaunchPlan`]: the worker's role and capabilities ([`launch`]), its jobs
//! and creation flags ([`job`]), its mitigation policy ([`mitigation`]), the
//! DACL entries of its grants ([`dacl`], with the rights in [`rights`]),
//! and [`spec`] encodes what the launcher reads. [`objects`] walks the
//! granted trees against the 16,384-object cap through a [`objects::Tree`]
//! the launcher implements; [`relay`] is the console relay's filter,
//! [`sockets`] the broker wrapper's ledger, [`render`] the dry run.
//! docs/sandbox-windows.md describes the design; the native half is
//! `terra-sandbox/src/windows/`.
#![forbid(unsafe_code)]

mod bits;
pub mod cmdline;
pub mod dacl;
pub mod error;
pub mod job;
pub mod launch;
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
    declared_capabilities, lower_plan, role_capabilities, LaunchPlan, WorkerSettings,
};
pub use objects::{walk, Kind, Objects, Tree, MAX_OBJECTS};
pub use path::PathStyle;
pub use relay::Relay;
pub use spec::{Grant, GrantKind, LaunchSpec, Peer, Proto, Role, Scope};
