//! The workload's last steps before execve, in the box, in a child of init:
//! descriptors, cwd, capabilities, no_new_privs, Landlock, seccomp (last),
//! activation check, execve. Setup errors and the activation result go to the
//! caller over the close-on-exec status pipe; exec success shows as EOF.

use std::ffi::CString;
use std::net::SocketAddr;

use seccompiler::BpfProgram;

use super::landlock::{self as ll, LandlockPlan};
use super::status::{self, Status};
use super::sys;

/// Everything the workload child needs, prepared before any fork.
pub struct WorkloadPrep {
    /// Executable candidates for argv[0] (PATH already expanded).
    pub candidates: Vec<CString>,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    pub cwd: String,
    pub canary_path: CString,
    pub canary_tcp: Option<SocketAddr>,
    /// Raw fd: one byte arrives once the canary exists (see `BoxSpec`).
    pub canary_gate: Option<i32>,
    pub landlock: LandlockPlan,
    pub seccomp: Vec<BpfProgram>,
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

fn refuse(fd: i32, why: String) -> ! {
    status::send(fd, &Status::Refused(why));
    sys::exit_now(125)
}

/// Runs in the workload child; never returns.
pub fn run(prep: &WorkloadPrep, status_fd: i32) -> ! {
    let mut keep = vec![status_fd];
    keep.extend(prep.canary_gate);
    sys::close_fds_except(&keep);
    if let Err(e) = sys::chdir(&prep.cwd) {
        refuse(
            status_fd,
            format!("working directory {} is not in the box: {e}", prep.cwd),
        );
    }
    if let Err(e) = sys::drop_all_capabilities() {
        refuse(status_fd, e);
    }
    let abi = match ll::apply(&prep.landlock) {
        Ok(abi) => abi,
        Err(e) => refuse(status_fd, e),
    };
    // The Landlock report travels with the next one (activation, or the
    // refusal), so the caller's reader wakes once, not twice, before exec.
    let landlock = Status::Landlock(abi);
    if let Err(e) = super::seccomp::install(&prep.seccomp) {
        status::send_all(status_fd, &[landlock, Status::Refused(e)]);
        sys::exit_now(125)
    }
    match activation(prep) {
        Ok(()) => status::send_all(status_fd, &[landlock, Status::Activation("passed".into())]),
        Err(why) => {
            status::send_all(
                status_fd,
                &[
                    landlock,
                    Status::Activation(why.clone()),
                    Status::Refused(format!("activation check failed: {why}")),
                ],
            );
            sys::exit_now(125)
        }
    }
    exec(prep, status_fd)
}

/// In the final context: the canary must not open; the canary listener must
/// not accept a connection. A canary that does not exist yet would make the
/// first test pass vacuously, so it first waits for the caller's word that it
/// does.
fn activation(prep: &WorkloadPrep) -> Result<(), String> {
    if let Some(gate) = prep.canary_gate {
        let ready = sys::read_byte(gate);
        sys::close(gate);
        if !ready {
            return Err("the caller ended before the canary existed".into());
        }
    }
    // SAFETY: valid C string; a returned descriptor is closed right away.
    let fd = unsafe { libc::open(prep.canary_path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd >= 0 {
        sys::close(fd);
        return Err(format!(
            "the canary {} could be opened inside the box",
            sys::cstr_lossy(&prep.canary_path)
        ));
    }
    if let Some(addr) = prep.canary_tcp {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Err(format!(
                "a TCP connection to the host canary {addr} succeeded inside the box"
            ));
        }
    }
    Ok(())
}

fn exec(prep: &WorkloadPrep, status_fd: i32) -> ! {
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
