//! Run lifecycle: run lock, pid files, the box, deadlines, reaping, receipts.
//!
//! `terra run` (the CLI) starts `terra __supervisor --request-fd N` and writes a
//! [`RunRequest`] (JSON, with the CLI's pid) on that pipe. The supervisor re-validates
//! the decision, prepares the run's state directory, starts the box through the
//! launcher, forwards signals to it, enforces the deadline, reaps it, removes the
//! run's temp directory and writes the receipt. Its exit status is the run's.
#![forbid(unsafe_code)]

#[cfg(unix)]
pub mod allow_net;
#[cfg(unix)]
pub mod backend;
#[cfg(unix)]
pub mod command_check;
#[cfg(target_os = "linux")]
mod confine;
#[cfg(target_os = "linux")]
pub mod dns_names;
pub mod error;
#[cfg(unix)]
pub mod files;
#[cfg(unix)]
mod hex;
pub mod input;
#[cfg(target_os = "linux")]
pub mod launch;
#[cfg(unix)]
pub mod limits;
#[cfg(unix)]
pub mod macos;
#[cfg(target_os = "linux")]
pub mod placeholders;
pub mod presets;
#[cfg(unix)]
pub mod profile;
#[cfg(target_os = "linux")]
mod pty;
#[cfg(target_os = "linux")]
mod reaper;
#[cfg(unix)]
pub mod receipt;
#[cfg(unix)]
pub mod save;
#[cfg(windows)]
pub mod windows;
#[cfg(unix)]
pub mod workspace_git;
// Arguments and environment travel as their bytes: Unix only.
#[cfg(unix)]
pub mod request;
#[cfg(target_os = "linux")]
mod role_kill;
#[cfg(unix)]
pub mod run;
#[cfg(target_os = "linux")]
pub mod runs;
#[cfg(unix)]
pub mod state;
#[cfg(unix)]
pub mod std_fds;
#[cfg(target_os = "linux")]
pub mod summary;
#[cfg(target_os = "linux")]
mod supervise;
#[cfg(target_os = "linux")]
pub mod temp;

use std::ffi::OsString;
use std::process::ExitCode;

pub use error::Error;
#[cfg(unix)]
pub use receipt::{Outcome, Receipt};
#[cfg(unix)]
pub use request::{PolicyOrigin, RunRequest};

/// Exit status when terra refused or failed before the workload started.
pub use terra_policy::EXIT_REFUSED;

/// `si_code` of a signal the kernel generated (e.g. the terminal's Ctrl-C):
/// the CLI and the supervisor leave those to the terminal.
#[cfg(target_os = "linux")]
const SI_KERNEL: i32 = 0x80;

/// Grace between SIGTERM and SIGKILL when the deadline passes.
pub const TIMEOUT_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The signals `terra run` and the supervisor pass on to the box: each is
/// delivered exactly once, along CLI -> supervisor -> box.
#[cfg(target_os = "linux")]
pub fn forwarded_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut s = SigSet::empty();
    for sig in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGWINCH,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
    ] {
        s.add(sig);
    }
    s
}

/// Entry point of the hidden `terra __supervisor` role.
pub fn role_main(args: Vec<OsString>) -> ExitCode {
    #[cfg(target_os = "linux")]
    {
        ExitCode::from(supervise::main(args))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = args;
        eprintln!("terra: the supervisor runs only on Linux in this build");
        ExitCode::from(EXIT_REFUSED)
    }
}
