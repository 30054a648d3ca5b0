//! `terra run`, `terra doctor`, `terra backends` on Windows: the windows
//! backend (`terra_supervisor::windows`), the workload in a per-launch
//! AppContainer under `terra __sandbox_launcher`.
//!
//! The options the windows backend does not carry out yet are accepted by
//! the parser and refused by name, so a command line written for Linux
//! fails plainly instead of running with less than it asked for.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use terra_supervisor::windows::WindowsRun;
use terra_supervisor::Error;

use crate::Failure;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Policy file: JSON source v3 or canonical MIR v3 bytes (magic "MMIR").
    /// Without it, terra's embedded default policy.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Not on the windows backend yet (refused).
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// Not on the windows backend yet (refused).
    #[arg(long, value_name = "NAME")]
    preset: Vec<String>,
    /// Not on the windows backend yet (refused).
    #[arg(long, value_name = "PATH")]
    read: Vec<PathBuf>,
    /// Not on the windows backend yet (refused).
    #[arg(long, value_name = "PATH")]
    write: Vec<PathBuf>,
    /// Not on the windows backend yet (refused).
    #[arg(long, value_name = "PATH")]
    deny: Vec<PathBuf>,
    /// Not on the windows backend: it has no network broker (refused).
    #[arg(long, value_name = "HOST:PORT")]
    allow_net: Vec<String>,
    /// The workspace directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Pass NAME=VALUE, or NAME copied from terra's environment, to the workload.
    #[arg(long, value_name = "NAME[=VALUE]")]
    env: Vec<OsString>,
    /// Not on the windows backend yet (refused).
    #[arg(long, value_name = "DURATION")]
    timeout: Option<String>,
    /// Not on the windows backend yet (refused).
    #[arg(long, value_name = "FILE")]
    receipt: Option<PathBuf>,
    /// Not on the windows backend yet (refused).
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    /// Not on the windows backend yet (refused).
    #[arg(long, value_name = "N")]
    pids: Option<String>,
    /// Not on the windows backend yet (refused).
    #[arg(long, value_name = "N")]
    cpus: Option<String>,
    /// Not on the windows backend yet (refused).
    #[arg(long, value_name = "SIZE")]
    max_file_size: Option<String>,
    /// Keep the run's private temp directory.
    #[arg(long)]
    keep_temp: bool,
    /// The backend: auto or windows (the only one on Windows).
    #[arg(long, default_value = "auto", value_name = "NAME")]
    backend: String,
    /// Print the launch plan (capabilities, job limits, mitigation flags,
    /// every DACL entry, the protected objects found); run nothing.
    #[arg(long)]
    dry_run: bool,
    /// With --dry-run: one JSON object instead of text.
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

/// The first option given that the windows backend does not carry out.
fn unsupported_option(args: &RunArgs) -> Option<&'static str> {
    [
        (args.profile.is_some(), "--profile"),
        (!args.preset.is_empty(), "--preset"),
        (!args.read.is_empty(), "--read"),
        (!args.write.is_empty(), "--write"),
        (!args.deny.is_empty(), "--deny"),
        (!args.allow_net.is_empty(), "--allow-net"),
        (args.timeout.is_some(), "--timeout"),
        (args.receipt.is_some(), "--receipt"),
        (args.memory.is_some(), "--memory"),
        (args.pids.is_some(), "--pids"),
        (args.cpus.is_some(), "--cpus"),
        (args.max_file_size.is_some(), "--max-file-size"),
    ]
    .into_iter()
    .find_map(|(given, name)| given.then_some(name))
}

pub fn run(args: RunArgs, _log_level: Option<&str>) -> ExitCode {
    let refuse = |e: Error| crate::fail(Failure::Run(&e));
    if !matches!(args.backend.as_str(), "auto" | "windows") {
        return refuse(Error::Unsupported(format!(
            "backend {} is not available on this OS (Windows runs the windows backend only)",
            args.backend
        )));
    }
    if args.json && !args.dry_run {
        return refuse(Error::Argument("--json is for --dry-run only".into()));
    }
    if let Some(flag) = unsupported_option(&args) {
        return refuse(Error::Unsupported(format!(
            "{flag} is not built for the windows backend yet; refusing rather than running without it"
        )));
    }
    let prepared = WindowsRun {
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
        let objects = match prepared.scan() {
            Ok(o) => o,
            Err(e) => {
                let _ = std::fs::remove_dir(&prepared.temp);
                return refuse(e);
            }
        };
        let code = crate::windows_dry_run::print_windows(
            &prepared.launch,
            prepared.plan.decision_digest(),
            &objects,
            &prepared.env,
            args.json,
        );
        let _ = std::fs::remove_dir(&prepared.temp);
        return code;
    }
    match prepared.run() {
        // The workload's exit code is 32 bits on Windows; ExitCode holds 8.
        Ok(code) => std::process::exit(code),
        Err(e) => refuse(e),
    }
}

fn declared() -> Vec<&'static str> {
    terra_appcontainer::declared_capabilities().names()
}

const DETAIL: &str = "the windows backend: the workload in a per-launch AppContainer and a kill-on-close job \
                      holding its process tree, started by terra __sandbox_launcher after its self-check worker passed";

pub fn doctor(args: DoctorArgs) -> ExitCode {
    if args.json {
        let v = serde_json::json!({"backend": "windows", "ok": true, "detail": DETAIL, "declaredCapabilities": declared()});
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!("ok   windows {DETAIL}");
        println!("     declares: {}", declared().join(" "));
    }
    ExitCode::SUCCESS
}

pub fn backends(args: BackendsArgs) -> ExitCode {
    let note = "AppContainer; network none only, no broker (see docs/sandbox-windows.md)";
    if args.json {
        let v = serde_json::json!([
            {"name": "linux", "supported": false, "declaredCapabilities": [], "note": "Linux only"},
            {"name": "landlock", "supported": false, "declaredCapabilities": [], "note": "Linux only"},
            {"name": "macos", "supported": false, "declaredCapabilities": [], "note": "macOS only"},
            {"name": "windows", "supported": true, "declaredCapabilities": declared(), "note": note, "auto": true},
        ]);
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!("linux    unsupported   Linux only");
        println!("landlock unsupported   Linux only");
        println!("macos    unsupported   macOS only");
        println!("windows  supported     {note}");
        println!("         declares: {}", declared().join(" "));
        println!("auto     -> windows");
    }
    ExitCode::SUCCESS
}
