//! `terra run`, `terra doctor`, `terra backends` on macOS: the macos backend
//! (`terra_supervisor::macos`), the workload under the Seatbelt launcher.
//!
//! The options the macos backend does not carry out yet are accepted by the
//! parser and refused by name, so a command line written for Linux fails
//! plainly instead of running with less than it asked for.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use terra_policy::Capability;
use terra_supervisor::macos::MacosRun;
use terra_supervisor::Error;

use crate::Failure;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Policy file: JSON source v3 or canonical MIR v3 bytes (magic "MMIR").
    /// Without it, terra's embedded default policy.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Not on the macos backend yet (refused).
    #[arg(long, value_name = "PATH")]
    read: Vec<PathBuf>,
    /// Not on the macos backend yet (refused).
    #[arg(long, value_name = "PATH")]
    write: Vec<PathBuf>,
    /// Not on the macos backend yet (refused).
    #[arg(long, value_name = "PATH")]
    deny: Vec<PathBuf>,
    /// Not on the macos backend yet: it has no network broker (refused).
    #[arg(long, value_name = "HOST:PORT")]
    allow_net: Vec<String>,
    /// The workspace directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Pass NAME=VALUE, or NAME copied from terra's environment, to the workload.
    #[arg(long, value_name = "NAME[=VALUE]")]
    env: Vec<OsString>,
    /// Not on the macos backend yet (refused).
    #[arg(long, value_name = "DURATION")]
    timeout: Option<String>,
    /// Not on the macos backend yet (refused).
    #[arg(long, value_name = "FILE")]
    receipt: Option<PathBuf>,
    /// Keep the run's private temp directory.
    #[arg(long)]
    keep_temp: bool,
    /// The backend: auto or macos (the only one on macOS).
    #[arg(long, default_value = "auto", value_name = "NAME")]
    backend: String,
    /// Print the Seatbelt profile and its parameters; run nothing.
    #[arg(long)]
    dry_run: bool,
    /// With --dry-run: one JSON object (backend, profile, parameters).
    #[arg(long)]
    json: bool,
    /// The command to run, after `--`.
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub struct BackendsArgs {
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// The first option given that the macos backend does not carry out.
fn unsupported_option(args: &RunArgs) -> Option<&'static str> {
    [
        (!args.read.is_empty(), "--read"),
        (!args.write.is_empty(), "--write"),
        (!args.deny.is_empty(), "--deny"),
        (!args.allow_net.is_empty(), "--allow-net"),
        (args.timeout.is_some(), "--timeout"),
        (args.receipt.is_some(), "--receipt"),
    ]
    .into_iter()
    .find_map(|(given, name)| given.then_some(name))
}

pub fn run(args: RunArgs, _log_level: Option<&str>) -> ExitCode {
    let refuse = |e: Error| crate::fail(Failure::Run(&e));
    if !matches!(args.backend.as_str(), "auto" | "macos") {
        return refuse(Error::Unsupported(format!(
            "backend {} is not available on this OS (macOS runs the macos backend only)",
            args.backend
        )));
    }
    if args.json && !args.dry_run {
        return refuse(Error::Argument("--json is for --dry-run only".into()));
    }
    if let Some(flag) = unsupported_option(&args) {
        return refuse(Error::Unsupported(format!(
            "{flag} is not built for the macos backend yet; refusing rather than running without it"
        )));
    }
    let prepared = MacosRun {
        policy: args.policy,
        max_policy_len: crate::policy_cmd::MAX_INPUT_LEN,
        workspace: args.workspace,
        env: args.env,
        keep_temp: args.keep_temp,
        command: args.command,
    }
    .prepare();
    let prepared = match prepared {
        Ok(p) => p,
        Err(e) => return refuse(e),
    };
    if args.dry_run {
        let code = crate::macos_dry_run::print_spec(&prepared.plan, &prepared.spec, args.json);
        let _ = std::fs::remove_dir(&prepared.temp);
        return code;
    }
    match prepared.run() {
        Ok(code) => ExitCode::from(code),
        Err(e) => refuse(e),
    }
}

fn declared() -> Vec<&'static str> {
    terra_seatbelt::declared_capabilities(false)
        .iter()
        .map(Capability::name)
        .collect()
}

pub fn doctor(args: DoctorArgs) -> ExitCode {
    let detail = "the macos backend: the workload under a Seatbelt profile applied by terra __sandbox_launcher, \
                  checked by its activation check before the command runs";
    if args.json {
        let v = serde_json::json!({"backend": "macos", "ok": true, "detail": detail, "declaredCapabilities": declared()});
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!("ok   macos {detail}");
        println!("     declares: {}", declared().join(" "));
    }
    ExitCode::SUCCESS
}

pub fn backends(args: BackendsArgs) -> ExitCode {
    let note = "Seatbelt; no process-tree containment, no broker yet (see docs/sandbox-macos.md)";
    if args.json {
        let v = serde_json::json!([
            {"name": "macos", "supported": true, "declaredCapabilities": declared(), "note": note, "auto": true},
            {"name": "linux", "supported": false, "declaredCapabilities": [], "note": "Linux only"},
            {"name": "landlock", "supported": false, "declaredCapabilities": [], "note": "Linux only"},
        ]);
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!("macos    supported     {note}");
        println!("         declares: {}", declared().join(" "));
        println!("linux    unsupported   Linux only");
        println!("landlock unsupported   Linux only");
        println!("auto     -> macos");
    }
    ExitCode::SUCCESS
}
