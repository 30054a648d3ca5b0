//! Making a running process execute one system call of the test's choosing
//! (root only: ptrace of another user's, or a no_new_privs, process). The
//! roles' seccomp tests use it to have the real `terra __vm`, `terra
//! __network` or `terra __supervisor` of a run call off its allowlist — no
//! switch in the shipped binary, the process as it runs.
//!
//! The tracee must be blocked in a system call (every role waits in one:
//! rt_sigtimedwait, poll, recvmsg): there its instruction pointer is right
//! after the 2-byte `syscall` instruction, which is moved back onto with the
//! number of the call to make; the tracee is then released and makes it.

use nix::sys::ptrace;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

/// Has thread `tid` (a process's main thread: its pid) make system call
/// `nr` with all-zero arguments. Err: why it could not be arranged.
#[cfg(target_arch = "x86_64")]
pub fn syscall_in(tid: i32, nr: u64) -> Result<(), String> {
    let pid = Pid::from_raw(tid);
    ptrace::seize(pid, ptrace::Options::empty()).map_err(|e| format!("PTRACE_SEIZE {tid}: {e}"))?;
    let result = (|| {
        ptrace::interrupt(pid).map_err(|e| format!("PTRACE_INTERRUPT: {e}"))?;
        match waitpid(pid, Some(nix::sys::wait::WaitPidFlag::__WALL)) {
            Ok(WaitStatus::PtraceEvent(..)) | Ok(WaitStatus::Stopped(..)) => {}
            other => return Err(format!("the tracee did not stop: {other:?}")),
        }
        let mut regs = ptrace::getregs(pid).map_err(|e| format!("PTRACE_GETREGS: {e}"))?;
        if (regs.orig_rax as i64) < 0 {
            return Err("the tracee is not in a system call".into());
        }
        regs.rip -= 2;
        regs.rax = nr;
        regs.orig_rax = u64::MAX;
        regs.rdi = 0;
        regs.rsi = 0;
        regs.rdx = 0;
        regs.r10 = 0;
        regs.r8 = 0;
        regs.r9 = 0;
        ptrace::setregs(pid, regs).map_err(|e| format!("PTRACE_SETREGS: {e}"))
    })();
    // Detaching resumes it: it executes `syscall` with `nr` at once.
    let _ = ptrace::detach(pid, None);
    result
}
