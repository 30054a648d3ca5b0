//! Run lifecycle: run lock, pid files, roles, deadlines, reaping, receipts.

use std::ffi::OsString;
use std::process::ExitCode;

/// Entry point of the hidden `terra __supervisor` role.
pub fn role_main(_args: Vec<OsString>) -> ExitCode {
    eprintln!("terra __supervisor: not built yet");
    ExitCode::from(125)
}
