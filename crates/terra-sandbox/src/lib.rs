//! Launchers that lower a SandboxPlan onto the host kernel.
//!
//! `linux/` holds the native Linux launcher (namespaces, mounts, seccomp,
//! Landlock). Other hosts are described in docs and compiled for their targets.

use std::ffi::OsString;
use std::process::ExitCode;

#[cfg(target_os = "linux")]
pub mod linux;

/// The exit status of a box, launcher or role that refused to start what it
/// was given (setup failure, activation failure, a parent already gone).
pub use terra_policy::EXIT_REFUSED;

/// Entry point of the hidden `terra __sandbox_launcher` role.
///
/// On Linux the launcher is not a separate executable: `linux::spawn_box` and
/// `linux::spawn_confined_role` fork it from the caller (see
/// docs/sandbox-linux.md), so this entry point only refuses.
pub fn launcher_role_main(_args: Vec<OsString>) -> ExitCode {
    eprintln!(
        "terra __sandbox_launcher: the Linux launcher runs in process (spawn_box); nothing to do"
    );
    ExitCode::from(EXIT_REFUSED)
}

/// Entry point of the hidden `terra __vm` role (the box's init).
///
/// On Linux the box's init is forked by `linux::spawn_box` (it is PID 1 of the
/// box's PID namespace without an exec), so this entry point only refuses.
pub fn vm_role_main(_args: Vec<OsString>) -> ExitCode {
    eprintln!("terra __vm: the box init is started by spawn_box; nothing to do");
    ExitCode::from(EXIT_REFUSED)
}
