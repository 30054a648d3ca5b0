//! The supervisor's own Landlock domain, applied once the box and the
//! broker run (Landlock forbids the mounts their clones make, and a domain
//! is inherited: it must come after them) and before the supervisor starts
//! a thread (a domain covers the calling thread and what it starts later).
//!
//! From then on the supervisor can reach only the files of its run: the
//! state and runtime directories of the run, the run's temp directory, the
//! `--receipt` directory, and its own /proc entry (read). In the parents of
//! the directories it removes at the end it may only remove directories.

use std::path::{Path, PathBuf};

use terra_sandbox::linux::{landlock_restrict_self, FsAccess};

use crate::error::{Error, Result};
use crate::files::split_output;
use crate::request::RunRequest;
use crate::state::RunDir;

const KMSG: &str = "/dev/kmsg";

/// The paths of a run the supervisor keeps working on.
pub struct RunFiles<'a> {
    pub state: &'a Path,
    pub runtime: &'a Path,
    pub temp: &'a Path,
    /// The temp directory is removed at the end.
    pub remove_temp: bool,
    /// `--receipt FILE` (not `-`).
    pub receipt: Option<&'a Path>,
    /// The landlock backend's reaper reads every `/proc/PID/stat` to find
    /// the workload's descendants (there is no PID namespace to end them).
    pub all_processes: bool,
}

/// What the supervisor may reach after the workers started, path by path.
pub fn rules(run: &RunFiles<'_>) -> Result<Vec<(String, FsAccess)>> {
    let mut rules: Vec<(PathBuf, FsAccess)> = vec![
        (run.state.to_path_buf(), FsAccess::ReadWrite),
        (run.runtime.to_path_buf(), FsAccess::ReadWrite),
        (run.temp.to_path_buf(), FsAccess::ReadWrite),
    ];
    // VmHWM for the debug log; with the landlock backend, every process's
    // stat (the reaper); nothing else of /proc.
    let proc = if run.all_processes {
        "/proc"
    } else {
        "/proc/self"
    };
    rules.push((PathBuf::from(proc), FsAccess::ReadData));
    // The kernel's record of a role killed by seccomp (role_kill.rs); the
    // kernel itself decides whether this user may read it.
    if Path::new(KMSG).exists() {
        rules.push((PathBuf::from(KMSG), FsAccess::ReadData));
    }
    if run.runtime != run.state {
        rules.extend(parent(run.runtime).map(|p| (p, FsAccess::RemoveDirs)));
    }
    if run.remove_temp {
        rules.extend(parent(run.temp).map(|p| (p, FsAccess::RemoveDirs)));
    }
    if let Some(path) = run.receipt {
        let (receipt_dir, _) = split_output(path).map_err(Error::Output)?;
        rules.push((receipt_dir, FsAccess::ReadWrite));
    }
    rules
        .into_iter()
        .map(|(p, a)| match p.into_os_string().into_string() {
            Ok(s) => Ok((s, a)),
            Err(p) => Err(Error::Host(format!(
                "{} is not UTF-8: the supervisor's Landlock rules cannot name it",
                Path::new(&p).display()
            ))),
        })
        .collect()
}

fn parent(p: &Path) -> Option<PathBuf> {
    p.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
}

/// Restricts the calling thread (and what it starts later) to [`rules`];
/// the ABI enforced (None: no Landlock on this kernel).
pub fn restrict(run: &RunFiles<'_>) -> Result<Option<i32>> {
    let rules = rules(run)?;
    landlock_restrict_self(&rules)
        .map_err(|e| Error::Host(format!("the supervisor's own Landlock domain: {e}")))
}

/// [`restrict`] for the run of `req` in `dir`.
pub fn apply(req: &RunRequest, dir: &RunDir) -> Result<Option<i32>> {
    restrict(&RunFiles {
        state: &dir.path,
        runtime: &dir.runtime,
        temp: &req.bindings.temp,
        remove_temp: !req.keep_temp,
        receipt: req.receipt.as_deref().filter(|p| *p != Path::new("-")),
        all_processes: req.backend == terra_sandbox::linux::nouserns::NAME,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::io::ErrorKind;

    /// The domain on a thread of its own (Landlock restricts the calling
    /// thread and what it starts; the test's other threads stay free).
    fn restricted<T: Send>(run: &RunFiles<'_>, f: impl FnOnce() -> T + Send) -> Option<T> {
        std::thread::scope(|s| {
            s.spawn(|| {
                let abi = restrict(run).expect("the supervisor's Landlock domain");
                abi.map(|_| f())
            })
            .join()
            .unwrap()
        })
    }

    #[test]
    fn the_supervisor_reaches_only_the_files_of_its_run() {
        let base = tempfile::tempdir().unwrap();
        let mk = |n: &str| {
            let p = base.path().join(n);
            fs::create_dir_all(&p).unwrap();
            p
        };
        let (state, runtime, temps, out, elsewhere) = (
            mk("state/run"),
            mk("runtime/run"),
            mk("temps"),
            mk("out"),
            mk("elsewhere"),
        );
        let temp = mk("temps/run-temp");
        fs::write(temp.join("left-by-the-box"), "x").unwrap();
        let secret = elsewhere.join("secret");
        fs::write(&secret, "host file").unwrap();
        let sibling = temps.join("someone-else");
        fs::write(&sibling, "x").unwrap();
        let receipt = out.join("receipt.json");
        let run = RunFiles {
            state: &state,
            runtime: &runtime,
            temp: &temp,
            remove_temp: true,
            receipt: Some(&receipt),
            all_processes: false,
        };
        let got = restricted(&run, || {
            let denied = |r: std::io::Result<()>| matches!(r, Err(e) if e.kind() == ErrorKind::PermissionDenied);
            [
                // The escapes: read or write outside, remove a file beside the temp dir.
                ("read elsewhere", denied(fs::read(&secret).map(|_| ()))),
                (
                    "write elsewhere",
                    denied(fs::write(elsewhere.join("new"), "x")),
                ),
                ("remove beside temp", denied(fs::remove_file(&sibling))),
                ("list base", denied(fs::read_dir(base.path()).map(|_| ()))),
                // The twins: the run's own files.
                ("state", fs::write(state.join("receipt.json"), "{}").is_ok()),
                ("runtime", fs::write(runtime.join("host.pid"), "1").is_ok()),
                ("receipt", fs::write(&receipt, "{}").is_ok()),
                ("proc", fs::read_to_string("/proc/self/status").is_ok()),
                ("temp removed", fs::remove_dir_all(&temp).is_ok()),
            ]
        });
        let Some(got) = got else {
            eprintln!("no Landlock on this kernel: nothing to check");
            assert!(terra_sandbox::linux::host_support().landlock_abi.is_none());
            return;
        };
        for (what, ok) in got {
            assert!(ok, "{what}");
        }
        assert!(secret.exists() && sibling.exists());
        assert!(!temp.exists());
    }
}
