//! The windows backend's run: the plan lowered to an AppContainer launch
//! plan and the workload started under `terra __sandbox_launcher`
//! (docs/sandbox-windows.md).
//!
//! `terra run` stays outside the AppContainer and supervises: it compiles
//! the policy, binds this host's workspace, a fresh temp directory and the
//! system directory as the minimal runtime, resolves the plan against what
//! the windows backend enforces (`terra_appcontainer::declared_capabilities`),
//! finds the program and lowers the plan (plain `C:\...` paths for the
//! working directory and the environment). The run starts the launcher,
//! puts it into a job that kills it (and, through their jobs, its
//! workers) when `terra run` ends however it ends, and only then writes
//! the launch spec to its standard input; the launcher inherits a
//! query-only handle to that job to prove it is in it. Ctrl-C and
//! Ctrl-Break are left to the launcher (which ends the workload's job and
//! cleans up); once the launcher has exited, `terra run` undoes what the
//! ledger still holds. The run's exit status is the workload's.
//!
//! Not here: mediated or direct networking (not declared), `--timeout`,
//! `--receipt`, CLI rules, resource limits (refused by the command line).

use std::collections::hash_map::RandomState;
use std::ffi::OsString;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use std::os::windows::io::AsRawHandle;

use terra_appcontainer::{LaunchPlan, Objects, PathStyle};
use terra_policy::{Mir, NetworkMode, SandboxPlan};
use terra_sandbox::windows::job::Job;

use crate::error::{Error, Result};

/// One windows run as the command line gave it.
#[derive(Debug, Clone)]
pub struct WindowsRun {
    pub policy: Option<PathBuf>,
    pub max_policy_len: usize,
    pub workspace: Option<PathBuf>,
    pub env: Vec<OsString>,
    pub keep_temp: bool,
    pub command: Vec<OsString>,
}

/// A run resolved on this host, ready to start (or to show, in a dry run).
#[derive(Debug)]
pub struct Prepared {
    pub plan: SandboxPlan,
    pub launch: LaunchPlan,

    /// The run's temp directory (granted by the plan); removed at the end
    /// unless kept.
    pub temp: PathBuf,
    keep_temp: bool,
    argv: Vec<String>,
    /// The workload's environment (plain paths).
    pub env: Vec<(String, String)>,
    /// The working directory, a plain `C:\...` path.
    cwd: String,
}

fn utf8(p: &Path, what: &str) -> Result<String> {
    p.to_str()
        .map(str::to_string)
        .ok_or_else(|| Error::Argument(format!("{what} {} is not valid Unicode", p.display())))
}

fn windows_path(p: &Path, what: &str) -> Result<String> {
    terra_appcontainer::path::windows_path(&utf8(p, what)?)
        .map_err(|e| Error::Unsupported(format!("{what}: {e}")))
}

impl WindowsRun {
    /// Resolves the run; the temp directory it makes is removed on refusal.
    pub fn prepare(&self) -> Result<Prepared> {
        let cwd = std::env::current_dir()
            .map_err(|e| Error::op("cannot read the current directory", e))?;
        let workspace = match &self.workspace {
            Some(w) => fs::canonicalize(cwd.join(w)).map_err(|e| Error::io("--workspace", w, e))?,
            None => fs::canonicalize(&cwd).map_err(|e| Error::io("", &cwd, e))?,
        };
        if !workspace.is_dir() || workspace.parent().is_none() {
            return Err(Error::Argument(format!(
                "the workspace {} is not a project directory (a directory other than a drive's root)",
                workspace.display()
            )));
        }
        let mir = self.load_policy()?;
        if mir.network() != NetworkMode::None {
            return Err(Error::Unsupported(format!(
                "this policy asks for network {}, but the windows backend declares network-none only \
                 (no broker runs on Windows in this build); refusing instead of running with another network",
                mir.network()
            )));
        }
        let temp = private_dir("terra-tmp")?;
        let result = (|| {
            let system = std::env::var_os("SystemRoot")
                .map(|r| PathBuf::from(r).join("System32"))
                .filter(|p| p.is_dir());
            let bindings = terra_policy::HostBindings {
                workspace: Some(workspace.clone()),
                temp: Some(temp.clone()),
                minimal_roots: system.into_iter().collect(),
                mediator: None,
            };
            let plan = terra_policy::compile_plan(
                &mir,
                &bindings,
                terra_appcontainer::declared_capabilities(),
            )
            .map_err(|e| Error::policy("policy refused by the windows backend", e))?;
            let host_vars: Vec<(String, String)> = std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect();
            let extra = self
                .env
                .iter()
                .map(|e| {
                    e.clone().into_string().map_err(|e| {
                        Error::Argument(format!(
                            "--env {:?}: not valid Unicode",
                            e.to_string_lossy()
                        ))
                    })
                })
                .collect::<Result<Vec<String>>>()?;
            let env = terra_appcontainer::env::workload_env(
                PathStyle::Windows,
                &host_vars,
                &utf8(&temp, "the temp directory")?,
                &extra,
            )
            .map_err(|e| Error::Argument(e.to_string()))?;
            let path: OsString = env
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("PATH"))
                .map(|(_, v)| v.into())
                .unwrap_or_default();
            let pathext = std::env::var_os("PATHEXT").unwrap_or_else(|| ".COM;.EXE".into());
            let program = find_program(&self.command[0], &cwd, &path, &pathext)?;
            let program = windows_path(&program, "the program")?;
            let launcher = std::env::current_exe()
                .and_then(fs::canonicalize)
                .map_err(|e| Error::op("cannot find terra's own executable", e))?;
            let launcher = windows_path(&launcher, "terra's executable")?;
            let box_cwd = fs::canonicalize(&cwd)
                .ok()
                .filter(|c| c.starts_with(&workspace))
                .unwrap_or_else(|| workspace.clone());
            let box_cwd = windows_path(&box_cwd, "the working directory")?;
            // Program Files and the Windows directory: readable to
            // AppContainers through the ACEs Windows ships for ALL
            // APPLICATION PACKAGES, whatever the policy says.
            let system_dirs: Vec<String> = [
                "ProgramFiles",
                "ProgramFiles(x86)",
                "ProgramW6432",
                "SystemRoot",
            ]
            .iter()
            .filter_map(|v| std::env::var(v).ok())
            .filter_map(|d| terra_appcontainer::path::windows_path(&d).ok())
            .collect();
            let launch = terra_appcontainer::lower_plan(
                &plan,
                PathStyle::Windows,
                &terra_appcontainer::Host {
                    executable: &program,
                    cwd: &box_cwd,
                    launcher: &launcher,
                    system_dirs: &system_dirs,
                },
            )
            .map_err(|e| Error::Unsupported(e.to_string()))?;
            let argv = self
                .command
                .iter()
                .map(|a| {
                    a.clone().into_string().map_err(|a| {
                        Error::Argument(format!("the argument {a:?} is not valid Unicode"))
                    })
                })
                .collect::<Result<Vec<String>>>()?;
            // Refused here already (batch files, quotes in argv[0]); the
            // launcher quotes again.
            terra_appcontainer::cmdline::command_line(&program, &argv)
                .map_err(|e| Error::Unsupported(e.to_string()))?;
            Ok(Prepared {
                plan,
                launch,
                temp: temp.clone(),
                keep_temp: self.keep_temp,
                argv,
                env,
                cwd: box_cwd,
            })
        })();
        if result.is_err() {
            let _ = fs::remove_dir(&temp);
        }
        result
    }

    fn load_policy(&self) -> Result<Mir> {
        match &self.policy {
            None => terra_policy::compile_source(terra_policy::DEFAULT_POLICY_SOURCE.as_bytes())
                .map_err(|e| Error::policy("the default policy", e)),
            Some(p) => {
                let bytes = crate::input::read_capped(p, self.max_policy_len)
                    .map_err(|e| Error::Argument(format!("--policy: {e}")))?;
                let context = || format!("--policy {}", p.display());
                if bytes.starts_with(b"MMIR") {
                    Mir::decode(&bytes).map_err(|e| Error::policy(context(), e))
                } else {
                    terra_policy::compile_source(&bytes).map_err(|e| Error::policy(context(), e))
                }
            }
        }
    }
}

impl Prepared {
    /// The objects below the granted trees, scanned (read only) for
    /// protected DACLs as the launcher will: for the dry run.
    pub fn scan(&self) -> Result<Objects> {
        terra_appcontainer::scan(
            &self.launch.entries,
            PathStyle::Windows,
            &terra_sandbox::windows::walk::HostTree,
        )
        .map_err(|e| Error::Unsupported(e.to_string()))
    }

    /// Starts the launcher on the spec and waits for the workload; returns
    /// the workload's exit code. The canary's directory and (unless kept)
    /// the temp directory are removed afterwards.
    pub fn run(self) -> Result<i32> {
        let private = private_dir("terra-launch")?;
        let outcome = self.start(&private);
        // The launcher has exited: what its ledger still holds (it was
        // killed, or its console closed) is undone now.
        for p in terra_sandbox::windows::cleanup::sweep() {
            eprintln!("terra: cleaning what the launch left: {p}");
        }
        let _ = fs::remove_dir_all(&private);
        if !self.keep_temp {
            let _ = fs::remove_dir_all(&self.temp);
        }
        outcome
    }

    fn start(&self, private: &Path) -> Result<i32> {
        let canary = private.join("canary");
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&canary)
            .and_then(|mut f| f.write_all(b"terra activation canary\n"))
            .map_err(|e| Error::io("cannot create", &canary, e))?;
        let canary = windows_path(&canary, "the canary")?;
        let spec = self
            .launch
            .spec()
            .map_err(|e| Error::Unsupported(e.to_string()))?
            .encode();
        let exe = std::env::current_exe()
            .map_err(|e| Error::op("cannot find terra's own executable", e))?;
        let job = Job::new(&terra_appcontainer::job::LAUNCHER_JOB)
            .map_err(|e| Error::Host(e.to_string()))?;
        // The launcher inherits this handle (std passes inheritable handles
        // on): query access only, for IsProcessInJob.
        let query = job
            .inheritable_query_handle()
            .map_err(|e| Error::Host(e.to_string()))?;
        // Ctrl-C and Ctrl-Break reach every process of the console: the
        // launcher ends the workload's job and cleans up; terra run waits
        // for it instead of dying first (which would kill it mid-cleanup).
        terra_sandbox::windows::console::leave_interrupts_to_launcher()
            .map_err(|e| Error::Host(e.to_string()))?;
        let mut child = Command::new(&exe)
            .arg("__sandbox_launcher")
            .arg("--canary")
            .arg(&canary)
            .arg("--job")
            .arg(format!("{:#x}", query.as_raw_handle() as usize))
            .arg("--")
            .args(&self.argv)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error::io("cannot start", &exe, e))?;
        // Into the job before it reads the spec: the launcher waits on its
        // standard input, and refuses to launch outside a job.
        if let Err(e) = job.assign(&child) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::Host(e.to_string()));
        }
        let written = child
            .stdin
            .take()
            .map(|mut stdin| stdin.write_all(&spec))
            .unwrap_or(Ok(()));
        if let Err(e) = written {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::op("cannot hand the launch spec to the launcher", e));
        }
        drop(query);
        let status = child
            .wait()
            .map_err(|e| Error::op("waiting for the launcher", e))?;
        drop(job);
        Ok(status.code().unwrap_or(i32::from(crate::EXIT_REFUSED)))
    }
}

/// A fresh directory of this user in the system temp directory, canonical.
fn private_dir(prefix: &str) -> Result<PathBuf> {
    let base = std::env::temp_dir();
    let state = RandomState::new();
    for attempt in 0u64..16 {
        let mut h = state.build_hasher();
        h.write_u64(attempt);
        h.write_u32(std::process::id());
        let dir = base.join(format!("{prefix}-{:016x}", h.finish()));
        match fs::create_dir(&dir) {
            Ok(()) => return fs::canonicalize(&dir).map_err(|e| Error::io("", &dir, e)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io("cannot create a private directory in", &base, e)),
        }
    }
    Err(Error::Host(format!(
        "no unique private directory could be made in {}",
        base.display()
    )))
}

/// The canonical path of the program `name` names: a path (with a
/// separator) relative to `cwd`, else the first file of that name on
/// `path`, trying each extension of PATHEXT when the name has none.
fn find_program(
    name: &std::ffi::OsStr,
    cwd: &Path,
    path: &std::ffi::OsStr,
    pathext: &std::ffi::OsStr,
) -> Result<PathBuf> {
    let text = name.to_string_lossy();
    let has_dir = text.contains(['\\', '/']);
    let has_ext = Path::new(name).extension().is_some();
    let exts: Vec<String> = if has_ext {
        vec![String::new()]
    } else {
        pathext
            .to_string_lossy()
            .split(';')
            .filter(|e| !e.is_empty())
            .map(str::to_string)
            .collect()
    };
    let dirs: Vec<PathBuf> = if has_dir {
        vec![cwd.to_path_buf()]
    } else {
        std::env::split_paths(path)
            .filter(|d| d.is_absolute())
            .collect()
    };
    for d in &dirs {
        for ext in &exts {
            let mut c = d.join(name).into_os_string();
            c.push(ext);
            if let Ok(p) = fs::canonicalize(&c) {
                if p.is_file() {
                    return Ok(p);
                }
            }
        }
    }
    Err(Error::Argument(format!(
        "the program {text} was not found (searched {})",
        if has_dir {
            cwd.display().to_string()
        } else {
            path.to_string_lossy().into_owned()
        }
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_found_on_path_with_pathext() {
        let system = PathBuf::from(std::env::var_os("SystemRoot").unwrap()).join("System32");
        let p = find_program(
            std::ffi::OsStr::new("whoami"),
            Path::new(r"C:\"),
            system.as_os_str(),
            std::ffi::OsStr::new(".COM;.EXE"),
        )
        .unwrap();
        assert!(
            p.to_string_lossy().to_lowercase().ends_with("whoami.exe"),
            "{p:?}"
        );
        assert!(find_program(
            std::ffi::OsStr::new("no-such-program"),
            Path::new(r"C:\"),
            system.as_os_str(),
            std::ffi::OsStr::new(".EXE"),
        )
        .is_err());
    }
}
