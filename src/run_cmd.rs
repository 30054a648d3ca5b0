//! `terra run`, `terra doctor`, `terra backends`.
//!
//! `terra run` parses its flags and hands them to
//! `terra_supervisor::run::RunBuilder`, which compiles the policy, adds the
//! command line's rules, binds this host's roots and checks the plan; the run
//! then goes to `terra __supervisor` over an inherited pipe
//! (`terra_supervisor::launch`). Any refusal before the workload starts is a
//! `terra: ...` message and exit `EXIT_REFUSED` (125), through [`crate::fail`].

use std::ffi::OsString;
use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

use serde_json::json;
use terra_policy::Capability;
use terra_sandbox::linux::nouserns;
use terra_supervisor::backend::{choose, Choice, HostFacts};
use terra_supervisor::launch::{Ended, Starting};
use terra_supervisor::run::{
    broker_available, PreparedRun, RunBuilder, SaveOutcome, BROKER_BUILT_IN, MEDIATOR,
};
use terra_supervisor::temp::{self, TempAfterRun};
use terra_supervisor::{presets, runs, summary};

use crate::shell_cmd::Offered;
use crate::Failure;

/// The values `--backend` offers to completions (terra checks what is given).
const BACKENDS: &[&str] = &["auto", "linux", "landlock", "vm", "macos", "windows"];

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Policy file: JSON source v3 or canonical MIR v3 bytes (magic "MMIR").
    /// Without it, terra's embedded default policy.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// A host-side profile: the policy file NAME.json in
    /// $XDG_CONFIG_HOME/terra/profiles (~/.config/terra/profiles). Without
    /// --policy and --profile, default.json there is used when it exists.
    #[arg(long, value_name = "NAME", conflicts_with = "policy")]
    profile: Option<String>,
    /// Add a toolchain preset (rust, node, python; see `terra presets`): its
    /// rules join the policy, its variables the environment. Not with a policy file.
    #[arg(long, value_name = "NAME", value_parser = Offered(presets::NAMES))]
    preset: Vec<String>,
    /// Admit the registry hosts of the presets given (TCP port 443, listed by
    /// `terra presets`), as --allow-net HOST:443 each; `--preset-net=private`
    /// also when they resolve to private addresses (a company mirror).
    #[arg(long, value_name = "private", num_args = 0..=1, require_equals = true,
          default_missing_value = "", value_parser = ["", "private"], hide_possible_values = true)]
    preset_net: Option<String>,
    /// Grant read access to PATH (and below). Not with --policy.
    #[arg(long, value_name = "PATH")]
    read: Vec<PathBuf>,
    /// Grant write access to PATH (and below). Not with --policy.
    #[arg(long, value_name = "PATH")]
    write: Vec<PathBuf>,
    /// Deny every access to PATH (and below), even inside a grant.
    #[arg(long, value_name = "PATH")]
    deny: Vec<PathBuf>,
    /// Allow TCP to HOST:PORT through the network broker (switches the network to mediated). Not with --policy.
    #[arg(long, value_name = "HOST:PORT")]
    allow_net: Vec<String>,
    /// After a run whose workload exited 0 (or with --dry-run): save this
    /// command line's policy (presets, --read, --write, --deny, --allow-net)
    /// as the profile NAME, and the variables of the presets and --env beside
    /// it (a bare --env NAME by name only); run it again with --profile NAME.
    #[arg(long, value_name = "NAME")]
    save_profile: Option<String>,
    /// After a run whose workload exited 0 (or with --dry-run): write this
    /// command line's policy to FILE as JSON source v3.
    #[arg(long, value_name = "FILE")]
    export_policy: Option<PathBuf>,
    /// Let --save-profile and --export-policy replace existing files.
    #[arg(long)]
    force: bool,
    /// Relax the default policy's process.treeConfinement to "disabled"
    /// (recorded in the receipt and the decision digest). Not with --policy.
    #[arg(long)]
    no_process_tree: bool,
    /// The workspace directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Pass NAME=VALUE, or NAME copied from terra's environment, to the workload.
    #[arg(long, value_name = "NAME[=VALUE]")]
    env: Vec<OsString>,
    /// Stop the workload after DURATION (e.g. 30s, 500ms, 5m, 1h; a bare number is seconds):
    /// SIGTERM, then SIGKILL of the whole box 2 s later.
    #[arg(long, value_name = "DURATION")]
    timeout: Option<String>,
    /// Also write the run's receipt (JSON) to FILE (`-`: standard output, after
    /// the workload's output). FILE must be absent or a regular file (replaced);
    /// no component of its path may be a symlink.
    #[arg(long, value_name = "FILE")]
    receipt: Option<PathBuf>,
    /// Keep the run's private temp directory after the run (its path is in
    /// the receipt). By default it is removed, also when the run failed.
    #[arg(long, conflicts_with = "rm_temp")]
    keep_temp: bool,
    /// Remove the run's private temp directory after the run: the default,
    /// accepted so scripts that pass it keep working.
    #[arg(long)]
    rm_temp: bool,
    /// Print nothing of terra's own after the run: no refusal summary
    /// (errors are still printed).
    #[arg(long, short = 'q')]
    quiet: bool,
    /// The backend to run on: auto (linux where user namespaces work, else
    /// landlock), linux, landlock, or vm (a guest kernel in QEMU; see
    /// `terra backends`); macos and windows with --dry-run only.
    #[arg(long, default_value = "auto", value_name = "NAME", value_parser = Offered(BACKENDS))]
    backend: String,
    /// Print the resolved plan, its decision digest and the backend's mount and
    /// filter program; run nothing.
    #[arg(long)]
    dry_run: bool,
    /// With `--backend macos --dry-run` or `--backend windows --dry-run`:
    /// print one JSON object (the profile, or the launch plan) instead of text.
    #[arg(long)]
    json: bool,
    /// Limit the box's memory to SIZE (e.g. 64M, 2G): a cgroup where one is
    /// writable, else RLIMIT_AS (address space). The receipt says which.
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    /// Limit the box to N processes: a pids cgroup where one is writable, else
    /// RLIMIT_NPROC in the box's user namespace (not for the host's root user).
    #[arg(long, value_name = "N")]
    pids: Option<String>,
    /// Limit the box to N CPUs (e.g. 0.5, 2): a cgroup CPU quota only.
    #[arg(long, value_name = "N")]
    cpus: Option<String>,
    /// Limit each file the workload writes to SIZE (RLIMIT_FSIZE).
    #[arg(long, value_name = "SIZE")]
    max_file_size: Option<String>,
    /// Refuse the run (exit 125) when a limit asked cannot be enforced here.
    #[arg(long)]
    require_limits: bool,
    /// With `--backend vm`: the guest's kernel (a bzImage whose modules are
    /// installed under /lib/modules). Default: the newest /boot/vmlinuz-*
    /// with modules.
    #[arg(long, value_name = "PATH")]
    kernel: Option<PathBuf>,
    /// With `--backend vm`: the guest's memory (default 256M).
    #[arg(long, value_name = "SIZE")]
    vm_memory: Option<String>,
    /// With `--backend vm`: how long the guest may take to report on its
    /// control channel before QEMU is killed and the run refused (default
    /// 30s under TCG, 10s with KVM).
    #[arg(long, value_name = "DURATION")]
    vm_ready_timeout: Option<String>,
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

/// `terra run`; `log_level` (`--log-level`) is passed on to the supervisor.
/// `terra run ...` read from argv before the command line is parsed: the
/// supervisor (and its early box) starts at once, while the parser and the
/// run's resolving go on. Only for the plain form: a first word `run`, and
/// none of the words before `--` that change what starts (`--dry-run`,
/// `--backend`, `--log-level`, `--json`, help); a limit flag only leaves the
/// box to be cloned later (inside its cgroups). A guess that the parsed
/// command line contradicts costs a supervisor killed unused, nothing else.
pub fn start_early(argv: impl Iterator<Item = OsString>) -> Option<Starting> {
    let early_box = early_start(argv)?;
    // A refusal is said by `run`, which checks again.
    standard_descriptors().ok()?;
    Starting::begin(Vec::new(), early_box).ok()
}

/// The caller's descriptors 0, 1 and 2, made safe to inherit before anything
/// is started (`terra_supervisor::std_fds`): each replaced one is said on
/// standard error (also with --quiet: what the workload reads or writes changed).
fn standard_descriptors() -> Result<(), terra_supervisor::Error> {
    for r in terra_supervisor::std_fds::replace_unsafe()? {
        eprintln!("terra: {r}");
    }
    Ok(())
}

/// [`start_early`]'s reading of argv: None, no early start; Some(whether
/// the box may be cloned early).
fn early_start(argv: impl Iterator<Item = OsString>) -> Option<bool> {
    let mut words = argv.skip(1);
    if words.next()? != "run" {
        return None;
    }
    let mut early_box = true;
    for w in words {
        let w = w.to_str()?;
        if w == "--" {
            break;
        }
        let name = w.split('=').next().unwrap_or(w);
        match name {
            "--dry-run" | "--backend" | "--log-level" | "--json" | "--help" | "-h" => return None,
            "--memory" | "--pids" | "--cpus" => early_box = false,
            _ => {}
        }
    }
    Some(early_box)
}

#[cfg(test)]
mod early_start_tests {
    use super::early_start;

    fn read(line: &str) -> Option<bool> {
        early_start(line.split(' ').map(std::ffi::OsString::from))
    }

    #[test]
    fn argv_read_before_the_parser_starts_only_the_plain_run() {
        assert_eq!(read("terra run -- true"), Some(true));
        assert_eq!(
            read("terra run --read /etc --timeout 5s -- true"),
            Some(true)
        );
        assert_eq!(read("terra run --memory 64M -- true"), Some(false));
        assert_eq!(read("terra run --pids=64 -- true"), Some(false));
        // Words after `--` are the command's.
        assert_eq!(read("terra run -- echo --dry-run --backend"), Some(true));
        for no in [
            "terra policy check p.json",
            "terra --log-level debug run -- true",
            "terra run --log-level=debug -- true",
            "terra run --dry-run -- true",
            "terra run --backend landlock -- true",
            "terra run --backend=vm -- true",
            "terra run --help",
            "terra",
        ] {
            assert_eq!(read(no), None, "{no}");
        }
    }
}

pub fn run(args: RunArgs, log_level: Option<&str>, early: Option<Starting>) -> ExitCode {
    let dry_run = args.dry_run;
    let macos = args.backend == "macos";
    let windows = args.backend == "windows";
    if args.json && !((macos || windows) && dry_run) {
        return crate::fail(Failure::Run(&terra_supervisor::Error::Argument(
            "--json is for `terra run --backend macos|windows --dry-run` only".into(),
        )));
    }
    if macos && !dry_run {
        return crate::fail(Failure::Run(&terra_supervisor::Error::Unsupported(
            macos_run_refusal().into(),
        )));
    }
    if windows && !dry_run {
        return crate::fail(Failure::Run(&terra_supervisor::Error::Unsupported(
            "backend windows is not available on this OS (AppContainer exists only on Windows); \
             `terra run --backend windows --dry-run` shows the launch plan it would use"
                .into(),
        )));
    }
    if let Some(flag) = windows.then(|| windows_refused_option(&args)).flatten() {
        return crate::fail(Failure::Run(&terra_supervisor::Error::Unsupported(
            format!(
                "{flag} is not built for the windows backend yet (its own build refuses it too)"
            ),
        )));
    }
    let json = args.json;
    let log_args: Vec<OsString> = log_level
        .map(|l| vec!["--log-level".into(), l.into()])
        .unwrap_or_default();
    // The supervisor starts now, beside this CLI's resolving of the run, and
    // with a box backend clones the box's namespaces meanwhile (it gets the
    // request once the run is resolved; dropped unused, it is killed).
    // (Started before the parse when argv allowed it; one the parsed command
    // line does not want is dropped: killed and reaped.)
    let early = early.filter(|s| log_args.is_empty() && s.early_box() == early_box_fits(&args));
    if !(dry_run || macos || windows) {
        if let Err(e) = standard_descriptors() {
            return crate::fail(Failure::Run(&e));
        }
    }
    let supervisor = if dry_run || macos || windows {
        None
    } else if let Some(s) = early {
        Some(s)
    } else {
        match Starting::begin(log_args.clone(), early_box_fits(&args)) {
            Ok(s) => Some(s),
            Err(e) => return crate::fail(Failure::Run(&e)),
        }
    };
    // The placeholders of runs killed before they could clean up go before
    // anything is resolved: a stale one would make its denied name look
    // present.
    terra_supervisor::placeholders::clean_stale();
    let built = RunBuilder {
        backend: args.backend,
        policy: args.policy,
        max_policy_len: crate::policy_cmd::MAX_INPUT_LEN,
        read: args.read,
        write: args.write,
        deny: args.deny,
        allow_net: args.allow_net,
        no_process_tree: args.no_process_tree,
        workspace: args.workspace,
        env: args.env,
        timeout: args.timeout,
        receipt: args.receipt,
        presets: args.preset,
        preset_net: args.preset_net.map(|v| v == "private"),
        profile: args.profile,
        save_profile: args.save_profile,
        export_policy: args.export_policy,
        force: args.force,
        memory: args.memory,
        pids: args.pids,
        cpus: args.cpus,
        max_file_size: args.max_file_size,
        require_limits: args.require_limits,
        kernel: args.kernel,
        vm_memory: args.vm_memory,
        vm_ready_timeout: args.vm_ready_timeout,
        ..RunBuilder::new(args.command)
    }
    .build();
    let mut prepared = match built {
        Ok(p) => p,
        Err(e) => return crate::fail(Failure::Run(&e)),
    };
    if dry_run && macos {
        let code = crate::macos_dry_run::print(&prepared, json);
        let _ = fs::remove_dir(&prepared.request.bindings.temp);
        return code;
    }
    if dry_run && windows {
        let code = crate::windows_dry_run::print_foreign(&prepared, json);
        let _ = fs::remove_dir(&prepared.request.bindings.temp);
        return code;
    }
    if dry_run {
        print!("{}", prepared.dry_run_text());
        let _ = fs::remove_dir(&prepared.request.bindings.temp);
        return save(&prepared, None, ExitCode::SUCCESS, args.quiet);
    }
    if let Err(e) = prepared.apply_limits() {
        let _ = fs::remove_dir(&prepared.request.bindings.temp);
        return crate::fail(Failure::Run(&e));
    }
    // --rm-temp is the default.
    let temp_after = if args.keep_temp {
        TempAfterRun::Keep
    } else {
        TempAfterRun::Remove
    };
    if !args.quiet {
        for w in prepared.warnings() {
            eprintln!("terra: {w}");
        }
    }
    // Denied paths that do not exist yet, inside a writable grant: held by
    // placeholders for the run (terra_supervisor::placeholders).
    let needed = terra_sandbox::linux::lower::placeholders(
        prepared.plan.rules(),
        &prepared.request.bindings.temp.to_string_lossy(),
    );
    // The run's record (its temp directory, its placeholders) goes outside
    // every grant before the workload starts: the next run cleans up after
    // this one if it is killed.
    let held = match terra_supervisor::placeholders::create(
        &needed,
        &prepared.plan,
        &prepared.request.bindings.temp,
    ) {
        Ok(h) => h,
        Err(e) => {
            prepared.request.limits.remove_cgroups();
            let _ = fs::remove_dir(&prepared.request.bindings.temp);
            return crate::fail(Failure::Run(&e));
        }
    };
    // Old runs are pruned while this one runs (mostly waiting on the disk),
    // not after it.
    let mut supervisor = supervisor;
    let ended = match supervisor.as_mut() {
        Some(s) => s.hand(&prepared.request, prune_old_runs),
        None => Err(terra_supervisor::Error::Request(
            "no supervisor was started for this run".into(),
        )),
    };
    let ended = match ended {
        Ok(ended) => ended,
        Err(e) => {
            prepared.request.limits.remove_cgroups();
            let _ = temp::after_run(&prepared.request.bindings.temp, temp_after);
            held.remove();
            return crate::fail(Failure::Run(&e));
        }
    };
    prepared.request.limits.remove_cgroups();
    after_run(&prepared, &ended, temp_after, args.quiet);
    // The record goes last: the temp directory is removed (or kept) by now.
    held.remove();
    save(
        &prepared,
        Some(ended.code.into()),
        ExitCode::from(ended.code),
        args.quiet,
    )
}

/// `--save-profile`, `--export-policy` after the run (see
/// `PreparedRun::save_after`): `code` unless the save fails.
fn save(prepared: &PreparedRun, exit: Option<i32>, code: ExitCode, quiet: bool) -> ExitCode {
    match prepared.save_after(exit) {
        Ok(SaveOutcome::Saved(said)) => {
            for s in said.iter().filter(|_| !quiet) {
                eprintln!("terra: {s}");
            }
            code
        }
        Ok(SaveOutcome::NotSaved(not_saved)) => {
            eprintln!("terra: {not_saved}");
            code
        }
        Err(e) => crate::fail(Failure::Run(&e)),
    }
}

/// Whether the supervisor should clone the box before the request is
/// known: a backend with a box (auto picks one where user namespaces work)
/// and no limit that makes cgroups (the box is cloned inside them).
fn early_box_fits(args: &RunArgs) -> bool {
    matches!(args.backend.as_str(), "auto" | "linux" | "vm")
        && args.memory.is_none()
        && args.pids.is_none()
        && args.cpus.is_none()
}

/// Removes the runs the default retention does not keep, in every state base.
fn prune_old_runs() {
    for base in &runs::bases() {
        let (removed, failed) = base.prune(runs::Retention::default(), SystemTime::now());
        if !removed.is_empty() {
            tracing::debug!(count = removed.len(), base = %base.path().display(), "old runs pruned");
        }
        for f in failed {
            tracing::warn!("cannot prune the run {f} in {}", base.path().display());
        }
    }
}

/// After the supervisor ended: the refusal summary, the temp directory kept
/// or removed.
fn after_run(prepared: &PreparedRun, ended: &Ended, temp_after: TempAfterRun, quiet: bool) {
    // The receipt says what this needs only with a broker (its refusals)
    // or when the program could not be run (126, 127); otherwise it is
    // not read: the run's end waits for nothing more.
    let none_failed = prepared.plan.network() == terra_policy::NetworkMode::None && ended.code != 0;
    let wanted = prepared.plan.network() == terra_policy::NetworkMode::Mediated
        || none_failed
        || matches!(ended.code, 126 | 127);
    let own = ended
        .run_dir
        .as_deref()
        .filter(|_| wanted)
        .and_then(|d| runs::open_reported(d, std::process::id()));
    // The receipt, read once.
    let receipt = own.as_ref().and_then(|r| Some((r, r.receipt()?)));
    if !quiet {
        if let Some(text) = receipt
            .as_ref()
            .and_then(|(run, r)| summary::refusal_summary(run, r))
        {
            eprint!("{text}");
        }
        if let Some(text) = receipt
            .as_ref()
            .filter(|_| none_failed)
            .and_then(|(_, r)| summary::dns_summary(r, prepared.request.policy.source != "default"))
        {
            eprint!("{text}");
        }
    }
    if !quiet {
        if let Some(note) = prepared.dropped_env_note(ended.code.into()) {
            eprintln!("terra: {note}");
        }
    }
    // The program was not found (127) or could not be executed (126, the
    // landlock backend's EACCES): name it when the host has it outside the grants.
    let exec_failed = receipt
        .as_ref()
        .is_some_and(|(_, r)| !r["outcome"]["execFailed"].is_null());
    if exec_failed {
        if let Some(hint) = prepared.program_hint() {
            eprintln!("terra: {hint}");
        }
    }
    if let Some(note) = temp::after_run(&prepared.request.bindings.temp, temp_after) {
        eprintln!("{note}");
    }
}

/// The first option given that the Windows build's `terra run` refuses
/// (src/run_cmd_windows.rs), so the dry run here shows only what it would run.
fn windows_refused_option(args: &RunArgs) -> Option<&'static str> {
    [
        (args.profile.is_some(), "--profile"),
        (!args.preset.is_empty(), "--preset"),
        (args.preset_net.is_some(), "--preset-net"),
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

/// Why `terra run --backend macos` (not a dry run) does not start here.
fn macos_run_refusal() -> &'static str {
    if cfg!(target_os = "macos") {
        "backend macos: runs only through the macOS build's command line"
    } else {
        "backend macos is not available on this OS (Seatbelt exists only on macOS); \
         `terra run --backend macos --dry-run` shows the profile it would apply"
    }
}

// ---------------------------------------------------------------- doctor

/// One line of `terra doctor`.
struct Check {
    name: &'static str,
    ok: bool,
    /// Informational checks never fail the doctor.
    required: bool,
    detail: String,
    fix: Option<String>,
}

/// The launcher's host checks (the one implementation, in terra-sandbox),
/// then whether the built-in broker can start.
fn doctor_checks() -> (Vec<Check>, Option<i32>) {
    let support = terra_sandbox::linux::host_support();
    let mut checks: Vec<Check> = support
        .checks
        .iter()
        .map(|c| Check {
            name: c.id.name(),
            ok: c.ok,
            required: c.id.required(),
            detail: c.detail.clone(),
            fix: c.fix.clone(),
        })
        .collect();
    let broker = broker_available(&support);
    checks.push(Check {
        name: "network-broker",
        ok: broker,
        required: false,
        detail: if broker {
            format!(
                "the network broker (terra __network, mediator {MEDIATOR}) is built in and its confined role can \
                 start here: network-mediated, network-require-tls-sni and network-private-addresses are declared"
            )
        } else if !BROKER_BUILT_IN {
            "this build has no network broker: mediated policies are refused".into()
        } else {
            "the network broker's confined role needs user namespaces (see user-namespaces): mediated \
             policies are refused"
                .into()
        },
        fix: (!broker).then(|| {
            format!(
                "fix user-namespaces first; mediated networking needs the same namespaces as the box; \
                 otherwise: {}",
                nouserns::MEDIATED_INSTEAD
            )
        }),
    });
    let landlock = terra_sandbox::linux::nouserns::usable();
    checks.push(Check {
        name: "landlock-backend",
        ok: landlock.is_ok(),
        required: false,
        detail: match &landlock {
            Ok(abi) => format!(
                "the landlock backend can run here (Landlock ABI {abi}, seccomp): declares {}; not confined: {}",
                nouserns::declared_capabilities().names().join(" "),
                nouserns::NOT_CONFINED.join("; ")
            ),
            Err(why) => format!("the landlock backend cannot run here: {why}"),
        },
        fix: landlock.is_err().then(|| {
            format!(
                "boot Linux >= 6.12 (Landlock ABI >= {}) with landlock in the `lsm=` kernel parameter",
                nouserns::MIN_ABI
            )
        }),
    });
    let vm = vm_usable(&support);
    checks.push(Check {
        name: "vm-backend",
        ok: vm.is_ok(),
        required: false,
        detail: match &vm {
            Ok(what) => format!("the vm backend can run here: {what}"),
            Err(why) => format!("the vm backend cannot run here: {why}"),
        },
        fix: vm.is_err().then(|| {
            "install QEMU and a kernel (Debian: apt-get install qemu-system-x86 linux-image-amd64; \
             `scripts/bootstrap.sh` does), with user namespaces working"
                .to_string()
        }),
    });
    (checks, support.landlock_abi)
}

/// Whether the vm backend can run here: QEMU, a kernel with its modules,
/// and the namespace box it runs in.
fn vm_usable(support: &terra_sandbox::linux::HostSupport) -> Result<String, String> {
    if !support.usable() {
        return Err(
            "it runs QEMU inside the namespace box, which cannot start here (see user-namespaces)"
                .into(),
        );
    }
    terra_vm::assets::usable()
}

/// What blocks user namespaces here (empty when they work) and what
/// `--backend auto` picks: the decision `terra run` makes, from the same
/// function.
fn doctor_backends() -> (Vec<nouserns::Cause>, Result<Choice, String>) {
    let (facts, causes) = HostFacts::probe_with_causes();
    let auto = choose("auto", || facts).map_err(|e| e.to_string());
    (causes, auto)
}

pub fn doctor(args: DoctorArgs) -> ExitCode {
    let (checks, abi) = doctor_checks();
    let linux_ok = checks.iter().all(|c| c.ok || !c.required);
    let (causes, auto) = doctor_backends();
    // The host runs boxes when either backend can start.
    let ok = auto.is_ok();
    if args.json {
        let v = json!({
            "backend": "linux",
            "ok": ok,
            "linuxOk": linux_ok,
            "auto": match &auto {
                Ok(c) => json!({"backend": c.backend.name(), "reason": c.reason}),
                Err(e) => json!({"backend": null, "reason": e}),
            },
            "userNamespacesBlockedBy": causes.iter().map(|c| json!({
                "name": c.name, "detail": c.detail, "fix": c.fix,
            })).collect::<Vec<_>>(),
            "landlockAbi": abi,
            "checks": checks.iter().map(|c| json!({
                "name": c.name, "ok": c.ok, "required": c.required, "detail": c.detail, "fix": c.fix,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        for c in &checks {
            let mark = match (c.ok, c.required) {
                (true, _) => "ok  ",
                (false, true) => "FAIL",
                (false, false) => "note",
            };
            println!("{mark} {:<30} {}", c.name, c.detail);
            if let Some(f) = c.fix.as_ref().filter(|f| **f != c.detail) {
                println!("     {:<30} fix: {f}", "");
            }
        }
        for c in &causes {
            println!("userns blocked by {}: {}", c.name, c.detail);
            println!("     fix: {}", c.fix);
        }
        match &auto {
            Ok(c) => println!(
                "terra can run boxes on this host: --backend auto takes {} ({}).",
                c.backend.name(),
                c.reason
            ),
            Err(e) => println!("terra cannot run boxes on this host: {e}"),
        }
        if ok && !linux_ok {
            println!(
                "the linux backend needs the FAIL lines fixed; until then plans needing {} are refused.",
                linux_only_capabilities().join(", ")
            );
        }
    }
    ExitCode::from(if ok { 0 } else { 1 })
}

// ---------------------------------------------------------------- backends

/// What the linux backend (with its broker) declares and the landlock
/// backend does not.
fn linux_only_capabilities() -> Vec<&'static str> {
    terra_sandbox::linux::declared_capabilities(BROKER_BUILT_IN)
        .missing_from(nouserns::declared_capabilities())
        .into_iter()
        .map(Capability::name)
        .collect()
}

pub fn backends(args: BackendsArgs) -> ExitCode {
    let support = terra_sandbox::linux::host_support();
    let linux_ok = support.usable();
    let declared = terra_sandbox::linux::declared_capabilities(broker_available(&support));
    let caps: Vec<&str> = declared.iter().map(Capability::name).collect();
    let failing: Vec<String> = support
        .checks
        .iter()
        .filter(|c| !c.ok && c.id.required())
        .map(|c| format!("{}: {}", c.id.name(), c.detail))
        .collect();
    let linux_note = if linux_ok {
        "supported on this host".to_string()
    } else if support.checks.is_empty() {
        "the launcher reported no host checks".to_string()
    } else {
        format!(
            "not usable here: {} (see `terra doctor`)",
            failing.join("; ")
        )
    };
    let landlock = nouserns::usable();
    let landlock_caps: Vec<&str> = nouserns::declared_capabilities().names();
    let landlock_note = match &landlock {
        Ok(abi) => format!(
            "supported on this host (Landlock ABI {abi}; no namespaces: Landlock, seccomp, the supervisor as subreaper)"
        ),
        Err(why) => format!("not usable here: {why} (see `terra doctor`)"),
    };
    let auto = choose("auto", HostFacts::probe);
    let vm = vm_usable(&support);
    let vm_caps: Vec<&str> = terra_supervisor::backend::vm_declared()
        .iter()
        .map(Capability::name)
        .collect();
    let rows = [
        ("linux", linux_ok, caps.clone(), linux_note),
        (
            nouserns::NAME,
            landlock.is_ok(),
            landlock_caps,
            landlock_note,
        ),
        (
            "vm",
            vm.is_ok(),
            vm_caps,
            match &vm {
                Ok(what) => format!("supported on this host ({what}); only with --backend vm"),
                Err(why) => format!("not usable here: {why}"),
            },
        ),
        (
            "macos",
            false,
            Vec::new(),
            "not supported on this host (Seatbelt, macOS only; `terra run --backend macos --dry-run` shows its profile)".to_string(),
        ),
        (
            "windows",
            false,
            terra_appcontainer::declared_capabilities().names(),
            "not supported on this host (AppContainer, Windows only; `terra run --backend windows --dry-run` shows its launch plan)".to_string(),
        ),
    ];
    if args.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(name, ok, caps, note)| {
                let mut row = json!({"name": name, "supported": ok, "declaredCapabilities": caps, "note": note});
                if *name == nouserns::NAME {
                    row["notConfined"] = json!(nouserns::NOT_CONFINED);
                    row["withoutCapabilities"] = linux_only_capabilities()
                        .iter()
                        .map(|c| json!({"name": c, "why": Capability::from_name(c).map(nouserns::missing_reason)}))
                        .collect();
                }
                if let Ok(c) = &auto {
                    row["auto"] = json!(c.backend.name() == *name);
                }
                row
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        for (name, ok, caps, note) in &rows {
            println!(
                "{name:<8} {:<13} {note}",
                if *ok { "supported" } else { "unsupported" }
            );
            if !caps.is_empty() {
                println!("         declares: {}", caps.join(" "));
            }
            if *name == nouserns::NAME {
                for c in linux_only_capabilities() {
                    let why = Capability::from_name(c).map_or("", nouserns::missing_reason);
                    println!("         lacks {c}: {why}");
                }
                for what in nouserns::NOT_CONFINED {
                    println!("         not confined: {what}");
                }
            }
        }
        match &auto {
            Ok(c) => println!("auto     -> {} ({})", c.backend.name(), c.reason),
            Err(e) => println!("auto     -> none: {e}"),
        }
    }
    ExitCode::SUCCESS
}

// ---------------------------------------------------------------- profiles

#[derive(Debug, clap::Args)]
pub struct ProfilesArgs {
    /// Machine-readable output.
    #[arg(long, conflicts_with = "names")]
    json: bool,
    /// Names only, one a line (what the shell completions read).
    #[arg(long)]
    names: bool,
}

/// `terra profiles`: the host-side profiles `--profile NAME` can use.
pub fn profiles(args: ProfilesArgs) -> ExitCode {
    use terra_supervisor::profile;
    let list = profile::list();
    if args.json {
        let v: Vec<_> = list
            .iter()
            .map(|(n, p)| json!({ "name": n, "path": p }))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else if args.names {
        for (n, _) in &list {
            println!("{n}");
        }
    } else {
        match profile::profiles_dir() {
            Some(d) if list.is_empty() => println!("no profiles in {}", d.display()),
            Some(_) => {
                for (n, p) in &list {
                    println!("{n:<16} {}", p.display());
                }
            }
            None => {
                println!("no profiles directory (neither XDG_CONFIG_HOME nor HOME is absolute)")
            }
        }
    }
    ExitCode::SUCCESS
}

// ---------------------------------------------------------------- presets

#[derive(Debug, clap::Args)]
pub struct PresetsArgs {
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// `terra presets`: each preset with the rules and variables it gives on
/// this host (or why it is refused here), then the credential files no
/// preset grants.
pub fn presets(args: PresetsArgs) -> ExitCode {
    use terra_supervisor::presets::{HostDirs, HOME_CREDENTIALS, PRESETS, REGISTRY_PORT};
    let host = HostDirs::from_env();
    let rows: Vec<_> = PRESETS.iter().map(|p| (p, p.resolve(&host))).collect();
    if args.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(p, r)| match r {
                Ok(r) => json!({
                    "name": p.name,
                    "about": p.about,
                    "rules": r.rules.iter().map(|x| json!({
                        "access": x.access.name(), "path": x.path, "scope": "tree", "missing": "skip",
                    })).collect::<Vec<_>>(),
                    "env": r.env.iter().map(|(k, v)| json!({
                        "name": k.to_string_lossy(), "value": v.to_string_lossy(),
                    })).collect::<Vec<_>>(),
                    "caches": r.caches.iter().map(|(p, _)| p).collect::<Vec<_>>(),
                    "hosts": r.hosts.iter().map(|h| format!("{h}:{REGISTRY_PORT}")).collect::<Vec<_>>(),
                    "neverGranted": HOME_CREDENTIALS,
                }),
                Err(e) => json!({
                    "name": p.name,
                    "about": p.about,
                    "refused": e.to_string(),
                    "neverGranted": HOME_CREDENTIALS,
                }),
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    for (p, r) in &rows {
        println!("{:<8} {}", p.name, p.about);
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                println!("         refused here: {e}");
                continue;
            }
        };
        for x in &r.rules {
            let here = if x.path.exists() {
                ""
            } else {
                "  (missing here: skipped)"
            };
            println!("         {:<5} {}{here}", x.access.name(), x.path.display());
        }
        for (k, v) in &r.env {
            println!(
                "         env   {}={}",
                k.to_string_lossy(),
                v.to_string_lossy()
            );
        }
        for h in r.hosts {
            println!("         net   {h}:{REGISTRY_PORT}  (--preset-net)");
        }
    }
    println!(
        "never granted by a preset (credentials, under ~): {}",
        HOME_CREDENTIALS.join(" ")
    );
    ExitCode::SUCCESS
}
