//! Launchers that lower a SandboxPlan onto the host kernel.
//!
//! `linux/` holds the native Linux launcher (namespaces, mounts, seccomp,
//! Landlock); `macos/` the Seatbelt launcher `terra __sandbox_launcher`
//! (docs/sandbox-macos.md), built only for macOS; `windows/` the
//! AppContainer launcher of the same name (docs/sandbox-windows.md), built
//! only for Windows.

use std::ffi::OsString;
use std::process::ExitCode;

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "macos")]
pub mod macos;
#[cfg(windows)]
pub mod windows;

/// The exit status of a box, launcher or role that refused to start what it
/// was given (setup failure, activation failure, a parent already gone).
pub use terra_policy::EXIT_REFUSED;

/// Entry point of the hidden `terra __sandbox_launcher` role.
///
/// On macOS it is the Seatbelt launcher (`macos`, docs/sandbox-macos.md).
/// On Linux there is no separate launcher process: the box's init and the
/// broker are cloned into their namespaces and exec terra as `__vm` and
/// `__network` (see docs/sandbox-linux.md), so this entry point only refuses.
#[cfg(target_os = "macos")]
pub fn launcher_role_main(args: Vec<OsString>) -> ExitCode {
    macos::launcher_main(args)
}

/// Entry point of the hidden `terra __sandbox_reaper` role (macOS): ends
/// every process of one run when `terra run` closes its standard input or
/// dies (docs/sandbox-macos.md, "The process tree").
#[cfg(target_os = "macos")]
pub fn reaper_role_main(args: Vec<OsString>) -> ExitCode {
    macos::tree::reaper_main(args)
}

/// Entry point of the hidden `terra __sandbox_launcher` role: on Windows
/// the AppContainer launcher (`windows`, docs/sandbox-windows.md).
#[cfg(windows)]
pub fn launcher_role_main(args: Vec<OsString>) -> ExitCode {
    windows::launcher_main(args)
}

/// Entry point of the hidden `terra __sandbox_launcher` role (see above).
#[cfg(not(any(target_os = "macos", windows)))]
pub fn launcher_role_main(_args: Vec<OsString>) -> ExitCode {
    eprintln!(
        "terra __sandbox_launcher: the Linux backend has no launcher process (the box is `terra __vm`); nothing to do"
    );
    ExitCode::from(EXIT_REFUSED)
}

/// Entry point of the hidden `terra __vm` role: the box's init, exec'd by
/// `linux::spawn_box` inside the box's new namespaces, its input on fixed
/// descriptors. `service` is the in-box service of mediated networking
/// (`terra_netd::box_service` in terra). Takes no argument but `net`: the
/// box makes its own network namespace.
#[cfg(target_os = "linux")]
pub fn vm_role_main(args: Vec<OsString>, service: linux::BoxService) -> ExitCode {
    let own_net = match args.as_slice() {
        [] => false,
        [word] if word == "net" => true,
        _ => {
            eprintln!("terra __vm: takes no arguments but `net` (its input is on descriptors)");
            return ExitCode::from(EXIT_REFUSED);
        }
    };
    linux::vm_main(service, own_net)
}

/// Entry point of the hidden `terra __vm` role: Linux only in this build.
#[cfg(not(target_os = "linux"))]
pub fn vm_role_main(_args: Vec<OsString>) -> ExitCode {
    eprintln!("terra __vm: only on Linux in this build");
    ExitCode::from(EXIT_REFUSED)
}
