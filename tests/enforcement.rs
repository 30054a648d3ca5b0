//! Enforcement suite: escape probes against the real `terra` binary.
//!
//! Every probe is its own `#[test]` and has a positive twin (`*_twin`): the
//! probe must fail to escape, the twin must show the granted action works, so a
//! box that denies everything (or never starts) cannot pass. A probe script
//! prints `TERRA-PROBE-BLOCKED` only after all its attempts failed, and
//! `TERRA-PROBE-ESCAPED: <what>` for each that worked; a twin prints
//! `TERRA-PROBE-OK` only when every granted action worked.
//!
//! When the suite runs as root, each probe and twin also runs as uid/gid 65534
//! through `setpriv --reuid=65534 --regid=65534 --clear-groups`, from a copy of
//! the binary in a world-readable directory, with fixtures owned by 65534.
//! The probes use /bin/sh, coreutils, python3 and iproute2 inside the box.
// Linux only: the probes run in boxes of the linux and landlock backends.
#![cfg(target_os = "linux")]

mod common;

use common::{command_as, is_root, run_bounded, show, terra_as, terra_bin, users, RunDirs, User};
use terra_test_support::process::{children, HANG_LIMIT};

use std::collections::HashSet;
use std::fs;
use std::io::{BufRead, BufReader};
use std::net::{TcpListener, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A uid that owns nothing else on the host, for "another user's file".
const OTHER_UID: u32 = 4242;
const BLOCKED: &str = "TERRA-PROBE-BLOCKED";
const ESCAPED: &str = "TERRA-PROBE-ESCAPED";
const OK: &str = "TERRA-PROBE-OK";

/// Shell helpers every probe script starts with.
const PRELUDE: &str = r#"
esc=0; bad=0
try() { if "$@" >/dev/null 2>&1; then echo "TERRA-PROBE-ESCAPED: $*"; esc=1; fi; }
blocked() { [ "$esc" = 0 ] && echo TERRA-PROBE-BLOCKED; exit 0; }
need() { if ! "$@" >/dev/null 2>&1; then echo "TERRA-PROBE-FAILED: $*"; bad=1; fi; }
ok() { [ "$bad" = 0 ] && echo TERRA-PROBE-OK; exit 0; }
PROBE="python3 $WS/probe.py"
"#;

/// Actions the shell cannot do on its own; exit 0 when the action worked.
const PROBE_PY: &str = r##"
import ctypes, os, socket, sys, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *args):
    conv = [a if isinstance(a, (ctypes.Array, ctypes.c_char_p)) else ctypes.c_long(a) for a in args]
    return libc.syscall(ctypes.c_long(nr), *conv)
def check(r):
    sys.exit(0 if r >= 0 else 1)
a = sys.argv[1:]
act = a[0]
if act == "getpid": check(sc(39))
elif act == "mount":
    os.makedirs("/tmp/terra-m", exist_ok=True)
    check(libc.mount(b"none", b"/tmp/terra-m", b"tmpfs", 0, None))
elif act == "unshare": check(libc.unshare(int(a[1], 16)))
elif act == "setns":
    fd = os.open("/proc/self/ns/" + a[1], os.O_RDONLY)
    check(libc.setns(fd, 0))
elif act == "chroot": check(libc.chroot(b"/tmp"))
elif act == "keyctl":
    check(sc(248, ctypes.c_char_p(b"user"), ctypes.c_char_p(b"terra"), ctypes.c_char_p(b"x"), 1, -3))
elif act == "keyctl_join": check(sc(250, 1, 0))
elif act == "bpf":
    attr = ctypes.create_string_buffer(struct.pack("IIII", 2, 4, 4, 1) + bytes(112))
    check(sc(321, 0, attr, 128))
elif act == "perf":
    attr = bytearray(128)
    struct.pack_into("II", attr, 0, 1, 128)           # PERF_TYPE_SOFTWARE, size
    struct.pack_into("Q", attr, 40, (1 << 5) | (1 << 6))  # exclude_kernel, exclude_hv
    buf = ctypes.create_string_buffer(bytes(attr))
    check(sc(298, buf, 0, -1, -1, 0))
elif act == "io_uring":
    params = ctypes.create_string_buffer(120)
    check(sc(425, 8, params))
elif act == "userfaultfd":
    r = sc(323, 0)
    if r < 0: r = sc(323, 1)
    check(r)
elif act == "kexec":
    r = sc(246, 0, 0, 0, 0)
    if r < 0: r = sc(320, -1, -1, 0, ctypes.c_char_p(b""), 0)
    check(r)
elif act == "module":
    fd = os.open("/dev/null", os.O_RDONLY)
    r = sc(313, fd, ctypes.c_char_p(b""), 0)
    if r < 0: r = sc(175, 0, 0, ctypes.c_char_p(b""))
    if r < 0: r = sc(176, ctypes.c_char_p(b"loop"), 0)
    check(r)
elif act == "ptrace": check(libc.ptrace(16, int(a[1]), 0, 0))
elif act == "tiocsti":
    import fcntl, termios
    fcntl.ioctl(0, termios.TIOCSTI, b"#")
elif act == "tty":
    assert os.isatty(0)
    os.write(0, b"tty write works\n")
    os.close(os.open("/dev/tty", os.O_RDWR))
elif act == "tcp":
    socket.create_connection((a[1], int(a[2])), timeout=5).close()
elif act == "tcp_listen":
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1); s.close()
elif act == "tcp_self":
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
    c = socket.create_connection(s.getsockname(), timeout=5); x, _ = s.accept()
    c.sendall(b"hi"); assert x.recv(2) == b"hi"
elif act == "udp":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"terra-probe", (a[1], int(a[2])))
elif act == "udp_self":
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); r.bind(("127.0.0.1", 0)); r.settimeout(5)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", r.getsockname())
    assert r.recv(1) == b"x"
elif act == "raw":
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close(); sys.exit(0)
    except OSError: pass
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close()
elif act == "stream": socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
elif act == "resolve": socket.getaddrinfo(a[1], 443)
elif act == "abstract":
    s = socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect("\0" + a[1])
elif act == "abstract_self":
    l = socket.socket(socket.AF_UNIX); l.bind("\0terra-self-%d" % os.getpid()); l.listen(1)
    s = socket.socket(socket.AF_UNIX); s.connect("\0terra-self-%d" % os.getpid())
elif act == "unix":
    s = socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect(a[1])
elif act == "unix_self":
    p = "/tmp/terra-self.sock"
    l = socket.socket(socket.AF_UNIX); l.bind(p); l.listen(1)
    s = socket.socket(socket.AF_UNIX); s.connect(p)
elif act == "open":
    os.close(os.open(a[1], os.O_RDONLY if a[2] == "r" else os.O_RDWR))
elif act == "openw": os.close(os.open(a[1], os.O_WRONLY))
elif act in ("chmod", "fchmod", "fchmodat", "fchmodat2", "creat", "mknod", "openat", "tmpfile", "openat2"):
    # Tries one route to a set-id file at a[1] with mode a[2]; exit 0 when the
    # file then carries S_ISUID or S_ISGID.
    p, mode = a[1], int(a[2], 8)
    try:
        if act == "chmod": os.chmod(p, mode)
        elif act == "fchmod":
            fd = os.open(p, os.O_RDONLY); os.fchmod(fd, mode)
        elif act == "fchmodat": sc(268, -100, ctypes.c_char_p(p.encode()), mode)
        elif act == "fchmodat2": sc(452, -100, ctypes.c_char_p(p.encode()), mode, 0)
        elif act == "creat": sc(85, ctypes.c_char_p(p.encode()), mode)
        elif act == "mknod": os.mknod(p, 0o100000 | mode)
        elif act == "openat": os.open(p, os.O_CREAT | os.O_WRONLY, mode)
        elif act == "tmpfile":
            fd = os.open(os.path.dirname(p), os.O_TMPFILE | os.O_WRONLY, mode)
            os.link("/proc/self/fd/%d" % fd, p, follow_symlinks=True)
        elif act == "openat2":
            how = ctypes.create_string_buffer(struct.pack("QQQ", os.O_CREAT | os.O_WRONLY, mode, 0))
            sc(437, -100, ctypes.c_char_p(p.encode()), how, 24)
    except OSError: pass
    sys.exit(0 if os.path.exists(p) and os.lstat(p).st_mode & 0o6000 else 1)
elif act == "plain_modes":
    # The ordinary modes still work: create 0755, chmod 0644, 0700, sticky dir.
    d = a[1]
    fd = os.open(d + "/made", os.O_CREAT | os.O_WRONLY, 0o755); os.fchmod(fd, 0o700); os.close(fd)
    assert os.stat(d + "/made").st_mode & 0o7777 == 0o700
    os.chmod(d + "/made", 0o644); assert os.stat(d + "/made").st_mode & 0o7777 == 0o644
    os.mkdir(d + "/shared", 0o755); os.chmod(d + "/shared", 0o1777)
    assert os.stat(d + "/shared").st_mode & 0o7777 == 0o1777
    os.mknod(d + "/node", 0o100644); os.close(os.open(d + "/tmp2", os.O_CREAT | os.O_WRONLY, 0o600))
elif act == "setcap":
    # v2 vfs_cap_data: magic|effective, then cap_net_raw (13) permitted and inheritable words.
    blob = struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0)
    try: os.setxattr(a[1], "security.capability", blob)
    except OSError: pass
    try: sys.exit(0 if os.getxattr(a[1], "security.capability") else 1)
    except OSError: sys.exit(1)
elif act == "socket":
    socket.socket(int(a[1]), int(a[2]) | socket.SOCK_CLOEXEC, int(a[3])).close()
elif act == "socketpair":
    x, y = socket.socketpair(int(a[1]), socket.SOCK_STREAM); x.close(); y.close()
elif act == "tcp6_self":
    s = socket.socket(socket.AF_INET6); s.bind(("::1", 0)); s.listen(1)
    c = socket.create_connection(s.getsockname()[:2], timeout=5); x, _ = s.accept()
    c.sendall(b"hi"); assert x.recv(2) == b"hi"
elif act == "tls_cas":
    import ssl
    n = ssl.create_default_context().cert_store_stats()["x509_ca"]
    sys.exit(0 if n > 0 else 1)
elif act == "nonempty":
    with open(a[1], "rb") as f: sys.exit(0 if f.read(16) else 1)
else:
    sys.exit("unknown action " + act)
"##;

// ------------------------------------------------------------------ fixture

/// One run's host-side world: a workspace, things outside every grant, a fake
/// home with secrets, the state directory, host processes and sockets.
struct BoxWorld {
    /// The workspace, state, runtime, home and temp directories, and the user.
    dirs: RunDirs,
    /// Outside every grant.
    out: PathBuf,
    terra_args: Vec<String>,
    box_env: Vec<(String, String)>,
    policy: Option<String>,
    children: Vec<Child>,
    tcp: Option<TcpListener>,
    udp: Option<UdpSocket>,
    unix: Option<UnixListener>,
    abstract_name: Option<String>,
    abstract_sock: Option<std::os::unix::net::UnixListener>,
    marker: String,
    pty: bool,
    /// Supplementary groups the run starts with (`setpriv --groups`; root suite only).
    groups: Option<String>,
    /// Host paths outside the fixture root, removed at drop.
    cleanup: Vec<PathBuf>,
}

static SEQ: AtomicUsize = AtomicUsize::new(0);

impl std::ops::Deref for BoxWorld {
    type Target = RunDirs;
    fn deref(&self) -> &RunDirs {
        &self.dirs
    }
}

impl BoxWorld {
    fn new(name: &str, user: User) -> BoxWorld {
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let dirs = RunDirs::new("terra-enf", name, user);
        let fx = BoxWorld {
            out: dirs.root.join("out"),
            dirs,
            terra_args: Vec::new(),
            box_env: Vec::new(),
            policy: None,
            children: Vec::new(),
            tcp: None,
            udp: None,
            unix: None,
            abstract_name: None,
            abstract_sock: None,
            marker: format!("terramark{}x{n}", std::process::id()),
            pty: false,
            groups: None,
            cleanup: Vec::new(),
        };
        for d in [&fx.out, &fx.home.join(".ssh")] {
            fs::create_dir_all(d).unwrap();
        }
        fx.write("ws/readme", "the workspace readme\n");
        fx.write("ws/probe.py", PROBE_PY);
        fx.write("out/secret", "outside secret\n");
        fx.write("home/.ssh/id_ed25519", "PRIVATE KEY\n");
        fs::set_permissions(
            fx.home.join(".ssh/id_ed25519"),
            fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        fx
    }

    /// Hands every fixture file to the run's user (65534 runs own their
    /// workspace), but for another user's files.
    fn chown_all(&self) {
        self.chown_to_user(Some(OTHER_UID));
    }

    fn env(&mut self, k: &str, v: impl Into<String>) {
        self.box_env.push((k.into(), v.into()));
    }

    /// A host process (outside the box) whose argv, environment and an open
    /// descriptor carry the marker.
    fn host_sleeper(&mut self) -> u32 {
        let secret = self.write("out/fdsecret", &format!("{}-fd\n", self.marker));
        let child = Command::new("/bin/sh")
            .arg("-c")
            .arg("exec 7<\"$1\"; exec sleep 3600")
            .arg(format!("{}-argv", self.marker))
            .arg(&secret)
            .env("TERRA_PROBE_MARK", format!("{}-env", self.marker))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        self.children.push(child);
        self.env("HOSTPID", pid.to_string());
        pid
    }

    fn run(&mut self, script: &str) -> Output {
        self.chown_all();
        let user = self.user;
        let groups = self.groups.clone().filter(|_| is_root());
        let mut cmd = command_as(user, groups.as_deref(), &[], &terra_bin(user));
        if self.pty {
            let mut c = Command::new("/usr/bin/python3");
            c.arg("-c").arg(PTY_WRAPPER).arg(cmd.get_program());
            c.args(cmd.get_args());
            cmd = c;
        }
        cmd.arg("run");
        if let Some(p) = &self.policy {
            let path = self.root.join("policy.json");
            fs::write(&path, p).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
            cmd.arg("--policy").arg(&path);
        }
        cmd.args(&self.terra_args);
        cmd.arg("--workspace")
            .arg(&self.ws)
            .arg("--timeout")
            .arg("60s");
        cmd.arg("--env").arg(format!("WS={}", self.ws.display()));
        cmd.arg("--env").arg(format!("OUT={}", self.out.display()));
        cmd.arg("--env")
            .arg(format!("HOSTHOME={}", self.home.display()));
        cmd.arg("--env")
            .arg(format!("STATE={}", self.state.display()));
        cmd.arg("--env").arg(format!("MARK={}", self.marker));
        for (k, v) in &self.box_env {
            cmd.arg("--env").arg(format!("{k}={v}"));
        }
        cmd.arg("--")
            .arg("/bin/sh")
            .arg("-c")
            .arg(format!("{PRELUDE}\n{script}"));
        self.run_env(&mut cmd, "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin");
        run_bounded(cmd)
    }
}

impl Drop for BoxWorld {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for p in &self.cleanup {
            let _ = fs::remove_file(p);
        }
    }
}

/// Runs the command under a pseudo-terminal that is its controlling terminal.
const PTY_WRAPPER: &str = r#"
import os, sys, fcntl, termios
pid, fd = os.forkpty()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
out = b""
while True:
    try:
        d = os.read(fd, 65536)
    except OSError:
        break
    if not d:
        break
    out += d
_, st = os.waitpid(pid, 0)
sys.stdout.buffer.write(out.replace(b"\r\n", b"\n"))
sys.exit(os.waitstatus_to_exitcode(st) & 255)
"#;

fn assert_blocked(fx: &BoxWorld, out: &Output) {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.code() == Some(0) && text.contains(BLOCKED) && !text.contains(ESCAPED),
        "probe escaped (or the box did not run it) as {:?}:\n{}",
        fx.user,
        show(out)
    );
}

fn assert_ok(fx: &BoxWorld, out: &Output) {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.code() == Some(0) && text.contains(OK),
        "granted action failed as {:?}:\n{}",
        fx.user,
        show(out)
    );
}

// ------------------------------------------------------------------ probes

/// One escape probe: host-side setup, the attack, its positive twin, and an
/// optional host-side check after the attack (returns what escaped).
struct Probe {
    setup: fn(&mut BoxWorld),
    attack: &'static str,
    twin: &'static str,
    after: Option<fn(&mut BoxWorld) -> Option<String>>,
}

fn no_setup(_: &mut BoxWorld) {}

fn run_attack(name: &str, p: &Probe) {
    for user in users() {
        let mut fx = BoxWorld::new(name, user);
        (p.setup)(&mut fx);
        let out = fx.run(p.attack);
        assert_blocked(&fx, &out);
        if let Some(after) = p.after {
            if let Some(what) = after(&mut fx) {
                panic!("probe {name} escaped as {user:?}: {what}\n{}", show(&out));
            }
        }
    }
}

fn run_twin(name: &str, p: &Probe) {
    for user in users() {
        let mut fx = BoxWorld::new(name, user);
        (p.setup)(&mut fx);
        let out = fx.run(p.twin);
        assert_ok(&fx, &out);
    }
}

macro_rules! probes {
    ($($(#[$meta:meta])* $name:ident, $twin:ident => $probe:expr;)+) => {
        $(
            #[test]
            $(#[$meta])*
            fn $name() {
                run_attack(stringify!($name), &$probe);
            }
            #[test]
            fn $twin() {
                run_twin(stringify!($name), &$probe);
            }
        )+
        /// Every probe, for the count check.
        const PROBE_NAMES: &[&str] = &[$(stringify!($name)),+];
    };
}

/// A policy source: the workspace and temp writable, the minimal runtime
/// readable, then the rules `more`; network none, process tree required, the
/// root in `root_mode`.
fn workspace_policy(more: &[serde_json::Value], root_mode: &str) -> String {
    let mut rules = vec![
        serde_json::json!({ "access": "write", "path": { "root": "workspace" } }),
        serde_json::json!({ "access": "read", "path": { "special": "minimal-runtime" } }),
        serde_json::json!({ "access": "write", "path": { "root": "temp" } }),
    ];
    rules.extend_from_slice(more);
    let policy = serde_json::json!({
        "formatVersion": 3,
        "filesystem": { "default": "deny", "rules": rules },
        "network": { "mode": "none" },
        "process": { "treeConfinement": "required" },
        "root": { "mode": root_mode }
    });
    serde_json::to_string_pretty(&policy).unwrap()
}

/// A rule with `access` on `relative` in the workspace.
fn ws_rule(access: &str, relative: &str) -> serde_json::Value {
    serde_json::json!({ "access": access, "path": { "root": "workspace", "relative": relative } })
}

/// A policy with a deny-write tree and a deny tree inside the writable workspace.
fn deny_write_policy(fx: &mut BoxWorld) {
    fx.write("ws/a/protected/file", "protected content\n");
    fx.write("ws/a/protected/sub/inner", "inner\n");
    fx.write("ws/secret/key", "workspace secret\n");
    fx.write("ws/evil", "evil\n");
    fx.policy = Some(workspace_policy(
        &[
            ws_rule("deny-write", "a/protected"),
            ws_rule("deny", "secret"),
        ],
        "read-only",
    ));
}

fn nested_deny_policy(fx: &mut BoxWorld) {
    fx.write("ws/d/secret/key", "nested secret\n");
    fx.policy = Some(workspace_policy(
        &[ws_rule("deny", "d/secret")],
        "read-only",
    ));
}

/// The nested denied file is still where it was, with its content.
fn nested_secret_in_place(fx: &mut BoxWorld) -> Option<String> {
    let p = fx.ws.join("d/secret/key");
    match fs::read_to_string(&p) {
        Ok(s) if s == "nested secret\n" => None,
        Ok(s) => Some(format!("{} now holds {s:?}", p.display())),
        Err(e) => Some(format!("{} is gone: {e}", p.display())),
    }
}

/// The deny-write target is unchanged after an attack.
fn protected_unchanged(fx: &mut BoxWorld) -> Option<String> {
    let p = fx.ws.join("a/protected/file");
    match fs::read_to_string(&p) {
        Ok(s) if s == "protected content\n" => {}
        Ok(s) => return Some(format!("{} now holds {s:?}", p.display())),
        Err(e) => return Some(format!("{} is gone: {e}", p.display())),
    }
    let meta = fs::metadata(&p).unwrap();
    if meta.permissions().mode() & 0o777 == 0o777 {
        return Some("the protected file was chmod-ed".into());
    }
    let year_2001 = 978_307_200;
    let mtime = meta
        .modified()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    if mtime < year_2001 + 366 * 86_400 {
        return Some("the protected file's times were changed".into());
    }
    if fx.ws.join("a/protected/new").exists() || fx.ws.join("a/protected/newdir").exists() {
        return Some("a file was created under the protected tree".into());
    }
    if !fx.ws.join("a/protected").is_dir() || fx.ws.join("b").exists() {
        return Some("an ancestor of the protected tree was renamed".into());
    }
    None
}

/// Another user's files: as root, files in the workspace owned by an unused
/// uid (0600 and 0644); as an unprivileged caller (who cannot chown), root's
/// files under a `--read /etc` grant.
fn other_user_files(fx: &mut BoxWorld) {
    if !is_root() {
        fx.terra_args.extend(["--read".into(), "/etc".into()]);
        fx.env("OTHER_SECRET", "/etc/shadow");
        fx.env("OTHER_PUBLIC", "/etc/hostname");
        return;
    }
    let secret = fx.write("ws/other-secret", "another user's secret\n");
    let public = fx.write("ws/other-public", "another user's public file\n");
    std::os::unix::fs::chown(&secret, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    std::os::unix::fs::chown(&public, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(&public, fs::Permissions::from_mode(0o644)).unwrap();
    fx.env("OTHER_SECRET", secret.display().to_string());
    fx.env("OTHER_PUBLIC", public.display().to_string());
}

fn read_only_grant(fx: &mut BoxWorld) {
    let ro = fx.root.join("ro");
    fx.write("ro/file", "read-only grant\n");
    fx.terra_args
        .extend(["--read".into(), ro.display().to_string()]);
    fx.env("RO", ro.display().to_string());
}

fn read_only_unchanged(fx: &mut BoxWorld) -> Option<String> {
    let ro = fx.root.join("ro");
    if fs::read_to_string(ro.join("file")).ok().as_deref() != Some("read-only grant\n") {
        return Some("the read-only file changed or vanished".into());
    }
    if ro.join("new").exists() {
        return Some("a file was created in the read-only grant".into());
    }
    None
}

fn plant_symlinks(fx: &mut BoxWorld) {
    std::os::unix::fs::symlink(fx.out.join("secret"), fx.ws.join("link")).unwrap();
    std::os::unix::fs::symlink(&fx.out, fx.ws.join("dirlink")).unwrap();
    std::os::unix::fs::symlink(fx.home.join(".ssh/id_ed25519"), fx.ws.join("keylink")).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", fx.ws.join("shadowlink")).unwrap();
    std::os::unix::fs::symlink(fx.ws.join("readme"), fx.ws.join("inlink")).unwrap();
    std::os::unix::fs::symlink("readme", fx.ws.join("rellink")).unwrap();
}

fn host_tmp_file(fx: &mut BoxWorld) {
    let p = PathBuf::from(format!("/tmp/{}-hosttmp", fx.marker));
    fs::write(&p, "host tmp secret\n").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
    fx.env("HOSTTMP", p.display().to_string());
    fx.cleanup.push(p);
}

fn sleeper(fx: &mut BoxWorld) {
    fx.host_sleeper();
}

fn sleeper_alive(fx: &mut BoxWorld) -> Option<String> {
    let c = fx.children.last_mut().unwrap();
    c.try_wait()
        .unwrap()
        .map(|st| format!("the host process was killed: {st:?}"))
}

fn tcp_listener(fx: &mut BoxWorld) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    fx.env("PORT", l.local_addr().unwrap().port().to_string());
    fx.tcp = Some(l);
}

fn tcp_not_accepted(fx: &mut BoxWorld) -> Option<String> {
    match fx.tcp.as_ref().unwrap().accept() {
        Ok((_, peer)) => Some(format!(
            "the host listener accepted a connection from {peer}"
        )),
        Err(_) => None,
    }
}

fn udp_socket(fx: &mut BoxWorld) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_nonblocking(true).unwrap();
    fx.env("PORT", s.local_addr().unwrap().port().to_string());
    fx.udp = Some(s);
}

fn udp_not_received(fx: &mut BoxWorld) -> Option<String> {
    let mut buf = [0u8; 64];
    match fx.udp.as_ref().unwrap().recv_from(&mut buf) {
        Ok((n, peer)) => Some(format!("the host received {n} bytes from {peer}")),
        Err(_) => None,
    }
}

/// Whether the host's `which` socket `l` took a connection from the box.
fn host_socket_accepted(l: Option<&UnixListener>, which: &str) -> Option<String> {
    let accepted = l.expect("the setup made the listener").accept().ok();
    accepted.map(|_| format!("the host {which} socket accepted"))
}

fn abstract_listener(fx: &mut BoxWorld) {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("{}-abstract", fx.marker);
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let l = UnixListener::bind_addr(&addr).unwrap();
    l.set_nonblocking(true).unwrap();
    fx.env("ABSTRACT", name.clone());
    fx.abstract_name = Some(name);
    fx.abstract_sock = Some(l);
}

fn abstract_not_accepted(fx: &mut BoxWorld) -> Option<String> {
    host_socket_accepted(fx.abstract_sock.as_ref(), "abstract")
}

fn unix_listener(fx: &mut BoxWorld) {
    let p = fx.out.join("host.sock");
    let l = UnixListener::bind(&p).unwrap();
    l.set_nonblocking(true).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o777)).unwrap();
    fx.env("SOCK", p.display().to_string());
    fx.unix = Some(l);
}

fn unix_not_accepted(fx: &mut BoxWorld) -> Option<String> {
    host_socket_accepted(fx.unix.as_ref(), "unix")
}

fn setuid_copy(fx: &mut BoxWorld) {
    let dst = fx.ws.join("suid-id");
    fs::copy("/usr/bin/id", &dst).unwrap();
    fs::copy("/usr/bin/id", fx.ws.join("plain-id")).unwrap();
    if is_root() {
        // Owned by another user with the set-user-ID bit: running it must not change the effective uid.
        std::os::unix::fs::chown(&dst, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    }
    fs::set_permissions(&dst, fs::Permissions::from_mode(0o4755)).unwrap();
}

fn block_devices(fx: &mut BoxWorld) {
    let mut devs: Vec<String> = fs::read_dir("/sys/block")
        .map(|rd| {
            rd.flatten()
                .map(|e| format!("/dev/{}", e.file_name().to_string_lossy()))
                .collect()
        })
        .unwrap_or_default();
    devs.sort();
    fx.env("BLOCKDEVS", devs.join(" "));
}

/// No process on the host carries the marker in its command line.
fn marker_gone(fx: &mut BoxWorld) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let alive = processes_with(&fx.marker);
        if alive.is_empty() {
            return None;
        }
        if Instant::now() > deadline {
            return Some(format!("processes outlived the run: {alive:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn processes_with(marker: &str) -> Vec<u32> {
    let mut v = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(marker) {
                v.push(pid);
            }
        }
    }
    v
}

fn state_has_receipt(fx: &mut BoxWorld) -> Option<String> {
    let runs = fx.state.join("terra/runs");
    let found = fs::read_dir(&runs)
        .map(|rd| {
            rd.flatten()
                .any(|e| e.path().join("receipt.json").is_file())
        })
        .unwrap_or(false);
    if found {
        None
    } else {
        Some(format!(
            "no receipt under {}: the state directory was not where the probe looked",
            runs.display()
        ))
    }
}

fn receipt_outside(fx: &mut BoxWorld) {
    let p = fx.out.join("receipt.json");
    fx.terra_args
        .extend(["--receipt".into(), p.display().to_string()]);
    fx.env("RECEIPT", p.display().to_string());
}

fn receipt_inside(fx: &mut BoxWorld) {
    let p = fx.ws.join("receipt.json");
    fx.terra_args
        .extend(["--receipt".into(), p.display().to_string()]);
    fx.env("RECEIPT", p.display().to_string());
}

fn receipt_is_genuine(fx: &mut BoxWorld, path: &Path) -> Option<String> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return Some(format!("no receipt at {}: {e}", path.display())),
    };
    let v: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => return Some(format!("the receipt is not JSON ({e}): {text}")),
    };
    let digest = v["decisionDigest"].as_str().unwrap_or("");
    if digest.len() != 64 || v["outcome"]["exitCode"] != 0 || v["activation"] != "passed" {
        return Some(format!("the receipt was forged or is wrong: {text}"));
    }
    if !v["argv"].to_string().contains("TERRA-PROBE") {
        return Some(format!("the receipt does not name this run's argv: {text}"));
    }
    let _ = fx;
    None
}

fn receipt_outside_genuine(fx: &mut BoxWorld) -> Option<String> {
    let p = fx.out.join("receipt.json");
    receipt_is_genuine(fx, &p)
}

fn receipt_inside_genuine(fx: &mut BoxWorld) -> Option<String> {
    let p = fx.ws.join("receipt.json");
    receipt_is_genuine(fx, &p)
}

/// `--receipt` in a directory of the workspace, which the box may replace.
fn receipt_in_workspace_dir(fx: &mut BoxWorld) {
    fs::create_dir_all(fx.ws.join("rcpt")).unwrap();
    let p = fx.ws.join("rcpt/receipt.json");
    fx.terra_args
        .extend(["--receipt".into(), p.display().to_string()]);
    fx.env("RECEIPT", p.display().to_string());
}

/// Nothing was written through the symlink the box left, and the receipt is
/// in the directory terra opened before the run (now `rcpt.orig`).
fn receipt_not_redirected(fx: &mut BoxWorld) -> Option<String> {
    let outside = fx.out.join("receipt.json");
    if outside.exists() {
        return Some(format!(
            "terra wrote {} through the box's symlink",
            outside.display()
        ));
    }
    let p = fx.ws.join("rcpt.orig/receipt.json");
    receipt_is_genuine(fx, &p)
}

fn pty(fx: &mut BoxWorld) {
    fx.pty = true;
}

/// A read-only grant holding a set-user-ID and set-group-ID file owned by the
/// run's user (the source for `cp -p`), and tar archives built on the host:
/// one with set-id members, one plain.
fn setid_sources(fx: &mut BoxWorld) {
    let src = fx.root.join("suidsrc");
    fs::create_dir_all(&src).unwrap();
    fs::copy("/usr/bin/id", src.join("tool")).unwrap();
    fs::set_permissions(src.join("tool"), fs::Permissions::from_mode(0o6755)).unwrap();
    // The twin's tree: the same program without set-id bits.
    fs::create_dir_all(src.join("plain")).unwrap();
    fs::copy("/usr/bin/id", src.join("plain/tool")).unwrap();
    fs::set_permissions(src.join("plain/tool"), fs::Permissions::from_mode(0o755)).unwrap();
    if is_root() {
        // A program with a file capability (cap_net_raw, v2 format), for cp -a and tar --xattrs.
        let capped = src.join("capped");
        fs::copy("/usr/bin/id", &capped).unwrap();
        let u = fx.user.uid();
        std::os::unix::fs::chown(&capped, Some(u), Some(u)).unwrap();
        set_file_caps(&capped);
        assert!(
            has_file_caps(&capped),
            "the host could not set a file capability"
        );
        fx.env("CAPPED", capped.display().to_string());
    }
    fx.terra_args
        .extend(["--read".into(), src.display().to_string()]);
    fx.env("SRC", src.display().to_string());
    // A host set-user-ID program, when there is one.
    let host = [
        "/usr/bin/passwd",
        "/usr/bin/su",
        "/bin/su",
        "/usr/bin/newgrp",
    ]
    .into_iter()
    .find(|p| {
        fs::metadata(p)
            .map(|m| m.permissions().mode() & 0o4000 != 0)
            .unwrap_or(false)
    })
    .unwrap_or("/usr/bin/id");
    fx.env("HOSTSUID", host);
    let uid = fx.user.uid();
    let script = format!(
        r##"
import io, tarfile, sys
def add(t, name, mode, data=None):
    i = tarfile.TarInfo(name); i.mode = mode; i.uid = i.gid = {uid}; i.uname = i.gname = ""
    if data is None:
        i.type = tarfile.DIRTYPE; t.addfile(i)
    else:
        i.size = len(data); t.addfile(i, io.BytesIO(data))
with tarfile.open(sys.argv[1], "w") as t:
    add(t, "sdir", 0o2775); add(t, "sdir/suid", 0o4755, b"#!/bin/sh\n"); add(t, "sgid", 0o2755, b"x\n")
with tarfile.open(sys.argv[2], "w") as t:
    add(t, "pdir", 0o755); add(t, "pdir/tool", 0o755, b"#!/bin/sh\n"); add(t, "pdir/data", 0o640, b"x\n")
"##
    );
    let st = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(fx.ws.join("setid.tar"))
        .arg(fx.ws.join("plain.tar"))
        .status()
        .unwrap();
    assert!(st.success(), "building the tar archives failed");
    fx.write("ws/target", "a file the box owns\n");
    fs::create_dir_all(fx.ws.join("tdir")).unwrap();
}

/// No file in the workspace carries a set-id bit or a file capability.
fn no_setid_in_workspace(fx: &mut BoxWorld) -> Option<String> {
    fn walk(p: &Path, found: &mut Vec<String>) {
        let Ok(meta) = fs::symlink_metadata(p) else {
            return;
        };
        if meta.permissions().mode() & 0o6000 != 0 {
            found.push(format!(
                "{} mode {:o}",
                p.display(),
                meta.permissions().mode()
            ));
        }
        if !meta.file_type().is_symlink() && has_file_caps(p) {
            found.push(format!("{} has security.capability", p.display()));
        }
        if meta.is_dir() {
            for e in fs::read_dir(p).into_iter().flatten().flatten() {
                walk(&e.path(), found);
            }
        }
    }
    let mut found = Vec::new();
    walk(&fx.ws, &mut found);
    (!found.is_empty()).then(|| format!("set-id or capability files: {found:?}"))
}

fn set_file_caps(p: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut blob = Vec::new();
    for w in [0x0200_0001u32, 1 << 13, 0, 0, 0] {
        blob.extend_from_slice(&w.to_le_bytes());
    }
    // SAFETY: valid C strings and a buffer of the given length.
    let rc = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            c"security.capability".as_ptr(),
            blob.as_ptr() as *const libc::c_void,
            blob.len(),
            0,
        )
    };
    assert_eq!(
        rc,
        0,
        "setxattr security.capability: {}",
        std::io::Error::last_os_error()
    );
}

fn has_file_caps(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut buf = [0u8; 64];
    // SAFETY: valid C strings and a buffer of the given length.
    let n = unsafe {
        libc::lgetxattr(
            c.as_ptr(),
            c"security.capability".as_ptr(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
        )
    };
    n > 0
}

/// Network `none`; IPv6 is tried only where the kernel has it.
fn socket_families(fx: &mut BoxWorld) {
    if Path::new("/proc/net/if_inet6").exists() {
        fx.env("V6", "1");
    }
}

/// Root mode `ephemeral-write`, which leaves the box root writable.
fn ephemeral_root(fx: &mut BoxWorld) {
    fx.policy = Some(workspace_policy(&[], "ephemeral-write"));
}

/// /sys shown read-only in the box.
fn sys_read_grant(fx: &mut BoxWorld) {
    fx.terra_args.extend(["--read".into(), "/sys".into()]);
}

/// A supplementary group the run starts with (ssl-cert where it exists), and,
/// as root, a workspace file readable only by that group and owned by another
/// user: with the group dropped, the box's root (no capabilities) cannot read it.
fn supplementary_group(fx: &mut BoxWorld) {
    let gid = fs::read_to_string("/etc/group")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 2 && f[0] == "ssl-cert").then(|| f[2].to_string())
        })
        .unwrap_or_else(|| "4243".into());
    fx.groups = Some(gid.clone());
    if Path::new("/etc/ssl/certs/ca-certificates.crt").is_file()
        || Path::new("/etc/pki/tls/certs/ca-bundle.crt").is_file()
    {
        fx.env("CAS", "1");
    }
    if is_root() && fx.user == User::Caller {
        let p = fx.write("ws/group-only", "readable by the group only\n");
        std::os::unix::fs::chown(&p, Some(OTHER_UID), Some(gid.parse().unwrap())).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
        fx.env("GRPFILE", p.display().to_string());
    }
    let outside = fx.write("out/group-secret", "outside, group-readable\n");
    if is_root() {
        std::os::unix::fs::chown(&outside, Some(OTHER_UID), Some(gid.parse().unwrap())).unwrap();
        fs::set_permissions(&outside, fs::Permissions::from_mode(0o640)).unwrap();
    }
}

probes! {
    // ---- reads outside the grants
    read_home_ssh, read_home_ssh_twin => Probe {
        setup: no_setup,
        attack: r#"try cat "$HOSTHOME/.ssh/id_ed25519"; try ls "$HOSTHOME/.ssh"; try cat /root/.ssh/id_rsa; try ls /root; blocked"#,
        twin: r#"need cat "$WS/readme"; need ls "$WS"; ok"#,
        after: None,
    };
    read_etc_shadow, read_etc_shadow_twin => Probe {
        setup: no_setup,
        attack: r#"try cat /etc/shadow; try cat /etc/gshadow; try cat /etc/sudoers; blocked"#,
        twin: r#"need cat /etc/passwd; need cat /usr/bin/env; ok"#,
        after: None,
    };
    read_other_users_file, read_other_users_file_twin => Probe {
        setup: other_user_files,
        attack: r#"try cat "$OTHER_SECRET"; blocked"#,
        twin: r#"need cat "$OTHER_PUBLIC"; ok"#,
        after: None,
    };
    read_outside_sibling, read_outside_sibling_twin => Probe {
        setup: no_setup,
        attack: r#"try cat "$OUT/secret"; try ls "$OUT"; try cat "$WS/../out/secret"; blocked"#,
        twin: r#"need cat "$WS/readme"; need cat "$WS/../ws/readme"; ok"#,
        after: None,
    };
    read_host_tmp, read_host_tmp_twin => Probe {
        setup: host_tmp_file,
        attack: r#"try cat "$HOSTTMP"; try test -e "$HOSTTMP"; blocked"#,
        twin: r#"need sh -c 'echo x > /tmp/own && cat /tmp/own'; ok"#,
        after: None,
    };
    // ---- writes to a read-only grant
    write_read_only_grant, write_read_only_grant_twin => Probe {
        setup: read_only_grant,
        attack: r#"try sh -c 'echo x >> "$RO/file"'; try touch "$RO/new"; try rm "$RO/file"; try chmod 777 "$RO/file"; blocked"#,
        twin: r#"need cat "$RO/file"; need sh -c 'echo x > "$WS/new"'; ok"#,
        after: Some(read_only_unchanged),
    };
    // ---- deny-write inside a writable workspace
    deny_write_write, deny_write_write_twin => Probe {
        setup: deny_write_policy,
        attack: r#"try sh -c 'echo x >> "$WS/a/protected/file"'; try sh -c 'echo x > "$WS/a/protected/file"'; try truncate -s 0 "$WS/a/protected/file"; blocked"#,
        twin: r#"need cat "$WS/a/protected/file"; need sh -c 'echo x >> "$WS/readme"'; ok"#,
        after: Some(protected_unchanged),
    };
    deny_write_create, deny_write_create_twin => Probe {
        setup: deny_write_policy,
        attack: r#"try touch "$WS/a/protected/new"; try mkdir "$WS/a/protected/newdir"; try mkfifo "$WS/a/protected/new"; try ln -s x "$WS/a/protected/new"; blocked"#,
        twin: r#"need touch "$WS/a/new"; need mkdir "$WS/a/newdir"; ok"#,
        after: Some(protected_unchanged),
    };
    deny_write_remove, deny_write_remove_twin => Probe {
        setup: deny_write_policy,
        attack: r#"try rm "$WS/a/protected/file"; try rm -r "$WS/a/protected/sub"; try rmdir "$WS/a/protected"; blocked"#,
        twin: r#"need rm "$WS/evil"; ok"#,
        after: Some(protected_unchanged),
    };
    deny_write_rename_over, deny_write_rename_over_twin => Probe {
        setup: deny_write_policy,
        attack: r#"try mv -f "$WS/evil" "$WS/a/protected/file"; try mv "$WS/a/protected/file" "$WS/stolen"; blocked"#,
        twin: r#"need mv -f "$WS/evil" "$WS/readme"; ok"#,
        after: Some(protected_unchanged),
    };
    deny_write_chmod, deny_write_chmod_twin => Probe {
        setup: deny_write_policy,
        attack: r#"try chmod 777 "$WS/a/protected/file"; try chmod 777 "$WS/a/protected"; blocked"#,
        twin: r#"need chmod 600 "$WS/evil"; ok"#,
        after: Some(protected_unchanged),
    };
    deny_write_utime, deny_write_utime_twin => Probe {
        setup: deny_write_policy,
        attack: r#"try touch -d 2001-01-01 "$WS/a/protected/file"; try touch -m -d 2001-01-01 "$WS/a/protected/file"; blocked"#,
        twin: r#"need touch -d 2001-01-01 "$WS/evil"; ok"#,
        after: Some(protected_unchanged),
    };
    deny_write_link, deny_write_link_twin => Probe {
        setup: deny_write_policy,
        attack: r#"try ln "$WS/a/protected/file" "$WS/hardlink"; try ln "$WS/evil" "$WS/a/protected/evil"; blocked"#,
        twin: r#"need ln "$WS/evil" "$WS/evil2"; ok"#,
        after: Some(protected_unchanged),
    };
    // Renaming an ancestor would carry the read-only bind away and free the
    // name; the launcher pins every ancestor up to the writable grant as a
    // mount point, so the rename fails (EBUSY).
    deny_write_rename_ancestor, deny_write_rename_ancestor_twin => Probe {
        setup: deny_write_policy,
        attack: r#"try mv "$WS/a" "$WS/b"; try mv "$WS/a/protected" "$WS/moved"; blocked"#,
        twin: r#"need mkdir "$WS/c"; need mv "$WS/c" "$WS/d"; ok"#,
        after: Some(protected_unchanged),
    };
    // ---- deny inside a grant
    deny_rename_ancestor, deny_rename_ancestor_twin => Probe {
        setup: nested_deny_policy,
        attack: r#"try mv "$WS/d" "$WS/e"; try rm -rf "$WS/d"; blocked"#,
        twin: r#"need mkdir -p "$WS/f/g"; need mv "$WS/f" "$WS/h"; ok"#,
        after: Some(nested_secret_in_place),
    };
    read_under_deny, read_under_deny_twin => Probe {
        setup: deny_write_policy,
        attack: r#"try cat "$WS/secret/key"; if [ -n "$(ls -A "$WS/secret" 2>/dev/null)" ]; then echo "TERRA-PROBE-ESCAPED: listed the denied directory"; esc=1; fi; try sh -c 'echo x > "$WS/secret/new"'; blocked"#,
        twin: r#"need cat "$WS/readme"; need ls "$WS"; ok"#,
        after: None,
    };
    // ---- symlinks planted in the workspace
    symlink_to_outside, symlink_to_outside_twin => Probe {
        setup: plant_symlinks,
        attack: r#"try cat "$WS/link"; try ls "$WS/dirlink/"; try cat "$WS/dirlink/secret"; try cat "$WS/keylink"; blocked"#,
        twin: r#"need cat "$WS/inlink"; need cat "$WS/rellink"; ok"#,
        after: None,
    };
    symlink_to_root_file, symlink_to_root_file_twin => Probe {
        setup: plant_symlinks,
        attack: r#"try cat "$WS/shadowlink"; ln -sf /etc/shadow "$WS/l2"; cat "$WS/l2" >/dev/null 2>&1 && echo "TERRA-PROBE-ESCAPED: new link" && esc=1; blocked"#,
        twin: r#"need ln -s "$WS/readme" "$WS/l3"; need cat "$WS/l3"; ok"#,
        after: None,
    };
    // ---- host processes through /proc, signals and ptrace
    proc_host_environ, proc_host_environ_twin => Probe {
        setup: sleeper,
        attack: r#"echo "$MARK-env" > /tmp/pat; if cat /proc/*/environ 2>/dev/null | grep -aqf /tmp/pat; then echo "TERRA-PROBE-ESCAPED: environ"; esc=1; fi; try cat "/proc/$HOSTPID/environ"; blocked"#,
        twin: r#"need grep -aq MARK= /proc/self/environ; ok"#,
        after: None,
    };
    proc_host_cmdline, proc_host_cmdline_twin => Probe {
        setup: sleeper,
        attack: r#"echo "$MARK-argv" > /tmp/pat; if cat /proc/*/cmdline 2>/dev/null | grep -aqf /tmp/pat; then echo "TERRA-PROBE-ESCAPED: cmdline"; esc=1; fi; try grep -aq "$MARK" "/proc/$HOSTPID/cmdline"; blocked"#,
        twin: r#"need grep -aq TERRA-PROBE /proc/$$/cmdline; need sh -c 'ps -e >/dev/null || ls /proc/1/cmdline'; ok"#,
        after: None,
    };
    proc_host_fds, proc_host_fds_twin => Probe {
        setup: sleeper,
        attack: r#"echo "$MARK-fd" > /tmp/pat; for f in /proc/[0-9]*/fd/*; do [ -f "$f" ] || continue; if grep -aqf /tmp/pat "$f" 2>/dev/null; then echo "TERRA-PROBE-ESCAPED: $f"; esc=1; fi; done 2>/dev/null; try cat "/proc/$HOSTPID/fd/7"; try ls "/proc/$HOSTPID/fd"; blocked"#,
        twin: r#"need ls /proc/self/fd; exec 8<"$WS/readme"; need cat /proc/self/fd/8; ok"#,
        after: None,
    };
    kill_host_process, kill_host_process_twin => Probe {
        setup: sleeper,
        attack: r#"try kill -9 "$HOSTPID"; try kill -0 "$HOSTPID"; blocked"#,
        twin: r#"sleep 300 & p=$!; need kill -9 $p; ok"#,
        after: Some(sleeper_alive),
    };
    ptrace_host_process, ptrace_host_process_twin => Probe {
        setup: sleeper,
        attack: r#"try $PROBE ptrace "$HOSTPID"; try $PROBE ptrace 1; blocked"#,
        twin: r#"need $PROBE getpid; ok"#,
        after: Some(sleeper_alive),
    };
    tiocsti_terminal, tiocsti_terminal_twin => Probe {
        setup: pty,
        attack: r#"try $PROBE tiocsti; blocked"#,
        twin: r#"need $PROBE tty; ok"#,
        after: None,
    };
    // ---- kernel interfaces
    syscall_mount, syscall_mount_twin => Probe {
        setup: no_setup,
        attack: r#"try $PROBE mount; try mount -t tmpfs none /tmp; try umount /proc; blocked"#,
        twin: r#"need $PROBE getpid; need mkdir /tmp/m; ok"#,
        after: None,
    };
    syscall_unshare, syscall_unshare_twin => Probe {
        setup: no_setup,
        attack: r#"try $PROBE unshare 10000000; try $PROBE unshare 20000; try $PROBE unshare 40000000; try unshare -U true; try unshare -r true; blocked"#,
        twin: r#"need $PROBE getpid; need sh -c 'true & wait'; ok"#,
        after: None,
    };
    syscall_setns, syscall_setns_twin => Probe {
        setup: no_setup,
        attack: r#"try $PROBE setns net; try $PROBE setns mnt; try $PROBE setns user; try nsenter -t 1 -m true; blocked"#,
        twin: r#"need $PROBE getpid; need ls /proc/self/ns; ok"#,
        after: None,
    };
    syscall_chroot, syscall_chroot_twin => Probe {
        setup: no_setup,
        attack: r#"try $PROBE chroot; try chroot /tmp /bin/true; blocked"#,
        twin: r#"need $PROBE getpid; ok"#,
        after: None,
    };
    syscall_keyctl, syscall_keyctl_twin => Probe {
        setup: no_setup,
        attack: r#"try $PROBE keyctl; try $PROBE keyctl_join; blocked"#,
        twin: r#"need $PROBE getpid; ok"#,
        after: None,
    };
    syscall_bpf, syscall_bpf_twin => Probe {
        setup: no_setup,
        attack: r#"try $PROBE bpf; blocked"#,
        twin: r#"need $PROBE getpid; ok"#,
        after: None,
    };
    syscall_perf_event_open, syscall_perf_event_open_twin => Probe {
        setup: no_setup,
        attack: r#"try $PROBE perf; blocked"#,
        twin: r#"need $PROBE getpid; ok"#,
        after: None,
    };
    syscall_io_uring, syscall_io_uring_twin => Probe {
        setup: no_setup,
        attack: r#"try $PROBE io_uring; blocked"#,
        twin: r#"need $PROBE getpid; ok"#,
        after: None,
    };
    syscall_userfaultfd, syscall_userfaultfd_twin => Probe {
        setup: no_setup,
        attack: r#"try $PROBE userfaultfd; blocked"#,
        twin: r#"need $PROBE getpid; ok"#,
        after: None,
    };
    syscall_kexec, syscall_kexec_twin => Probe {
        setup: no_setup,
        attack: r#"try $PROBE kexec; blocked"#,
        twin: r#"need $PROBE getpid; ok"#,
        after: None,
    };
    syscall_module_loading, syscall_module_loading_twin => Probe {
        setup: no_setup,
        attack: r#"try $PROBE module; try modprobe dummy; blocked"#,
        twin: r#"need $PROBE getpid; ok"#,
        after: None,
    };
    // ---- devices
    device_kvm, device_kvm_twin => Probe {
        setup: no_setup,
        attack: r#"try $PROBE open /dev/kvm rw; try $PROBE open /dev/kvm r; try mknod /tmp/kvm c 10 232; blocked"#,
        twin: r#"need $PROBE open /dev/null rw; need head -c 8 /dev/urandom; ok"#,
        after: None,
    };
    device_mem, device_mem_twin => Probe {
        setup: no_setup,
        attack: r#"for d in /dev/mem /dev/kmem /dev/port; do try $PROBE open $d r; done; try mknod /tmp/mem c 1 1; blocked"#,
        twin: r#"need $PROBE open /dev/zero r; need sh -c 'echo x > /dev/null'; ok"#,
        after: None,
    };
    device_block, device_block_twin => Probe {
        setup: block_devices,
        attack: r#"for d in $BLOCKDEVS /dev/sda /dev/vda /dev/nvme0n1 /dev/loop0; do try $PROBE open $d r; done; try mknod /tmp/blk b 8 0; try mknod /tmp/blk2 b 253 0; blocked"#,
        twin: r#"need $PROBE open /dev/full rw; need head -c 8 /dev/zero; ok"#,
        after: None,
    };
    // ---- network (policy: none)
    net_tcp_host_loopback, net_tcp_host_loopback_twin => Probe {
        setup: tcp_listener,
        attack: r#"try $PROBE tcp 127.0.0.1 "$PORT"; try $PROBE tcp localhost "$PORT"; blocked"#,
        twin: r#"need $PROBE tcp_self; need $PROBE udp_self; ok"#,
        after: Some(tcp_not_accepted),
    };
    net_udp, net_udp_twin => Probe {
        setup: udp_socket,
        attack: r#"$PROBE udp 127.0.0.1 "$PORT" >/dev/null 2>&1; $PROBE udp localhost "$PORT" >/dev/null 2>&1; blocked"#,
        twin: r#"need $PROBE udp_self; ok"#,
        after: Some(udp_not_received),
    };
    net_raw_socket, net_raw_socket_twin => Probe {
        setup: no_setup,
        attack: r#"try $PROBE raw; blocked"#,
        twin: r#"need $PROBE stream; ok"#,
        after: None,
    };
    net_dns, net_dns_twin => Probe {
        setup: no_setup,
        attack: r#"try $PROBE resolve deb.debian.org; try getent hosts deb.debian.org; blocked"#,
        twin: r#"need $PROBE resolve localhost; ok"#,
        after: None,
    };
    net_netlink_changes, net_netlink_changes_twin => Probe {
        setup: no_setup,
        attack: r#"try ip link set lo mtu 1280; try ip addr add 10.99.0.1/32 dev lo; try ip link add terra0 type dummy; try ip route add 10.99.0.0/24 dev lo; blocked"#,
        twin: r#"need ip -o link show lo; ok"#,
        after: None,
    };
    net_abstract_unix_socket, net_abstract_unix_socket_twin => Probe {
        setup: abstract_listener,
        attack: r#"try $PROBE abstract "$ABSTRACT"; blocked"#,
        twin: r#"need $PROBE abstract_self; ok"#,
        after: Some(abstract_not_accepted),
    };
    net_host_unix_socket, net_host_unix_socket_twin => Probe {
        setup: unix_listener,
        attack: r#"try $PROBE unix "$SOCK"; try $PROBE unix /run/dbus/system_bus_socket; try $PROBE unix /var/run/docker.sock; blocked"#,
        twin: r#"need $PROBE unix_self; ok"#,
        after: Some(unix_not_accepted),
    };
    // ---- privilege
    setuid_binary, setuid_binary_twin => Probe {
        setup: setuid_copy,
        attack: r#"u=$("$WS/suid-id" -u 2>/dev/null); r=$("$WS/suid-id" -ru 2>/dev/null); if [ -n "$u" ] && [ "$u" != "$r" ]; then echo "TERRA-PROBE-ESCAPED: euid $u ruid $r"; esc=1; fi; blocked"#,
        twin: r#"need "$WS/plain-id" -u; ok"#,
        after: None,
    };
    // ---- set-id files planted for the host (issue 9, item 1)
    setid_chmod_family, setid_chmod_family_twin => Probe {
        setup: setid_sources,
        attack: r#"f="$WS/target"; for m in 4755 2755 6755; do for r in chmod fchmod fchmodat fchmodat2; do try $PROBE $r "$f" $m; done; done; try sh -c 'chmod u+s "$WS/target"; test -u "$WS/target"'; try sh -c 'chmod g+s "$WS/target"; test -g "$WS/target"'; try sh -c 'chmod g+s "$WS/tdir"; test -g "$WS/tdir"'; blocked"#,
        twin: r#"need chmod +x "$WS/target"; need test -x "$WS/target"; need chmod 755 "$WS/target"; need chmod 644 "$WS/target"; need chmod 1777 "$WS/tdir"; need test -k "$WS/tdir"; ok"#,
        after: Some(no_setid_in_workspace),
    };
    setid_creation_modes, setid_creation_modes_twin => Probe {
        setup: setid_sources,
        attack: r#"n=0; for r in creat mknod openat tmpfile openat2; do for m in 4755 2755 6755; do n=$((n+1)); try $PROBE $r "$WS/new$n" $m; done; done; try sh -c 'mkdir -m 2755 "$WS/sgdir"; test -g "$WS/sgdir"'; try sh -c 'install -m 4755 /usr/bin/id "$WS/inst"; test -u "$WS/inst"'; blocked"#,
        twin: r#"need $PROBE plain_modes "$WS"; need mkdir -m 750 "$WS/pdir"; need install -m 755 /usr/bin/id "$WS/inst"; need "$WS/inst" -u; ok"#,
        after: Some(no_setid_in_workspace),
    };
    setid_copy_and_extract, setid_copy_and_extract_twin => Probe {
        setup: setid_sources,
        attack: r#"test -u "$SRC/tool" && test -g "$SRC/tool" || { echo "TERRA-PROBE-FAILED: the set-id source lost its bits"; exit 0; }; try sh -c 'cp -p "$SRC/tool" "$WS/c1"; test -u "$WS/c1" || test -g "$WS/c1"'; try sh -c 'cp -a "$HOSTSUID" "$WS/c2"; test -u "$WS/c2" || test -g "$WS/c2"'; mkdir "$WS/x"; try sh -c 'tar -xpf "$WS/setid.tar" -C "$WS/x"; test -u "$WS/x/sdir/suid" || test -g "$WS/x/sgid" || test -g "$WS/x/sdir"'; try sh -c 'tar --same-permissions -xf "$WS/setid.tar" -C "$WS/x"; test -u "$WS/x/sdir/suid"'; blocked"#,
        twin: r#"need cp -p "$WS/target" "$WS/copy"; need cp -a "$SRC/plain" "$WS/tree"; need test -x "$WS/tree/tool"; mkdir "$WS/x"; need tar -xpf "$WS/plain.tar" -C "$WS/x"; need test -x "$WS/x/pdir/tool"; need cat "$WS/x/pdir/data"; ok"#,
        after: Some(no_setid_in_workspace),
    };
    setid_file_capability, setid_file_capability_twin => Probe {
        setup: setid_sources,
        attack: r#"try $PROBE setcap "$WS/target"; try setcap cap_net_raw+ep "$WS/target"; if [ -n "$CAPPED" ]; then cp -a "$CAPPED" "$WS/c1" 2>/dev/null; tar --xattrs --xattrs-include='*' -cf /tmp/caps.tar -C "$SRC" capped 2>/dev/null; mkdir "$WS/x"; tar --xattrs --xattrs-include='*' -xpf /tmp/caps.tar -C "$WS/x" 2>/dev/null; fi; blocked"#,
        twin: r#"need python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.terra", b"1"); assert os.getxattr(sys.argv[1], "user.terra") == b"1"' "$WS/target"; need cp -a "$WS/target" "$WS/copy"; ok"#,
        after: Some(no_setid_in_workspace),
    };
    // ---- socket families outside the plan (issue 9, item 2)
    net_socket_families, net_socket_families_twin => Probe {
        setup: socket_families,
        attack: r#"try $PROBE socket 40 1 0; try $PROBE socket 40 2 0; try $PROBE socket 38 5 0; try $PROBE socket 17 2 0; try $PROBE socket 17 3 768; try $PROBE socket 44 3 0; try $PROBE socket 31 1 3; try $PROBE socket 29 3 1; try $PROBE socket 21 5 0; try $PROBE socket 30 4 0; try $PROBE socket 3 5 0; try $PROBE socket 4 2 0; try $PROBE socket 5 2 0; try $PROBE socket 9 2 0; try $PROBE socket 16 3 9; try $PROBE socket 16 3 15; try $PROBE socket 16 3 4; try $PROBE socket 16 3 16; try $PROBE socketpair 40; try $PROBE socketpair 2; blocked"#,
        twin: r#"need $PROBE socket 1 1 0; need $PROBE socket 1 2 0; need $PROBE socketpair 1; need $PROBE tcp_self; need $PROBE udp_self; need $PROBE socket 16 3 0; need ip -o link show lo; need $PROBE resolve localhost; if [ -n "$V6" ]; then need $PROBE tcp6_self; fi; ok"#,
        after: None,
    };
    // ---- root-only and group-only files (issue 9, item 5)
    minimal_runtime_private_keys, minimal_runtime_private_keys_twin => Probe {
        setup: supplementary_group,
        attack: r#"try ls /etc/ssl/private; try test -e /etc/ssl/private; for k in /etc/ssl/private/ssl-cert-snakeoil.key /etc/ssl/private/*.key /etc/pki/tls/private/localhost.key; do try cat "$k"; done; try cat "$OUT/group-secret"; if [ -n "$GRPFILE" ]; then try cat "$GRPFILE"; fi; if [ "$(id -u)" = 0 ] && [ "$(id -G)" != "$(id -g)" ]; then echo "TERRA-PROBE-ESCAPED: supplementary groups $(id -G)"; esc=1; fi; blocked"#,
        twin: r#"need ls /etc/ssl/certs; if [ -n "$CAS" ]; then need $PROBE tls_cas; fi; need cat /etc/passwd; need cat "$WS/readme"; ok"#,
        after: None,
    };
    // ---- host kernel settings through /proc and /sys (issue 9, item 7)
    proc_kernel_settings, proc_kernel_settings_twin => Probe {
        setup: ephemeral_root,
        attack: r#"for f in /proc/irq/*/smp_affinity /proc/irq/default_smp_affinity /proc/bus/pci/*/* /proc/fs/*/* /proc/sys/vm/drop_caches /proc/sys/kernel/core_pattern /proc/sysrq-trigger; do [ -f "$f" ] && try $PROBE openw "$f"; done; for f in /proc/kcore /proc/keys /proc/key-users /proc/timer_list /proc/sched_debug /proc/kpageflags /proc/kpagecount /proc/kpagecgroup /proc/slabinfo /proc/kallsyms /proc/kmsg; do try $PROBE nonempty "$f"; done; for d in /proc/acpi /proc/scsi; do if [ -n "$(ls -A "$d" 2>/dev/null)" ]; then echo "TERRA-PROBE-ESCAPED: $d listed"; esc=1; fi; done; blocked"#,
        twin: r#"need $PROBE nonempty /proc/self/status; need $PROBE nonempty /proc/cpuinfo; need $PROBE nonempty /proc/sys/kernel/ostype; need ls /proc/irq; need sh -c 'echo x > /etc/terra-ephemeral && cat /etc/terra-ephemeral'; ok"#,
        after: None,
    };
    sys_firmware_masked, sys_firmware_masked_twin => Probe {
        setup: sys_read_grant,
        attack: r#"if [ -n "$(ls -A /sys/firmware 2>/dev/null)" ]; then echo "TERRA-PROBE-ESCAPED: /sys/firmware listed"; esc=1; fi; for f in /sys/kernel/mm/transparent_hugepage/enabled /sys/module/*/parameters/*; do [ -f "$f" ] && try $PROBE openw "$f"; done 2>/dev/null; blocked"#,
        twin: r#"need ls /sys/class; need $PROBE nonempty /sys/kernel/mm/transparent_hugepage/enabled; ok"#,
        after: None,
    };
    // ---- process tree
    daemon_outlives_run, daemon_outlives_run_twin => Probe {
        setup: no_setup,
        attack: r#"cp /bin/sleep "/tmp/$MARK-daemon"; ( setsid "/tmp/$MARK-daemon" 3600 </dev/null >/dev/null 2>&1 & ); ( nohup "/tmp/$MARK-daemon" 3601 </dev/null >/dev/null 2>&1 & ); ( trap '' HUP TERM INT; "/tmp/$MARK-daemon" 3602 </dev/null >/dev/null 2>&1 & ); blocked"#,
        twin: r#"( setsid sh -c 'exec sleep 300' </dev/null >/dev/null 2>&1 & ); need sh -c 'sleep 0 & wait'; ok"#,
        after: Some(marker_gone),
    };
    // ---- the run's own state
    state_directory, state_directory_twin => Probe {
        setup: no_setup,
        attack: r#"try ls "$STATE"; try ls "$STATE/terra/runs"; try sh -c 'cat "$STATE"/terra/runs/*/request.json'; try sh -c 'echo x > "$STATE/terra/runs/x"'; try touch "$STATE/x"; try sh -c 'ls "/dev/shm/terra-$(id -u)/runs"/*/lock'; blocked"#,
        twin: r#"need cat "$WS/readme"; ok"#,
        after: Some(state_has_receipt),
    };
    receipt_outside_workspace, receipt_outside_workspace_twin => Probe {
        setup: receipt_outside,
        attack: r#"try sh -c 'echo "{}" > "$RECEIPT"'; try test -e "$(dirname "$RECEIPT")"; blocked"#,
        twin: r#"need true; ok"#,
        after: Some(receipt_outside_genuine),
    };
    // The box replaces the receipt's directory with a symlink to a directory
    // outside every grant; terra writes the receipt after the box is gone,
    // with the caller's rights.
    receipt_dir_swapped_for_symlink, receipt_dir_swapped_for_symlink_twin => Probe {
        setup: receipt_in_workspace_dir,
        attack: r#"if mv "$WS/rcpt" "$WS/rcpt.orig" && ln -s "$OUT" "$WS/rcpt"; then blocked; fi; echo "TERRA-PROBE-FAILED: the directory was not swapped""#,
        twin: r#"need test -d "$WS/rcpt"; ok"#,
        after: Some(receipt_not_redirected),
    };
    // The box pre-creates the temporary names terra would use for the
    // receipt (from the CLI's pid, which must not be on init's command line)
    // and forges the receipt: terra must still write the genuine one.
    receipt_predictable_temp_names, receipt_predictable_temp_names_twin => Probe {
        setup: receipt_inside,
        attack: r#"cmd=$(tr '\0' ' ' </proc/1/cmdline); case "$cmd" in *--parent-pid*) echo "TERRA-PROBE-ESCAPED: the CLI's pid is on init's command line: $cmd"; esc=1;; esac; p=$(echo "$cmd" | sed -n 's/.*--parent-pid \([0-9]*\).*/\1/p'); p=${p:-2}; n=$p; while [ "$n" -lt $((p + 300)) ]; do : > "$WS/.receipt.json.tmp-$n"; : > "$WS/.receipt.json.terra-tmp-$n-0"; n=$((n + 1)); done; echo '{"decisionDigest":"forged","outcome":{"exitCode":0}}' > "$RECEIPT"; blocked"#,
        twin: r#"need true; ok"#,
        after: Some(receipt_inside_genuine),
    };
    receipt_in_workspace_forgery, receipt_in_workspace_forgery_twin => Probe {
        setup: receipt_inside,
        attack: r#"echo '{"decisionDigest":"forged","outcome":{"exitCode":0}}' > "$RECEIPT"; blocked"#,
        twin: r#"need sh -c 'echo x > "$WS/other"'; ok"#,
        after: Some(receipt_inside_genuine),
    };
}

// ------------------------------------------------------------------ grants through planted symlinks

/// Run 1 (the untrusted workload) plants symlinks; run 2 names them on the
/// command line. A grant must never follow a link the box could have written
/// out of the workspace or into another place.
#[test]
fn cli_grant_through_planted_symlink() {
    for user in users() {
        let mut fx = BoxWorld::new("cli-planted", user);
        let cache = fx.root.join("cachedir");
        fs::create_dir_all(&cache).unwrap();
        fx.terra_args = vec!["--write".into(), cache.display().to_string()];
        let plant = fx
            .run(r#"need ln -s "$OUT" "$WS/cache"; need ln -s "$OUT" "$WS/../cachedir/link"; ok"#);
        assert_ok(&fx, &plant);
        let tries: [(&str, String); 4] = [
            ("--write", "cache".into()),
            ("--read", "cache".into()),
            ("--write", fx.ws.join("cache/sub").display().to_string()),
            ("--write", cache.join("link").display().to_string()),
        ];
        for (flag, path) in tries {
            fx.terra_args = vec![flag.into(), path.clone()];
            let out = fx.run(r#"echo x >> "$OUT/planted"; echo TERRA-PROBE-ESCAPED: ran"#);
            assert_eq!(
                out.status.code(),
                Some(125),
                "{flag} {path} through a planted link was not refused as {user:?}:\n{}",
                show(&out)
            );
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("symlink"),
                "the refusal names the symlink: {}",
                show(&out)
            );
            assert!(
                !fx.out.join("planted").exists(),
                "wrote outside as {user:?}"
            );
        }
    }
}

/// The twin: a link inside the workspace that stays inside it works as a
/// command-line grant, as `root: workspace` does in a policy file.
#[test]
fn cli_grant_through_planted_symlink_twin() {
    for user in users() {
        let mut fx = BoxWorld::new("cli-planted-twin", user);
        let plant = fx.run(r#"need mkdir "$WS/real"; need ln -s real "$WS/good"; ok"#);
        assert_ok(&fx, &plant);
        fx.terra_args = vec!["--write".into(), "good".into()];
        let out = fx.run(r#"need sh -c 'echo x >> "$WS/good/f"'; ok"#);
        assert_ok(&fx, &out);
        assert_eq!(fs::read_to_string(fx.ws.join("real/f")).unwrap(), "x\n");
    }
}

/// A write grant on /proc or /sys (or on /, which holds them) is refused
/// before anything runs, like a workspace of /; reading them stays possible.
#[test]
fn write_grants_on_kernel_interfaces_are_refused() {
    for user in users() {
        for path in ["/sys", "/proc", "/proc/sys", "/sys/kernel", "/"] {
            let mut fx = BoxWorld::new("kernel-write", user);
            fx.terra_args.extend(["--write".into(), path.into()]);
            let out = fx.run("echo TERRA-PROBE-ESCAPED: ran");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.code() == Some(125)
                    && err.contains("kernel interface")
                    && !String::from_utf8_lossy(&out.stdout).contains(ESCAPED),
                "--write {path} as {user:?} was not refused:\n{}",
                show(&out)
            );
        }
        let mut fx = BoxWorld::new("kernel-read", user);
        fx.terra_args.extend(["--read".into(), "/sys".into()]);
        let out = fx.run("need ls /sys/kernel; ok");
        assert_ok(&fx, &out);
    }
}

#[test]
fn at_least_forty_probes() {
    let unique: HashSet<&&str> = PROBE_NAMES.iter().collect();
    assert_eq!(unique.len(), PROBE_NAMES.len());
    assert!(PROBE_NAMES.len() >= 40, "only {} probes", PROBE_NAMES.len());
}

// ------------------------------------------------------------------ kill -9 at several phases

/// Starts `terra run` whose workload announces itself and then sleeps with
/// the marker in its command line; returns the CLI child.
fn start_long_run(fx: &mut BoxWorld) -> Child {
    fx.chown_all();
    let mut cmd = terra_as(fx.user, &[]);
    cmd.arg("run")
        .arg("--workspace")
        .arg(&fx.ws)
        .arg("--")
        .arg("/bin/sh")
        .arg("-c")
        .arg(format!(
            "cp /bin/sleep /tmp/{m}-sleep; ( setsid /tmp/{m}-sleep 3600 </dev/null >/dev/null 2>&1 & ); echo started; exec /tmp/{m}-sleep 3601",
            m = fx.marker
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // A run killed with -9 leaves its temp and runtime directories: they are
    // the fixture's.
    fx.run_env(&mut cmd, "/usr/bin:/bin");
    cmd.spawn().unwrap()
}

fn wait_started(child: &mut Child) {
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "started", "the workload did not start");
}

/// Every process of the run is gone (bounded wait for the kernel to finish the kills).
fn assert_nothing_left(fx: &mut BoxWorld, cli: u32, pids: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let supervisor_mark = format!("--parent-pid\0{cli}\0");
    loop {
        let mut marked = processes_with(&fx.marker);
        marked.extend(processes_with(&supervisor_mark));
        let alive: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| {
                fs::read_to_string(format!("/proc/{p}/stat"))
                    .map(|s| !s.contains(") Z "))
                    .unwrap_or(false)
            })
            .collect();
        if marked.is_empty() && alive.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "as {:?}: processes of the run outlived a kill -9: marked {marked:?}, alive {alive:?}",
            fx.user
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill9(pid: u32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// Kills the run's supervisor `sup` with SIGKILL; the CLI (`child`) must
/// then fail.
fn kill9_supervisor(child: &mut Child, sup: u32) {
    kill9(sup);
    let status = child.wait().unwrap();
    assert_ne!(
        status.code(),
        Some(0),
        "the CLI must not report success after its supervisor died"
    );
}

#[test]
fn kill9_cli_while_workload_runs() {
    for user in users() {
        let mut fx = BoxWorld::new("kill-cli-running", user);
        let mut child = start_long_run(&mut fx);
        wait_started(&mut child);
        let cli = child.id(); // setpriv execs terra: same pid
        let sup = children(cli);
        assert!(
            !processes_with(&fx.marker).is_empty(),
            "the workload is not visible before the kill"
        );
        kill9(cli);
        let _ = child.wait();
        assert_nothing_left(&mut fx, cli, &sup);
    }
}

#[test]
fn kill9_supervisor_while_workload_runs() {
    for user in users() {
        let mut fx = BoxWorld::new("kill-sup-running", user);
        let mut child = start_long_run(&mut fx);
        wait_started(&mut child);
        let cli = child.id(); // setpriv execs terra: same pid
        let sups = children(cli);
        assert_eq!(sups.len(), 1, "expected one supervisor under the CLI");
        let sup = sups[0];
        let under: Vec<u32> = children(sup);
        kill9_supervisor(&mut child, sup);
        let mut all = under;
        all.push(cli);
        assert_nothing_left(&mut fx, cli, &all);
    }
}

#[test]
fn kill9_cli_at_startup_phases() {
    // Kill the CLI after it has been running for increasing amounts of time,
    // so the kill lands before, during and after the box's setup.
    for user in users() {
        for delay_ms in [0u64, 5, 20, 50, 100, 250] {
            let mut fx = BoxWorld::new("kill-cli-phase", user);
            let mut child = start_long_run(&mut fx);
            std::thread::sleep(Duration::from_millis(delay_ms));
            let cli = child.id(); // setpriv execs terra: same pid
            let mut tree = vec![cli];
            for s in children(cli) {
                tree.push(s);
                tree.extend(children(s));
            }
            kill9(cli);
            if cli != child.id() {
                kill9(child.id());
            }
            let _ = child.wait();
            assert_nothing_left(&mut fx, cli, &tree);
        }
    }
}

#[test]
fn kill9_supervisor_at_startup_phases() {
    // Kill the supervisor at increasing delays after it appears: while it
    // validates and prepares state, while the box is being set up, and after.
    for user in users() {
        for delay_ms in [0u64, 2, 10, 30, 100] {
            let mut fx = BoxWorld::new("kill-sup-phase", user);
            let mut child = start_long_run(&mut fx);
            let cli = child.id(); // setpriv execs terra: same pid
            let appeared = Instant::now();
            let sup = loop {
                // The CLI's first child may be its user-namespace probe
                // (`--backend auto`): the supervisor is the one named so.
                let named = children(cli).into_iter().find(|&c| {
                    std::fs::read(format!("/proc/{c}/cmdline"))
                        .is_ok_and(|a| a.windows(12).any(|w| w == b"__supervisor"))
                });
                if let Some(s) = named {
                    break s;
                }
                assert!(
                    appeared.elapsed() < HANG_LIMIT,
                    "no supervisor appeared under the CLI"
                );
                std::thread::sleep(Duration::from_millis(1));
            };
            std::thread::sleep(Duration::from_millis(delay_ms));
            let mut tree = vec![cli, sup];
            tree.extend(children(sup));
            kill9_supervisor(&mut child, sup);
            assert_nothing_left(&mut fx, cli, &tree);
        }
    }
}
