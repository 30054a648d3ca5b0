//! terra: run untrusted commands inside a strict, policy-described sandbox.
//!
//! This file only parses the command line and dispatches; each concern lives in
//! a crate (`terra-policy`, `terra-sandbox`, `terra-netd`, `terra-supervisor`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[cfg(any(target_os = "linux", target_os = "macos"))]
mod macos_dry_run;
mod policy_cmd;
#[cfg(target_os = "linux")]
mod run_cmd;
#[cfg(target_os = "macos")]
#[path = "run_cmd_macos.rs"]
mod run_cmd;
#[cfg(windows)]
#[path = "run_cmd_windows.rs"]
mod run_cmd;
#[cfg(not(any(target_os = "linux", target_os = "macos", windows)))]
#[path = "run_cmd_elsewhere.rs"]
mod run_cmd;
#[cfg(target_os = "linux")]
mod runs_cmd;
mod shell_cmd;
#[cfg(any(target_os = "linux", windows))]
mod windows_dry_run;

/// dlmalloc on Linux: the static build's musl allocator unmaps freed memory at
/// once, which cost about 100 mmap/munmap pairs per `terra run`.
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

/// Run untrusted commands inside a strict, policy-described sandbox.
///
/// terra compiles a JSON policy (source v3) into canonical MIR v3 bytes, resolves
/// it for this host, and runs the command confined by it, supervising the whole
/// process tree. It refuses whatever it cannot enforce; it never guesses.
#[derive(Debug, Parser)]
#[command(name = "terra", version, propagate_version = true)]
pub struct Cli {
    /// Log level: error, warn, info, debug or trace (also TERRA_LOG).
    #[arg(long, global = true, value_name = "LEVEL")]
    log_level: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Compile, validate, inspect, hash, resolve, evaluate and compare policies.
    #[command(subcommand)]
    Policy(policy_cmd::PolicyCommand),
    /// Run a command confined by a policy (the embedded default when none is given).
    Run(Box<run_cmd::RunArgs>),
    /// List recent runs (`terra runs show [ID|last]`: a receipt and its network log).
    #[cfg(target_os = "linux")]
    Runs(runs_cmd::RunsArgs),
    /// List the toolchain presets (`terra run --preset NAME`) as they resolve on this host.
    #[cfg(target_os = "linux")]
    Presets(run_cmd::PresetsArgs),
    /// List the host-side profiles (`terra run --profile NAME`).
    #[cfg(target_os = "linux")]
    Profiles(run_cmd::ProfilesArgs),
    /// Report whether this host can run terra's Linux backend, and what to change if not.
    Doctor(run_cmd::DoctorArgs),
    /// List backends with their declared capabilities and whether this host supports them.
    Backends(run_cmd::BackendsArgs),
    /// Print a shell completion script (bash, zsh, fish, powershell).
    Completions(shell_cmd::CompletionsArgs),
    /// Print terra's man page (roff).
    Man,
    /// Role: the run supervisor (started by `terra run`).
    #[command(name = "__supervisor", hide = true)]
    Supervisor(RoleArgs),
    /// Role: the box's init inside its namespaces.
    #[command(name = "__vm", hide = true)]
    Vm(RoleArgs),
    /// Role: the network broker.
    #[command(name = "__network", hide = true)]
    Network(RoleArgs),
    /// Role: the native sandbox launcher.
    #[command(name = "__sandbox_launcher", hide = true)]
    SandboxLauncher(RoleArgs),
}

/// Roles take their arguments raw; each role parses its own.
#[derive(Debug, clap::Args)]
struct RoleArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<std::ffi::OsString>,
}

/// Colours on stderr only when it is a terminal and `NO_COLOR` is unset or
/// empty (<https://no-color.org>).
fn stderr_colours() -> bool {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !no_color && std::io::stderr().is_terminal()
}

fn init_logging(level: Option<&str>) {
    let filter = level
        .map(str::to_owned)
        .or_else(|| std::env::var("TERRA_LOG").ok())
        .unwrap_or_else(|| "warn".to_owned());
    let fmt = tracing_subscriber::fmt()
        .with_ansi(stderr_colours())
        .with_writer(std::io::stderr)
        .without_time();
    // A plain level (the usual case, in every role of every run) needs no
    // directive parser: about 0.1 ms less at each process's start.
    let _ = match filter.parse::<tracing_subscriber::filter::LevelFilter>() {
        Ok(level) => fmt.with_max_level(level).try_init(),
        Err(_) => fmt
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .try_init(),
    };
}

/// Exit status for a command line clap rejected: `EXIT_REFUSED` (125) for
/// `terra run` (terra refused before the workload started), 1 elsewhere, so
/// that 2 keeps meaning "a valid report with violations" for `terra policy`.
fn usage_error_status() -> u8 {
    match std::env::args_os().nth(1) {
        Some(first) if first == "run" => terra_supervisor::EXIT_REFUSED,
        _ => 1,
    }
}

/// Why a command failed. [`fail`] is the one place such a failure becomes a
/// `terra: ...` message on stderr and an exit status.
pub enum Failure<'a> {
    /// `terra run` refused or failed before the workload started.
    Run(&'a terra_supervisor::Error),
    /// A `terra policy` command failed; `violations` when it is a finding of
    /// `validate` (a readable but non-canonical document).
    Policy {
        error: &'a terra_policy::PolicyError,
        violations: bool,
    },
}

/// Prints the failure as `terra: ...` and returns its exit status:
/// `EXIT_REFUSED` (125) for `terra run`, 1 for a `terra policy` failure and 2
/// for a `validate` finding (see DESIGN.md, exit codes).
pub fn fail(failure: Failure<'_>) -> ExitCode {
    let code = match failure {
        Failure::Run(e) => {
            eprintln!("terra: {e}");
            terra_supervisor::EXIT_REFUSED
        }
        Failure::Policy { error, violations } => {
            eprintln!("terra: {}: {}", error.class(), error.detail());
            if violations {
                policy_cmd::EXIT_VIOLATIONS
            } else {
                policy_cmd::EXIT_FAILURE
            }
        }
    };
    ExitCode::from(code)
}

/// `terra __vm`: the box's init, handed the in-box service of mediated
/// networking (terra-sandbox does not know terra-netd).
fn vm_role(args: Vec<std::ffi::OsString>) -> ExitCode {
    #[cfg(target_os = "linux")]
    {
        terra_sandbox::vm_role_main(args, terra_netd::box_service)
    }
    #[cfg(not(target_os = "linux"))]
    {
        terra_sandbox::vm_role_main(args)
    }
}

/// `terra __network`: the broker, handed the confined role's entry (its
/// root, capabilities; terra-netd does not know terra-sandbox).
fn network_role(args: Vec<std::ffi::OsString>) -> ExitCode {
    #[cfg(target_os = "linux")]
    {
        terra_netd::role_main(args, terra_sandbox::linux::enter_confined_role)
    }
    #[cfg(not(target_os = "linux"))]
    {
        terra_netd::role_main(args)
    }
}

fn main() -> ExitCode {
    // terra forks only while single-threaded, but a fork(3) must never copy
    // a held allocator lock: take it around every fork.
    #[cfg(target_os = "linux")]
    // SAFETY: called once, first thing in main, before any thread exists.
    unsafe {
        dlmalloc::enable_alloc_after_fork()
    };
    // A role (`terra __vm`, ...) is started for every run: it skips the
    // command-line parser (its argv is its name and its own arguments).
    let mut argv = std::env::args_os().skip(1);
    if let Some(role) = argv.next().and_then(|a| a.into_string().ok()) {
        let rest: Vec<std::ffi::OsString> = argv.collect();
        let run: Option<fn(Vec<std::ffi::OsString>) -> ExitCode> = match role.as_str() {
            "__supervisor" => Some(terra_supervisor::role_main),
            "__vm" => Some(vm_role),
            "__network" => Some(network_role),
            "__sandbox_launcher" => Some(terra_sandbox::launcher_role_main),
            // The macos backend: ends a run's processes, found by their profile.
            #[cfg(target_os = "macos")]
            "__sandbox_reaper" => Some(terra_sandbox::reaper_role_main),
            // The vm backend: terra as the guest's init (it refuses unless
            // it is PID 1 on the initramfs), and the forwarder QEMU spawns.
            #[cfg(target_os = "linux")]
            "__vm_guest" => Some(terra_vm::guest::main),
            #[cfg(target_os = "linux")]
            "__vm_forward" => Some(terra_vm::forward::main),
            _ => None,
        };
        if let Some(run) = run {
            init_logging(None);
            return run(rest);
        }
    }
    // `terra run ...`: the supervisor starts before the command line is
    // parsed (see run_cmd::start_early).
    #[cfg(target_os = "linux")]
    let early = run_cmd::start_early(std::env::args_os());
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(usage_error_status())
            } else {
                ExitCode::SUCCESS // --help and --version
            };
        }
    };
    init_logging(cli.log_level.as_deref());
    match cli.command {
        Command::Policy(cmd) => policy_cmd::run(cmd),
        #[cfg(target_os = "linux")]
        Command::Run(args) => run_cmd::run(*args, cli.log_level.as_deref(), early),
        #[cfg(not(target_os = "linux"))]
        Command::Run(args) => run_cmd::run(*args, cli.log_level.as_deref()),
        #[cfg(target_os = "linux")]
        Command::Runs(args) => runs_cmd::run(args),
        #[cfg(target_os = "linux")]
        Command::Presets(args) => run_cmd::presets(args),
        #[cfg(target_os = "linux")]
        Command::Profiles(args) => run_cmd::profiles(args),
        Command::Doctor(args) => run_cmd::doctor(args),
        Command::Completions(args) => shell_cmd::completions(args),
        Command::Man => shell_cmd::man(),
        Command::Backends(args) => run_cmd::backends(args),
        Command::Supervisor(r) => terra_supervisor::role_main(r.args),
        Command::Vm(r) => vm_role(r.args),
        Command::Network(r) => network_role(r.args),
        Command::SandboxLauncher(r) => terra_sandbox::launcher_role_main(r.args),
    }
}
