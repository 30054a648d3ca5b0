//! `terra run`, `terra doctor`, `terra backends`.
//!
//! `terra run` compiles the policy (the embedded default unless `--policy`),
//! adds the command line's rules, binds this host's roots, checks the plan
//! against the backend's declared capabilities and hands the run to
//! `terra __supervisor` over an inherited pipe. It refuses with exit 125 and a
//! `terra: ...` message on any failure before the workload starts.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use serde_json::json;
use terra_policy::digest::artifact_digest;
use terra_policy::{
    Access, Capability, CapabilitySet, HostBindings, Mir, Missing, NetworkMode, RootKind,
    SandboxPlan, Scope,
};
use terra_supervisor::request::{hex, hex_os, PolicyOrigin, RunRequest, REQUEST_VERSION};
use tracing::debug;

const EXIT_REFUSED: u8 = terra_supervisor::EXIT_REFUSED;

/// The network broker role (`terra __network`, crate terra-netd) is part of
/// this binary on Linux.
const BROKER_BUILT_IN: bool = cfg!(target_os = "linux");
/// The mediator id this host binds for mediated plans: the built-in broker.
pub const MEDIATOR: &str = "terra-netd/1";

/// Whether the linux backend can start the broker on this host: it is built
/// in, and the host can create the namespaces its confined role needs (the
/// launcher's `user-namespaces` check, the same the box needs).
fn broker_available(support: &terra_sandbox::linux::HostSupport) -> bool {
    BROKER_BUILT_IN && support.passed(terra_sandbox::linux::CheckId::UserNamespaces)
}

/// Environment variables copied from the caller into the box (plus every `LC_*`).
pub const ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "LANG",
    "LANGUAGE",
    "TZ",
];
/// PATH inside the box when the caller has none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

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
    /// Allow TCP to HOST:PORT through the network broker (switches the network to mediated). Not with --policy.
    #[arg(long, value_name = "HOST:PORT")]
    allow_net: Vec<String>,
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
    /// Keep the run's private temp directory (its path is in the receipt).
    #[arg(long)]
    keep_temp: bool,
    /// The backend to run on.
    #[arg(long, default_value = "linux", value_name = "NAME")]
    backend: String,
    /// Print the resolved plan, its decision digest and the backend's mount and
    /// filter program; run nothing.
    #[arg(long)]
    dry_run: bool,
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

/// Everything resolved for one run, before the supervisor starts.
struct Prepared {
    plan: SandboxPlan,
    request: RunRequest,
}

pub fn run(args: RunArgs) -> ExitCode {
    let prepared = match prepare(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("terra: {e}");
            return ExitCode::from(EXIT_REFUSED);
        }
    };
    if args.dry_run {
        print!("{}", dry_run_text(&prepared));
        let _ = fs::remove_dir(&prepared.request.temp);
        return ExitCode::SUCCESS;
    }
    match start_supervisor(&prepared.request) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let _ = fs::remove_dir(&prepared.request.temp);
            eprintln!("terra: {e}");
            ExitCode::from(EXIT_REFUSED)
        }
    }
}

fn prepare(args: &RunArgs) -> Result<Prepared, String> {
    let t0 = Instant::now();
    if args.backend != "linux" {
        return Err(match args.backend.as_str() {
            "macos" | "windows" => format!(
                "backend {} is not supported on this host (see `terra backends`)",
                args.backend
            ),
            other => format!("unknown backend {other:?} (see `terra backends`)"),
        });
    }
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let workspace = match &args.workspace {
        Some(w) => resolve_cli_path(&absolute_lexical(w, &cwd))
            .and_then(|p| fs::canonicalize(&p).map_err(|e| e.to_string()))
            .map_err(|e| format!("--workspace {}: {e}", w.display()))?,
        None => fs::canonicalize(&cwd).map_err(|e| format!("the current directory: {e}"))?,
    };
    let (mir, origin) = load_policy(args, &cwd, &workspace)?;
    debug!(phase = "compile", ms = t0.elapsed().as_secs_f64() * 1e3, digest = %mir.decision_digest());

    let t1 = Instant::now();
    // No host probe here (it would cost every run a fork): the broker is
    // built in, and when this host cannot start it (nor the box: both need
    // user namespaces), the supervisor refuses the run with exit 125.
    let declared = terra_sandbox::linux::declared_capabilities(BROKER_BUILT_IN);
    let mediated = mir.network() == NetworkMode::Mediated;
    if mediated && !declared.contains(Capability::NetworkMediated) {
        return Err(
            "this policy asks for mediated networking (network mode \"mediated\" or --allow-net), but the linux \
             backend in this build declares no network-mediated capability (no network broker); refusing \
             instead of falling back to another network mode"
                .into(),
        );
    }
    let mediator = mediated.then(|| MEDIATOR.to_string());
    if !workspace.is_dir() {
        return Err(format!(
            "the workspace {} is not a directory",
            workspace.display()
        ));
    }
    if workspace == Path::new("/") {
        return Err("the workspace would be / (the whole host); run from a project directory or pass --workspace DIR".into());
    }
    let box_cwd = match fs::canonicalize(&cwd) {
        Ok(c) if c.starts_with(&workspace) => c,
        _ => workspace.clone(),
    };
    let temp = make_temp_dir()?;
    let result = (|| {
        let bindings = HostBindings {
            workspace: Some(workspace.clone()),
            temp: Some(temp.clone()),
            minimal_roots: terra_policy::default_minimal_roots(),
            mediator: mediator.clone(),
        };
        let plan = terra_policy::compile_plan(&mir, &bindings, declared)
            .map_err(|e| format!("policy refused: {e}"))?;
        debug!(
            phase = "resolve",
            ms = t1.elapsed().as_secs_f64() * 1e3,
            rules = plan.rules().len()
        );
        // The proxy environment comes before --env, which may override it
        // (harmless: the box has no other route out).
        let proxy: Vec<(OsString, OsString)> = if mediated {
            terra_netd::proxy_env(terra_netd::proxy_listen_addr())
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect()
        } else {
            Vec::new()
        };
        let env = box_env(&proxy, &args.env)?;
        let timeout_ms = args
            .timeout
            .as_deref()
            .map(parse_duration)
            .transpose()?
            .map(|d| d.as_millis() as u64);
        // `-` is standard output; the supervisor opens the receipt's
        // directory and checks the name before the box starts.
        let receipt = args.receipt.as_ref().map(|r| {
            if r.as_os_str() == "-" {
                r.clone()
            } else {
                absolute_lexical(r, &cwd)
            }
        });
        let request = RunRequest {
            version: REQUEST_VERSION,
            parent_pid: std::process::id() as i32,
            backend: "linux".into(),
            mir_hex: hex(mir.bytes()),
            decision_digest: mir.decision_digest(),
            policy: origin,
            workspace: workspace.clone(),
            temp: temp.clone(),
            minimal_roots: bindings.minimal_roots.clone(),
            mediator,
            declared: declared.iter().map(|c| c.name().to_string()).collect(),
            cwd: box_cwd,
            argv_hex: args.command.iter().map(|a| hex_os(a)).collect(),
            env_hex: env.iter().map(|(k, v)| (hex_os(k), hex_os(v))).collect(),
            timeout_ms,
            receipt,
            keep_temp: args.keep_temp,
        };
        Ok(Prepared { plan, request })
    })();
    if result.is_err() {
        let _ = fs::remove_dir(&temp);
    }
    result
}

/// The policy (default or `--policy`) plus the command line's rules.
fn load_policy(
    args: &RunArgs,
    cwd: &Path,
    workspace: &Path,
) -> Result<(Mir, PolicyOrigin), String> {
    let (base, source, format, digest) = match &args.policy {
        None => {
            let src = terra_policy::DEFAULT_POLICY_SOURCE.as_bytes();
            let mir = terra_policy::compile_source(src)
                .map_err(|e| format!("the default policy: {e}"))?;
            (mir, "default".to_string(), "json", artifact_digest(src))
        }
        Some(p) => {
            let grants =
                !args.read.is_empty() || !args.write.is_empty() || !args.allow_net.is_empty();
            if grants {
                return Err(
                    "with --policy only --deny may be added (a restriction); put --read, --write and --allow-net \
                     grants in the policy file"
                        .into(),
                );
            }
            let bytes = terra_supervisor::files::read_capped(p, crate::policy_cmd::MAX_INPUT_LEN)
                .map_err(|e| format!("--policy: {e}"))?;
            let (mir, format) = if bytes.starts_with(b"MMIR") {
                (
                    Mir::decode(&bytes).map_err(|e| format!("--policy {}: {e}", p.display()))?,
                    "mir",
                )
            } else {
                (
                    terra_policy::compile_source(&bytes)
                        .map_err(|e| format!("--policy {}: {e}", p.display()))?,
                    "json",
                )
            };
            let shown = absolute_lexical(p, cwd).display().to_string();
            (mir, shown, format, artifact_digest(&bytes))
        }
    };
    let mut overlay = Vec::new();
    let mut builder = base.to_builder();
    let lists: [(&[PathBuf], Access); 3] = [
        (&args.read, Access::Read),
        (&args.write, Access::Write),
        (&args.deny, Access::Deny),
    ];
    for (paths, access) in lists {
        for p in paths {
            let (root, path) = cli_rule_path(p, cwd, workspace)
                .map_err(|e| format!("--{access} {}: {e}", p.display()))?;
            builder
                .add_rule(access, root, &path, Scope::Tree, Missing::Error)
                .map_err(|e| format!("--{access} {}: {e}", p.display()))?;
            overlay.push(match root {
                RootKind::Workspace => format!("{access} workspace:{path}"),
                _ => format!("{access} {path}"),
            });
        }
    }
    for dest in &args.allow_net {
        let (host, port) = dest
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .ok_or_else(|| format!("--allow-net {dest:?}: expected HOST:PORT"))?;
        builder.set_network(NetworkMode::Mediated);
        builder
            .add_destination(host, port, false, false)
            .map_err(|e| format!("--allow-net {dest}: {e}"))?;
        overlay.push(format!("allow-net {}:{port}", host.to_ascii_lowercase()));
    }
    let mir = builder
        .build()
        .map_err(|e| format!("the policy with the command line's rules: {e}"))?;
    let origin = PolicyOrigin {
        source,
        format: format.into(),
        artifact_digest: digest,
        overlay,
    };
    Ok((mir, origin))
}

/// Absolute against `cwd`, without touching the file system.
fn absolute_lexical(p: &Path, cwd: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// A command-line rule: a path inside the workspace becomes a workspace rule
/// (the resolver then refuses a symlink that leaves the workspace, exactly as
/// for `root: workspace` in a policy file); a path outside it becomes a host
/// rule on its resolved path, refusing any symlink the box could have planted
/// (see [`resolve_cli_path`]). A path with `..` is resolved first.
fn cli_rule_path(p: &Path, cwd: &Path, workspace: &Path) -> Result<(RootKind, String), String> {
    let abs = absolute_lexical(p, cwd);
    let lexical_inside =
        abs.starts_with(workspace) && !abs.components().any(|c| c == Component::ParentDir);
    let path = if lexical_inside {
        abs
    } else {
        resolve_cli_path(&abs)?
    };
    let utf8 = |p: &Path| {
        p.to_str()
            .map(str::to_owned)
            .ok_or_else(|| "paths in policies must be valid UTF-8".to_string())
    };
    match path.strip_prefix(workspace) {
        Ok(rel) => Ok((RootKind::Workspace, utf8(rel)?)),
        Err(_) => Ok((RootKind::Host, utf8(&path)?)),
    }
}

/// Most symlinks followed while resolving one command-line path (as the kernel's limit).
const MAX_SYMLINKS: usize = 40;

/// realpath of an absolute path, one component at a time, refusing every
/// symlink on the way that is owned by the uid terra runs as: every file an
/// earlier box wrote belongs to that uid, so such a link may have been planted
/// to redirect this run's grant (`ln -s /outside cache` in one run, `--write
/// cache` in the next). Links owned by another uid (the system's `/lib ->
/// usr/lib` for an unprivileged caller) are followed. Components from the
/// first missing one on are kept as written, so the rule's `missing` mode
/// decides.
fn resolve_cli_path(abs: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::geteuid().as_raw();
    let mut pending: Vec<OsString> = Vec::new();
    let push = |pending: &mut Vec<OsString>, p: &Path| {
        for c in p.components().rev() {
            match c {
                Component::Normal(n) => pending.push(n.to_owned()),
                Component::ParentDir => pending.push("..".into()),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
    };
    push(&mut pending, abs);
    let mut cur = PathBuf::from("/");
    let mut links = 0;
    while let Some(c) = pending.pop() {
        if c == ".." {
            cur.pop();
            continue;
        }
        let next = cur.join(&c);
        match fs::symlink_metadata(&next) {
            Ok(md) if md.file_type().is_symlink() => {
                if md.uid() == uid {
                    return Err(format!(
                        "{} is a symlink owned by uid {uid}, the uid the box runs as, so an earlier run \
                         could have planted it; refusing to follow it (name the real path instead)",
                        next.display()
                    ));
                }
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(format!(
                        "{}: too many levels of symbolic links",
                        abs.display()
                    ));
                }
                let target =
                    fs::read_link(&next).map_err(|e| format!("{}: {e}", next.display()))?;
                if target.is_absolute() {
                    cur = PathBuf::from("/");
                }
                push(&mut pending, &target);
            }
            Ok(_) => cur = next,
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ENOTDIR) =>
            {
                if pending.iter().any(|c| c == "..") {
                    return Err(format!("{}: {e}", next.display()));
                }
                cur = next;
                while let Some(rest) = pending.pop() {
                    cur.push(rest);
                }
            }
            Err(e) => return Err(format!("{}: {e}", next.display())),
        }
    }
    Ok(cur)
}

/// A fresh private (0700) directory for the run's /tmp, outside the state directory.
fn make_temp_dir() -> Result<PathBuf, String> {
    let base = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let uid = nix::unistd::geteuid().as_raw();
    for _ in 0..16 {
        let mut rnd = [0u8; 6];
        fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut rnd))
            .map_err(|e| format!("/dev/urandom: {e}"))?;
        let dir = base.join(format!("terra-tmp-{uid}-{}", hex(&rnd)));
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
                    .map_err(|e| format!("{}: {e}", dir.display()))?;
                return fs::canonicalize(&dir).map_err(|e| format!("{}: {e}", dir.display()));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(format!(
                    "cannot create the run's temp directory in {}: {e}",
                    base.display()
                ))
            }
        }
    }
    Err(format!(
        "cannot create a unique temp directory in {}",
        base.display()
    ))
}

/// The workload's environment: the allowlist copied from terra's environment,
/// HOME and TMPDIR pointing at the box's private /tmp, then `base` (the proxy
/// environment of a mediated run), then `--env`.
fn box_env(
    base: &[(OsString, OsString)],
    extra: &[OsString],
) -> Result<Vec<(OsString, OsString)>, String> {
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    let set = |k: OsString, v: OsString, env: &mut Vec<(OsString, OsString)>| {
        env.retain(|(n, _)| *n != k);
        env.push((k, v));
    };
    for (k, v) in std::env::vars_os() {
        let name = k.as_bytes();
        if ENV_ALLOWLIST.iter().any(|a| a.as_bytes() == name) || name.starts_with(b"LC_") {
            set(k, v, &mut env);
        }
    }
    if !env.iter().any(|(k, _)| k == "PATH") {
        set("PATH".into(), DEFAULT_PATH.into(), &mut env);
    }
    set("HOME".into(), "/tmp".into(), &mut env);
    set("TMPDIR".into(), "/tmp".into(), &mut env);
    for (k, v) in base {
        set(k.clone(), v.clone(), &mut env);
    }
    for e in extra {
        let bytes = e.as_bytes();
        let (name, value) = match bytes.iter().position(|b| *b == b'=') {
            Some(i) => (
                OsStr::from_bytes(&bytes[..i]).to_owned(),
                OsStr::from_bytes(&bytes[i + 1..]).to_owned(),
            ),
            None => {
                let v = std::env::var_os(e).ok_or_else(|| {
                    format!(
                        "--env {}: not set in terra's environment (use NAME=VALUE)",
                        e.to_string_lossy()
                    )
                })?;
                (e.clone(), v)
            }
        };
        if name.is_empty() || name.as_bytes().contains(&0) || value.as_bytes().contains(&0) {
            return Err(format!(
                "--env {:?}: invalid name or value",
                e.to_string_lossy()
            ));
        }
        set(name, value, &mut env);
    }
    env.sort();
    Ok(env)
}

/// `30`, `30s`, `500ms`, `5m`, `1h`; zero is refused.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("--timeout {s:?}: expected a duration such as 30s, 500ms, 5m or 1h");
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let ms = match unit {
        "" | "s" => n.checked_mul(1000),
        "ms" => Some(n),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => None,
    }
    .ok_or_else(bad)?;
    if ms == 0 {
        return Err(format!("--timeout {s:?}: must be more than zero"));
    }
    Ok(Duration::from_millis(ms))
}

fn dry_run_text(p: &Prepared) -> String {
    use std::fmt::Write as _;
    let r = &p.request;
    let plan = &p.plan;
    let mut s = String::new();
    let names = |c: CapabilitySet| c.iter().map(|c| c.name()).collect::<Vec<_>>().join(" ");
    let _ = writeln!(
        s,
        "policy:          {} ({}, artifact sha256 {})",
        r.policy.source, r.policy.format, r.policy.artifact_digest
    );
    for o in &r.policy.overlay {
        let _ = writeln!(s, "  + {o}");
    }
    let _ = writeln!(s, "decision digest: {}", plan.decision_digest());
    let _ = writeln!(s, "network:         {}", plan.network());
    for d in plan.destinations() {
        let mut flags = Vec::new();
        if d.require_tls_sni {
            flags.push("requireTlsSni");
        }
        if d.allow_private_addresses {
            flags.push("allowPrivateAddresses");
        }
        let _ = writeln!(
            s,
            "  allow tcp {}:{}{}",
            d.host,
            d.port,
            if flags.is_empty() {
                String::new()
            } else {
                format!("  [{}]", flags.join(", "))
            }
        );
    }
    if let Some(m) = &r.mediator {
        let _ = writeln!(s, "mediator:        {m}");
    }
    let _ = writeln!(s, "root:            {}", plan.root_mode());
    let _ = writeln!(s, "process tree:    {}", plan.process_tree());
    let _ = writeln!(
        s,
        "required:        {}",
        names(plan.required_capabilities())
    );
    let declared: CapabilitySet = r
        .declared
        .iter()
        .filter_map(|n| Capability::from_name(n))
        .collect();
    let _ = writeln!(s, "declared:        {}", names(declared));
    let _ = writeln!(s, "workspace:       {}", r.workspace.display());
    let _ = writeln!(s, "temp:            {} (bound at /tmp)", r.temp.display());
    let _ = writeln!(s, "cwd:             {}", r.cwd.display());
    let _ = writeln!(s, "rules:");
    for rule in plan.rules() {
        let _ = writeln!(
            s,
            "  {:<10} {:<5} {}{}  ({})",
            rule.access.name(),
            rule.scope.name(),
            rule.path,
            if rule.protect_create {
                "  [protect-create]"
            } else {
                ""
            },
            rule.source_root
        );
    }
    for o in plan.omitted() {
        let _ = writeln!(s, "  omitted    {} {} (missing, skip)", o.access, o.path);
    }
    let _ = writeln!(s, "environment:");
    for (k, v) in r.env().unwrap_or_default() {
        let _ = writeln!(s, "  {}={}", k.to_string_lossy(), v.to_string_lossy());
    }
    let _ = writeln!(s, "argv:            {:?}", r.argv_display());
    let config = terra_sandbox::linux::BoxConfig {
        plan: plan.clone(),
        argv: r.argv().unwrap_or_default(),
        cwd: r.cwd.clone(),
        env: r.env().unwrap_or_default(),
        temp_dir: r.temp.clone(),
        canary_path: PathBuf::from("<runtime-dir>/request.json"),
        canary_tcp: None,
        canary_gate: None,
        mediated: if plan.network() == NetworkMode::Mediated {
            terra_netd::fdpass::broker_socketpair()
                .ok()
                .map(|(box_end, _)| {
                    (
                        box_end,
                        terra_netd::proxy_listen_addr(),
                        terra_netd::box_service as terra_sandbox::linux::BoxService,
                    )
                })
        } else {
            None
        },
        hostname: "terra".into(),
    };
    let _ = writeln!(s, "backend program (linux):");
    for line in terra_sandbox::linux::describe(&config).lines() {
        let _ = writeln!(s, "  {line}");
    }
    if plan.network() == NetworkMode::Mediated {
        let _ = writeln!(s, "network broker (terra __network):");
        for line in terra_netd::describe().lines() {
            let _ = writeln!(s, "  {line}");
        }
    }
    s
}

/// The `--log-level` given to this terra, passed on to the supervisor.
fn log_level_args() -> Vec<OsString> {
    let args: Vec<OsString> = std::env::args_os().collect();
    let mut out = Vec::new();
    for (i, a) in args.iter().enumerate() {
        if a == "--log-level" {
            if let Some(v) = args.get(i + 1) {
                out = vec![a.clone(), v.clone()];
            }
        } else if a.as_bytes().starts_with(b"--log-level=") {
            out = vec![a.clone()];
        } else if a == "--" {
            break;
        }
    }
    out
}

/// Starts `terra __supervisor`, hands it the request, forwards signals to it
/// and returns its exit status as the run's.
///
/// Signals are delivered once:
/// - Without a terminal in the foreground (CI, pipes, background jobs) the
///   supervisor gets its own process group, so a terminal-generated signal
///   reaches only this CLI, which forwards it along CLI -> supervisor -> box.
/// - When terra runs in the terminal's foreground with stdin on that terminal,
///   the CLI and the supervisor stay in the foreground process group; the
///   supervisor relays the terminal to the box's own pseudo-terminal
///   (terra-supervisor's pty.rs). The CLI forwards only signals sent to it by a
///   process (`kill`), never the terminal's own (si_code SI_KERNEL): the
///   supervisor got those too. On exit the CLI gives the terminal back to its
///   own process group and restores the terminal modes it found (also when
///   the supervisor, which restores them itself, was killed).
fn start_supervisor(req: &RunRequest) -> Result<u8, String> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::signal::{kill, Signal};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    use nix::unistd::Pid;

    let t0 = Instant::now();
    let body =
        serde_json::to_vec(req).map_err(|e| format!("cannot encode the run request: {e}"))?;
    let (rd, wr) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    fcntl(rd.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::empty())).map_err(|e| format!("fcntl: {e}"))?;

    // Block the forwarded signals and SIGCHLD before the child exists, so none
    // is lost or acted on by default; the supervisor inherits the block and
    // reads them from its own signalfd.
    let mut mask = terra_supervisor::forwarded_signals();
    mask.add(Signal::SIGCHLD);
    mask.thread_block()
        .map_err(|e| format!("cannot block signals: {e}"))?;
    let sigfd = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(|e| format!("signalfd: {e}"))?;

    let mut cmd = Command::new("/proc/self/exe");
    cmd.args(log_level_args())
        .arg("__supervisor")
        .arg("--request-fd")
        .arg(rd.as_raw_fd().to_string());
    let tty = ForegroundTty::detect();
    if tty.is_none() {
        cmd.process_group(0);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the supervisor: {e}"))?;
    drop(rd);
    let child_pid = Pid::from_raw(child.id() as i32);
    {
        let mut w = fs::File::from(wr);
        if let Err(e) = w.write_all(&body) {
            let _ = kill(child_pid, Signal::SIGKILL);
            let _ = child.wait();
            return Err(format!("cannot hand the run to the supervisor: {e}"));
        }
    }
    debug!(phase = "handoff", ms = t0.elapsed().as_secs_f64() * 1e3);

    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| format!("wait: {e}"))? {
            break st;
        }
        let mut fds = [PollFd::new(sigfd.as_fd(), PollFlags::POLLIN)];
        let _ = poll(&mut fds, PollTimeout::NONE);
        while let Ok(Some(info)) = sigfd.read_signal() {
            match Signal::try_from(info.ssi_signo as i32) {
                Ok(Signal::SIGCHLD) | Err(_) => {}
                Ok(_) if tty.is_some() && info.ssi_code == SI_KERNEL => {
                    debug!(
                        "terminal-generated signal: the workload gets it from the terminal itself"
                    );
                }
                Ok(sig) => {
                    debug!(signal = ?sig, "forwarding to the supervisor");
                    let _ = kill(child_pid, sig);
                }
            }
        }
    };
    if let Some(t) = tty {
        t.restore();
    }
    debug!(phase = "supervisor", ms = t0.elapsed().as_secs_f64() * 1e3);
    if let Some(code) = status.code() {
        return Ok(code.clamp(0, 255) as u8);
    }
    let sig = status.signal().unwrap_or(0);
    eprintln!("terra: the supervisor was killed by signal {sig}; the box went with it");
    Ok((128 + sig).clamp(0, 255) as u8)
}

/// `si_code` of a signal the kernel generated (e.g. the terminal's Ctrl-C).
const SI_KERNEL: i32 = 0x80;

/// The terminal terra runs in the foreground of, with the modes it had.
struct ForegroundTty {
    pgrp: nix::unistd::Pid,
    termios: Option<nix::sys::termios::Termios>,
}

impl ForegroundTty {
    /// Some when stdin is a terminal whose foreground process group is ours.
    fn detect() -> Option<ForegroundTty> {
        let stdin = std::io::stdin();
        if !nix::unistd::isatty(stdin.as_raw_fd()).unwrap_or(false) {
            return None;
        }
        let pgrp = nix::unistd::getpgrp();
        if nix::unistd::tcgetpgrp(stdin.as_fd()).ok()? != pgrp {
            return None;
        }
        let termios = nix::sys::termios::tcgetattr(stdin.as_fd()).ok();
        Some(ForegroundTty { pgrp, termios })
    }

    /// Gives the terminal back to our process group (a workload shell may have
    /// taken it for its own jobs) and restores the terminal modes.
    fn restore(self) {
        use nix::sys::signal::{SigSet, Signal};
        let stdin = std::io::stdin();
        let mut ttou = SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        // tcsetpgrp from a background group succeeds while SIGTTOU is blocked.
        let _ = ttou.thread_block();
        let _ = nix::unistd::tcsetpgrp(stdin.as_fd(), self.pgrp);
        if let Some(t) = &self.termios {
            let _ =
                nix::sys::termios::tcsetattr(stdin.as_fd(), nix::sys::termios::SetArg::TCSANOW, t);
        }
        let _ = ttou.thread_unblock();
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
            "fix user-namespaces first; mediated networking needs the same namespaces as the box".into()
        }),
    });
    (checks, support.landlock_abi)
}

pub fn doctor(args: DoctorArgs) -> ExitCode {
    let (checks, abi) = doctor_checks();
    let ok = checks.iter().all(|c| c.ok || !c.required);
    if args.json {
        let v = json!({
            "backend": "linux",
            "ok": ok,
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
        println!(
            "{}",
            if ok {
                "terra can run boxes on this host."
            } else {
                "terra cannot run boxes on this host until the FAIL lines are fixed."
            }
        );
    }
    ExitCode::from(if ok { 0 } else { 1 })
}

// ---------------------------------------------------------------- backends

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
    let rows = [
        ("linux", linux_ok, caps.clone(), linux_note),
        (
            "macos",
            false,
            Vec::new(),
            "not supported on this host and not built for macOS yet (Seatbelt backend planned)".to_string(),
        ),
        (
            "windows",
            false,
            Vec::new(),
            "not supported on this host and not built for Windows yet (AppContainer backend planned)".to_string(),
        ),
    ];
    if args.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(name, ok, caps, note)| json!({"name": name, "supported": ok, "declaredCapabilities": caps, "note": note}))
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
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        for bad in [
            "",
            "0",
            "0s",
            "1.5s",
            "-1",
            "s",
            "10x",
            "99999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_is_an_allowlist() {
        let env = box_env(&[], &["A=b".into(), "EMPTY=".into()]).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("HOME").unwrap(), "/tmp");
        assert_eq!(get("TMPDIR").unwrap(), "/tmp");
        assert_eq!(get("A").unwrap(), "b");
        assert_eq!(get("EMPTY").unwrap(), "");
        assert!(get("PATH").is_some());
        for (k, _) in &env {
            let k = k.to_string_lossy();
            assert!(
                ["HOME", "TMPDIR", "A", "EMPTY"].contains(&k.as_ref())
                    || ENV_ALLOWLIST.contains(&k.as_ref())
                    || k.starts_with("LC_"),
                "{k} leaked into the box"
            );
        }
        assert!(box_env(&[], &["=x".into()]).is_err());
        assert!(box_env(&[], &["TERRA_SURELY_UNSET_VARIABLE".into()]).is_err());
        // The proxy environment of a mediated run, overridable by --env.
        let proxy: Vec<(OsString, OsString)> =
            terra_netd::proxy_env(terra_netd::proxy_listen_addr())
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect();
        let env = box_env(&proxy, &["NO_PROXY=x".into()]).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("HTTPS_PROXY").unwrap(), "http://127.0.0.1:3128");
        assert_eq!(get("all_proxy").unwrap(), "http://127.0.0.1:3128");
        assert_eq!(get("NO_PROXY").unwrap(), "x");
        assert_eq!(get("no_proxy").unwrap(), "");
    }
}
