//! The checks before a worker runs.
//!
//! Windows has no exec: a worker's first instruction is its program's, so
//! it cannot check itself. The launcher therefore starts a **self-check
//! worker** first, made exactly like the real one (same package SID, same
//! attributes, its own worker job): terra itself, as `terra
//! __sandbox_launcher --self-check ROLE CANARY`, which checks from inside
//! ([`inside`]) that its token is a less-privileged AppContainer token with
//! exactly the role's capabilities, that it is in a job of the worker's
//! limits, that no console is attached or attachable and standard input is
//! not a console, and that the canary (a private file outside every grant)
//! does not open. Then the real worker is created suspended and checked from
//! outside ([`outside`]) to have the same package SID, capabilities and its
//! own job before it is resumed.

use std::os::windows::io::AsRawHandle;

use terra_appcontainer::{role_capabilities, Role, WorkerSettings};
use windows_sys::Win32::Foundation::{ERROR_ACCESS_DENIED, HANDLE};
use windows_sys::Win32::Security::{
    GetTokenInformation, TokenAppContainerSid, TokenCapabilities, TokenIsAppContainer,
    TokenIsLessPrivilegedAppContainer, TOKEN_APPCONTAINER_INFORMATION, TOKEN_GROUPS,
    TOKEN_INFORMATION_CLASS, TOKEN_QUERY,
};
use windows_sys::Win32::System::Console::{
    AttachConsole, FreeConsole, GetConsoleMode, GetConsoleWindow, GetStdHandle,
    ATTACH_PARENT_PROCESS, STD_INPUT_HANDLE,
};
use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};

use super::job;
use super::process::Worker;
use super::util::{last_error, owned, OwnedSid};

/// What the self-check worker prints when every check passed.
pub const OK_LINE: &str = "terra-appcontainer-self-check ok";

/// The token of `process`, for queries.
fn token(process: HANDLE) -> Result<std::os::windows::io::OwnedHandle, String> {
    let mut t: HANDLE = std::ptr::null_mut();
    // SAFETY: `process` is a valid process handle; `t` receives a new handle.
    if unsafe { OpenProcessToken(process, TOKEN_QUERY, &mut t) } == 0 {
        return Err(last_error("OpenProcessToken"));
    }
    owned(t, "OpenProcessToken")
}

/// One token information class, in a u64-aligned buffer.
fn info(token: HANDLE, class: TOKEN_INFORMATION_CLASS, what: &str) -> Result<Vec<u64>, String> {
    let mut len = 0u32;
    // SAFETY: a null buffer of length 0 asks for the length needed.
    unsafe { GetTokenInformation(token, class, std::ptr::null_mut(), 0, &mut len) };
    let mut buf = vec![0u64; (len as usize).div_ceil(8).max(1)];
    // SAFETY: `buf` has at least `len` writable bytes, 8-byte aligned.
    let ok = unsafe {
        GetTokenInformation(
            token,
            class,
            buf.as_mut_ptr().cast(),
            (buf.len() * 8) as u32,
            &mut len,
        )
    };
    if ok == 0 {
        return Err(last_error(&format!("GetTokenInformation ({what})")));
    }
    Ok(buf)
}

/// The facts of a token the checks compare.
struct TokenFacts {
    app_container: bool,
    less_privileged: bool,
    capabilities: u32,
}

fn facts(token: HANDLE) -> Result<TokenFacts, String> {
    let flag =
        |class, what| -> Result<bool, String> { Ok(info(token, class, what)?[0] as u32 != 0) };
    let caps = info(token, TokenCapabilities, "capabilities")?;
    // SAFETY: the call filled `caps` with a TOKEN_GROUPS (u64-aligned).
    let count = unsafe { (*caps.as_ptr().cast::<TOKEN_GROUPS>()).GroupCount };
    Ok(TokenFacts {
        app_container: flag(TokenIsAppContainer, "is AppContainer")?,
        less_privileged: flag(
            TokenIsLessPrivilegedAppContainer,
            "is less-privileged AppContainer",
        )?,
        capabilities: count,
    })
}

fn check_facts(f: &TokenFacts, role: Role) -> Result<(), String> {
    if !f.app_container {
        return Err("the token is not an AppContainer token".into());
    }
    if !f.less_privileged {
        return Err("the token is not a less-privileged AppContainer token".into());
    }
    let want = role_capabilities(role).len() as u32;
    if f.capabilities != want {
        return Err(format!(
            "the token carries {} capability SIDs; the {} role has exactly {want}",
            f.capabilities,
            role.name()
        ));
    }
    Ok(())
}

/// The self-check, run inside the AppContainer by `--self-check`.
pub fn inside(role: Role, canary: &str) -> Result<(), String> {
    // SAFETY: the pseudo handle of this process is always valid.
    let t = token(unsafe { GetCurrentProcess() })?;
    check_facts(&facts(t.as_raw_handle())?, role)?;
    if !job::current_in_job()? {
        return Err("this process is in no job".into());
    }
    let want = WorkerSettings::of(role).job;
    let have = job::current_limits()?;
    if have != want {
        return Err(format!(
            "this process's job has limits {have:?}, not the worker job's {want:?}"
        ));
    }
    // SAFETY: GetConsoleWindow takes no argument and only reads.
    if !unsafe { GetConsoleWindow() }.is_null() {
        return Err("a console window is attached".into());
    }
    // SAFETY: plain call; on success the console is freed again below.
    if unsafe { AttachConsole(ATTACH_PARENT_PROCESS) } != 0 {
        // SAFETY: detaches the console just attached.
        unsafe { FreeConsole() };
        return Err("the launcher's console could be attached: keystrokes could be queued for the user's shell".into());
    }
    let mut mode = 0;
    // SAFETY: GetStdHandle returns this process's handle (or null);
    // GetConsoleMode only reads it and fails for anything but a console.
    if unsafe { GetConsoleMode(GetStdHandle(STD_INPUT_HANDLE), &mut mode) } != 0 {
        return Err("standard input is a console".into());
    }
    match std::fs::File::open(canary) {
        Err(e) if e.raw_os_error() == Some(ERROR_ACCESS_DENIED as i32) => Ok(()),
        Ok(_) => Err(format!("the canary {canary}, outside every grant, opened")),
        Err(e) => Err(format!(
            "opening the canary {canary} failed with {e}, not with access denied"
        )),
    }
}

/// The real worker, still suspended: same package SID, the role's
/// capabilities, less privileged, in its own job.
pub fn outside(worker: &Worker, package: &OwnedSid, role: Role) -> Result<(), String> {
    let t = token(worker.process.as_raw_handle())?;
    check_facts(&facts(t.as_raw_handle())?, role)?;
    let sid = info(t.as_raw_handle(), TokenAppContainerSid, "AppContainer SID")?;
    // SAFETY: the call filled `sid` with a TOKEN_APPCONTAINER_INFORMATION
    // whose pointer points into the same buffer, at a valid SID.
    let same = unsafe {
        let p = (*sid.as_ptr().cast::<TOKEN_APPCONTAINER_INFORMATION>()).TokenAppContainer;
        !p.is_null() && package.equals(p)
    };
    if !same {
        return Err("the worker's package SID is not this launch's".into());
    }
    if !worker.job.contains(&worker.process)? {
        return Err("the worker is not in its job".into());
    }
    Ok(())
}
