//! The workload's last steps before execve, in the box, in a child of init:
//! descriptors, cwd, capabilities, no_new_privs, Landlock, seccomp (last),
//! activation check, execve. Setup errors and the activation result go to the
//! caller over the close-on-exec status pipe; exec success shows as EOF.

use std::ffi::CString;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};

use seccompiler::BpfProgram;

use super::error::SandboxError;
use super::landlock::{self as ll, LandlockPlan};
use super::status::{self, Status};
use super::sys;

/// Everything the workload child needs, prepared before any fork.
pub struct WorkloadPrep<'a> {
    /// Executable candidates for argv[0] (PATH already expanded).
    pub candidates: Vec<CString>,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    pub cwd: String,
    pub canary_path: CString,
    pub canary_tcp: Option<SocketAddr>,
    /// One byte arrives on it once the canary exists (see `BoxSpec`): the
    /// caller's descriptor, owned by its `BoxSpec` (the box's processes
    /// inherit it).
    pub canary_gate: Option<BorrowedFd<'a>>,
    /// Set on itself before Landlock and seccomp (the deny list allows
    /// setrlimit, but the workload must not start unlimited).
    pub rlimits: super::Rlimits,
    pub landlock: LandlockPlan,
    pub seccomp: Vec<BpfProgram>,
    /// Mediated networking: the connect-notification filter, installed
    /// before the deny lists; its listener goes to the box service.
    pub notify_seccomp: Option<BpfProgram>,
}

/// Expands argv[0] over the PATH of the workload's own environment.
pub fn candidates(argv0: &[u8], env_path: Option<&[u8]>) -> Vec<Vec<u8>> {
    if argv0.contains(&b'/') {
        return vec![argv0.to_vec()];
    }
    let path = env_path.unwrap_or(b"/usr/local/bin:/usr/bin:/bin");
    path.split(|b| *b == b':')
        .map(|dir| {
            let dir = if dir.is_empty() { &b"."[..] } else { dir };
            let mut v = dir.to_vec();
            v.push(b'/');
            v.extend_from_slice(argv0);
            v
        })
        .collect()
}

fn refuse(fd: BorrowedFd<'_>, why: String) -> ! {
    status::send(fd, &Status::Refused(why));
    sys::exit_now(crate::EXIT_REFUSED.into())
}

/// Runs in the workload child; never returns.
pub fn run(prep: &WorkloadPrep, status_fd: BorrowedFd<'_>, handover: Option<BorrowedFd<'_>>) -> ! {
    let mut keep = vec![sys::raw(&status_fd)];
    keep.extend(prep.canary_gate.as_ref().map(sys::raw));
    keep.extend(handover.as_ref().map(sys::raw));
    // SAFETY: this child never returns (it execs or exits), so no owner of a
    // closed descriptor is used or dropped again.
    unsafe { sys::close_fds_except(&keep) };
    if let Err(e) = sys::chdir(&prep.cwd) {
        refuse(
            status_fd,
            format!("working directory {} is not in the box: {e}", prep.cwd),
        );
    }
    if let Err(e) = sys::drop_all_capabilities() {
        refuse(status_fd, e.to_string());
    }
    if let Err(e) = super::rlimits::apply(&prep.rlimits) {
        refuse(status_fd, format!("resource limits: {e}"));
    }
    let abi = match ll::apply(&prep.landlock) {
        Ok(abi) => abi,
        Err(e) => refuse(status_fd, e.to_string()),
    };
    // The Landlock report travels with the next one (activation, or the
    // refusal), so the caller's reader wakes once, not twice, before exec.
    let landlock = Status::Landlock(abi);
    if prep.notify_seccomp.is_some() {
        if let Err(e) = tcp_canary(prep) {
            let why = e.to_string();
            status::send_all(
                status_fd,
                &[
                    landlock,
                    Status::Activation(why.clone()),
                    Status::Refused(why),
                ],
            );
            sys::exit_now(crate::EXIT_REFUSED.into())
        }
    }
    if let (Some(prog), Some(chan)) = (&prep.notify_seccomp, handover) {
        if let Err(e) = hand_over_listener(prog, chan) {
            status::send_all(
                status_fd,
                &[
                    landlock,
                    Status::Refused(format!("mediated networking: the connect filter: {e}")),
                ],
            );
            sys::exit_now(crate::EXIT_REFUSED.into())
        }
    }
    if let Err(e) = super::seccomp::install(&prep.seccomp) {
        status::send_all(status_fd, &[landlock, Status::Refused(e.to_string())]);
        sys::exit_now(crate::EXIT_REFUSED.into())
    }
    match activation(prep) {
        Ok(()) => status::send_all(status_fd, &[landlock, Status::Activation("passed".into())]),
        Err(e) => {
            let why = match &e {
                SandboxError::Activation(why) => why.clone(),
                other => other.to_string(),
            };
            status::send_all(
                status_fd,
                &[
                    landlock,
                    Status::Activation(why),
                    Status::Refused(e.to_string()),
                ],
            );
            sys::exit_now(crate::EXIT_REFUSED.into())
        }
    }
    exec(prep, status_fd)
}

/// Installs the connect-notification filter and sends its listener to the
/// box service over `chan` (then closes both here: the workload never holds
/// its own listener).
fn hand_over_listener(prog: &BpfProgram, chan: BorrowedFd<'_>) -> std::io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let listener = terra_kernel::notify::install_listener(prog)?;
    let fds = [listener.as_raw_fd()];
    let iov = [std::io::IoSlice::new(b"n")];
    sendmsg::<()>(
        chan.as_raw_fd(),
        &iov,
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(std::io::Error::from)?;
    drop(listener);
    // SAFETY: the hand-over end was inherited from init (its owner lives in
    // init's copy of memory, never dropped here) and is not used again.
    unsafe { sys::close_inherited(chan.as_raw_fd()) };
    Ok(())
}

/// In the final context: the canary must not open; the canary listener must
/// not accept a connection. A canary that does not exist yet would make the
/// first test pass vacuously, so it first waits for the caller's word that it
/// does.
pub fn activation(prep: &WorkloadPrep) -> Result<(), SandboxError> {
    if let Some(gate) = prep.canary_gate {
        let ready = sys::read_byte(gate);
        // SAFETY: the gate was inherited (its owner lives in the caller's
        // copy of memory, which this process never drops) and is not used
        // again.
        unsafe { sys::close_inherited(gate.as_raw_fd()) };
        if !ready {
            return Err(SandboxError::Activation(
                "the caller ended before the canary existed".into(),
            ));
        }
    }
    use nix::{fcntl::OFlag, sys::stat::Mode};
    if let Ok(fd) = nix::fcntl::open(
        prep.canary_path.as_c_str(),
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        let _ = nix::unistd::close(fd);
        return Err(SandboxError::Activation(format!(
            "the canary {} could be opened inside the box",
            sys::cstr_lossy(&prep.canary_path)
        )));
    }
    if prep.notify_seccomp.is_none() {
        tcp_canary(prep)?;
    }
    Ok(())
}

/// The host loopback canary must not accept a connection: the box's network
/// namespace holds it. With the connect filter this runs before the filter
/// is installed (`run`): through the filter the same connect would be made
/// by the box's network service in the same namespace, and the workload
/// would wait for that service to start.
fn tcp_canary(prep: &WorkloadPrep) -> Result<(), SandboxError> {
    if let Some(addr) = prep.canary_tcp {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Err(SandboxError::Activation(format!(
                "a TCP connection to the host canary {addr} succeeded inside the box"
            )));
        }
    }
    Ok(())
}

pub fn exec(prep: &WorkloadPrep, status_fd: BorrowedFd<'_>) -> ! {
    let mut argv: Vec<*const libc::c_char> = prep.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = prep.envp.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    let mut denied: Option<String> = None;
    let mut other: Option<String> = None;
    for c in &prep.candidates {
        // SAFETY: argv/envp are NULL-terminated arrays of valid C strings that
        // outlive the call.
        unsafe { libc::execve(c.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENOTDIR) => {}
            Some(libc::EACCES) => {
                denied.get_or_insert_with(|| format!("{}: {err}", sys::cstr_lossy(c)));
            }
            _ => {
                other = Some(format!("{}: {err}", sys::cstr_lossy(c)));
                break;
            }
        }
    }
    let name = prep
        .argv
        .first()
        .map(|a| sys::cstr_lossy(a))
        .unwrap_or_default();
    let (code, reason) = match (other, denied) {
        (Some(r), _) | (None, Some(r)) => (126, format!("cannot execute {name}: {r}")),
        (None, None) => (127, format!("{name}: command not found in the box")),
    };
    status::send(status_fd, &Status::ExecFailed { code, reason });
    sys::exit_now(code)
}
