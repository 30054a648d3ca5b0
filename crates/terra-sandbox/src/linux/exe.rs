//! Starting a role: terra's own executable, opened once by descriptor, and
//! the few system calls a freshly cloned child makes before it execs it.
//!
//! A role is `execveat(exe_fd, "", ["terra", ROLE], [], AT_EMPTY_PATH)`:
//! no path lookup, no environment, nothing in argv but the role's name. What
//! the role needs arrives on descriptors at fixed numbers.
//!
//! The child between clone(2) and its exec makes only system calls on data
//! prepared before the clone (no allocation, no lock, no libc state), so a
//! role can be cloned from any caller, multi-threaded test harnesses
//! included.

use std::ffi::CStr;
use std::fmt::Write as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::errno::Errno;
use nix::unistd::{ForkResult, Pid};

use super::error::SandboxError;
use super::sys;

/// terra's executable, opened (O_PATH, close-on-exec) before any workload
/// exists; roles are exec'd from this descriptor, never from a path.
#[derive(Debug)]
pub struct RoleExe {
    fd: OwnedFd,
}

impl RoleExe {
    /// The executable this process runs from (`/proc/self/exe`, a link the
    /// kernel resolves to the running binary itself).
    pub fn current() -> Result<RoleExe, SandboxError> {
        RoleExe::open(Path::new("/proc/self/exe"))
    }

    /// Another executable that dispatches the same role names (the tests'
    /// role binary; terra itself uses [`RoleExe::current`]).
    pub fn open(path: &Path) -> Result<RoleExe, SandboxError> {
        use nix::fcntl::OFlag;
        let fd = nix::fcntl::open(
            path,
            OFlag::O_PATH | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|errno| SandboxError::sys_at("open(O_PATH)", errno, path.display().to_string()))?;
        // SAFETY: `fd` was just opened and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(RoleExe { fd })
    }
}

/// The most descriptors a role is handed.
const MAX_FDS: usize = 10;
/// Descriptors are first moved at or above this number, so that placing
/// them at their fixed numbers (all below it) never clobbers one another.
const HIGH: RawFd = 64;

/// Capabilities a role keeps across its exec (as ambient capabilities): an
/// unprivileged caller's uid is not 0 in the role's user namespace, so the
/// exec would otherwise drop them all. CAP_SYS_ADMIN: mounts, pivot_root,
/// sethostname; CAP_NET_ADMIN: the box's loopback; CAP_SETPCAP: the
/// workload's bounding-set drop and securebits; CAP_NET_BIND_SERVICE: the
/// box's DNS stub on port 53; CAP_SYS_PTRACE: kept by the box's network
/// service alone (the workload's connect() arguments and socket). Each role
/// drops what it does not use before it serves, the workload all of them.
/// (Numbers from linux/capability.h.)
const AMBIENT: [u32; 5] = [
    CAP_SYS_ADMIN,
    CAP_NET_ADMIN,
    CAP_SETPCAP,
    CAP_NET_BIND_SERVICE,
    CAP_SYS_PTRACE,
];
const CAP_SETPCAP: u32 = 8;
const CAP_NET_BIND_SERVICE: u32 = 10;
const CAP_SYS_PTRACE: u32 = 19;
const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;

/// Everything a cloned child needs to become a role, prepared before the clone.
pub(crate) struct Launch<'a> {
    exe: &'a RoleExe,
    /// ["terra", role, NULL] or ["terra", role, arg, NULL].
    argv: [*const libc::c_char; 4],
    /// (descriptor of the caller, number in the role)
    moves: [(RawFd, RawFd); MAX_FDS],
    count: usize,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// Where a failure before the exec is reported as a status line (a
    /// number in the role), if anywhere; stderr always gets it.
    status: Option<RawFd>,
}

impl<'a> Launch<'a> {
    pub fn new(exe: &'a RoleExe, role: &'static CStr) -> Launch<'a> {
        let (uid, gid) = (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        );
        Launch {
            exe,
            argv: [
                c"terra".as_ptr(),
                role.as_ptr(),
                std::ptr::null(),
                std::ptr::null(),
            ],
            moves: [(-1, -1); MAX_FDS],
            count: 0,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            status: None,
        }
    }

    /// Hands `fd` to the role as descriptor `number` (below 64, each once).
    pub fn give(&mut self, fd: RawFd, number: RawFd) -> Result<(), SandboxError> {
        if !(0..HIGH).contains(&number) || self.moves[..self.count].iter().any(|m| m.1 == number) {
            return Err(SandboxError::InvalidRequest(format!(
                "descriptor number {number} for a role: must be in 0..{HIGH} and given once"
            )));
        }
        if self.count == MAX_FDS {
            return Err(SandboxError::InvalidRequest(format!(
                "a role takes at most {MAX_FDS} descriptors"
            )));
        }
        self.moves[self.count] = (fd, number);
        self.count += 1;
        Ok(())
    }

    /// One word after the role's name in argv (a flag, never a secret).
    pub fn arg(&mut self, word: &'static CStr) {
        self.argv[2] = word.as_ptr();
    }

    /// Reports a failure before the exec on this descriptor (its number in the role).
    pub fn report_to(&mut self, number: RawFd) {
        self.status = Some(number);
    }

    /// Clones a child into the new namespaces `flags`, which execs the role.
    /// Returns its pid. Any caller: the child makes only system calls.
    pub fn spawn(&self, flags: libc::c_int) -> Result<Pid, SandboxError> {
        // SAFETY: the child runs `become_role`, which only makes system calls
        // on this prepared data and ends with execveat or _exit; it never
        // returns into the caller's code.
        match unsafe { sys::clone_raw(flags) }? {
            ForkResult::Child => self.become_role(),
            ForkResult::Parent { child } => Ok(child),
        }
    }

    /// In the cloned child: descriptors, uid/gid maps, ambient capabilities,
    /// parent-death signal, exec. Never returns.
    fn become_role(&self) -> ! {
        let mut high = [-1; MAX_FDS];
        for (i, (src, _)) in self.moves[..self.count].iter().enumerate() {
            // SAFETY: fcntl on a descriptor number; no memory is passed.
            high[i] = unsafe { libc::fcntl(*src, libc::F_DUPFD_CLOEXEC, HIGH) };
            if high[i] < 0 {
                self.fail("fcntl(F_DUPFD_CLOEXEC)");
            }
        }
        // SAFETY: as above.
        let exe = unsafe { libc::fcntl(self.exe.fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, HIGH) };
        if exe < 0 {
            self.fail("fcntl(F_DUPFD_CLOEXEC) of the executable");
        }
        sys::cloexec_from(3);
        for (i, (_, number)) in self.moves[..self.count].iter().enumerate() {
            // dup2 leaves the copy without close-on-exec: the role keeps it.
            // SAFETY: dup2 on descriptor numbers.
            if unsafe { libc::dup2(high[i], *number) } < 0 {
                self.fail("dup2");
            }
        }
        if !write_proc(c"/proc/self/setgroups", b"deny", true)
            || !write_proc(c"/proc/self/uid_map", &self.uid_map, false)
            || !write_proc(c"/proc/self/gid_map", &self.gid_map, false)
        {
            self.fail("writing the uid/gid maps");
        }
        if let Err(call) = raise_ambient() {
            self.fail(call);
        }
        // The role re-arms it after its exec and checks its parent then.
        sys::kill_with_parent();
        let envp: [*const libc::c_char; 1] = [std::ptr::null()];
        // SAFETY: `exe` is an open descriptor of the executable; argv and
        // envp are NULL-terminated arrays of C strings that outlive the call.
        unsafe {
            libc::syscall(
                libc::SYS_execveat,
                exe,
                c"".as_ptr(),
                self.argv.as_ptr(),
                envp.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        };
        self.fail("execveat(terra's executable)")
    }

    /// Says which step failed (and its errno) on stderr and, for the box, on
    /// its status pipe; then exits 125. Formats on the stack.
    fn fail(&self, step: &str) -> ! {
        let errno = Errno::last();
        let role = self.role_name();
        let mut line = StackText::new();
        let _ = writeln!(
            line,
            "{{\"refused\":\"cannot start terra {role}: {step} failed: {}\"}}",
            errno.desc()
        );
        if let Some(fd) = self.status {
            // SAFETY: `fd` is this child's own descriptor (or closed: EBADF).
            let _ = unsafe { libc::write(fd, line.buf.as_ptr().cast(), line.len) };
        }
        let mut msg = StackText::new();
        let _ = writeln!(
            msg,
            "terra: cannot start terra {role}: {step} failed: {}",
            errno.desc()
        );
        // SAFETY: as above, on stderr.
        let _ = unsafe { libc::write(2, msg.buf.as_ptr().cast(), msg.len) };
        sys::exit_now(crate::EXIT_REFUSED.into())
    }

    fn role_name(&self) -> &str {
        // SAFETY: argv[1] is the `&'static CStr` given to `new`.
        unsafe { CStr::from_ptr(self.argv[1]) }
            .to_str()
            .unwrap_or("role")
    }
}

/// Opens a /proc file and writes `data`; `optional`: a missing file is fine.
fn write_proc(path: &CStr, data: &[u8], optional: bool) -> bool {
    // SAFETY: `path` is a valid C string; the result is checked.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return optional && Errno::last() == Errno::ENOENT;
    }
    // SAFETY: `data` is valid for its length; `fd` was just opened.
    let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    // SAFETY: `fd` is ours and not used again.
    unsafe { libc::close(fd) };
    n == data.len() as isize
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Makes [`AMBIENT`] inheritable and ambient, so they survive the exec of
/// an unprivileged caller's role (in the child's own user namespace, where
/// it holds every capability until then).
fn raise_ambient() -> Result<(), &'static str> {
    let hdr = CapHeader {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capget v3 writes two data structs into `data`.
    if unsafe {
        libc::syscall(
            libc::SYS_capget,
            &hdr as *const CapHeader,
            data.as_mut_ptr(),
        )
    } != 0
    {
        return Err("capget");
    }
    for cap in AMBIENT {
        data[(cap / 32) as usize].inheritable |= 1 << (cap % 32);
    }
    // SAFETY: capset v3 reads one header and two data structs.
    if unsafe { libc::syscall(libc::SYS_capset, &hdr as *const CapHeader, data.as_ptr()) } != 0 {
        return Err("capset(inheritable)");
    }
    for cap in AMBIENT {
        // SAFETY: integer arguments only; changes this thread's ambient set.
        let rc = unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                cap as libc::c_ulong,
                0,
                0,
            )
        };
        if rc != 0 {
            return Err("prctl(PR_CAP_AMBIENT_RAISE)");
        }
    }
    Ok(())
}

/// A small text buffer on the stack (a failure message in a cloned child,
/// which must not allocate); longer text is cut.
struct StackText {
    buf: [u8; 256],
    len: usize,
}

impl StackText {
    fn new() -> StackText {
        StackText {
            buf: [0; 256],
            len: 0,
        }
    }
}

impl std::fmt::Write for StackText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// First steps of every role after its exec: non-dumpable again (exec reset
/// it), `terra` as its name (after fexecve the kernel names it after the
/// descriptor), the parent-death signal re-armed, and an exit when the
/// parent is already gone (`parent`: readable once it is, see
/// `sys::peer_gone`).
pub(crate) fn role_start(parent: Option<&OwnedFd>) {
    sys::not_dumpable();
    set_name();
    sys::kill_with_parent();
    if let Some(p) = parent {
        if sys::peer_gone(std::os::fd::AsFd::as_fd(p)) {
            sys::exit_now(crate::EXIT_REFUSED.into());
        }
    }
}

/// Names this process `terra` (comm, what ps and process accounting show).
pub fn set_name() {
    let _ = nix::sys::prctl::set_name(c"terra");
}

/// Adopts descriptor `n` (handed to this role at a fixed number), making it
/// close-on-exec again; None when it is not open.
pub(crate) fn adopt(n: RawFd) -> Option<OwnedFd> {
    // SAFETY: fcntl on a descriptor number.
    if unsafe { libc::fcntl(n, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: `n` is open and, by the role's contract, handed to it alone.
    Some(unsafe { OwnedFd::from_raw_fd(n) })
}

/// Reads a role's configuration (JSON) from descriptor `fd` to its end.
pub(crate) fn read_config<T: serde::de::DeserializeOwned>(
    fd: OwnedFd,
    limit: usize,
) -> Result<T, SandboxError> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::fs::File::from(fd)
        .take(limit as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| SandboxError::io_at("read", &e, "the role's configuration"))?;
    if buf.len() > limit {
        return Err(SandboxError::InvalidRequest(format!(
            "the role's configuration is larger than {limit} bytes"
        )));
    }
    serde_json::from_slice(&buf).map_err(|e| {
        SandboxError::InvalidRequest(format!("the role's configuration does not decode: {e}"))
    })
}

/// Writes a role's configuration on the caller's end of its pipe and closes it.
pub(crate) fn write_config<T: serde::Serialize>(
    fd: OwnedFd,
    config: &T,
) -> Result<(), SandboxError> {
    use std::io::Write;
    let body = serde_json::to_vec(config).map_err(|e| {
        SandboxError::InvalidRequest(format!("cannot encode the role's configuration: {e}"))
    })?;
    std::fs::File::from(fd)
        .write_all(&body)
        .map_err(|e| SandboxError::io_at("write", &e, "the role's configuration"))
}
