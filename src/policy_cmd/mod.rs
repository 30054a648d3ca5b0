//! `terra policy ...`: format commands (compile, validate, inspect, hashes, init)
//! and plan commands (capabilities, resolve, evaluate, composition).

use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;
use terra_policy::report::Report;
use terra_policy::PolicyError;
#[cfg(target_os = "linux")]
use terra_supervisor::files::{self, Existing, Follow, OutError};
use terra_supervisor::input::{read_capped, ReadError};

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

/// Prints `s` on stdout in one write.
fn print(s: &str) {
    let _ = io::stdout().write_all(s.as_bytes());
}

/// A refusal of a `terra policy` command and the file it is about (when
/// one is): its `--json` form is `terra_policy::report::error_json`.
pub struct Refusal {
    pub error: PolicyError,
    pub path: Option<String>,
}

impl From<PolicyError> for Refusal {
    fn from(error: PolicyError) -> Refusal {
        Refusal { error, path: None }
    }
}

/// Tags a refusal with the file it is about.
fn about(path: &Path) -> impl Fn(PolicyError) -> Refusal + '_ {
    move |error| Refusal {
        error,
        path: Some(path.display().to_string()),
    }
}

/// The end of every `terra policy` command: the report, or the refusal on
/// stderr (and with `--json` its one JSON shape on stdout); `validating`
/// turns a non-canonical document into a finding (exit 2).
fn finish(
    result: Result<Report, Refusal>,
    json: bool,
    report_json: bool,
    validating: bool,
) -> ExitCode {
    match result {
        Ok(report) => print_report(&report, report_json),
        Err(r) => {
            if json {
                print(&terra_policy::report::json_text(
                    &terra_policy::report::error_json(&r.error, r.path.as_deref()),
                ));
            }
            crate::fail(crate::Failure::Policy {
                violations: validating && r.error.class() == terra_policy::ErrorClass::NonCanonical,
                error: &r.error,
            })
        }
    }
}

/// Prints a report (its JSON or its text); exit 2 when it has violations.
fn print_report(report: &Report, json: bool) -> ExitCode {
    print(&report.render(json));
    ExitCode::from(if report.violations {
        EXIT_VIOLATIONS
    } else {
        EXIT_OK
    })
}

/// Largest input file any policy command (and `terra run --policy`) reads:
/// JSON source and MIR v3 are both at most 1 MiB (spec sections 1 and 2).
pub const MAX_INPUT_LEN: usize =
    if terra_policy::source::MAX_SOURCE_LEN > terra_policy::codec::MAX_MIR_LEN {
        terra_policy::source::MAX_SOURCE_LEN
    } else {
        terra_policy::codec::MAX_MIR_LEN
    };

/// Reads an input of at most [`MAX_INPUT_LEN`] bytes (at most that plus one
/// byte is ever read, whatever the file is); `too_big` makes the refusal (its
/// class depends on what the file is).
fn read_input(path: &Path, too_big: fn(String) -> PolicyError) -> Result<Vec<u8>, PolicyError> {
    read_capped(path, MAX_INPUT_LEN).map_err(|e| match e {
        ReadError::TooLarge(m) => too_big(format!("{m} (1 MiB)")),
        ReadError::Io(m) => PolicyError::Io(m),
    })
}

/// Writes an output file atomically (see `terra_supervisor::files`): never
/// through a symlink at the final name, never over anything but a regular
/// file, and over a regular file only with `replace`. A killed writer leaves
/// no partial file under any name.
#[cfg(target_os = "linux")]
fn write_output(output: &Path, bytes: &[u8], replace: bool) -> Result<(), PolicyError> {
    let existing = if replace {
        Existing::ReplaceRegular
    } else {
        Existing::Refuse
    };
    files::write_file(output, bytes, 0o666, Follow::DirComponents, existing, true).map_err(|e| {
        match e {
            OutError::Exists(m) => {
                PolicyError::Argument(format!("{m}; pass --replace to replace it"))
            }
            OutError::NotRegular(m) => PolicyError::Argument(format!(
                "output {m} (--replace replaces regular files only)"
            )),
            OutError::Io(m) => PolicyError::Io(m),
        }
    })
}

/// Outside Linux the descriptor-relative writer (`O_TMPFILE`, `O_PATH`,
/// `RENAME_NOREPLACE`) is not built: an output file is refused rather than
/// written without those guarantees.
#[cfg(not(target_os = "linux"))]
fn write_output(output: &Path, _bytes: &[u8], _replace: bool) -> Result<(), PolicyError> {
    Err(PolicyError::Io(format!(
        "cannot write {}: writing output files is built only on Linux in this version of terra",
        output.display()
    )))
}
