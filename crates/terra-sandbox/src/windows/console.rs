//! `terra run`'s side of Ctrl-C: it leaves the interrupt to the launcher.

use windows_sys::Win32::System::Console::{SetConsoleCtrlHandler, CTRL_BREAK_EVENT, CTRL_C_EVENT};

use super::util::last_error;

/// Ctrl-C and Ctrl-Break are the launcher's to handle (it ends the
/// workload's job and removes what the launch added); `terra run` waits for
/// it instead of dying first, which would kill the launcher mid-cleanup
/// through the launcher job. A closed console ends `terra run` as usual.
unsafe extern "system" fn leave_to_launcher(event: u32) -> windows_sys::core::BOOL {
    i32::from(event == CTRL_C_EVENT || event == CTRL_BREAK_EVENT)
}

/// Installs the handler for the rest of the process.
pub fn leave_interrupts_to_launcher() -> Result<(), String> {
    // SAFETY: a handler of the right signature, valid for the whole process.
    if unsafe { SetConsoleCtrlHandler(Some(leave_to_launcher), 1) } == 0 {
        return Err(last_error("SetConsoleCtrlHandler"));
    }
    Ok(())
}
