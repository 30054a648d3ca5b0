//! The macOS launcher: `terra __sandbox_launcher`.
//!
//! ```text
//! terra __sandbox_launcher --spec-fd N --canary PATH -- ARG0 [ARGS...]
//! ```
//!
//! It reads the owner-only launch spec (crate terra-seatbelt) from
//! descriptor N, renders the role's profile, applies it to itself with
//! `sandbox_init_with_parameters` (every path a parameter), then runs the
//! activation check: the private canary at PATH, outside every grant, must
//! not open, and with network none (or mediated) the loopback tries must be
//! refused. Only then does it exec the spec's executable with ARG0 and ARGS,
//! keeping its environment. The profile is inherited by everything the role
//! starts. Any failure is a `terra __sandbox_launcher: ...` line and exit
//! `EXIT_REFUSED`, before the role runs.

mod activate;
mod apply;
mod args;
mod spec_fd;

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

use crate::EXIT_REFUSED;

/// Entry point of `terra __sandbox_launcher` on macOS.
pub fn launcher_main(argv: Vec<OsString>) -> ExitCode {
    match launch(argv) {
        Ok(never) => match never {},
        Err(why) => {
            eprintln!("terra __sandbox_launcher: {why}");
            ExitCode::from(EXIT_REFUSED)
        }
    }
}

/// Confines this process and execs the role; returns only on failure.
fn launch(argv: Vec<OsString>) -> Result<std::convert::Infallible, String> {
    let args = args::parse(argv)?;
    let spec = spec_fd::read(args.spec_fd)?;
    let probes = terra_seatbelt::probes(&spec, &args.canary)
        .map_err(|e| format!("activation check: {e}"))?;
    // Before confinement the canary must open: otherwise its failure later
    // would prove nothing about the profile.
    activate::canary_opens_now(&args.canary)?;
    let profile = terra_seatbelt::render(&spec).map_err(|e| e.to_string())?;
    apply::apply(&profile)?;
    activate::check(&probes)?;
    let (arg0, rest) = args.command.split_first().ok_or("no command after --")?;
    let err = Command::new(&spec.executable).arg0(arg0).args(rest).exec();
    Err(format!("exec {}: {err}", spec.executable))
}
