//! The network broker: proxy protocols, destination matching, DNS pinning, relay, receipts.

use std::ffi::OsString;
use std::process::ExitCode;

/// Entry point of the hidden `terra __network` role.
pub fn role_main(_args: Vec<OsString>) -> ExitCode {
    eprintln!("terra __network: not built yet");
    ExitCode::from(125)
}
