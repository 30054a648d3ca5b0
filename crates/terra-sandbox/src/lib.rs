//! Linux, macOS and Windows launchers that lower a SandboxPlan onto the host kernel.

use std::ffi::OsString;
use std::process::ExitCode;

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
