//! The macOS launcher: `terra __sandbox_launcher`.
//!
//! ```text
//! terra __sandbox_launcher --spec-fd N --canary PATH [--status-fd N] [--foreground] -- ARG0 [ARGS...]
//! ```
//!
//! It reads the owner-only launch spec (crate terra-seatbelt) from
//! descriptor N, renders the role's profile, applies it to itself with
//! `sandbox_init_with_parameters` (every path a parameter), then runs the
//! activation check: the private canary at PATH, outside every grant, must
//! not open, and the role's network probes must be refused. Only then does
//! it exec the spec's executable with ARG0 and ARGS, keeping its
//! environment. The profile is inherited by everything the role starts.
//!
//! With `--status-fd` it reports on that pipe (`terra_seatbelt::Status`):
//! `activation passed` before the exec (the pipe closes with the exec), or
//! why it refused (exit `EXIT_REFUSED`), or why the exec failed (exit 126,
//! or 127 when the program is not there). With `--foreground` it first makes
//! its own process group (terra run started it in a new one) the foreground
//! group of the terminal on standard input, so the workload reads the
//! terminal and gets its Ctrl-C, as it would without terra.

mod activate;
mod apply;
mod error;
mod spec_fd;
mod status;
pub mod tree;

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

use terra_seatbelt::{LauncherArgs, Status};

use crate::EXIT_REFUSED;
use error::LaunchError;

/// Entry point of `terra __sandbox_launcher` on macOS.
pub fn launcher_main(argv: Vec<OsString>) -> ExitCode {
    // terra run blocks the signals it forwards (and SIGTTOU) while it
    // supervises, and a process keeps its parent's signal mask across fork
    // and exec (std's spawn and exec reset only SIGPIPE's disposition): the
    // role must not start with SIGINT or SIGTERM blocked.
    if let Err(e) = nix::sys::signal::SigSet::empty().thread_set_mask() {
        eprintln!("terra __sandbox_launcher: cannot empty the signal mask: {e}");
        return ExitCode::from(EXIT_REFUSED);
    }
    let args = match LauncherArgs::parse(argv) {
        Ok(a) => a,
        Err(why) => {
            eprintln!("terra __sandbox_launcher: {why}");
            return ExitCode::from(EXIT_REFUSED);
        }
    };
    let mut report = match args.status_fd.map(status::Pipe::adopt).transpose() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("terra __sandbox_launcher: {why}");
            return ExitCode::from(EXIT_REFUSED);
        }
    };
    let (status, code) = match launch(&args, report.as_mut()) {
        Ok(never) => match never {},
        Err(Failed::Refused(why)) => (Status::Refused(why.to_string()), EXIT_REFUSED),
        Err(Failed::Exec { code, reason }) => (Status::ExecFailed { code, reason }, code),
    };
    // terra run reads the status pipe and says it; started without one (by
    // hand), the launcher says it itself.
    match report.as_mut() {
        Some(p) => {
            p.say(&status);
        }
        None => {
            if let Status::Refused(why) | Status::ExecFailed { reason: why, .. } = &status {
                eprintln!("terra __sandbox_launcher: {why}");
            }
        }
    }
    ExitCode::from(code)
}

/// Why the launch did not end in the role's exec.
enum Failed {
    Refused(LaunchError),
    Exec { code: u8, reason: String },
}

impl<E: Into<LaunchError>> From<E> for Failed {
    fn from(why: E) -> Failed {
        Failed::Refused(why.into())
    }
}

/// Confines this process and execs the role; returns only on failure.
fn launch(
    args: &LauncherArgs,
    report: Option<&mut status::Pipe>,
) -> Result<std::convert::Infallible, Failed> {
    let spec = spec_fd::read(args.spec_fd)?;
    let probes = terra_seatbelt::probes(&spec, &args.canary)?;
    // Before confinement the canary must open: otherwise its failure later
    // would prove nothing about the profile.
    activate::canary_opens_now(&args.canary)?;
    if args.foreground {
        // Before the profile: the terminal is not the role's to change.
        status::take_terminal()?;
    }
    let profile = terra_seatbelt::render(&spec)?;
    apply::apply(&profile)?;
    activate::check(&probes)?;
    if let Some(p) = report {
        // terra run gone before the role runs: its reaper may have swept
        // already (before this process carried the profile), so the role
        // must not start unwatched.
        if !p.say(&Status::ActivationPassed) {
            return Err(LaunchError::SupervisorGone.into());
        }
    }
    let (arg0, rest) = args.command.split_first().ok_or(LaunchError::NoCommand)?;
    let err = Command::new(&spec.executable).arg0(arg0).args(rest).exec();
    // 127: the program is not there; 126: it is, but cannot be executed
    // (the profile refused it, or it is not an executable).
    let code = if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    Err(Failed::Exec {
        code,
        reason: format!("exec {}: {err}", spec.executable),
    })
}
