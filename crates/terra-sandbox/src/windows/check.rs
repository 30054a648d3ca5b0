//! The checks before a worker runs.
//!
//! Windows has no exec: a worker's first instruction is its program's, so
//! it cannot check itself. The launcher therefore starts a **self-check
//! worker** first, made exactly like the real one (same package SID, same
//! attributes, its own worker job): terra itself, as `terra
//! __sandbox_launcher --self-check ROLE CANARY`, which checks from inside
//! ([`inside`]) that its token is an AppContainer token (less privileged
//! exactly when the role's is) with exactly the role's capabilities, that
//! it is in a job of exactly the role's limits, its console (a role: none,
//! none attachable; the workload: its own, holding no other process),
//! standard input not a console, that the canary (a private file outside
//! every grant) does not open, and that the program's image does. Then the real worker is created suspended and checked from
//! outside ([`outside`]) to have the same package SID, capabilities and its
//! own job before it is resumed.

use super::error::Error;
use std::os::windows::io::AsRawHandle;

use terra_appcontainer::Console;
use terra_appcontainer::{role_capabilities, Role, WorkerSettings};
use windows_sys::Win32::Foundation::{ERROR_ACCESS_DENIED, HANDLE};
use windows_sys::Win32::Security::{
    GetTokenInformation, TokenAppContainerSid, TokenCapabilities, TokenIsAppContainer,
    TokenIsLessPrivilegedAppContainer, TOKEN_APPCONTAINER_INFORMATION, TOKEN_GROUPS,
    TOKEN_INFORMATION_CLASS, TOKEN_QUERY,
};
use windows_sys::Win32::System::Console::{
    AttachConsole, FreeConsole, GetConsoleMode, GetConsoleProcessList, GetConsoleWindow,
    GetStdHandle, ATTACH_PARENT_PROCESS, STD_INPUT_HANDLE,
};
use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};

use super::job;
use super::process::Worker;
use super::util::{last_error, owned, OwnedSid};

/// What the self-check worker prints when every check passed.
pub const OK_LINE: &str = "terra-appcontainer-self-check ok";

/// The token of `process`, for queries.
fn token(process: HANDLE) -> Result<std::os::windows::io::OwnedHandle, Error> {
    let mut t: HANDLE = std::ptr::null_mut();
    // SAFETY: `process` is a valid process handle; `t` receives a new handle.
    if unsafe { OpenProcessToken(process, TOKEN_QUERY, &mut t) } == 0 {
        return Err(last_error("OpenProcessToken"));
    }
    owned(t, "OpenProcessToken")
}

/// One token information class, in a u64-aligned buffer.
fn info(token: HANDLE, class: TOKEN_INFORMATION_CLASS, what: &str) -> Result<Vec<u64>, Error> {
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

fn facts(token: HANDLE) -> Result<TokenFacts, Error> {
    let flag =
        |class, what| -> Result<bool, Error> { Ok(info(token, class, what)?[0] as u32 != 0) };
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

fn check_facts(f: &TokenFacts, role: Role) -> Result<(), Error> {
    if !f.app_container {
        return Err("the token is not an AppContainer token".into());
    }
    let want_lpac = WorkerSettings::of(role).less_privileged();
    if f.less_privileged != want_lpac {
        return Err(format!(
            "the token is {}a less-privileged AppContainer token; the {} role's is {}",
            if f.less_privileged { "" } else { "not " },
            role.name(),
            if want_lpac { "" } else { "not" }
        )
        .into());
    }
    let want = role_capabilities(role).len() as u32;
    if f.capabilities != want {
        return Err(format!(
            "the token carries {} capability SIDs; the {} role has exactly {want}",
            f.capabilities,
            role.name()
        )
        .into());
    }
    Ok(())
}

/// A role: no console, and the launcher's cannot be attached.
fn no_console() -> Result<(), Error> {
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
    Ok(())
}

/// The workload: a console of its own (CREATE_NO_WINDOW), which no other
/// process shares: not the user's, so nothing typed there reaches it and
/// nothing it writes to the console reaches the user's shell.
fn own_console() -> Result<(), Error> {
    let mut pids = [0u32; 4];
    // SAFETY: `pids` is writable for its length.
    let n = unsafe { GetConsoleProcessList(pids.as_mut_ptr(), pids.len() as u32) };
    if n == 0 {
        return Err(last_error(
            "GetConsoleProcessList (the workload has a console of its own)",
        ));
    }
    if n != 1 || pids[0] != std::process::id() {
        return Err(format!(
            "the console is shared with {} other processes: it is not the worker's own",
            n - 1
        )
        .into());
    }
    Ok(())
}

/// The self-check, run inside the AppContainer by `--self-check`.
pub fn inside(role: Role, canary: &str, program: &str) -> Result<(), Error> {
    // SAFETY: the pseudo handle of this process is always valid.
    let t = token(unsafe { GetCurrentProcess() })?;
    check_facts(&facts(t.as_raw_handle())?, role)?;
    if !job::current_in_any()? {
        return Err("this process is in no job".into());
    }
    let settings = WorkerSettings::of(role);
    let have = job::current_limits()?;
    if have != settings.job {
        return Err(format!(
            "this process's job has limits {have:?}, not the {} job's {:?}",
            role.name(),
            settings.job
        )
        .into());
    }
    match settings.console {
        Console::None => no_console()?,
        Console::OwnHidden => own_console()?,
    }
    // The program's image: readable here, so the worker can start (a
    // per-user install outside every grant would fail here, not later).
    if let Err(e) = std::fs::File::open(program) {
        return Err(format!("the program {program} does not open in the AppContainer: {e}").into());
    }
    let mut mode = 0;
    // SAFETY: GetStdHandle returns this process's handle (or null);
    // GetConsoleMode only reads it and fails for anything but a console.
    if unsafe { GetConsoleMode(GetStdHandle(STD_INPUT_HANDLE), &mut mode) } != 0 {
        return Err("standard input is a console".into());
    }
    match std::fs::File::open(canary) {
        Err(e) if e.raw_os_error() == Some(ERROR_ACCESS_DENIED as i32) => Ok(()),
        Ok(_) => Err(format!("the canary {canary}, outside every grant, opened").into()),
        Err(e) => Err(format!(
            "opening the canary {canary} failed with {e}, not with access denied"
        )
        .into()),
    }
}

/// The real worker, still suspended: same package SID, the role's
/// capabilities, less privileged, in its own job.
pub fn outside(worker: &Worker, package: &OwnedSid, role: Role) -> Result<(), Error> {
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
