//! `terra policy ...`: format commands (compile, validate, inspect, hashes, init)
//! and plan commands (capabilities, resolve, evaluate, composition).

use std::process::ExitCode;

use clap::Subcommand;

mod format;
mod plan;

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    #[command(flatten)]
    Format(format::FormatCommand),
    #[command(flatten)]
    Plan(plan::PlanCommand),
}

/// Exit status of `terra policy`: 0 ok, 1 failure, 2 a valid report with violations.
pub const EXIT_OK: u8 = 0;
pub const EXIT_FAILURE: u8 = 1;
pub const EXIT_VIOLATIONS: u8 = 2;

pub fn run(cmd: PolicyCommand) -> ExitCode {
    match cmd {
        PolicyCommand::Format(c) => format::run(c),
        PolicyCommand::Plan(c) => plan::run(c),
    }
}
