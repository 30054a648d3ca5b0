//! The macos backend's run: the plan lowered to a Seatbelt launch spec and
//! the workload started under `terra __sandbox_launcher`
//! (docs/sandbox-macos.md).
//!
//! `terra run` itself stays unconfined and supervises: it compiles the
//! policy, binds this host's workspace and a fresh private temp directory,
//! resolves the plan against what Seatbelt enforces
//! (`terra_seatbelt::declared_capabilities`), resolves the command's program
//! to its canonical path, writes the spec into an owner-only file of a
//! private directory that no grant covers (with the canary beside it), and
//! execs nothing itself: the launcher is its child, confines itself, proves
//! the confinement and execs the program. The run's exit status is the
//! workload's (128 + N when a signal N ended it).
//!
//! Not here yet, and refused by the command line on macOS: mediated
//! networking (no broker for macOS), `--timeout`, `--receipt`, CLI rules.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use terra_policy::{Mir, NetworkMode, SandboxPlan};
use terra_seatbelt::LaunchSpec;

use crate::error::{Error, Result};

/// Variables copied from terra's environment into the workload's (and every
/// `LC_*`); HOME and TMPDIR name the run's temp directory.
const ENV_ALLOWLIST: &[&str] = &["PATH", "TERM", "COLORTERM", "NO_COLOR", "LANG", "TZ"];
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";

/// One macos run as the command line gave it.
#[derive(Debug, Clone)]
pub struct MacosRun {
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
    pub spec: LaunchSpec,
    /// The run's private temp directory (granted by the plan); removed at
    /// the end unless kept.
    pub temp: PathBuf,
    keep_temp: bool,
    argv: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    cwd: PathBuf,
}

impl MacosRun {
    /// Resolves the run; the temp directory it makes is removed on refusal.
    pub fn prepare(&self) -> Result<Prepared> {
        let cwd = std::env::current_dir()
            .map_err(|e| Error::op("cannot read the current directory", e))?;
        let workspace = match &self.workspace {
            Some(w) => fs::canonicalize(cwd.join(w)).map_err(|e| Error::io("--workspace", w, e))?,
            None => fs::canonicalize(&cwd).map_err(|e| Error::io("", &cwd, e))?,
        };
        if !workspace.is_dir() || workspace == Path::new("/") {
            return Err(Error::Argument(format!(
                "the workspace {} is not a project directory (a directory other than /)",
                workspace.display()
            )));
        }
        let mir = self.load_policy()?;
        if mir.network() == NetworkMode::Mediated {
            return Err(Error::Unsupported(
                "this policy asks for mediated networking, but the macos backend has no network broker yet; \
                 refusing instead of falling back to another network mode"
                    .into(),
            ));
        }
        let temp = private_dir("terra-tmp")?;
        let result = (|| {
            let bindings = terra_policy::HostBindings {
                workspace: Some(workspace.clone()),
                temp: Some(temp.clone()),
                minimal_roots: terra_policy::default_minimal_roots(),
                mediator: None,
            };
            let declared = terra_seatbelt::declared_capabilities(false);
            let plan = terra_policy::compile_plan(&mir, &bindings, declared)
                .map_err(|e| Error::policy("policy refused by the macos backend", e))?;
            let env = workload_env(&self.env, temp.as_os_str())?;
            let path = env
                .iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            let program = find_program(&self.command[0], &cwd, &path)?;
            let program = program.to_str().ok_or_else(|| {
                Error::Argument(format!("the program {} is not UTF-8", program.display()))
            })?;
            let spec = terra_seatbelt::lower_plan(&plan, program, None)
                .map_err(|e| Error::Unsupported(e.to_string()))?;
            let box_cwd = fs::canonicalize(&cwd)
                .ok()
                .filter(|c| c.starts_with(&workspace))
                .unwrap_or_else(|| workspace.clone());
            Ok(Prepared {
                plan,
                spec,
                temp: temp.clone(),
                keep_temp: self.keep_temp,
                argv: self.command.clone(),
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
    /// Starts the launcher on the spec and waits for the workload; returns
    /// the run's exit status. The spec file, the canary and (unless kept)
    /// the temp directory are removed afterwards.
    pub fn run(self) -> Result<u8> {
        let private = private_dir("terra-launch")?;
        let outcome = self.start(&private);
        let _ = fs::remove_dir_all(&private);
        if !self.keep_temp {
            let _ = fs::remove_dir_all(&self.temp);
        }
        outcome
    }

    fn start(&self, private: &Path) -> Result<u8> {
        let canary = private.join("canary");
        owner_only_file(&canary, b"terra activation canary\n")?;
        let canary = canary
            .to_str()
            .ok_or_else(|| Error::Host(format!("{} is not UTF-8", canary.display())))?
            .to_string();
        // Refused here already when a grant covers the canary; the launcher
        // checks again.
        terra_seatbelt::probes(&self.spec, &canary)
            .map_err(|e| Error::Host(format!("activation check: {e}")))?;
        let spec_path = private.join("spec");
        owner_only_file(&spec_path, &self.spec.encode())?;
        let spec_file = fs::File::open(&spec_path).map_err(|e| Error::io("", &spec_path, e))?;
        // The launcher inherits the descriptor: only this one child is
        // started from this process, and the launcher closes it after reading.
        nix::fcntl::fcntl(
            spec_file.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
        )
        .map_err(|e| Error::Host(format!("cannot pass the launch spec descriptor: {e}")))?;
        let exe = std::env::current_exe()
            .map_err(|e| Error::op("cannot find terra's own executable", e))?;
        let status = Command::new(&exe)
            .arg0("terra")
            .arg("__sandbox_launcher")
            .arg("--spec-fd")
            .arg(spec_file.as_raw_fd().to_string())
            .arg("--canary")
            .arg(&canary)
            .arg("--")
            .args(&self.argv)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.cwd)
            .status()
            .map_err(|e| Error::io("cannot start", &exe, e))?;
        drop(spec_file);
        Ok(match (status.code(), status.signal()) {
            (Some(c), _) => c.clamp(0, 255) as u8,
            (None, Some(s)) => (128 + s).clamp(0, 255) as u8,
            (None, None) => crate::EXIT_REFUSED,
        })
    }
}

/// A fresh directory of this user, mode 0700, in `$TMPDIR` (or /tmp),
/// canonical.
fn private_dir(prefix: &str) -> Result<PathBuf> {
    let base = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let urandom = Path::new("/dev/urandom");
    for _ in 0..16 {
        let mut rnd = [0u8; 6];
        fs::File::open(urandom)
            .and_then(|mut f| f.read_exact(&mut rnd))
            .map_err(|e| Error::io("", urandom, e))?;
        let dir = base.join(format!("{prefix}-{}", crate::request::hex(&rnd)));
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
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

/// A new file (never an existing one, never through a symlink) of mode 0600.
fn owner_only_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(|e| Error::io("cannot create", path, e))?;
    f.write_all(bytes)
        .map_err(|e| Error::io("cannot write", path, e))
}

/// The workload's environment: the allowlist from terra's, HOME and TMPDIR
/// at the temp directory, then `--env NAME[=VALUE]`.
fn workload_env(extra: &[OsString], tmp: &OsStr) -> Result<Vec<(OsString, OsString)>> {
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    let mut set = |k: OsString, v: OsString| {
        env.retain(|(n, _)| *n != k);
        env.push((k, v));
    };
    for (k, v) in std::env::vars_os() {
        let name = k.as_bytes();
        if ENV_ALLOWLIST.iter().any(|a| a.as_bytes() == name) || name.starts_with(b"LC_") {
            set(k, v);
        }
    }
    if std::env::var_os("PATH").is_none() {
        set("PATH".into(), DEFAULT_PATH.into());
    }
    set("HOME".into(), tmp.to_owned());
    set("TMPDIR".into(), tmp.to_owned());
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
        set(name, value);
    }
    env.sort();
    Ok(env)
}

/// The canonical path of the program `name` names: a path (with a slash)
/// relative to `cwd`, else the first regular file of that name on `path`.
fn find_program(name: &OsStr, cwd: &Path, path: &OsStr) -> Result<PathBuf> {
    let candidates: Vec<PathBuf> = if name.as_bytes().contains(&b'/') {
        vec![cwd.join(name)]
    } else {
        std::env::split_paths(path)
            .filter(|d| d.is_absolute())
            .map(|d| d.join(name))
            .collect()
    };
    candidates
        .iter()
        .find_map(|c| fs::canonicalize(c).ok().filter(|p| p.is_file()))
        .ok_or_else(|| {
            Error::Argument(format!(
                "the program {} was not found (searched {})",
                name.to_string_lossy(),
                if name.as_bytes().contains(&b'/') {
                    cwd.display().to_string()
                } else {
                    path.to_string_lossy().into_owned()
                }
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_name_is_found_on_path_and_canonicalised() {
        let p = find_program(
            OsStr::new("sh"),
            Path::new("/"),
            OsStr::new("/nowhere:/bin"),
        )
        .unwrap();
        assert_eq!(p, fs::canonicalize("/bin/sh").unwrap());
    }

    #[test]
    fn a_missing_program_is_refused_naming_the_search() {
        let e = find_program(
            OsStr::new("no-such-program"),
            Path::new("/"),
            OsStr::new("/bin"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("searched /bin"), "{e}");
    }

    #[test]
    fn the_environment_points_home_and_tmpdir_at_the_temp_directory() {
        let env = workload_env(&["A=1".into()], OsStr::new("/t")).unwrap();
        for (k, v) in [("HOME", "/t"), ("TMPDIR", "/t"), ("A", "1")] {
            assert!(env.iter().any(|(n, x)| n == k && x == v), "{k}: {env:?}");
        }
        assert!(workload_env(&["=x".into()], OsStr::new("/t")).is_err());
    }
}
