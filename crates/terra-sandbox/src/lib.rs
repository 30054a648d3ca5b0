//! Launchers that lower a SandboxPlan onto the host kernel.
//!
//! `linux/` holds the native Linux launcher (namespaces, mounts, seccomp,
//! Landlock). Other hosts are described in docs and compiled for their targets.

use std::ffi::OsString;
use std::process::ExitCode;

#[cfg(target_os = "linux")]
pub mod linux;

/// Entry point of the hidden `terra __sandbox_launcher` role.
pub fn launcher_role_main(_args: Vec<OsString>) -> ExitCode {
    eprintln!("terra __sandbox_launcher: not built yet");
    ExitCode::from(125)
}

/// Entry point of the hidden `terra __vm` role (the box's init).
pub fn vm_role_main(_args: Vec<OsString>) -> ExitCode {
    eprintln!("terra __vm: not built yet");
    ExitCode::from(125)
}
