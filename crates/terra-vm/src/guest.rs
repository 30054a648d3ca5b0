//! terra as the guest's init (`rdinit=/terra -- __vm_guest`): PID 1 of the
//! guest kernel, started from the initramfs built by `assets`.
//!
//! 1. mounts devtmpfs, proc and sysfs for itself (never for the workload);
//! 2. loads the modules in the initramfs in their order (finit_module);
//! 3. waits for the control port (`terra.ctl`), says Ready, reads the run's
//!    [`GuestConfig`];
//! 4. mounts the box's tree over 9p at /newroot with a procfs and a small
//!    /dev of the guest's own; brings up lo and, for mediated networking,
//!    the one NIC (whose only route is QEMU's forward to the broker);
//! 5. forks the workload: own session, stdio on pipes, chroot into the
//!    tree, the caller's uid and gid, every capability dropped (locked
//!    securebits, empty bounding set), no_new_privs, the workload's seccomp
//!    deny lists, the activation check, execve;
//! 6. relays stdin, stdout, stderr and signals over the channel, reaps
//!    orphans, reports how the workload ended and powers the guest off.
//!
//! Refuses to run unless it is PID 1 on an initramfs root with no procfs
//! mounted yet: started on a host by hand or by accident it does nothing.

use std::ffi::{CString, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nix::mount::{mount, MsFlags};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{ForkResult, Pid};
use serde::{Deserialize, Serialize};

use crate::proto::{Decoder, FromGuest, GuestConfig, ToGuest};

const NEWROOT: &str = "/newroot";

fn say(msg: &str) {
    let _ = writeln!(std::io::stderr(), "terra (guest init): {msg}");
}

/// Powers the guest off (QEMU runs with -no-reboot: it exits). Never returns.
fn power_off() -> ! {
    nix::unistd::sync();
    // SAFETY: reboot(2) with a constant command; the guest ends here.
    unsafe { libc::reboot(libc::RB_POWER_OFF) };
    // Not reached unless the call failed: let the kernel panic (panic=-1
    // reboots, which -no-reboot turns into QEMU's exit).
    std::process::exit(1)
}

/// The entry of `terra __vm_guest`.
pub fn main(args: Vec<OsString>) -> ExitCode {
    if !args.is_empty() || nix::unistd::getpid().as_raw() != 1 || !on_initramfs() {
        eprintln!(
            "terra __vm_guest: this is the init of terra's vm guest (PID 1 of its kernel, on the initramfs \
             terra built); it does nothing elsewhere"
        );
        return ExitCode::from(125);
    }
    if let Err(e) = early() {
        say(&format!("setup failed: {e}"));
        power_off()
    }
    let ctl = match find_port(Duration::from_secs(20)) {
        Ok(f) => f,
        Err(e) => {
            say(&e);
            power_off()
        }
    };
    let mut chan = Channel {
        fd: ctl,
        dec: Decoder::new(),
    };
    if chan.send(&FromGuest::Ready.encode()).is_err() {
        power_off()
    }
    let config = match chan.read_config() {
        Ok(c) => c,
        Err(e) => {
            say(&e);
            power_off()
        }
    };
    if let Err(e) = prepare_root(&config) {
        let _ = chan.send(&FromGuest::Refused(format!("the guest's root: {e}")).encode());
        power_off()
    }
    run(chan, &config)
}

/// The root is the initramfs (ramfs or tmpfs) and nothing is mounted on /proc.
fn on_initramfs() -> bool {
    use nix::sys::statfs::{statfs, FsType, TMPFS_MAGIC};
    /// linux/magic.h: RAMFS_MAGIC (the initramfs's rootfs without tmpfs).
    const RAMFS_MAGIC: FsType = FsType(0x8584_58f6);
    let root_ok = statfs("/").is_ok_and(|s| {
        let t = s.filesystem_type();
        t == RAMFS_MAGIC || t == TMPFS_MAGIC
    });
    root_ok && !std::path::Path::new("/proc/self").exists()
}

fn mnt(
    src: &str,
    target: &str,
    fstype: &str,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), String> {
    let _ = std::fs::create_dir_all(target);
    mount(Some(src), target, Some(fstype), flags, data)
        .map_err(|e| format!("mount {fstype} on {target}: {e}"))
}

/// Its own /dev, /proc, /sys; stdio on the console; the modules.
fn early() -> Result<(), String> {
    let nosuid = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    mnt("devtmpfs", "/dev", "devtmpfs", MsFlags::MS_NOSUID, None)?;
    if let Ok(c) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/console")
    {
        let _ = nix::unistd::dup2(c.as_raw_fd(), 1);
        let _ = nix::unistd::dup2(c.as_raw_fd(), 2);
    }
    if let Ok(n) = std::fs::File::open("/dev/null") {
        let _ = nix::unistd::dup2(n.as_raw_fd(), 0);
    }
    mnt("proc", "/proc", "proc", nosuid | MsFlags::MS_NODEV, None)?;
    mnt("sysfs", "/sys", "sysfs", nosuid | MsFlags::MS_NODEV, None)?;
    // Nobody may read init's memory through /proc, even the same uid.
    let _ = nix::sys::prctl::set_dumpable(false);
    load_modules("/modules")
}

/// Loads the modules in `dir` (its files, in name order; directories are
/// other groups).
fn load_modules(dir: &str) -> Result<(), String> {
    let mut names: Vec<_> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.path())
            .collect(),
        Err(_) => return Ok(()),
    };
    names.sort();
    for p in names {
        let f = std::fs::File::open(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        // SAFETY: finit_module with an open descriptor, an empty
        // NUL-terminated parameter string and no flags.
        let rc = unsafe { libc::syscall(libc::SYS_finit_module, f.as_raw_fd(), c"".as_ptr(), 0) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(format!("finit_module({}): {e}", p.display()));
            }
        }
    }
    Ok(())
}

/// The control port: the virtio-serial port named `terra.ctl` (it appears
/// a moment after its driver loaded).
fn find_port(within: Duration) -> Result<OwnedFd, String> {
    let t0 = Instant::now();
    loop {
        if let Ok(rd) = std::fs::read_dir("/sys/class/virtio-ports") {
            for e in rd.flatten() {
                let name = std::fs::read_to_string(e.path().join("name")).unwrap_or_default();
                if name.trim() == crate::qemu::PORT_NAME {
                    let dev = format!("/dev/{}", e.file_name().to_string_lossy());
                    if let Ok(f) = std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(&dev)
                    {
                        return Ok(f.into());
                    }
                }
            }
        }
        if t0.elapsed() > within {
            return Err(format!(
                "the control port {} did not appear within {within:?}",
                crate::qemu::PORT_NAME
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

struct Channel {
    fd: OwnedFd,
    dec: Decoder,
}

impl Channel {
    /// Writes all of `bytes`; the port is non-blocking (the relay polls
    /// it), so a full port is waited for, never an error.
    fn send(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut off = 0;
        while off < bytes.len() {
            match nix::unistd::write(&self.fd, &bytes[off..]) {
                Ok(n) => off += n,
                Err(nix::errno::Errno::EINTR) => {}
                Err(nix::errno::Errno::EAGAIN) => {
                    let mut p = [PollFd::new(self.fd.as_fd(), PollFlags::POLLOUT)];
                    let _ = poll(&mut p, PollTimeout::NONE);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Reads once (blocking) into the decoder; false at end of file.
    fn fill(&mut self) -> Result<bool, String> {
        let mut buf = vec![0u8; self.dec.room().min(256 * 1024)];
        match nix::unistd::read(self.fd.as_raw_fd(), &mut buf) {
            Ok(0) => Ok(false),
            Ok(n) => {
                self.dec.push(&buf[..n]);
                Ok(true)
            }
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => Ok(true),
            Err(e) => Err(format!("the control channel: {e}")),
        }
    }

    fn read_config(&mut self) -> Result<GuestConfig, String> {
        loop {
            match self.dec.next_to_guest().map_err(|e| e.to_string())? {
                Some(ToGuest::Config(c)) => return Ok(*c),
                Some(other) => {
                    return Err(format!("expected the configuration first, got {other:?}"))
                }
                None => {
                    if !self.fill()? {
                        return Err("the host closed the control channel".into());
                    }
                }
            }
        }
    }
}

/// The box's tree over 9p at /newroot, its /proc and /dev, the network.
fn prepare_root(c: &GuestConfig) -> Result<(), String> {
    let opts = format!("trans=virtio,version=9p2000.L,msize={}", c.msize);
    mnt(
        &c.share_tag,
        NEWROOT,
        "9p",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(&opts),
    )?;
    let proc_ = format!("{NEWROOT}/proc");
    if std::path::Path::new(&proc_).is_dir() {
        mnt(
            "proc",
            &proc_,
            "proc",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None,
        )?;
    }
    let dev = format!("{NEWROOT}/dev");
    if std::path::Path::new(&dev).is_dir() {
        small_dev(&dev)?;
    }
    let s = socket_for_ioctl()?;
    if_up(&s, "lo", None)?;
    if let Some(net) = &c.net {
        load_modules("/modules/net")?;
        // The NIC appears once virtio_net has probed its device.
        let t0 = Instant::now();
        loop {
            match if_up(&s, "eth0", Some((net.address, net.prefix))) {
                Ok(()) => break,
                Err(e) if t0.elapsed() > Duration::from_secs(5) => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
    Ok(())
}

/// tmpfs with null zero full random urandom tty, a private devpts, shm.
fn small_dev(dev: &str) -> Result<(), String> {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    mnt(
        "tmpfs",
        dev,
        "tmpfs",
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("mode=0755,size=64k"),
    )?;
    for (n, major, minor) in [
        ("null", 1, 3),
        ("zero", 1, 5),
        ("full", 1, 7),
        ("random", 1, 8),
        ("urandom", 1, 9),
        ("tty", 5, 0),
    ] {
        let p = format!("{dev}/{n}");
        mknod(
            p.as_str(),
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            makedev(major, minor),
        )
        .map_err(|e| format!("mknod {p}: {e}"))?;
        // mknod applies the umask: make the mode exact.
        let _ = nix::sys::stat::fchmodat(
            None,
            p.as_str(),
            Mode::from_bits_truncate(0o666),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        );
    }
    mnt(
        "devpts",
        &format!("{dev}/pts"),
        "devpts",
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )?;
    let _ = std::os::unix::fs::symlink("pts/ptmx", format!("{dev}/ptmx"));
    mnt(
        "tmpfs",
        &format!("{dev}/shm"),
        "tmpfs",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=1777"),
    )?;
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        let _ = std::os::unix::fs::symlink(target, format!("{dev}/{name}"));
    }
    Ok(())
}

fn socket_for_ioctl() -> Result<OwnedFd, String> {
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!("socket: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in r.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    r
}

fn sockaddr_in(a: std::net::Ipv4Addr) -> libc::sockaddr {
    // SAFETY: sockaddr_in is plain old data; all-zero is a valid value.
    let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sin.sin_family = libc::AF_INET as libc::sa_family_t;
    sin.sin_addr.s_addr = u32::from_ne_bytes(a.octets());
    // SAFETY: sockaddr_in and sockaddr have the same size on Linux; the
    // kernel reads it as sockaddr_in (its family says so).
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

fn ioctl(s: &OwnedFd, req: libc::c_ulong, r: &mut libc::ifreq, what: &str) -> Result<(), String> {
    // SAFETY: the interface ioctls read and write one ifreq.
    if unsafe { libc::ioctl(s.as_raw_fd(), req as _, r as *mut libc::ifreq) } < 0 {
        return Err(format!("{what}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Sets an interface's address and netmask (if given) and brings it up.
fn if_up(s: &OwnedFd, name: &str, addr: Option<(std::net::Ipv4Addr, u8)>) -> Result<(), String> {
    if let Some((a, prefix)) = addr {
        let mut r = ifreq(name);
        r.ifr_ifru.ifru_addr = sockaddr_in(a);
        ioctl(
            s,
            libc::SIOCSIFADDR,
            &mut r,
            &format!("{name}: set address"),
        )?;
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(prefix))
        };
        let mut r = ifreq(name);
        r.ifr_ifru.ifru_netmask = sockaddr_in(std::net::Ipv4Addr::from(mask));
        ioctl(
            s,
            libc::SIOCSIFNETMASK,
            &mut r,
            &format!("{name}: set netmask"),
        )?;
    }
    let mut r = ifreq(name);
    ioctl(s, libc::SIOCGIFFLAGS, &mut r, &format!("{name}: get flags"))?;
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    let flags = unsafe { r.ifr_ifru.ifru_flags };
    r.ifr_ifru.ifru_flags = flags | (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    ioctl(s, libc::SIOCSIFFLAGS, &mut r, &format!("{name}: up"))
}

/// What the workload child reports before its exec (JSON lines on a
/// close-on-exec pipe; end of file means the exec succeeded).
#[derive(Debug, Serialize, Deserialize)]
enum Report {
    Activation(String),
    Refused(String),
    ExecFailed { code: i32, reason: String },
}

fn report(fd: RawFd, r: &Report) {
    if let Ok(mut line) = serde_json::to_vec(r) {
        line.push(b'\n');
        // SAFETY: `fd` is the child's own copy of the report pipe.
        let f = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
        let _ = (&*f).write_all(&line);
    }
}

fn pipe() -> (OwnedFd, OwnedFd) {
    match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => {
            say(&format!("pipe: {e}"));
            power_off()
        }
    }
}

/// The workload's side of the fork; never returns.
fn workload(
    c: &GuestConfig,
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    rep: RawFd,
    tty: Option<&str>,
) -> ! {
    let refuse = |why: String| -> ! {
        report(rep, &Report::Refused(why));
        // SAFETY: _exit in the child, no destructors of the parent's state.
        unsafe { libc::_exit(125) }
    };
    let _ = nix::unistd::setsid();
    // With a terminal: the pseudo-terminal's slave on 0, 1, 2, as the
    // controlling terminal of the workload's session.
    let slave = tty.map(|path| {
        let fd = nix::fcntl::open(
            path,
            nix::fcntl::OFlag::O_RDWR,
            nix::sys::stat::Mode::empty(),
        )
        .unwrap_or_else(|e| refuse(format!("the guest's terminal {path}: {e}")));
        // SAFETY: TIOCSCTTY with an integer argument on an open terminal.
        if unsafe { libc::ioctl(fd, libc::TIOCSCTTY as _, 0) } != 0 {
            refuse(format!(
                "the guest's terminal: TIOCSCTTY: {}",
                std::io::Error::last_os_error()
            ));
        }
        fd
    });
    let (stdin, stdout, stderr) = match slave {
        Some(fd) => (fd, fd, fd),
        None => (stdin, stdout, stderr),
    };
    for (from, to) in [(stdin, 0), (stdout, 1), (stderr, 2)] {
        if nix::unistd::dup2(from, to).is_err() {
            refuse("dup2 of the workload's stdio".into());
        }
    }
    // Everything else closes at the exec (the channel, the pipes' other ends).
    // SAFETY: close_range with the CLOEXEC flag only marks descriptors.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if let Err(e) = std::env::set_current_dir(NEWROOT)
        .and_then(|_| nix::unistd::chroot(".").map_err(std::io::Error::from))
        .and_then(|_| std::env::set_current_dir(&c.cwd))
    {
        refuse(format!("working directory {} in the guest: {e}", c.cwd));
    }
    if let Err(e) = drop_privileges(c.uid, c.gid) {
        refuse(format!("dropping privileges: {e}"));
    }
    match terra_seccomp::compile(terra_seccomp::Table::Workload)
        .and_then(|p| terra_seccomp::install(&p))
    {
        Ok(()) => {}
        Err(e) => refuse(format!("the workload's seccomp filters: {e}")),
    }
    match activation(c) {
        Ok(()) => report(rep, &Report::Activation("passed".into())),
        Err(why) => {
            report(rep, &Report::Activation(why.clone()));
            refuse(format!("activation check failed: {why}"));
        }
    }
    exec(c, rep)
}

/// securebits locked (no root privileges, no fix-ups), empty bounding set,
/// no supplementary groups, the caller's gid and uid, no capability left,
/// no_new_privs.
fn drop_privileges(uid: u32, gid: u32) -> Result<(), String> {
    const SECBITS: libc::c_ulong = 0x2f | 0xc0; // NOROOT(+L), NO_SETUID_FIXUP(+L), KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE(+L)
                                                // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_SECUREBITS, SECBITS, 0, 0, 0) } != 0 {
        return Err(format!("securebits: {}", std::io::Error::last_os_error()));
    }
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments; EINVAL past the last capability.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
        {
            return Err(format!("bounding set: {}", std::io::Error::last_os_error()));
        }
    }
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    nix::unistd::setgroups(&[]).map_err(|e| format!("setgroups: {e}"))?;
    let g = nix::unistd::Gid::from_raw(gid);
    nix::unistd::setresgid(g, g, g).map_err(|e| format!("setresgid: {e}"))?;
    let u = nix::unistd::Uid::from_raw(uid);
    nix::unistd::setresuid(u, u, u).map_err(|e| format!("setresuid: {e}"))?;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    let hdr = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let data = [0u32; 6];
    // SAFETY: capset v3 reads one header and two 3-word data structs.
    if unsafe { libc::syscall(libc::SYS_capset, &hdr as *const Header, data.as_ptr()) } != 0 {
        return Err(format!("capset: {}", std::io::Error::last_os_error()));
    }
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))
}

/// In the final context: the canary must not open, no canary address may
/// accept a connection.
fn activation(c: &GuestConfig) -> Result<(), String> {
    let canary = String::from_utf8_lossy(&c.canary_path).into_owned();
    if std::fs::File::open(&canary).is_ok() {
        return Err(format!(
            "the canary {canary} could be opened inside the guest"
        ));
    }
    for a in &c.canary_tcp {
        if std::net::TcpStream::connect_timeout(a, Duration::from_millis(300)).is_ok() {
            return Err(format!(
                "a TCP connection to {a} succeeded inside the guest"
            ));
        }
    }
    Ok(())
}

fn exec(c: &GuestConfig, rep: RawFd) -> ! {
    let cs = |v: &[Vec<u8>]| -> Vec<CString> {
        v.iter()
            .filter_map(|b| CString::new(b.clone()).ok())
            .collect()
    };
    let (argv, envp, cands) = (cs(&c.argv), cs(&c.envp), cs(&c.candidates));
    let mut denied = None;
    let mut other = None;
    for cand in &cands {
        match nix::unistd::execve(cand, &argv, &envp) {
            Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ENOTDIR) => {}
            Err(nix::errno::Errno::EACCES) => {
                denied.get_or_insert_with(|| {
                    format!("{}: permission denied", cand.to_string_lossy())
                });
            }
            Err(e) => {
                other = Some(format!("{}: {e}", cand.to_string_lossy()));
                break;
            }
            Ok(never) => match never {},
        }
    }
    let name = argv
        .first()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (code, reason) = match (other, denied) {
        (Some(r), _) | (None, Some(r)) => (126, format!("cannot execute {name}: {r}")),
        (None, None) => (127, format!("{name}: command not found in the guest")),
    };
    report(rep, &Report::ExecFailed { code, reason });
    // SAFETY: _exit in the child.
    unsafe { libc::_exit(code) }
}

/// TIOCSWINSZ on a terminal (the kernel signals its foreground job).
fn set_window(fd: RawFd, rows: u16, cols: u16) {
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize.
    unsafe { libc::ioctl(fd, libc::TIOCSWINSZ as _, &ws as *const libc::winsize) };
}

/// A pseudo-terminal in the workload's own devpts (its /dev/ptmx): the
/// master, and the slave's path (as init sees it, before the chroot).
fn open_pty(rows: u16, cols: u16) -> Result<(OwnedFd, String), String> {
    let ptmx = format!("{NEWROOT}/dev/pts/ptmx");
    let fd = nix::fcntl::open(
        ptmx.as_str(),
        nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_NOCTTY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| format!("{ptmx}: {e}"))?;
    // SAFETY: a new descriptor owned by nobody else.
    let master = unsafe { OwnedFd::from_raw_fd(fd) };
    let unlock: libc::c_int = 0;
    let mut n: libc::c_uint = 0;
    // SAFETY: TIOCSPTLCK reads an int, TIOCGPTN writes an unsigned int.
    let ok = unsafe {
        libc::ioctl(fd, libc::TIOCSPTLCK as _, &unlock as *const libc::c_int) == 0
            && libc::ioctl(fd, libc::TIOCGPTN as _, &mut n as *mut libc::c_uint) == 0
    };
    if !ok {
        return Err(format!(
            "unlocking the pseudo-terminal: {}",
            std::io::Error::last_os_error()
        ));
    }
    set_window(fd, rows, cols);
    Ok((master, format!("{NEWROOT}/dev/pts/{n}")))
}

fn set_nonblocking(fd: BorrowedFd<'_>) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    if let Ok(fl) = fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL) {
        let _ = fcntl(
            fd.as_raw_fd(),
            FcntlArg::F_SETFL(OFlag::from_bits_truncate(fl) | OFlag::O_NONBLOCK),
        );
    }
}

/// Forks the workload and relays until it ended; powers off.
fn run(mut chan: Channel, c: &GuestConfig) -> ! {
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    let _ = chld.thread_block();
    let sfd = match SignalFd::with_flags(&chld, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK) {
        Ok(s) => s,
        Err(e) => {
            let _ = chan.send(&FromGuest::Refused(format!("signalfd: {e}")).encode());
            power_off()
        }
    };
    let (in_r, in_w) = pipe();
    let (out_r, out_w) = pipe();
    let (err_r, err_w) = pipe();
    let (rep_r, rep_w) = pipe();
    let pty = match c.terminal {
        Some((rows, cols)) => match open_pty(rows, cols) {
            Ok(p) => Some(p),
            Err(e) => {
                let _ =
                    chan.send(&FromGuest::Refused(format!("the guest's terminal: {e}")).encode());
                power_off()
            }
        },
        None => None,
    };
    // SAFETY: init has one thread (nothing started one).
    let child = match unsafe { nix::unistd::fork() } {
        Ok(ForkResult::Child) => {
            let _ = SigSet::empty().thread_set_mask();
            workload(
                c,
                in_r.as_raw_fd(),
                out_w.as_raw_fd(),
                err_w.as_raw_fd(),
                rep_w.as_raw_fd(),
                pty.as_ref().map(|(_, slave)| slave.as_str()),
            )
        }
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => {
            let _ = chan.send(&FromGuest::Refused(format!("fork: {e}")).encode());
            power_off()
        }
    };
    drop((in_r, out_w, err_w, rep_w));
    // With a terminal the master is both: what is typed goes in, what the
    // workload writes comes out.
    let (in_w, out_r) = match pty {
        Some((master, _)) => match master.try_clone() {
            Ok(m) => (m, master),
            Err(_) => power_off(),
        },
        None => (in_w, out_r),
    };
    for fd in [&in_w, &out_r, &err_r, &rep_r, &chan.fd] {
        set_nonblocking(fd.as_fd());
    }
    let mut stdin_w = Some(in_w);
    let mut pending: Vec<u8> = Vec::new();
    let mut stdin_eof = false;
    let mut outs: [Option<OwnedFd>; 3] = [Some(out_r), Some(err_r), Some(rep_r)];
    let mut report_buf: Vec<u8> = Vec::new();
    let mut ended: Option<(bool, i32)> = None;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if ended.is_some() && outs.iter().all(Option::is_none) {
            break;
        }
        let mut fds = vec![
            PollFd::new(chan.fd.as_fd(), PollFlags::POLLIN),
            PollFd::new(sfd.as_fd(), PollFlags::POLLIN),
        ];
        let mut which: Vec<usize> = Vec::new();
        for (i, o) in outs.iter().enumerate() {
            if let Some(fd) = o {
                fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
                which.push(i);
            }
        }
        let stdin_at = match (&stdin_w, pending.is_empty()) {
            (Some(w), false) => {
                fds.push(PollFd::new(w.as_fd(), PollFlags::POLLOUT));
                Some(fds.len() - 1)
            }
            _ => None,
        };
        if let Err(e) = poll(&mut fds, PollTimeout::NONE) {
            if e != nix::errno::Errno::EINTR {
                break;
            }
            continue;
        }
        let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
        let ctl_ready = ready(&fds[0]);
        let sig_ready = ready(&fds[1]);
        let out_ready: Vec<usize> = which
            .iter()
            .enumerate()
            .filter(|(k, _)| ready(&fds[2 + k]))
            .map(|(_, i)| *i)
            .collect();
        let stdin_ready = stdin_at.is_some_and(|i| ready(&fds[i]));
        drop(fds);
        if ctl_ready {
            match chan.fill() {
                Ok(true) => {}
                // The host is gone: nothing to report to.
                Ok(false) | Err(_) => {
                    let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
                    power_off()
                }
            }
            loop {
                match chan.dec.next_to_guest() {
                    Ok(Some(ToGuest::Stdin(b))) => {
                        if stdin_w.is_some() {
                            pending.extend(b)
                        }
                    }
                    Ok(Some(ToGuest::StdinEof)) => stdin_eof = true,
                    Ok(Some(ToGuest::Signal(s))) => {
                        if let Ok(sig) = Signal::try_from(s) {
                            let _ = kill(child, sig);
                        }
                    }
                    Ok(Some(ToGuest::WindowSize { rows, cols })) => {
                        if c.terminal.is_some() {
                            if let Some(m) = &outs[0] {
                                set_window(m.as_raw_fd(), rows, cols);
                            }
                        }
                    }
                    Ok(Some(ToGuest::Config(_))) | Err(_) => {
                        // A second configuration or a broken stream: stop.
                        let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
                        power_off()
                    }
                    Ok(None) => break,
                }
            }
        }
        if stdin_ready {
            if let Some(w) = &stdin_w {
                match nix::unistd::write(w, &pending) {
                    Ok(n) => {
                        pending.drain(..n);
                    }
                    Err(nix::errno::Errno::EAGAIN) => {}
                    Err(_) => {
                        pending.clear();
                        stdin_w = None;
                    }
                }
            }
        }
        if stdin_eof && pending.is_empty() {
            stdin_w = None;
        }
        for i in out_ready {
            let Some(fd) = &outs[i] else { continue };
            match nix::unistd::read(fd.as_raw_fd(), &mut buf) {
                Ok(0) => outs[i] = None,
                Ok(n) => match i {
                    0 | 1 => {
                        if chan
                            .send(&FromGuest::data_frames(i == 1, &buf[..n]))
                            .is_err()
                        {
                            power_off()
                        }
                    }
                    _ => {
                        report_buf.extend_from_slice(&buf[..n]);
                        while let Some(nl) = report_buf.iter().position(|b| *b == b'\n') {
                            let line: Vec<u8> = report_buf.drain(..=nl).collect();
                            let msg = match serde_json::from_slice::<Report>(&line) {
                                Ok(Report::Activation(a)) => FromGuest::Activation(a),
                                Ok(Report::Refused(r)) => FromGuest::Refused(r),
                                Ok(Report::ExecFailed { code, reason }) => {
                                    FromGuest::ExecFailed { code, reason }
                                }
                                Err(_) => continue,
                            };
                            let _ = chan.send(&msg.encode());
                        }
                    }
                },
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
                Err(_) => outs[i] = None,
            }
        }
        if sig_ready {
            while let Ok(Some(_)) = sfd.read_signal() {}
            loop {
                match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::Exited(pid, code)) => {
                        if pid == child {
                            ended = Some((false, code));
                        }
                    }
                    Ok(WaitStatus::Signaled(pid, sig, _)) => {
                        if pid == child {
                            ended = Some((true, sig as i32));
                        }
                    }
                    Ok(WaitStatus::StillAlive) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            if ended.is_some() {
                // The workload's end ends the guest's processes, as the
                // end of a PID namespace's init does: its pipes then close.
                let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
            }
        }
    }
    let (signaled, value) = ended.unwrap_or((false, 125));
    let _ = chan.send(&FromGuest::Exit { signaled, value }.encode());
    // Let the host read the last frames before the port goes away.
    let _ = std::fs::File::from(chan.fd.try_clone().unwrap_or_else(|_| power_off())).sync_all();
    let _ = chan.fd.as_fd();
    let _ = std::io::stdout().flush();
    drop(chan);
    power_off()
}

#[allow(dead_code)]
fn unused(_: &mut dyn Read) {}
