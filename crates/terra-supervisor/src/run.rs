//! Building a run: what `terra run` resolves before the supervisor starts.
//!
//! [`RunBuilder`] takes the command line's values (the CLI only parses
//! flags), compiles the policy (the embedded default unless a policy file is
//! given), adds the command line's rules, binds this host's roots (the
//! workspace, a fresh private temp directory), checks the plan against the
//! backend's declared capabilities and produces the [`RunRequest`] the
//! supervisor receives. Every refusal is an [`Error`]; nothing is guessed.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use terra_policy::digest::artifact_digest;
#[cfg(target_os = "linux")]
use terra_policy::CapabilitySet;
use terra_policy::{Access, Capability, Mir, Missing, NetworkMode, RootKind, SandboxPlan, Scope};
use tracing::debug;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::request::{hex, hex_os, Bindings, PolicyOrigin, RunRequest, REQUEST_VERSION};
use crate::workspace_git;

/// The network broker role (`terra __network`, crate terra-netd) is part of
/// this binary on Linux and on macOS (there fed by its own loopback
/// listeners, `terra_netd::standalone`).
pub const BROKER_BUILT_IN: bool = cfg!(any(target_os = "linux", target_os = "macos"));
/// The mediator id this host binds for mediated plans: the built-in broker.
pub const MEDIATOR: &str = terra_netd::MEDIATOR;

/// Whether the linux backend can start the broker on this host: it is built
/// in, and the host can create the namespaces its confined role needs (the
/// launcher's `user-namespaces` check, the same the box needs).
#[cfg(target_os = "linux")]
pub fn broker_available(support: &terra_sandbox::linux::HostSupport) -> bool {
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
/// With network none nothing a package manager retries can succeed: its
/// retries only delay the failure (cargo 10.9 s, pip 8 s measured).
/// `--env` overrides them.
pub const NO_NETWORK_RETRIES: &[(&str, &str)] = &[
    ("CARGO_NET_RETRY", "0"),
    ("PIP_RETRIES", "0"),
    ("npm_config_fetch_retries", "0"),
];
/// PATH inside the box when the caller has none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// One run as the command line describes it; [`RunBuilder::build`] resolves
/// it. Start from [`RunBuilder::new`] and set what the command line gave.
#[derive(Debug, Clone)]
pub struct RunBuilder {
    /// The workload's argv (at least the program).
    pub command: Vec<OsString>,
    /// The backend to run on (`--backend`; only `linux` runs here).
    pub backend: String,
    /// A policy file (JSON source v3 or canonical MIR v3) instead of the
    /// embedded default (`--policy`).
    pub policy: Option<PathBuf>,
    /// The most bytes read from the policy file.
    pub max_policy_len: usize,
    /// Grants and denials of the command line (`--read`, `--write`, `--deny`).
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    pub deny: Vec<PathBuf>,
    /// `HOST:PORT` destinations (`--allow-net`); any switches the network to mediated.
    pub allow_net: Vec<String>,
    /// The workspace directory (default: the current directory).
    pub workspace: Option<PathBuf>,
    /// `NAME=VALUE`, or `NAME` copied from this environment (`--env`).
    pub env: Vec<OsString>,
    /// The deadline as written on the command line (`--timeout`).
    pub timeout: Option<String>,
    /// Where to write an extra copy of the receipt (`-`: standard output).
    pub receipt: Option<PathBuf>,
    /// Toolchain presets (`--preset`, see [`crate::presets`]).
    pub presets: Vec<String>,
    /// `--preset-net[=private]`: admit the presets' registry hosts (port
    /// 443); `Some(true)` also when they resolve to private addresses.
    pub preset_net: Option<bool>,
    /// A host-side profile (`--profile`, see [`crate::profile`]).
    pub profile: Option<String>,
    /// `--save-profile NAME`, `--export-policy FILE` and `--force` (see
    /// [`crate::save`]).
    pub save_profile: Option<String>,
    pub export_policy: Option<PathBuf>,
    pub force: bool,
    /// Resource limits as written (`--memory`, `--pids`, `--cpus`,
    /// `--max-file-size`, see [`crate::limits`]).
    pub memory: Option<String>,
    pub pids: Option<String>,
    pub cpus: Option<String>,
    pub max_file_size: Option<String>,
    /// Refuse the run when a limit asked cannot be enforced (`--require-limits`).
    pub require_limits: bool,
    /// Relax the default policy's `process.treeConfinement` to `disabled`
    /// (`--no-process-tree`): an explicit choice, recorded in the overlay and
    /// so in the decision digest; like the grants, not with a policy file.
    pub no_process_tree: bool,
    /// Where a mediated workload finds the proxy: None for the box's own
    /// 127.0.0.1:3128 (the linux backend's box service); on macOS the
    /// broker's loopback listener, bound before the run is built.
    pub proxy: Option<std::net::SocketAddr>,
    /// The vm backend's kernel (`--kernel`, a bzImage; default: the newest
    /// /boot/vmlinuz-* with modules) and guest memory (`--vm-memory`).
    pub kernel: Option<PathBuf>,
    pub vm_memory: Option<String>,
    /// The guest's report deadline as written (`--vm-ready-timeout`).
    pub vm_ready_timeout: Option<String>,
}

/// Everything resolved for one run, before the supervisor starts: the plan
/// (for `--dry-run`) and the request the supervisor re-validates.
#[derive(Debug)]
pub struct PreparedRun {
    pub plan: SandboxPlan,
    pub request: RunRequest,
    /// The limits asked; [`PreparedRun::apply_limits`] turns them into the
    /// request's [`crate::limits::LimitPlan`].
    pub limits: crate::limits::Requested,
    pub require_limits: bool,
    /// What [`PreparedRun::warnings`] adds: a preset cache that could not be made.
    pub notes: Vec<String>,
    /// What to save after the run (`--save-profile`, `--export-policy`).
    pub save: Option<SavePlan>,
}

/// What `--save-profile` and `--export-policy` write once the workload
/// exited 0 (or for `--dry-run`): see [`crate::save`].
#[derive(Debug)]
pub struct SavePlan {
    pub profile: Option<crate::save::ProfileTarget>,
    pub export: Option<PathBuf>,
    /// The variables the presets, the profile and `--env` set.
    pub vars: Vec<crate::save::SavedVar>,
    pub force: bool,
}

impl RunBuilder {
    /// A run of `command` on the linux backend under the embedded default
    /// policy, with nothing added.
    pub fn new(command: Vec<OsString>) -> RunBuilder {
        RunBuilder {
            command,
            backend: "linux".into(),
            policy: None,
            max_policy_len: 1 << 20,
            read: Vec::new(),
            write: Vec::new(),
            deny: Vec::new(),
            allow_net: Vec::new(),
            workspace: None,
            env: Vec::new(),
            timeout: None,
            receipt: None,
            presets: Vec::new(),
            preset_net: None,
            profile: None,
            save_profile: None,
            export_policy: None,
            force: false,
            memory: None,
            pids: None,
            cpus: None,
            max_file_size: None,
            require_limits: false,
            no_process_tree: false,
            proxy: None,
            kernel: None,
            vm_memory: None,
            vm_ready_timeout: None,
        }
    }

    /// Resolves the run: policy, rules, bindings, plan, request. The fresh
    /// temp directory it makes is removed again on any refusal.
    pub fn build(self) -> Result<PreparedRun> {
        let t0 = Instant::now();
        let choice = crate::backend::choose(&self.backend, crate::backend::HostFacts::probe)?;
        debug!(backend = choice.backend.name(), reason = %choice.reason);
        let cwd = std::env::current_dir()
            .map_err(|e| Error::op("cannot read the current directory", e))?;
        let workspace = match &self.workspace {
            Some(w) => {
                let flag = format!("--workspace {}", w.display());
                resolve_cli_path(&absolute_lexical(w, &cwd))
                    .and_then(|p| fs::canonicalize(&p).map_err(|e| Error::op("", e)))
                    .map_err(|e| e.context(flag))?
            }
            None => {
                let ws =
                    fs::canonicalize(&cwd).map_err(|e| Error::op("the current directory", e))?;
                refuse_broad_workspace(&ws, std::env::var_os("HOME").map(PathBuf::from))?;
                ws
            }
        };
        let presets = self
            .presets
            .iter()
            .map(|n| {
                crate::presets::find(n)
                    .and_then(|p| p.resolve(&crate::presets::HostDirs::from_env()))
            })
            .collect::<Result<Vec<_>>>()?;
        if self.preset_net.is_some() && presets.is_empty() {
            return Err(Error::Argument(
                "--preset-net admits the registry hosts of the presets given; add --preset NAME \
                 (see `terra presets`)"
                    .into(),
            ));
        }
        let policy_file = self.policy_file(&workspace)?;
        // A profile's limits (NAME.limits.json) under the command line's.
        let profile_limits = match (&policy_file, &self.policy) {
            (Some((file, _)), None) => crate::profile::limits_of(file)?,
            _ => crate::profile::ProfileLimits::default(),
        };
        // A profile's variables (NAME.env.json), under --env.
        let profile_env = match (&policy_file, &self.policy) {
            (Some((file, _)), None) => crate::profile::env_of(file)?,
            _ => Vec::new(),
        };
        // Refused before anything runs: a save that could not be written.
        let save_target = self
            .save_profile
            .as_deref()
            .map(|n| crate::save::profile_target(n, self.force))
            .transpose()?;
        if let Some(t) = &save_target {
            crate::profile::refuse_in_workspace(
                &t.policy,
                &workspace,
                &format!("--save-profile {}:", t.name),
            )?;
        }
        let export = self
            .export_policy
            .as_ref()
            .map(|f| absolute_lexical(f, &cwd));
        if let Some(f) = &export {
            crate::save::check_export(f, self.force)?;
        }
        if self.force && save_target.is_none() && export.is_none() {
            return Err(Error::Argument(
                "--force replaces what --save-profile or --export-policy writes; give one".into(),
            ));
        }
        // The git rules added are named by the landlock backend's refusal
        // (Linux only).
        #[cfg_attr(not(target_os = "linux"), allow(unused_variables))]
        let (mir, origin, git_protected) =
            self.load_policy(policy_file.as_ref(), &presets, &cwd, &workspace)?;
        debug!(phase = "compile", ms = t0.elapsed().as_secs_f64() * 1e3, digest = %mir.decision_digest());

        let t1 = Instant::now();
        // No host probe here (it would cost every run a fork): the broker is
        // built in, and when this host cannot start it (nor the box: both need
        // user namespaces), the supervisor refuses the run.
        let declared = choice.backend.declared(BROKER_BUILT_IN);
        let mediated = mir.network() == NetworkMode::Mediated;
        if mediated && !declared.contains(Capability::NetworkMediated) {
            let why = match choice.backend {
                #[cfg(target_os = "linux")]
                Backend::Landlock => {
                    terra_sandbox::linux::nouserns::missing_reason(Capability::NetworkMediated)
                }
                #[cfg(not(target_os = "linux"))]
                Backend::Landlock => "the landlock backend runs on Linux only",
                Backend::Linux | Backend::Vm => "this build has no network broker",
                Backend::Macos => "this build has no network broker for macOS",
                Backend::Windows => "no network broker runs on Windows in this build",
            };
            // What works instead, where the backend has an alternative.
            let instead = match choice.backend {
                #[cfg(target_os = "linux")]
                Backend::Landlock => {
                    format!(
                        " Instead: {}.",
                        terra_sandbox::linux::nouserns::MEDIATED_INSTEAD
                    )
                }
                _ => String::new(),
            };
            return Err(Error::Unsupported(format!(
                "this policy asks for mediated networking (network mode \"mediated\" or --allow-net), but the {} \
                 backend ({}) declares no network-mediated capability: {why}; refusing instead of falling back to \
                 another network mode.{instead}",
                choice.backend.name(),
                choice.reason
            )));
        }
        let mediator = mediated.then(|| MEDIATOR.to_string());
        if !workspace.is_dir() {
            return Err(Error::Argument(format!(
                "the workspace {} is not a directory",
                workspace.display()
            )));
        }
        if workspace == Path::new("/") {
            return Err(Error::Argument(
                "the workspace would be / (the whole host); run from a project directory or pass --workspace DIR".into(),
            ));
        }
        let box_cwd = match fs::canonicalize(&cwd) {
            Ok(c) if c.starts_with(&workspace) => c,
            _ => workspace.clone(),
        };
        // A missing download cache would be skipped (`missing: skip`) and
        // the fetch would have nowhere to write: make it first, as the
        // toolchain itself would on the host.
        let mut notes = Vec::new();
        for p in &presets {
            notes.extend(crate::presets::make_caches(p)?);
        }
        let temp = make_temp_dir()?;
        let bindings = Bindings {
            workspace: workspace.clone(),
            temp: temp.clone(),
            minimal_roots: terra_policy::default_minimal_roots(),
            mediator: mediator.clone(),
        };
        let result = (|| {
            #[cfg(target_os = "linux")]
            if choice.backend == Backend::Landlock {
                refuse_missing_on_landlock(
                    &mir,
                    &bindings,
                    declared,
                    &choice.reason,
                    &git_protected,
                )?;
            }
            let plan = terra_policy::compile_plan(&mir, &bindings.host_bindings(), declared)
                .map_err(|e| {
                    Error::policy(
                        format!(
                            "policy refused by the {} backend ({})",
                            choice.backend.name(),
                            choice.reason
                        ),
                        e,
                    )
                })?;
            debug!(
                phase = "resolve",
                ms = t1.elapsed().as_secs_f64() * 1e3,
                rules = plan.rules().len()
            );
            // The proxy environment comes before --env, which may override it
            // (harmless: the box has no other route out).
            let proxy = match (mediated, choice.backend) {
                (false, _) => Vec::new(),
                // The guest reaches the box's proxy through QEMU's forward.
                (true, Backend::Vm) => proxy_env(std::net::SocketAddr::V4(terra_vm::qemu::PROXY)),
                (true, _) => proxy_env(self.proxy.unwrap_or_else(terra_netd::proxy_listen_addr)),
            };
            // The landlock and macos backends have no private /tmp: HOME and
            // TMPDIR name the run's temp directory at its host path.
            let tmp = match choice.backend {
                Backend::Linux | Backend::Vm => OsString::from("/tmp"),
                Backend::Landlock | Backend::Macos | Backend::Windows => {
                    temp.clone().into_os_string()
                }
            };
            // Preset variables first, then the profile's, the proxy's,
            // then --env.
            let mut base: Vec<(OsString, OsString)> =
                presets.iter().flat_map(|p| p.env.clone()).collect();
            base.extend(profile_vars(&profile_env)?);
            if mir.network() == NetworkMode::None {
                base.extend(
                    NO_NETWORK_RETRIES
                        .iter()
                        .map(|(k, v)| (OsString::from(k), OsString::from(v))),
                );
            }
            base.extend(proxy);
            let env = box_env(&base, &self.env, &tmp)?;
            let save = (save_target.is_some() || export.is_some()).then(|| SavePlan {
                profile: save_target.clone(),
                export: export.clone(),
                vars: saved_vars(&presets, &profile_env, &self.env),
                force: self.force,
            });
            let timeout_ms = self
                .timeout
                .as_deref()
                .map(parse_duration)
                .transpose()?
                .map(|d| d.as_millis() as u64);
            // `-` is standard output; the supervisor opens the receipt's
            // directory and checks the name before the box starts.
            let limits = self.requested_limits(&profile_limits)?;
            let receipt = self.receipt.as_ref().map(|r| {
                if r.as_os_str() == "-" {
                    r.clone()
                } else {
                    absolute_lexical(r, &cwd)
                }
            });
            let vm = match choice.backend {
                Backend::Vm => Some(self.vm_boot(&profile_limits)?),
                _ => None,
            };
            let request = RunRequest {
                version: REQUEST_VERSION,
                parent_pid: std::process::id() as i32,
                backend: choice.backend.name().into(),
                backend_reason: choice.reason.clone(),
                mir_hex: hex(mir.bytes()),
                decision_digest: mir.decision_digest(),
                policy: origin,
                bindings,
                declared: declared.iter().map(|c| c.name().to_string()).collect(),
                cwd: box_cwd,
                argv_hex: self.command.iter().map(|a| hex_os(a)).collect(),
                env_hex: env.iter().map(|(k, v)| (hex_os(k), hex_os(v))).collect(),
                timeout_ms,
                receipt,
                // The supervisor leaves the temp directory in place: `terra
                // run` keeps or removes it once the supervisor ended, by the
                // run's outcome (temp.rs).
                keep_temp: true,
                limits: crate::limits::LimitPlan::default(),
                vm,
            };
            Ok(PreparedRun {
                plan,
                request,
                limits,
                require_limits: self.require_limits
                    || profile_limits.require_limits.unwrap_or(false),
                notes,
                save,
            })
        })();
        if result.is_err() {
            let _ = fs::remove_dir(&temp);
        }
        result
    }

    /// The vm backend's guest: QEMU, the kernel, the cached vmlinux and
    /// initramfs (made now when absent), the accelerator. A host without
    /// QEMU or a kernel is refused with what to install.
    #[cfg(target_os = "linux")]
    fn vm_boot(&self, profile: &crate::profile::ProfileLimits) -> Result<terra_vm::Boot> {
        let memory_mib = self
            .vm_memory
            .as_deref()
            .or(profile.vm_memory.as_deref())
            .map(|s| {
                crate::limits::parse_size(s)
                    .ok()
                    .map(|b| b >> 20)
                    .filter(|m| (64..=65_536).contains(m))
                    .map(|m| m as u32)
                    .ok_or_else(|| {
                        Error::Argument(format!(
                            "--vm-memory {s}: between 64M and 64G (e.g. 256M, 1G)"
                        ))
                    })
            })
            .transpose()?;
        let ready_ms = self
            .vm_ready_timeout
            .as_deref()
            .map(|s| {
                parse_duration(s)
                    .map(|d| d.as_millis() as u64)
                    .map_err(|e| {
                        Error::Argument(e.to_string().replace("--timeout", "--vm-ready-timeout"))
                    })
            })
            .transpose()?;
        let wishes = terra_vm::assets::Wishes {
            kernel: self.kernel.clone().or_else(|| profile.vm_kernel.clone()),
            memory_mib,
            ready_ms,
        };
        terra_vm::assets::prepare(&wishes)
            .map_err(|e| Error::Unsupported(format!("the vm backend cannot run here: {e}")))
    }

    #[cfg(not(target_os = "linux"))]
    fn vm_boot(&self, _profile: &crate::profile::ProfileLimits) -> Result<terra_vm::Boot> {
        Err(Error::Unsupported(
            "the vm backend runs on Linux only in this build".into(),
        ))
    }

    /// The limit flags, parsed (each refusal names its flag).
    fn requested_limits(
        &self,
        profile: &crate::profile::ProfileLimits,
    ) -> Result<crate::limits::Requested> {
        use crate::limits::{parse_cpus, parse_size};
        // The command line's value, else the profile's.
        let flag =
            |name: &str,
             v: &Option<String>,
             from_profile: &Option<String>,
             parse: fn(&str) -> std::result::Result<u64, crate::limits::ValueError>| {
                v.as_ref()
                    .or(from_profile.as_ref())
                    .map(String::as_str)
                    .map(|s| parse(s).map_err(|why| Error::Argument(format!("{name} {s}: {why}"))))
                    .transpose()
            };
        let req = crate::limits::Requested {
            memory: flag("--memory", &self.memory, &profile.memory, parse_size)?,
            pids: flag("--pids", &self.pids, &profile.pids, |s| {
                match s.trim().parse::<u64>() {
                    Ok(n) if n > 0 => Ok(n),
                    _ => Err(crate::limits::ValueError::NotProcesses),
                }
            })?,
            millicpus: flag("--cpus", &self.cpus, &profile.cpus, parse_cpus)?,
            max_file_size: flag(
                "--max-file-size",
                &self.max_file_size,
                &profile.max_file_size,
                parse_size,
            )?,
        };
        if (self.require_limits || profile.require_limits == Some(true)) && req.is_empty() {
            return Err(Error::Argument(
                "--require-limits: no limit was asked (--memory, --pids, --cpus, --max-file-size)"
                    .into(),
            ));
        }
        Ok(req)
    }

    /// The policy file: `--policy`, `--profile NAME`, or the default profile
    /// when there is one (none: the embedded default policy), with how to
    /// name it in messages.
    fn policy_file(&self, workspace: &Path) -> Result<Option<(PathBuf, String)>> {
        match (&self.policy, &self.profile) {
            (Some(_), Some(_)) => Err(Error::Argument(
                "--policy and --profile name two policies; give one".into(),
            )),
            (Some(p), None) => Ok(Some((p.clone(), format!("--policy {}", p.display())))),
            (None, Some(name)) => {
                let file = crate::profile::named(name)?;
                let label = format!("--profile {name}");
                crate::profile::refuse_in_workspace(&file, workspace, &label)?;
                Ok(Some((file, label)))
            }
            (None, None) => match crate::profile::default_file() {
                Some(file) => {
                    let label = "the default profile".to_string();
                    crate::profile::refuse_in_workspace(&file, workspace, &label)?;
                    Ok(Some((file, label)))
                }
                None => Ok(None),
            },
        }
    }

    /// The policy (default or the policy file) plus the command line's rules.
    fn load_policy(
        &self,
        policy: Option<&(PathBuf, String)>,
        presets: &[crate::presets::Resolved],
        cwd: &Path,
        workspace: &Path,
    ) -> Result<(Mir, PolicyOrigin, Vec<workspace_git::Protected>)> {
        let (base, source, format, digest) = match policy {
            None => {
                let src = terra_policy::DEFAULT_POLICY_SOURCE.as_bytes();
                let mir = terra_policy::compile_source(src)
                    .map_err(|e| Error::policy("the default policy", e))?;
                (mir, "default".to_string(), "json", artifact_digest(src))
            }
            Some((p, label)) => {
                let grants = !self.read.is_empty()
                    || !self.write.is_empty()
                    || !self.allow_net.is_empty()
                    || !presets.is_empty();
                if grants {
                    return Err(Error::Argument(format!(
                        "with a policy file ({label}) only --deny may be added (a restriction); put --read, --write, \
                         --allow-net and --preset grants in the policy file"
                    )));
                }
                if self.no_process_tree {
                    return Err(Error::Argument(format!(
                        "with a policy file ({label}) --no-process-tree is not added; write \
                         \"process\": {{\"treeConfinement\": \"disabled\"}} in the policy file"
                    )));
                }
                // A profile is host configuration: read only when the caller
                // owns it (profile::open_trusted); --policy names its file on purpose.
                let bytes = if self.policy.is_some() {
                    crate::files::read_capped(p, self.max_policy_len)
                        .map_err(|e| Error::Input(e).context(label.clone()))?
                } else {
                    crate::profile::read_trusted(p, self.max_policy_len, label)?.ok_or_else(
                        || Error::Argument(format!("{label}: {} is gone", p.display())),
                    )?
                };
                let context = || {
                    if label.starts_with("--policy") {
                        label.clone()
                    } else {
                        format!("{label} {}", p.display())
                    }
                };
                let (mir, format) = if bytes.starts_with(b"MMIR") {
                    let mir = Mir::decode(&bytes).map_err(|e| Error::policy(context(), e))?;
                    (mir, "mir")
                } else {
                    let mir = terra_policy::compile_source(&bytes)
                        .map_err(|e| Error::policy(context(), e))?;
                    (mir, "json")
                };
                let shown = absolute_lexical(p, cwd).display().to_string();
                (mir, shown, format, artifact_digest(&bytes))
            }
        };
        let mut overlay = Vec::new();
        let mut builder = base.to_builder();
        let mut git = workspace_git::GitProtection::find(
            workspace,
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|h| h.is_absolute())
                .as_deref(),
        )?;
        let lists: [(&[PathBuf], Access); 3] = [
            (&self.read, Access::Read),
            (&self.write, Access::Write),
            (&self.deny, Access::Deny),
        ];
        for (paths, access) in lists {
            for p in paths {
                let flag = || format!("--{access} {}", p.display());
                let (root, path) =
                    cli_rule_path(p, cwd, workspace).map_err(|e| e.context(flag()))?;
                if access == Access::Write {
                    git.cli_write(root, &path, &flag())?;
                }
                builder
                    .add_rule(access, root, &path, Scope::Tree, Missing::Error)
                    .map_err(|e| Error::policy(flag(), e))?;
                overlay.push(match root {
                    RootKind::Workspace => format!("{access} workspace:{path}"),
                    _ => format!("{access} {path}"),
                });
            }
        }
        for preset in presets {
            for rule in &preset.rules {
                let flag = || {
                    format!(
                        "--preset {} ({} {})",
                        preset.name,
                        rule.access,
                        rule.path.display()
                    )
                };
                let (root, path) =
                    cli_rule_path(&rule.path, cwd, workspace).map_err(|e| e.context(flag()))?;
                builder
                    .add_rule(rule.access, root, &path, Scope::Tree, Missing::Skip)
                    .map_err(|e| Error::policy(flag(), e))?;
                overlay.push(format!(
                    "preset {}: {} {}",
                    preset.name,
                    rule.access,
                    rule.path.display()
                ));
            }
        }
        for dest in &self.allow_net {
            let d = crate::allow_net::parse(dest)?;
            builder.set_network(NetworkMode::Mediated);
            builder
                .add_destination(d.host, d.port, false, d.allow_private)
                .map_err(|e| Error::policy(format!("--allow-net {dest}"), e))?;
            overlay.push(format!(
                "allow-net {}:{}{}",
                d.host.to_ascii_lowercase(),
                d.port,
                if d.allow_private {
                    " (private addresses allowed)"
                } else {
                    ""
                }
            ));
        }
        if let Some(private) = self.preset_net {
            for preset in presets {
                for host in preset.hosts {
                    let port = crate::presets::REGISTRY_PORT;
                    builder.set_network(NetworkMode::Mediated);
                    builder
                        .add_destination(host, port, false, private)
                        .map_err(|e| {
                            Error::policy(format!("--preset {} --preset-net", preset.name), e)
                        })?;
                    overlay.push(format!(
                        "preset {}: allow-net {host}:{port}{}",
                        preset.name,
                        if private {
                            " (private addresses allowed)"
                        } else {
                            ""
                        }
                    ));
                }
            }
        }
        if self.no_process_tree {
            builder.set_process_tree(terra_policy::ProcessTree::Disabled);
            overlay.push("process-tree disabled".into());
        }
        let git_protected = git.apply(&mut builder, &base)?;
        overlay.extend(
            git_protected
                .iter()
                .map(workspace_git::Protected::overlay_line),
        );
        let mir = builder
            .build()
            .map_err(|e| Error::policy("the policy with the command line's rules", e))?;
        let origin = PolicyOrigin {
            source,
            format: format.into(),
            artifact_digest: digest,
            overlay,
        };
        Ok((mir, origin, git_protected))
    }
}

/// Without `--workspace`, the current directory becomes the writable
/// workspace: refused when that is `/`, `/tmp`, `$HOME` or a parent of
/// `$HOME` (from the home directory, `terra run` would make `~/.ssh` and
/// `~/.bashrc` writable). `--workspace DIR` names such a directory on purpose.
pub fn refuse_broad_workspace(ws: &Path, home: Option<PathBuf>) -> Result<()> {
    let home = home
        .filter(|h| h.is_absolute())
        .and_then(|h| fs::canonicalize(h).ok());
    let tmp = fs::canonicalize("/tmp").unwrap_or_else(|_| PathBuf::from("/tmp"));
    let what = if ws == Path::new("/") {
        "/, the whole host".to_string()
    } else if home.as_deref() == Some(ws) {
        "your home directory: ~/.ssh, ~/.bashrc and every other file in it would be writable"
            .to_string()
    } else if ws == tmp {
        "the shared temp directory".to_string()
    } else if let Some(h) = home.as_deref().filter(|h| h.starts_with(ws)) {
        format!("a parent of your home directory {}", h.display())
    } else {
        return Ok(());
    };
    let on_purpose = if ws == Path::new("/") {
        String::new()
    } else {
        format!(" (--workspace {} if you mean it)", ws.display())
    };
    Err(Error::Argument(format!(
        "the current directory {} is {what}; without --workspace it would become the box's writable \
         workspace. Run from a project directory, or pass --workspace DIR{on_purpose}",
        ws.display(),
    )))
}

/// On the landlock backend, a plan needing a capability it does not declare
/// is refused with each capability, why it is missing, and the rules (or
/// modes) that need it, quoted.
#[cfg(target_os = "linux")]
fn refuse_missing_on_landlock(
    mir: &Mir,
    bindings: &Bindings,
    declared: CapabilitySet,
    reason: &str,
    git_protected: &[workspace_git::Protected],
) -> Result<()> {
    // Resolved against every capability only to see what the plan needs.
    let Ok(plan) = terra_policy::compile_plan(mir, &bindings.host_bindings(), CapabilitySet::ALL)
    else {
        return Ok(()); // compile_plan below reports the plan's own error
    };
    let missing = plan.required_capabilities().missing_from(declared);
    if missing.is_empty() {
        return Ok(());
    }
    let mut parts = Vec::new();
    for c in missing {
        let mut quoted: Vec<String> = plan
            .rules()
            .iter()
            .filter(|r| {
                if c == Capability::FsProtectCreate {
                    r.protect_create
                } else {
                    terra_policy::capability::capability_for_access(r.access) == c
                }
            })
            .map(|r| {
                format!(
                    "`{} {} {}` ({})",
                    r.access.name(),
                    r.scope.name(),
                    r.path,
                    r.source_root
                )
            })
            .collect();
        if c == Capability::RootEphemeralWrite {
            quoted.push("`root mode ephemeral-write`".into());
        }
        if c == Capability::ProcessTree {
            quoted.push("`process treeConfinement required`".into());
        }
        parts.push(format!(
            "{c} ({}), needed by {}",
            terra_sandbox::linux::nouserns::missing_reason(c),
            if quoted.is_empty() {
                "the policy's network settings".to_string()
            } else {
                quoted.join(", ")
            }
        ));
    }
    // Refused for the read-only git paths terra added: say how to lift them.
    let unprotectable = plan
        .required_capabilities()
        .missing_from(declared)
        .into_iter()
        .any(|c| matches!(c, Capability::FsDenyWrite | Capability::FsProtectCreate));
    let lifts: Vec<String> = git_protected
        .iter()
        .filter(|_| unprotectable)
        .filter(|p| {
            let host = bindings.workspace.join(&p.rel);
            plan.rules().iter().any(|r| {
                r.access == Access::DenyWrite && Path::new(r.path.as_str()).starts_with(&host)
            })
        })
        .map(|p| format!("--write {}", p.rel))
        .collect();
    let git_hint = if lifts.is_empty() {
        String::new()
    } else {
        format!(
            "; terra makes the workspace's git metadata read-only in a box (its hooks and configuration run \
             with your next git): pass {} to let the box write it",
            lifts.join(" ")
        )
    };
    Err(Error::Unsupported(format!(
        "the landlock backend ({reason}) does not declare {}; use --backend linux where user namespaces \
         work{git_hint}",
        parts.join("; ")
    )))
}

/// The proxy environment of a mediated run: the box's service address, or
/// on macOS the broker's loopback listener.
fn proxy_env(addr: std::net::SocketAddr) -> Vec<(OsString, OsString)> {
    terra_netd::proxy_env(addr)
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
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
fn cli_rule_path(p: &Path, cwd: &Path, workspace: &Path) -> Result<(RootKind, String)> {
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
            .ok_or_else(|| Error::Argument("paths in policies must be valid UTF-8".into()))
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
fn resolve_cli_path(abs: &Path) -> Result<PathBuf> {
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
                    return Err(Error::Argument(format!(
                        "{} is a symlink owned by uid {uid}, the uid the box runs as, so an earlier run \
                         could have planted it; refusing to follow it (name the real path instead)",
                        next.display()
                    )));
                }
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(Error::io(
                        "",
                        abs,
                        std::io::Error::from_raw_os_error(nix::errno::Errno::ELOOP as i32),
                    ));
                }
                let target = fs::read_link(&next).map_err(|e| Error::io("", &next, e))?;
                if target.is_absolute() {
                    cur = PathBuf::from("/");
                }
                push(&mut pending, &target);
            }
            Ok(_) => cur = next,
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(nix::errno::Errno::ENOTDIR as i32) =>
            {
                if pending.iter().any(|c| c == "..") {
                    return Err(Error::io("", &next, e));
                }
                cur = next;
                while let Some(rest) = pending.pop() {
                    cur.push(rest);
                }
            }
            Err(e) => return Err(Error::io("", &next, e)),
        }
    }
    Ok(cur)
}

/// A fresh private (0700) directory for the run's /tmp, outside the state
/// directory, in `$TMPDIR` (or /tmp); its path canonical.
fn make_temp_dir() -> Result<PathBuf> {
    let base = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let base = fs::canonicalize(&base).map_err(|e| Error::io("", &base, e))?;
    let uid = nix::unistd::geteuid().as_raw();
    crate::state::new_private_dir(&base, &format!("terra-tmp-{uid}"))
}

/// The workload's environment: the allowlist copied from terra's environment,
/// HOME and TMPDIR set to `tmp` (the box's private /tmp, or on the landlock
/// backend the run's temp directory), then `base` (the proxy
/// environment of a mediated run), then `--env`.
pub fn box_env(
    base: &[(OsString, OsString)],
    extra: &[OsString],
    tmp: &OsStr,
) -> Result<Vec<(OsString, OsString)>> {
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
    set("HOME".into(), tmp.to_owned(), &mut env);
    set("TMPDIR".into(), tmp.to_owned(), &mut env);
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
                    Error::Argument(format!(
                        "--env {}: not set in terra's environment (use NAME=VALUE)",
                        e.to_string_lossy()
                    ))
                })?;
                (e.clone(), v)
            }
        };
        if name.is_empty() || name.as_bytes().contains(&0) || value.as_bytes().contains(&0) {
            return Err(Error::Argument(format!(
                "--env {:?}: invalid name or value",
                e.to_string_lossy()
            )));
        }
        set(name, value, &mut env);
    }
    env.sort();
    Ok(env)
}

/// A profile's variables with values: `null` ones copied from terra's
/// environment, refused when it has no such variable.
fn profile_vars(vars: &[crate::save::SavedVar]) -> Result<Vec<(OsString, OsString)>> {
    vars.iter()
        .map(|(k, v)| match v {
            Some(v) => Ok((k.clone(), v.clone())),
            None => std::env::var_os(k).map(|v| (k.clone(), v)).ok_or_else(|| {
                Error::Argument(format!(
                    "the profile's variable {} (copied from terra's environment) is not set",
                    k.to_string_lossy()
                ))
            }),
        })
        .collect()
}

/// What a saved profile keeps of the variables: the presets' and the
/// profile's, then `--env` (`NAME=VALUE` with its value, a bare `NAME` by
/// name only), the later one of a name winning.
fn saved_vars(
    presets: &[crate::presets::Resolved],
    profile: &[crate::save::SavedVar],
    extra: &[OsString],
) -> Vec<crate::save::SavedVar> {
    let mut out: Vec<crate::save::SavedVar> = Vec::new();
    let mut set = |k: OsString, v: Option<OsString>| {
        out.retain(|(n, _)| *n != k);
        out.push((k, v));
    };
    for (k, v) in presets.iter().flat_map(|p| p.env.iter()) {
        set(k.clone(), Some(v.clone()));
    }
    for (k, v) in profile {
        set(k.clone(), v.clone());
    }
    for e in extra {
        let b = e.as_bytes();
        match b.iter().position(|c| *c == b'=') {
            Some(i) => set(
                OsStr::from_bytes(&b[..i]).to_owned(),
                Some(OsStr::from_bytes(&b[i + 1..]).to_owned()),
            ),
            None => set(e.clone(), None),
        }
    }
    out
}

/// `30`, `30s`, `500ms`, `5m`, `1h`; zero is refused.
pub fn parse_duration(s: &str) -> Result<Duration> {
    let bad = || {
        Error::Argument(format!(
            "--timeout {s:?}: expected a duration such as 30s, 500ms, 5m or 1h"
        ))
    };
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
        return Err(Error::Argument(format!(
            "--timeout {s:?}: must be more than zero"
        )));
    }
    Ok(Duration::from_millis(ms))
}

/// What `--save-profile` and `--export-policy` did after a run.
#[derive(Debug)]
pub enum SaveOutcome {
    /// Written (or nothing asked): what to say, unless quiet.
    Saved(Vec<String>),
    /// Not written, because the workload failed: said even when quiet.
    NotSaved(String),
}

impl PreparedRun {
    /// Decides the mechanism of every limit asked and makes its cgroups
    /// (a real run only, never `--dry-run`). With `--require-limits`, a
    /// limit nothing enforces refuses the run, and nothing is left behind.
    pub fn apply_limits(&mut self) -> Result<()> {
        let landlock = self.request.backend == crate::backend::Backend::Landlock.name();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let tag = format!("{}-{nanos:09}", std::process::id());
        let plan =
            crate::limits::prepare(&self.limits, landlock, nix::unistd::getuid().as_raw(), &tag);
        if self.require_limits {
            if let Err(e) = plan.require_all() {
                plan.remove_cgroups();
                return Err(e);
            }
        }
        self.request.limits = plan;
        Ok(())
    }

    /// Writes what `--save-profile` and `--export-policy` asked, after a
    /// run that ended with `exit` (None: `--dry-run`): only when the
    /// workload exited 0. What to say on stderr is in the [`SaveOutcome`].
    pub fn save_after(&self, exit: Option<i32>) -> Result<SaveOutcome> {
        let Some(save) = &self.save else {
            return Ok(SaveOutcome::Saved(Vec::new()));
        };
        if let Some(code) = exit.filter(|c| *c != 0) {
            let what: Vec<String> = save
                .profile
                .iter()
                .map(|t| format!("the profile {}", t.name))
                .chain(save.export.iter().map(|f| f.display().to_string()))
                .collect();
            return Ok(SaveOutcome::NotSaved(format!(
                "not saved: {} (the workload exited {code}; a profile keeps a command line that worked)",
                what.join(" and ")
            )));
        }
        let mir =
            Mir::decode(self.plan.mir_bytes()).map_err(|e| Error::policy("the run's policy", e))?;
        let mut said = Vec::new();
        if let Some(t) = &save.profile {
            crate::save::write_profile(t, &mir, &save.vars, save.force)?;
            said.push(format!(
                "saved the profile {} ({}); run with --profile {}",
                t.name,
                t.policy.display(),
                t.name
            ));
        }
        if let Some(f) = &save.export {
            crate::save::export_policy(f, &mir, save.force)?;
            said.push(format!("wrote the policy source {}", f.display()));
        }
        Ok(SaveOutcome::Saved(said))
    }

    /// What `terra run` says on stderr before the run starts: the backend
    /// `--backend auto` took when it is not linux, with what it cannot
    /// confine; on the linux backend, a workspace under `/tmp` is bound
    /// through at its path inside the box's private `/tmp`, so a file
    /// written elsewhere in `/tmp` is not the host's and goes with the run's
    /// temp directory; a preset's cache that could not be made.
    pub fn warnings(&self) -> Vec<String> {
        let chosen =
            Backend::from_name(&self.request.backend).map(|backend| crate::backend::Choice {
                backend,
                reason: self.request.backend_reason.clone(),
            });
        let mut out: Vec<String> = chosen
            .as_ref()
            .and_then(crate::backend::auto_notice)
            .into_iter()
            .collect();
        out.extend(self.tmp_warning());
        out.extend(self.notes.iter().cloned());
        out
    }

    /// What `terra run` says after a workload that exited `code` (not 0,
    /// not terra's own 125): the names (never the values) of terra's
    /// environment variables the box did not get, since a missing
    /// certificate or configuration variable fails without naming itself.
    pub fn dropped_env_note(&self, code: i32) -> Option<String> {
        if code == 0 || i64::from(code) == i64::from(crate::EXIT_REFUSED) {
            return None;
        }
        let given: Vec<OsString> = self
            .request
            .env()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        let mut dropped: Vec<String> = std::env::vars_os()
            .map(|(k, _)| k)
            .filter(|k| !given.contains(k))
            .map(|k| k.to_string_lossy().into_owned())
            .collect();
        dropped.sort();
        dropped.dedup();
        if dropped.is_empty() {
            return None;
        }
        const SHOWN: usize = 40;
        let more = dropped.len().saturating_sub(SHOWN);
        let mut s = format!(
            "the workload exited {code}; the box did not get these variables of your environment \
             (names only; pass one with --env NAME): {}",
            dropped[..dropped.len().min(SHOWN)].join(" ")
        );
        if more > 0 {
            s.push_str(&format!(" and {more} more"));
        }
        let certs: Vec<&str> = dropped
            .iter()
            .map(String::as_str)
            .filter(|n| crate::presets::CERT_VARS.contains(n))
            .collect();
        if !certs.is_empty() {
            s.push_str(&format!(
                "\nterra:   {} name certificates: --preset rust, node or python passes its \
                 toolchain's with the files readable (see `terra presets`)",
                certs.join(" ")
            ));
        }
        Some(s)
    }

    /// Where the workload's program is, looked up on the host with the
    /// box's PATH (see [`crate::command_check`]).
    pub fn program(&self) -> crate::command_check::Program {
        let argv = self.request.argv().unwrap_or_default();
        let path = self
            .request
            .env()
            .unwrap_or_default()
            .into_iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v)
            .unwrap_or_default();
        match argv.first() {
            Some(p) => crate::command_check::locate(p, &path, &self.request.cwd, &self.plan),
            None => crate::command_check::Program::NotFound,
        }
    }

    /// The hint when the workload's program is on the host outside every grant.
    pub fn program_hint(&self) -> Option<String> {
        let argv = self.request.argv().unwrap_or_default();
        let program = argv.first()?;
        crate::command_check::hint(
            program,
            &self.program(),
            self.request.policy.source != "default",
        )
    }

    fn tmp_warning(&self) -> Vec<String> {
        let ws = &self.request.bindings.workspace;
        let mut out = Vec::new();
        if self.request.backend == Backend::Linux.name() && ws.starts_with("/tmp") {
            out.push(format!(
                "the workspace {} is under /tmp, but the box has a private /tmp (the run's temp directory) \
                 with only the workspace bound through: files written in /tmp outside {} do not reach the \
                 host's /tmp",
                ws.display(),
                ws.display()
            ));
        }
        out
    }

    /// What `--dry-run` prints: the resolved plan, its decision digest, the
    /// environment and argv, and the backend's program (for a mediated plan
    /// also the broker's, generated from the tables its filters are built from).
    #[cfg(target_os = "linux")]
    pub fn dry_run_text(&self) -> String {
        use std::fmt::Write as _;
        let r = &self.request;
        let plan = &self.plan;
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
        let _ = writeln!(s, "backend:         {} ({})", r.backend, r.backend_reason);
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
        if let Some(m) = &r.bindings.mediator {
            let _ = writeln!(s, "mediator:        {m}");
        }
        let _ = writeln!(s, "root:            {}", plan.root_mode());
        let _ = writeln!(s, "process tree:    {}", plan.process_tree());
        if !self.limits.is_empty() {
            // The mechanism is decided when the run starts (cgroups are
            // made then, never for a dry run).
            let l = &self.limits;
            let mut asked = Vec::new();
            asked.extend(
                l.memory
                    .map(|m| format!("memory {}", crate::limits::size_words(m))),
            );
            asked.extend(l.pids.map(|p| format!("pids {p}")));
            asked.extend(l.millicpus.map(|c| format!("cpus {}", c as f64 / 1000.0)));
            asked.extend(
                l.max_file_size
                    .map(|f| format!("max file size {}", crate::limits::size_words(f))),
            );
            let _ = writeln!(
                s,
                "limits:          {}{} (mechanism chosen at start: cgroup v2, cgroup v1, rlimit or none)",
                asked.join(", "),
                if self.require_limits { ", all required" } else { "" }
            );
        }
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
        let _ = writeln!(s, "workspace:       {}", r.bindings.workspace.display());
        let landlock = r.backend == Backend::Landlock.name();
        let _ = writeln!(
            s,
            "temp:            {} ({})",
            r.bindings.temp.display(),
            if landlock {
                "granted and named by HOME and TMPDIR; /tmp is the host's"
            } else {
                "bound at /tmp"
            }
        );
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
        let program = match self.program() {
            crate::command_check::Program::Granted(p) => format!("{} (granted)", p.display()),
            crate::command_check::Program::NotFound => {
                "not found in any directory of the box's PATH on the host".to_string()
            }
            found @ crate::command_check::Program::OutsideGrants { .. } => {
                let name = r
                    .argv()
                    .unwrap_or_default()
                    .first()
                    .cloned()
                    .unwrap_or_default();
                format!(
                    "NOT IN THE BOX: {}",
                    crate::command_check::hint(&name, &found, r.policy.source != "default")
                        .unwrap_or_default()
                )
            }
        };
        let _ = writeln!(s, "program:         {program}");
        let config = terra_sandbox::linux::BoxConfig {
            plan: plan.clone(),
            argv: r.argv().unwrap_or_default(),
            cwd: r.cwd.clone(),
            env: r.env().unwrap_or_default(),
            temp_dir: r.bindings.temp.clone(),
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
            dns_report: None,
            hostname: "terra".into(),
            rlimits: Default::default(),
            vm: r.vm.clone(),
        };
        let _ = writeln!(s, "backend program ({}):", r.backend);
        let program = if landlock {
            terra_sandbox::linux::nouserns::describe(&config)
        } else {
            terra_sandbox::linux::describe(&config)
        };
        for line in program.lines() {
            let _ = writeln!(s, "  {line}");
        }
        if let Some(boot) = &r.vm {
            let _ = writeln!(
                s,
                "vm (terra __vm runs QEMU in the box above; the box's tree, without its /proc and /dev, is QEMU's 9p \
                 share {}):",
                terra_vm::qemu::SHARE_TAG
            );
            let _ = writeln!(s, "  engine:      {}", boot.qemu_version);
            let _ = writeln!(
                s,
                "  accelerator: {} ({})",
                boot.accel.name(),
                boot.accel_reason
            );
            let _ = writeln!(
                s,
                "  kernel:      {} ({}, sha256 {})",
                boot.kernel, boot.kernel_release, boot.kernel_sha256
            );
            let _ = writeln!(s, "  vmlinux:     {}", boot.vmlinux);
            let _ = writeln!(s, "  initramfs:   {}", boot.initramfs);
            let _ = writeln!(
                s,
                "  QEMU's root: {} (read-only), terra at {}, /dev, /proc, the share at /export",
                boot.host_paths.join(" "),
                boot.terra_in_root
            );
            let proxy =
                (plan.network() == NetworkMode::Mediated).then(terra_netd::proxy_listen_addr);
            let _ = writeln!(s, "  command line:");
            for a in terra_vm::qemu::argv(boot, proxy, "/export") {
                let _ = writeln!(s, "    {a}");
            }
            let _ = writeln!(
                s,
                "  guest: terra is init; 9p share at /newroot with its own /proc and /dev; the workload runs chrooted \
                 there as uid {} gid {}, every capability dropped, no_new_privs, the workload's seccomp deny lists, \
                 after the activation check; ready within {} ms or the run is refused",
                nix::unistd::geteuid(),
                nix::unistd::getegid(),
                boot.ready_ms
            );
        }
        if plan.network() == NetworkMode::Mediated {
            let _ = writeln!(s, "network broker (terra __network):");
            for line in terra_netd::describe().lines() {
                let _ = writeln!(s, "  {line}");
            }
        }
        // terra's own roles, from the same tables they install.
        use terra_seccomp::Table;
        let mut roles = vec![(
            "supervisor (terra __supervisor), once the workers run",
            Table::Supervisor,
        )];
        if !landlock {
            roles.push((
                "the box's init (terra __vm), once the workload runs",
                Table::BoxInit,
            ));
            if plan.network() != NetworkMode::Direct {
                roles.push((
                    "the workload's connect() (the AF_UNIX rule; mediated: judged by the broker, handed off)",
                    Table::WorkloadNotify,
                ));
                roles.push((
                    "the box's network service (connect notifications; mediated: proxy, DNS stub)",
                    Table::BoxService,
                ));
            }
        }
        for (who, table) in roles {
            let _ = writeln!(s, "{who}:");
            let text =
                terra_seccomp::describe(table, None).unwrap_or_else(|e| format!("seccomp: {e}\n"));
            for line in text.lines() {
                let _ = writeln!(s, "  {line}");
            }
        }
        s
    }
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
            assert!(
                matches!(parse_duration(bad), Err(Error::Argument(m)) if m.starts_with("--timeout ")),
                "{bad}"
            );
        }
    }

    #[test]
    fn env_is_an_allowlist() {
        let env = box_env(&[], &["A=b".into(), "EMPTY=".into()], OsStr::new("/tmp")).unwrap();
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
        // The landlock backend's HOME and TMPDIR: the run's temp directory.
        let env = box_env(&[], &[], OsStr::new("/tmp/terra-tmp-0-ab")).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("HOME").unwrap(), "/tmp/terra-tmp-0-ab");
        assert_eq!(get("TMPDIR").unwrap(), "/tmp/terra-tmp-0-ab");
        assert!(box_env(&[], &["=x".into()], OsStr::new("/tmp")).is_err());
        assert!(box_env(
            &[],
            &["TERRA_SURELY_UNSET_VARIABLE".into()],
            OsStr::new("/tmp")
        )
        .is_err());
        // The proxy environment of a mediated run, overridable by --env.
        let env = box_env(
            &proxy_env(terra_netd::proxy_listen_addr()),
            &["NO_PROXY=x".into()],
            OsStr::new("/tmp"),
        )
        .unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("HTTPS_PROXY").unwrap(), "http://127.0.0.1:3128");
        assert_eq!(get("all_proxy").unwrap(), "http://127.0.0.1:3128");
        assert_eq!(get("NO_PROXY").unwrap(), "x");
        assert_eq!(get("no_proxy").unwrap(), "");
    }

    #[test]
    fn unsupported_backends_are_refused_before_anything_is_made() {
        for (name, words) in [
            ("plan9", "unknown backend \"plan9\""),
            ("", "unknown backend \"\""),
        ] {
            let e = RunBuilder {
                backend: name.into(),
                ..RunBuilder::new(vec!["true".into()])
            }
            .build()
            .unwrap_err();
            assert!(
                matches!(&e, Error::Unsupported(m) if m.starts_with(words)),
                "{name}: {e}"
            );
        }
    }

    #[test]
    fn the_windows_backend_resolves_here_for_its_dry_run() {
        // The default policy: what the windows backend declares covers it.
        let p = RunBuilder {
            backend: "windows".into(),
            workspace: Some(std::env::temp_dir()),
            ..RunBuilder::new(vec!["true".into()])
        }
        .build()
        .unwrap();
        let _ = fs::remove_dir(&p.request.bindings.temp);
        assert_eq!(p.request.backend, "windows");
        assert!(!p.request.declared.contains(&"network-mediated".to_string()));
    }
}
