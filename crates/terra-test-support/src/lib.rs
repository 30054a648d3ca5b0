//! Helpers the terra workspace's test suites share. Every crate takes this one
//! as a dev-dependency only; nothing here is part of a shipped API.
//!
//! - [`users`]: who a case runs as (the caller and, as root, uid/gid 65534)
//!   and the one way to start a program, or this test binary again, as 65534.
//! - [`dirs`]: a run's host directories (workspace, state, runtime, home, temp).
//! - [`process`]: bounded runs and bounded waits (guards against hangs, never
//!   timing assertions).
//! - [`http`]: a plain HTTP server on the host's loopback that counts connections.
//! - [`data`]: the conformance data under `spec/` and its hex encoding.
//! - [`json`]: reading the JSON terra prints.
#![forbid(unsafe_code)]

pub mod data;
#[cfg(unix)]
pub mod dirs;
pub mod http;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod inject;
pub mod json;
pub mod process;
#[cfg(unix)]
pub mod users;
