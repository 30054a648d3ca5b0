//! `terra run`'s side of Ctrl-C: it leaves the interrupt to the launcher.

use super::error::Error;
use windows_sys::Win32::System::Console::{
    SetConsoleCtrlHandler, CTRL_BREAK_EVENT, CTRL_CLOSE_EVENT, CTRL_C_EVENT,
};

use super::util::last_error;

/// Ctrl-C and Ctrl-Break are the launcher's to handle (it ends the
/// workload's job and removes what the launch added); `terra run` waits for
/// it instead of dying first, which would kill the launcher mid-cleanup
/// through the launcher job. A closed console ends every process attached
/// to it once its handler returns (Windows allows about five seconds):
/// `terra run` holds on for most of that, so the launcher can clean up; if
/// `terra run`'s own main thread finishes first the process simply ends.
unsafe extern "system" fn leave_to_launcher(event: u32) -> windows_sys::core::BOOL {
    match event {
        CTRL_C_EVENT | CTRL_BREAK_EVENT => 1,
        CTRL_CLOSE_EVENT => {
            std::thread::sleep(std::time::Duration::from_millis(CLOSE_GRACE_MS));
            0
        }
        _ => 0,
    }
}

/// How long a handler may hold a closing console's process (Windows ends
/// it after about 5 s).
pub const CLOSE_GRACE_MS: u64 = 4_500;

/// Installs the handler for the rest of the process.
pub fn leave_interrupts_to_launcher() -> Result<(), Error> {
    // SAFETY: a handler of the right signature, valid for the whole process.
    if unsafe { SetConsoleCtrlHandler(Some(leave_to_launcher), 1) } == 0 {
        return Err(last_error("SetConsoleCtrlHandler"));
    }
    Ok(())
}
