//! capabilities, resolve, evaluate, restrict, contains, diff, overlaps.
//!
//! A POLICY argument is a MIR v3 file (it starts with the magic `MMIR`) or a
//! JSON source v3 file (anything else); files over 1 MiB are refused before
//! they are parsed. Errors go to stderr as `terra: <class>: <message>` (and,
//! with `--json`, as an `error` object on stdout). Exit status: 0 ok, 1
//! failure, 2 a valid report with violations (a failed `--check`, a candidate
//! that is not contained).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use terra_policy::report::{self, Report};
use terra_policy::{default_minimal_roots, resolve, CapabilitySet, HostBindings, Mir};
use terra_policy::{PolicyError, Resolution};

use super::Refusal;

/// Trusted host bindings used to resolve a policy on this host.
#[derive(Debug, Args, Clone)]
pub struct HostArgs {
    /// The workspace directory (binds `workspace` rules). Default: the current directory.
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// The temp directory (binds `temp` rules). Default: the system temp
    /// directory ($TMPDIR, else /tmp).
    #[arg(long, value_name = "DIR")]
    temp: Option<PathBuf>,
    /// A minimal-runtime root; repeat for more (at most 64 distinct). Default:
    /// /usr, /bin, /sbin, /lib, /lib32, /lib64, /etc/alternatives,
    /// /etc/ssl/certs, /etc/ca-certificates, /etc/pki/tls/certs,
    /// /etc/pki/ca-trust, whichever exist.
    #[arg(long = "minimal-root", value_name = "DIR")]
    minimal_roots: Vec<PathBuf>,
    /// The network mediator id (binds mediated policies). Default: terra's
    /// own broker, terra-netd/1.
    #[arg(long, value_name = "ID")]
    mediator: Option<String>,
}

impl HostArgs {
    /// The bindings, each defaulted as `terra run` binds it (the current
    /// directory, the system temp directory, terra's own mediator).
    fn bindings(&self) -> HostBindings {
        HostBindings {
            workspace: self
                .workspace
                .clone()
                .or_else(|| std::env::current_dir().ok()),
            temp: self.temp.clone().or_else(|| Some(std::env::temp_dir())),
            minimal_roots: if self.minimal_roots.is_empty() {
                default_minimal_roots()
            } else {
                self.minimal_roots.clone()
            },
            mediator: self
                .mediator
                .clone()
                .or_else(|| Some(terra_netd::MEDIATOR.to_string())),
        }
    }
}

/// A refusal about a binding names the flag that gives it.
fn name_the_flag(e: PolicyError) -> PolicyError {
    e.map_detail(|m| {
        let flag = [
            ("workspace binding", "--workspace DIR"),
            ("temp binding", "--temp DIR"),
            ("mediator binding", "--mediator ID"),
            ("minimal-runtime", "--minimal-root DIR"),
        ]
        .iter()
        .find(|(words, _)| m.contains(words) && m.contains("binding"))
        .map(|(_, flag)| *flag);
        match flag {
            Some(f) => format!("{m} (give it with {f})"),
            None => m.to_string(),
        }
    })
}

/// A backend's declared capabilities, for `--check`.
#[derive(Debug, Args, Clone)]
pub struct CheckArgs {
    /// Check the required capabilities against --available; exit 2 when some are missing.
    #[arg(long)]
    check: bool,
    /// Capabilities the backend declares (names, space- or comma-separated).
    #[arg(long, value_name = "CAP", num_args = 1.., value_delimiter = ',', requires = "check")]
    available: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// List the capabilities a policy requires (read from the policy alone).
    Capabilities {
        /// Policy file: MIR v3 or JSON source v3.
        policy: PathBuf,
        #[command(flatten)]
        check: CheckArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Resolve a policy on this host and print the plan.
    Resolve {
        /// Policy file: MIR v3 or JSON source v3.
        policy: PathBuf,
        #[command(flatten)]
        host: HostArgs,
        #[command(flatten)]
        check: CheckArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the permission of one canonical absolute path under a resolved policy.
    Evaluate {
        /// Policy file: MIR v3 or JSON source v3.
        policy: PathBuf,
        /// Canonical absolute path to evaluate.
        #[arg(long, value_name = "PATH")]
        path: String,
        #[command(flatten)]
        host: HostArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Narrow BASE by OVERLAY (deny and deny-write rules only) and write the MIR.
    Restrict {
        /// Base policy file.
        base: PathBuf,
        /// Overlay policy file: only deny and deny-write rules.
        overlay: PathBuf,
        /// Where to write the canonical MIR v3 bytes.
        #[arg(long, value_name = "FILE")]
        output: PathBuf,
        /// Replace OUTPUT if it exists.
        #[arg(long)]
        replace: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Whether CANDIDATE grants nothing beyond BOUNDARY (exit 2 when it does).
    Contains {
        boundary: PathBuf,
        candidate: PathBuf,
        #[command(flatten)]
        host: HostArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// What changes from BEFORE to AFTER.
    Diff {
        before: PathBuf,
        after: PathBuf,
        /// Exit 2 when AFTER grants anything BEFORE does not.
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        host: HostArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// What FIRST and SECOND both grant.
    Overlaps {
        first: PathBuf,
        second: PathBuf,
        #[command(flatten)]
        host: HostArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: PlanCommand) -> ExitCode {
    let json = match &cmd {
        PlanCommand::Capabilities { json, .. }
        | PlanCommand::Resolve { json, .. }
        | PlanCommand::Evaluate { json, .. }
        | PlanCommand::Restrict { json, .. }
        | PlanCommand::Contains { json, .. }
        | PlanCommand::Diff { json, .. }
        | PlanCommand::Overlaps { json, .. } => *json,
    };
    let result = match cmd {
        PlanCommand::Capabilities { policy, check, .. } => {
            load_policy(&policy).and_then(|mir| Ok(report::capabilities(&mir, available(&check)?)))
        }
        PlanCommand::Resolve {
            policy,
            host,
            check,
            ..
        } => (|| {
            let a = available(&check)?;
            let res = load_resolved(&policy, &host)?;
            report::resolved(&res, a).map_err(super::about(&policy))
        })(),
        PlanCommand::Evaluate {
            policy, path, host, ..
        } => evaluate(&policy, &path, &host),
        PlanCommand::Restrict {
            base,
            overlay,
            output,
            replace,
            ..
        } => restrict(&base, &overlay, &output, replace),
        PlanCommand::Contains {
            boundary,
            candidate,
            host,
            ..
        } => load_two(&boundary, &candidate, &host).map(|(b, c)| report::containment(&b, &c)),
        PlanCommand::Diff {
            before,
            after,
            check,
            host,
            ..
        } => load_two(&before, &after, &host).map(|(b, a)| report::difference(&b, &a, check)),
        PlanCommand::Overlaps {
            first,
            second,
            host,
            ..
        } => load_two(&first, &second, &host).map(|(f, s)| report::overlap(&f, &s)),
    };
    super::finish(result, json, json, false)
}

/// Loads a policy: MIR v3 when the file starts with `MMIR`, JSON source v3 otherwise.
fn load_policy(path: &Path) -> Result<Mir, Refusal> {
    let at = super::about(path);
    terra_policy::load_policy(&super::read_input(path, PolicyError::Limit).map_err(&at)?)
        .map_err(&at)
}

fn load_resolved(path: &Path, host: &HostArgs) -> Result<Resolution, Refusal> {
    resolve(&load_policy(path)?, &host.bindings())
        .map_err(name_the_flag)
        .map_err(super::about(path))
}

/// The two policies a comparison reads, each resolved on this host.
fn load_two(
    first: &Path,
    second: &Path,
    host: &HostArgs,
) -> Result<(Resolution, Resolution), Refusal> {
    Ok((load_resolved(first, host)?, load_resolved(second, host)?))
}

/// The capabilities given with --available, or `None` without --check.
fn available(check: &CheckArgs) -> Result<Option<CapabilitySet>, PolicyError> {
    if !check.check {
        return Ok(None);
    }
    CapabilitySet::parse(check.available.iter().flat_map(|s| s.split_whitespace())).map(Some)
}

fn evaluate(policy: &Path, path: &str, host: &HostArgs) -> Result<Report, Refusal> {
    // Refuse a non-canonical path before touching the policy.
    terra_policy::evaluate::check_canonical_path(path)?;
    Ok(report::evaluation(&load_resolved(policy, host)?, path)?)
}

fn restrict(base: &Path, overlay: &Path, output: &Path, replace: bool) -> Result<Report, Refusal> {
    let mir = terra_policy::restrict(&load_policy(base)?, &load_policy(overlay)?)?;
    super::write_output(output, mir.bytes(), replace).map_err(super::about(output))?;
    Ok(report::restricted(&mir, &output.display().to_string()))
}
