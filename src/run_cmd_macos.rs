//! `terra run`, `terra doctor`, `terra backends` on macOS: the macos backend
//! (`terra_supervisor::macos`), the workload under the Seatbelt launcher.
//!
//! The run is built by the same `RunBuilder` as on Linux (policy, command
//! line rules, toolchain presets, environment, `--timeout`, `--receipt`);
//! the options the macos backend does not carry out (host-side profiles by
//! name, resource limits, the temp directory policy of Linux) are not part
//! of this command line.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use terra_policy::{Capability, NetworkMode};
use terra_supervisor::macos::MacosRun;
use terra_supervisor::run::{RunBuilder, BROKER_BUILT_IN};
use terra_supervisor::Error;

use crate::Failure;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Policy file: JSON source v3 or canonical MIR v3 bytes (magic "MMIR").
    /// Without it, terra's embedded default policy.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Grant read access to PATH (and below). Not with --policy.
    #[arg(long, value_name = "PATH")]
    read: Vec<PathBuf>,
    /// Grant write access to PATH (and below). Not with --policy.
    #[arg(long, value_name = "PATH")]
    write: Vec<PathBuf>,
    /// Deny every access to PATH (and below), even inside a grant.
    #[arg(long, value_name = "PATH")]
    deny: Vec<PathBuf>,
    /// Allow TCP to HOST:PORT through the network broker (switches the
    /// network to mediated: the workload reaches the broker's loopback
    /// proxy and nothing else). Not with --policy.
    #[arg(long, value_name = "HOST:PORT")]
    allow_net: Vec<String>,
    /// Add a toolchain preset (rust, node, python; docs/run.md): its
    /// directories read-only (npm's cache writable) and its variables. Not
    /// with --policy.
    #[arg(long, value_name = "NAME")]
    preset: Vec<String>,
    /// Relax the default policy's process.treeConfinement to "disabled"
    /// (recorded in the receipt and the decision digest): the run's
    /// processes that left its process group are then not swept at its end.
    /// Not with --policy.
    #[arg(long)]
    no_process_tree: bool,
    /// The workspace directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Pass NAME=VALUE, or NAME copied from terra's environment, to the workload.
    #[arg(long, value_name = "NAME[=VALUE]")]
    env: Vec<OsString>,
    /// Stop the workload after DURATION (e.g. 30s, 500ms, 5m, 1h; a bare
    /// number is seconds): SIGTERM to its process group, then SIGKILL 2 s
    /// later; then every process still carrying the run's profile is killed.
    #[arg(long, value_name = "DURATION")]
    timeout: Option<String>,
    /// Also write the run's receipt (JSON) to FILE (`-`: standard output, after
    /// the workload's output). FILE must be absent or a regular file (replaced);
    /// no component of its path may be a symlink.
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
    /// With --dry-run: one JSON object (backend, profile, parameters; broker
    /// for a mediated plan).
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

pub fn run(args: RunArgs, _log_level: Option<&str>) -> ExitCode {
    let refuse = |e: Error| crate::fail(Failure::Run(&e));
    if args.json && !args.dry_run {
        return refuse(Error::Argument("--json is for --dry-run only".into()));
    }
    // The caller's descriptors 0, 1, 2, made safe to inherit before anything
    // starts (terra_supervisor::std_fds); each replaced one is said.
    if !args.dry_run {
        match terra_supervisor::std_fds::replace_unsafe() {
            Ok(replaced) => replaced.iter().for_each(|r| eprintln!("terra: {r}")),
            Err(e) => return refuse(e),
        }
    }
    // The broker's listeners are bound before the run is built: a mediated
    // run's proxy environment names their port. They are dropped at once
    // when the plan is not mediated; a dry run binds nothing.
    let listeners = if args.dry_run {
        None
    } else {
        match terra_netd::standalone::bind_loopback() {
            Ok(l) => Some(l),
            Err(e) => {
                return refuse(Error::op(
                    "cannot bind the network broker's loopback listener",
                    e,
                ))
            }
        }
    };
    let built = RunBuilder {
        backend: args.backend,
        policy: args.policy,
        max_policy_len: crate::policy_cmd::MAX_INPUT_LEN,
        read: args.read,
        write: args.write,
        deny: args.deny,
        allow_net: args.allow_net,
        no_process_tree: args.no_process_tree,
        presets: args.preset,
        workspace: args.workspace,
        env: args.env,
        timeout: args.timeout,
        receipt: args.receipt,
        proxy: listeners
            .as_ref()
            .map(|l| SocketAddr::from((Ipv4Addr::LOCALHOST, l.port))),
        ..RunBuilder::new(args.command)
    }
    .build();
    let prepared = match built {
        Ok(p) => p,
        Err(e) => return refuse(e),
    };
    if args.dry_run {
        let code = crate::macos_dry_run::print(&prepared, args.json);
        let _ = std::fs::remove_dir(&prepared.request.bindings.temp);
        return code;
    }
    let mediated = prepared.plan.network() == NetworkMode::Mediated;
    let code = MacosRun {
        prepared,
        listeners: listeners.filter(|_| mediated),
        keep_temp: args.keep_temp,
        terra_exe: None,
    }
    .run();
    ExitCode::from(code)
}

fn declared() -> Vec<&'static str> {
    terra_seatbelt::declared_capabilities(BROKER_BUILT_IN)
        .iter()
        .map(Capability::name)
        .collect()
}

pub fn doctor(args: DoctorArgs) -> ExitCode {
    let detail = "the macos backend: the workload under a Seatbelt profile applied by terra __sandbox_launcher, \
                  checked by its activation check before the command runs; mediated networking through \
                  terra __network under the broker profile";
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
    let note = "Seatbelt; the run's processes found by their profile and killed at its end (see docs/sandbox-macos.md)";
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
