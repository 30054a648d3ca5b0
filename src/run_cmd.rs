//! `terra run`, `terra doctor`, `terra backends`.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The command to run, after `--`.
    #[arg(trailing_var_arg = true, required = true)]
    command: Vec<std::ffi::OsString>,
}

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {}

#[derive(Debug, clap::Args)]
pub struct BackendsArgs {}

pub fn run(_args: RunArgs) -> ExitCode {
    eprintln!("terra: run is not built yet");
    ExitCode::from(125)
}

pub fn doctor(_args: DoctorArgs) -> ExitCode {
    eprintln!("terra: doctor is not built yet");
    ExitCode::from(1)
}

pub fn backends(_args: BackendsArgs) -> ExitCode {
    eprintln!("terra: backends is not built yet");
    ExitCode::from(1)
}
