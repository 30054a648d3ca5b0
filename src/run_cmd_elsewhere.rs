//! `terra run`, `terra doctor`, `terra backends` on a host that is neither
//! Linux, macOS nor Windows (a BSD, say).
//!
//! The linux and landlock backends need Linux, the macos backend macOS,
//! the windows backend Windows. So
//! these commands accept any arguments and refuse plainly, naming the OS,
//! instead of calling code of another OS.

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
         the macos backend macOS, the windows backend Windows",
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
