//! A confined host role (the broker): cloned into its own user, PID, mount,
//! IPC and UTS namespaces on the host network, then terra's executable is
//! exec'd as the role (`terra __network`), PID 1 of its namespace. After
//! the exec, [`enter`] builds a tmpfs root holding only the given files
//! read-only, drops every capability and sets no_new_privs.
//!
//! | fd | what |
//! |---|---|
//! | 3 | the root's mount program (JSON on a pipe, read to its end) |
//! | 6 | the caller's liveness (a pidfd of it, or a pipe only it writes) |
//! | others | the caller's `keep_fds`, at their numbers (the broker: 0, 1, 7, 8, 9) |

use std::ffi::CStr;
use std::os::fd::RawFd;

use serde::{Deserialize, Serialize};

use super::exe::{self, adopt, read_config, role_start, Launch, RoleExe};
use super::lower::MountOp;
use super::{mounts, sys, RoleConfig, RoleHandle, SandboxError};

const CONFIG_FD: RawFd = 3;
const PARENT_FD: RawFd = 6;
const CONFIG_LIMIT: usize = 1 << 20;

/// What the role is handed on [`CONFIG_FD`].
#[derive(Debug, Serialize, Deserialize)]
struct RoleSetup {
    ops: Vec<MountOp>,
}

const NAMESPACES: libc::c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS;

pub fn spawn(
    exe: &RoleExe,
    role: &'static CStr,
    config: RoleConfig,
) -> Result<RoleHandle, SandboxError> {
    let mut files: Vec<String> = Vec::new();
    for f in &config.read_only_files {
        let c = std::fs::canonicalize(f)
            .map_err(|e| SandboxError::io_at("realpath", &e, f.display().to_string()))?;
        let p = c
            .to_str()
            .ok_or_else(|| SandboxError::Unsupported(format!("{} is not UTF-8", c.display())))?;
        files.push(p.to_string());
    }
    files.sort_by_key(|p| p.matches('/').count());
    let mut ops: Vec<MountOp> = files
        .into_iter()
        .map(|p| {
            let dir = std::fs::metadata(&p).map(|m| m.is_dir()).unwrap_or(false);
            MountOp::Bind {
                path: p,
                dir,
                writable: false,
            }
        })
        .collect();
    ops.push(MountOp::RootReadOnly);
    let (config_r, config_w) = sys::pipe_cloexec()?;
    let (parent_fd, life_w) = sys::caller_liveness()?;
    let mut launch = Launch::new(exe, role);
    launch.give(sys::raw(&config_r), CONFIG_FD)?;
    launch.give(sys::raw(&parent_fd), PARENT_FD)?;
    for (fd, n) in &config.keep_fds {
        launch.give(sys::raw(fd), *n)?;
    }
    let what = format!("terra {}", role.to_string_lossy());
    let pid = super::spawn_role(&launch, NAMESPACES, &what)?;
    // The role holds its own copies now.
    drop((config_r, parent_fd, config));
    if let Err(e) = exe::write_config(config_w, &RoleSetup { ops }) {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = sys::wait_child(pid, false);
        return Err(e);
    }
    Ok(RoleHandle {
        pid: pid.as_raw(),
        _life: life_w,
    })
}

/// In the role, first thing after its exec: the checks every role makes,
/// its root, default signal handling, no capabilities, no_new_privs.
pub fn enter() -> Result<(), SandboxError> {
    let parent = adopt(PARENT_FD);
    role_start(parent.as_ref());
    if parent.is_none() || nix::unistd::getpid().as_raw() != 1 {
        return Err(SandboxError::InvalidRequest(
            "a confined role is started by terra inside new namespaces, not by hand".into(),
        ));
    }
    drop(parent);
    let setup: RoleSetup = read_config(
        adopt(CONFIG_FD).ok_or_else(|| {
            SandboxError::InvalidRequest(format!("no configuration on fd {CONFIG_FD}"))
        })?,
        CONFIG_LIMIT,
    )?;
    // The caller blocked signals around the clone; the role starts clean.
    sys::reset_signals();
    mounts::enter_staging()
        .and_then(|_| mounts::apply(&setup.ops, mounts::Prebuilt::default()))
        .and_then(|_| mounts::enter_new_root())
        .map_err(|e| SandboxError::Launch(format!("the role's root: {e}")))?;
    sys::drop_all_capabilities()
}
