//! capabilities, resolve, evaluate, restrict, contains, diff, overlaps.

use std::process::ExitCode;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// List the capabilities a policy requires.
    Capabilities { policy: std::path::PathBuf },
}

pub fn run(cmd: PlanCommand) -> ExitCode {
    match cmd {
        PlanCommand::Capabilities { .. } => {
            eprintln!("terra: policy capabilities is not built yet");
            ExitCode::from(super::EXIT_FAILURE)
        }
    }
}
