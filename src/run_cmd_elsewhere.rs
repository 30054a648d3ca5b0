//! `terra run`, `terra doctor`, `terra backends` on a host that is not Linux.
//!
//! Every backend that can start a run in this build needs Linux (the linux
//! and landlock backends); the macos backend has its Seatbelt launcher
//! (`terra __sandbox_launcher`) but not yet the supervisor that starts it.
//! So these commands accept any arguments and refuse plainly, naming the
//! OS, instead of calling Linux-only code.

use std::ffi::OsString;
use std::process::ExitCode;

use crate::Failure;

/// The arguments are taken raw: nothing here can use them.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

#[derive(Debug, clap::Args)]
pub struct BackendsArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// Why no backend runs here.
fn reason() -> String {
    format!(
        "no backend of this build runs on {os}: the linux and landlock backends need Linux, \
         and the macos backend's supervisor is not built yet (on Linux, \
         `terra run --backend macos --dry-run` shows the Seatbelt profile it would apply)",
        os = std::env::consts::OS
    )
}

pub fn run(_args: RunArgs, _log_level: Option<&str>) -> ExitCode {
    crate::fail(Failure::Run(
        &terra_supervisor::Error::Unsupported(reason()),
    ))
}

pub fn doctor(_args: DoctorArgs) -> ExitCode {
    println!("terra cannot run boxes on this host: {}", reason());
    ExitCode::from(1)
}

pub fn backends(_args: BackendsArgs) -> ExitCode {
    println!("no backend is supported on this host: {}", reason());
    ExitCode::SUCCESS
}
