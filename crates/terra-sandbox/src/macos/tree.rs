//! Ending a run's whole process tree on macOS: the host's process list
//! (libproc's `proc_listallpids`), libsandbox's `sandbox_check` asked about
//! each process, and SIGKILL, given to `terra_seatbelt::sweep`, which
//! decides (docs/sandbox-macos.md, "The process tree").

use std::ffi::{c_char, c_int, c_void, CString};

use terra_seatbelt::{RunMark, SweepReport, Verdict};

/// `SANDBOX_FILTER_NONE`: the question "is this process sandboxed".
const FILTER_NONE: c_int = 0;
/// `SANDBOX_FILTER_PATH`: the variadic argument is a path.
const FILTER_PATH: c_int = 1;

extern "C" {
    fn proc_listallpids(buffer: *mut c_void, buffersize: c_int) -> c_int;
    fn sandbox_check(pid: libc::pid_t, operation: *const c_char, kind: c_int, ...) -> c_int;
    /// A flag for `sandbox_check`'s kind: a denied answer is not logged as
    /// a violation (the sweep asks about every process of the host).
    static SANDBOX_CHECK_NO_REPORT: c_int;
}

/// Every process id of the host but this process's own.
fn all_pids() -> Vec<i32> {
    // SAFETY: a null buffer of size 0 only asks for the count.
    let n = unsafe { proc_listallpids(std::ptr::null_mut(), 0) };
    if n <= 0 {
        return Vec::new();
    }
    // Room for processes started since the count.
    let mut pids = vec![0 as libc::pid_t; n as usize + 64];
    let bytes = (pids.len() * std::mem::size_of::<libc::pid_t>()) as c_int;
    // SAFETY: `pids` is a writable buffer of exactly `bytes` bytes, which
    // the call fills with at most that many bytes of process ids.
    let got = unsafe { proc_listallpids(pids.as_mut_ptr().cast(), bytes) };
    pids.truncate(got.max(0) as usize);
    let me = std::process::id() as i32;
    pids.retain(|&p| p != me);
    pids
}

/// What libsandbox says about `pid` (None when it cannot say: the process
/// is gone, or belongs to another user).
fn verdict(pid: i32, mark: &CString, antimark: &CString) -> Option<Verdict> {
    let op = c"file-read-metadata";
    // SAFETY: the static is a constant libsandbox exports.
    let no_report = unsafe { SANDBOX_CHECK_NO_REPORT };
    // SAFETY: a null operation with FILTER_NONE takes no further argument.
    let sandboxed = unsafe { sandbox_check(pid, std::ptr::null(), FILTER_NONE | no_report) };
    if sandboxed < 0 {
        return None;
    }
    let allowed = |path: &CString| {
        // SAFETY: `op` and `path` are NUL-terminated and outlive the call;
        // FILTER_PATH takes exactly one `const char *` argument.
        let r = unsafe { sandbox_check(pid, op.as_ptr(), FILTER_PATH | no_report, path.as_ptr()) };
        // 0: allowed, 1: denied, -1: cannot be asked.
        (r >= 0).then_some(r == 0)
    };
    Some(Verdict {
        sandboxed: sandboxed == 1,
        mark_allowed: allowed(mark)?,
        antimark_allowed: allowed(antimark)?,
    })
}

/// Kills every process carrying the run's profile (by `mark`), until a
/// pass finds none.
pub fn sweep_run(mark: &RunMark) -> SweepReport {
    let (Ok(m), Ok(a)) = (
        CString::new(mark.mark.as_str()),
        CString::new(mark.antimark.as_str()),
    ) else {
        // Launch specs hold no NUL (checked when encoded); nothing to find.
        return SweepReport::default();
    };
    terra_seatbelt::sweep(
        all_pids,
        |pid| verdict(pid, &m, &a),
        |pid| {
            // SAFETY: kill has no memory preconditions; a pid that is gone
            // gives ESRCH, which needs nothing.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        },
    )
}

/// Entry point of `terra __sandbox_reaper --mark PATH --antimark PATH`:
/// waits for end of file on standard input (terra run holds the only write
/// end: it closes it at the run's end, and the kernel closes it when terra
/// run dies, also by SIGKILL), sweeps, and reports one line on standard
/// output. terra run starts it in a process group of its own, so the
/// terminal's Ctrl-C is not its; the workload cannot signal it (its profile
/// allows signals to its own sandbox only).
pub fn reaper_main(argv: Vec<std::ffi::OsString>) -> std::process::ExitCode {
    use std::io::{Read, Write};
    let args: Option<Vec<String>> = argv.into_iter().map(|a| a.into_string().ok()).collect();
    let mark = match args
        .ok_or_else(|| terra_seatbelt::Error::Args("an argument is not UTF-8".into()))
        .and_then(|a| terra_seatbelt::tree::parse_reaper_argv(&a))
    {
        Ok(m) => m,
        Err(e) => {
            eprintln!("terra __sandbox_reaper: {e}");
            return std::process::ExitCode::from(crate::EXIT_REFUSED);
        }
    };
    // A hang-up of the terminal terra run had is not the end of the run.
    // SAFETY: installing SIG_IGN runs no handler code.
    let _ = unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGHUP,
            nix::sys::signal::SigHandler::SigIgn,
        )
    };
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 64];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let report = sweep_run(&mark);
    // terra run may be gone (killed): then nobody reads this.
    let _ = std::io::stdout().write_all(report.line().as_bytes());
    std::process::ExitCode::SUCCESS
}
