//! A launch plan: everything one launch does, as data. Made from a
//! SandboxPlan by `terra run` (and its dry run), and again from the launch
//! spec by the launcher, with the same code.

use terra_policy::{Access, Capability, CapabilitySet, NetworkMode, RootKind, SandboxPlan};

use crate::dacl::{dacl_entries, denied_by, readable, DaclEntry, Origin};
use crate::error::{Error, Result};
use crate::job::{
    JobLimits, LAUNCHER_JOB, PROCESS_CREATION_ALL_APPLICATION_PACKAGES_OPT_OUT,
    PROCESS_CREATION_CHILD_PROCESS_RESTRICTED, ROLE_CREATION_FLAGS, ROLE_JOB,
    WORKLOAD_CREATION_FLAGS, WORKLOAD_JOB,
};
use crate::mitigation::{ROLE_POLICY, WORKLOAD_POLICY};
use crate::path::PathStyle;
use crate::rights::{ALLOW_READ, DENY_WRITE, NO_INHERITANCE};
use crate::spec::{Grant, GrantKind, LaunchSpec, Peer, Role, Scope};

/// The capabilities the windows backend enforces (docs/sandbox-windows.md
/// says why each one is or is not declared):
///
/// - fs-read, fs-write, fs-deny, fs-deny-write: DACL entries for the
///   per-launch package SID, walked by the launcher;
/// - network-none: the worker's token has no network capability, and the
///   self-check sees that;
/// - process-tree: the workload's job holds its whole tree (no breakaway)
///   and kills it when the launcher's handle closes; the launcher's own
///   job kills the launcher with `terra run`.
///
/// Not declared: network-direct (the workload would need the internetClient
/// capabilities, and would still reach no loopback service), network-mediated
/// and its flags (no broker runs on Windows in this build),
/// root-ephemeral-write (no overlay), fs-protect-create (not built).
pub fn declared_capabilities() -> CapabilitySet {
    CapabilitySet::EMPTY
        .with(Capability::FsRead)
        .with(Capability::FsWrite)
        .with(Capability::FsDeny)
        .with(Capability::FsDenyWrite)
        .with(Capability::NetworkNone)
        .with(Capability::ProcessTree)
}

/// A well-known AppContainer capability: its name and SID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppCapability {
    pub name: &'static str,
    pub sid: &'static str,
}

/// The capability SIDs a role's token carries: none for either.
///
/// The workload has no network, so no internetClient (S-1-15-3-1),
/// internetClientServer (S-1-15-3-2) or privateNetworkClientServer
/// (S-1-15-3-3). The broker has none either: it never opens a socket
/// itself; its wrapper opens each approved one and duplicates it in
/// (`crate::sockets`).
pub fn role_capabilities(role: Role) -> &'static [AppCapability] {
    match role {
        Role::Workload => &[],
        Role::Broker => &[],
    }
}

/// One launch, as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchPlan {
    pub style: PathStyle,
    pub role: Role,
    /// The program the worker runs.
    pub executable: String,
    /// The worker's working directory: a plain drive path (`C:\...`),
    /// never the verbatim `\\?\` form: cmd.exe refuses a UNC working
    /// directory ("UNC paths are not supported", cmderdev/cmder issue 1315,
    /// microsoft/vscode issue 38587), and Codex's Windows sandbox strips the
    /// prefix for the same reason (codex-rs/windows-sandbox-rs/src/path_normalization.rs,
    /// dunce::canonicalize).
    pub cwd: String,
    /// Why the worker can read its program.
    pub program_access: ProgramAccess,
    /// terra's own executable: the self-check worker.
    pub launcher: String,
    pub grants: Vec<Grant>,
    pub peers: Vec<Peer>,
    /// DACL entries in order: the grants', the ancestors kept in place,
    /// then terra's executable when no grant covers it.
    pub entries: Vec<DaclEntry>,
    /// The plan's minimal-runtime read grants: on Windows the system's own
    /// files, readable by every less-privileged AppContainer through the
    /// ACEs Windows ships for ALL RESTRICTED APPLICATION PACKAGES. terra
    /// changes no ACL there (it could not: they belong to TrustedInstaller),
    /// so they are listed, not granted, and not in the launch spec.
    pub baseline: Vec<String>,
}

/// Where a worker's console is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Console {
    /// None at all (DETACHED_PROCESS): a role.
    None,
    /// A windowless console of its own (CREATE_NO_WINDOW), shared by its
    /// console children, never the user's: the workload.
    OwnHidden,
}

/// How the workload reads its program's image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgramAccess {
    /// A read or write grant of the plan covers it.
    Granted,
    /// The minimal runtime (System32) or a system install directory
    /// (Program Files): Windows' own ACEs for ALL APPLICATION PACKAGES
    /// allow read and execute there; terra changes nothing.
    SystemInstall { dir: String },
}

/// What the job, process and token settings of a role are (the same for
/// every launch of the role; no spec can change them).
///
/// | | workload | broker (a role) |
/// |---|---|---|
/// | job | [`WORKLOAD_JOB`]: its tree, kill on close | [`ROLE_JOB`]: one process |
/// | child process policy | not set | restricted |
/// | Win32k | allowed | locked down |
/// | token | AppContainer | less-privileged AppContainer |
/// | console | its own, windowless | none |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSettings {
    pub capabilities: &'static [AppCapability],
    pub job: JobLimits,
    pub launcher_job: JobLimits,
    pub mitigation: [u64; 2],
    pub creation_flags: u32,
    /// PROC_THREAD_ATTRIBUTE_CHILD_PROCESS_POLICY, when set at all.
    pub child_process_policy: Option<u32>,
    /// PROC_THREAD_ATTRIBUTE_ALL_APPLICATION_PACKAGES_POLICY, when set at all.
    pub all_application_packages_policy: Option<u32>,
    pub console: Console,
}

impl WorkerSettings {
    pub fn of(role: Role) -> WorkerSettings {
        match role {
            // A build: children, user32, the files Windows opens to every
            // app (ALL APPLICATION PACKAGES: Program Files, System32, the
            // window station a user32 program attaches to).
            Role::Workload => WorkerSettings {
                capabilities: role_capabilities(role),
                job: WORKLOAD_JOB,
                launcher_job: LAUNCHER_JOB,
                mitigation: WORKLOAD_POLICY,
                creation_flags: WORKLOAD_CREATION_FLAGS,
                child_process_policy: None,
                all_application_packages_policy: None,
                console: Console::OwnHidden,
            },
            // terra's own role: one process, no children, no Win32k, no
            // console, less privileged.
            Role::Broker => WorkerSettings {
                capabilities: role_capabilities(role),
                job: ROLE_JOB,
                launcher_job: LAUNCHER_JOB,
                mitigation: ROLE_POLICY,
                creation_flags: ROLE_CREATION_FLAGS,
                child_process_policy: Some(PROCESS_CREATION_CHILD_PROCESS_RESTRICTED),
                all_application_packages_policy: Some(
                    PROCESS_CREATION_ALL_APPLICATION_PACKAGES_OPT_OUT,
                ),
                console: Console::None,
            },
        }
    }

    /// True for a less-privileged AppContainer token.
    pub fn less_privileged(&self) -> bool {
        self.all_application_packages_policy.is_some()
    }
}

impl LaunchPlan {
    /// The plan of `role` running `executable` with `grants`; `launcher` is
    /// terra's executable (granted read for the self-check when nothing
    /// else grants it; refused when a deny covers it).
    pub fn new(
        style: PathStyle,
        role: Role,
        executable: &str,
        cwd: &str,
        launcher: &str,
        grants: Vec<Grant>,
        peers: Vec<Peer>,
    ) -> Result<LaunchPlan> {
        let executable = style.canonical(executable)?;
        let cwd = style.canonical(cwd)?;
        let launcher = style.canonical(launcher)?;
        let grants = grants
            .into_iter()
            .map(|g| {
                Ok(Grant {
                    path: style.canonical(&g.path)?,
                    ..g
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if role == Role::Workload && !peers.is_empty() {
            return Err(Error::Unsupported(
                "a workload has no peers: only the broker's wrapper opens sockets".into(),
            ));
        }
        if let Some(d) = denied_by(&grants, style, &launcher) {
            return Err(Error::Unsupported(format!(
                "terra's own executable {launcher} is inside the deny rule on {}: the self-check worker could not start",
                d.path
            )));
        }
        let program_access = if readable(&grants, style, &executable) {
            ProgramAccess::Granted
        } else {
            ProgramAccess::SystemInstall { dir: String::new() }
        };
        let mut entries = dacl_entries(&grants, style);
        if !readable(&grants, style, &launcher) {
            entries.push(DaclEntry {
                path: launcher.clone(),
                scope: Scope::Exact,
                origin: Origin::Launcher,
                allow: ALLOW_READ,
                deny: DENY_WRITE,
                inheritance: NO_INHERITANCE,
            });
        }
        Ok(LaunchPlan {
            style,
            role,
            executable,
            cwd,
            program_access,
            launcher,
            grants,
            peers,
            entries,
            baseline: Vec::new(),
        })
    }

    /// Checks that the workload can read its program: a grant covers it,
    /// or it lies in one of `system_dirs` (the minimal runtime, the Windows
    /// directory and the Program Files directories, readable through
    /// Windows' own ACEs for ALL APPLICATION PACKAGES). Anything else (a
    /// per-user install under %LOCALAPPDATA% or %USERPROFILE%: rustup's,
    /// scoop's, python.org's per-user Python) is refused before anything
    /// changes, naming the directory: terra never widens a policy by itself.
    fn check_program(&mut self, system_dirs: &[String]) -> Result<()> {
        if self.program_access == ProgramAccess::Granted {
            return Ok(());
        }
        let style = self.style;
        match system_dirs
            .iter()
            .find(|d| style.within(d, &self.executable))
        {
            Some(d) => {
                self.program_access = ProgramAccess::SystemInstall { dir: d.clone() };
                Ok(())
            }
            None => {
                let dir = self
                    .executable
                    .rsplit_once(style.separator())
                    .map(|(d, _)| d.to_string())
                    .unwrap_or_default();
                Err(Error::Unsupported(format!(
                    "the program {} is outside every grant and outside the system's install directories \
                     (Program Files and the Windows directory, readable to AppContainers through ALL APPLICATION \
                     PACKAGES): install it machine-wide under Program Files, or put it in the workspace \
                     ({dir} cannot be granted by a Windows policy yet: policy host paths are Unix paths)",
                    self.executable
                )))
            }
        }
    }

    /// The launcher's plan for a spec it read (paths already canonical).
    pub fn from_spec(spec: &LaunchSpec, launcher: &str) -> Result<LaunchPlan> {
        spec.validate()?;
        LaunchPlan::new(
            PathStyle::Windows,
            spec.role,
            &spec.executable,
            &spec.cwd,
            launcher,
            spec.grants.clone(),
            spec.peers.clone(),
        )
    }

    /// The spec handed to the launcher. Only a plan of Windows paths has one.
    pub fn spec(&self) -> Result<LaunchSpec> {
        if self.style != PathStyle::Windows {
            return Err(Error::Unsupported(
                "this plan was resolved on another host: its paths are not Windows paths, so it has no launch spec"
                    .into(),
            ));
        }
        let spec = LaunchSpec {
            role: self.role,
            executable: self.executable.clone(),
            cwd: self.cwd.clone(),
            grants: self.grants.clone(),
            peers: self.peers.clone(),
        };
        spec.validate()?;
        Ok(spec)
    }

    pub fn settings(&self) -> WorkerSettings {
        WorkerSettings::of(self.role)
    }
}

/// Where the workload runs: its program, its working directory, terra's
/// own executable and the system's install directories (Program Files),
/// each as this host spells it (a verbatim `\\?\C:\...` is accepted and
/// made plain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host<'a> {
    pub executable: &'a str,
    pub cwd: &'a str,
    pub launcher: &'a str,
    pub system_dirs: &'a [String],
}

/// The workload's launch plan for `plan` on `host`, in `style`. Refuses
/// what the windows backend does not build, naming it (compile_plan has
/// already checked the declared capabilities; these are checked again
/// here).
pub fn lower_plan(plan: &SandboxPlan, style: PathStyle, host: &Host) -> Result<LaunchPlan> {
    if plan.network() != NetworkMode::None {
        return Err(Error::Unsupported(format!(
            "network mode {} is not built for the windows backend (network-none only)",
            plan.network()
        )));
    }
    let mut grants = Vec::new();
    let mut baseline = Vec::new();
    for rule in plan.rules() {
        if rule.source_root == RootKind::MinimalRuntime {
            if rule.access != Access::Read {
                return Err(Error::Unsupported(format!(
                    "a {} rule on the minimal-runtime root {:?}: on Windows that is the system's own files, \
                     whose ACLs terra does not change",
                    rule.access, rule.path
                )));
            }
            baseline.push(style.canonical(&rule.path)?);
            continue;
        }
        if rule.protect_create {
            return Err(Error::Unsupported(format!(
                "rule on {:?} protects a path from creation (fs-protect-create), which the windows backend does not declare",
                rule.path
            )));
        }
        grants.push(Grant {
            kind: match rule.access {
                Access::Read => GrantKind::Read,
                Access::Write => GrantKind::Write,
                Access::Deny => GrantKind::Deny,
                Access::DenyWrite => GrantKind::DenyWrite,
            },
            scope: match rule.scope {
                terra_policy::Scope::Tree => Scope::Tree,
                terra_policy::Scope::Exact => Scope::Exact,
            },
            path: rule.path.clone(),
        });
    }
    let mut launch = LaunchPlan::new(
        style,
        Role::Workload,
        host.executable,
        host.cwd,
        host.launcher,
        grants,
        Vec::new(),
    )?;
    if !readable(&launch.grants, style, &launch.cwd)
        && !baseline.iter().any(|b| style.within(b, &launch.cwd))
    {
        return Err(Error::Unsupported(format!(
            "the working directory {} is outside every read and write grant",
            launch.cwd
        )));
    }
    let mut system_dirs = baseline.clone();
    for d in host.system_dirs {
        system_dirs.push(style.canonical(d)?);
    }
    launch.check_program(&system_dirs)?;
    launch.baseline = baseline;
    Ok(launch)
}
