//! compile, validate, inspect, hash, artifact-hash, init.

use std::process::ExitCode;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum FormatCommand {
    /// Print terra's default policy source.
    Init,
}

pub fn run(cmd: FormatCommand) -> ExitCode {
    match cmd {
        FormatCommand::Init => {
            eprintln!("terra: policy init is not built yet");
            ExitCode::from(super::EXIT_FAILURE)
        }
    }
}
