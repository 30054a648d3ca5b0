//! The descriptors the caller hands in as 0, 1 and 2 do not open host paths
//! or host sockets in the box: a directory, an `O_PATH` descriptor, an IP
//! socket, a Unix datagram socket are replaced by /dev/null with a warning
//! (`terra_supervisor::std_fds`), before anything is started, so on every
//! backend. Each negative case has a positive twin (a pipe, a regular file, a
//! connected Unix socket keep working), and each runs as the caller and, as
//! root, as uid 65534. The probes run in the box with the descriptor moved
//! to 3 (`exec 3<&0`), since python refuses a directory as its stdin.
#![cfg(target_os = "linux")]

mod common;

use common::{show, terra_as, users, RunDirs, User};
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The name of the file inside the host directory outside every grant; a
/// probe that prints it has listed the directory.
const SECRET: &str = "secret-name.txt";

/// A run's directories and a host directory outside every grant
/// (`<root>/outside`, holding [`SECRET`]).
struct Case {
    dirs: RunDirs,
    outside: PathBuf,
}

impl Case {
    fn new(name: &str, user: User) -> Case {
        let dirs = RunDirs::new("terra-stdfd", name, user);
        let outside = dirs.root.join("outside");
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join(SECRET), "the secret's content\n").unwrap();
        dirs.chown_to_user(None);
        Case { dirs, outside }
    }

    /// `terra run [front] -- /bin/sh -c script` as the case's user, with its
    /// standard descriptors as given (None: a pipe the test reads).
    fn run(
        &self,
        front: &[&str],
        script: &str,
        stdin: Stdio,
        stdout: Option<Stdio>,
        stderr: Option<Stdio>,
    ) -> Output {
        let mut cmd = self.command(&[], front, script);
        cmd.stdin(stdin);
        if let Some(s) = stdout {
            cmd.stdout(s);
        }
        if let Some(s) = stderr {
            cmd.stderr(s);
        }
        cmd.output().unwrap()
    }

    /// The command, `via` started in front of terra as the case's user.
    fn command(&self, via: &[&str], front: &[&str], script: &str) -> Command {
        let mut cmd = terra_as(self.dirs.user, via);
        self.dirs.run_env(&mut cmd, "/usr/local/bin:/usr/bin:/bin");
        cmd.arg("run")
            .args(front)
            .arg("--workspace")
            .arg(&self.dirs.ws)
            .args(["--", "/bin/sh", "-c", script]);
        cmd
    }

    fn outside_str(&self) -> String {
        self.outside.to_str().unwrap().to_string()
    }
}

/// `python3 -c CODE` for a shell script (CODE holds no single quote).
fn py(code: &str) -> String {
    assert!(!code.contains('\''), "{code}");
    format!("python3 -c '{code}'")
}

/// Lists the directory on descriptor `fd` and stats [`SECRET`] through it;
/// prints what worked and what was refused.
fn probe_directory(fd: u8) -> String {
    py(&format!(
        "import os
try:
    print(\"listed\", os.listdir({fd}))
except OSError as e:
    print(\"listdir-refused\", e.errno)
try:
    print(\"stat-size\", os.stat(\"{SECRET}\", dir_fd={fd}).st_size)
except OSError as e:
    print(\"stat-refused\", e.errno)"
    ))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The warning `terra run` prints for descriptor `name` that was `what`.
fn warning(name: &str, what: &str) -> String {
    format!("terra: {name} is {what}")
}

/// The box saw /dev/null on fd 0 instead of what the caller handed in, the
/// probe printed `refused`, and terra warned that standard input was `what`.
fn assert_stdin_replaced(o: &Output, label: &str, refused: &str, what: &str) {
    let out = text(&o.stdout);
    for want in ["fd0 /dev/null\n", refused] {
        assert!(out.contains(want), "{label}: {want:?} {}", show(o));
    }
    let warned = warning("standard input", what);
    assert!(
        text(&o.stderr).contains(&warned),
        "{label}: {warned:?} {}",
        show(o)
    );
}

#[test]
fn a_directory_on_stdin_is_replaced_by_dev_null_and_a_pipe_or_file_is_kept() {
    for user in users() {
        let case = Case::new("dir-stdin", user);
        let script = format!(
            "echo fd0 $(readlink /proc/$$/fd/0); exec 3<&0 </dev/null; {}; \
             echo read:$(cat <&3 2>&1):end",
            probe_directory(3)
        );
        let o = case.run(
            &[],
            &script,
            File::open(&case.outside).unwrap().into(),
            None,
            None,
        );
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        assert_eq!(o.status.code(), Some(0), "{user:?} {}", show(&o));
        assert!(!out.contains(SECRET), "{user:?} listed: {}", show(&o));
        assert!(out.contains("fd0 /dev/null\n"), "{user:?} {}", show(&o));
        assert!(out.contains("listdir-refused"), "{user:?} {}", show(&o));
        assert!(out.contains("stat-refused"), "{user:?} {}", show(&o));
        assert!(out.contains("read::end"), "{user:?} {}", show(&o));
        let said = format!(
            "{} ({}); the box gets /dev/null instead\n",
            warning("standard input", "a directory"),
            case.outside_str()
        );
        assert_eq!(err.matches(&said).count(), 1, "{user:?} {}", show(&o));

        // Twins: a pipe, and a regular file outside every grant, are read.
        let mut child = case
            .command(&[], &[], "cat; echo fd0 $(readlink /proc/$$/fd/0)")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"through the pipe\n")
            .unwrap();
        let o = child.wait_with_output().unwrap();
        let out = text(&o.stdout);
        assert!(
            out.starts_with("through the pipe\nfd0 pipe:["),
            "{user:?} {}",
            show(&o)
        );
        assert!(
            !text(&o.stderr).contains("/dev/null instead"),
            "{}",
            show(&o)
        );
        let o = case.run(
            &[],
            "cat",
            File::open(case.outside.join(SECRET)).unwrap().into(),
            None,
            None,
        );
        assert_eq!(
            text(&o.stdout),
            "the secret's content\n",
            "{user:?} {}",
            show(&o)
        );
        assert!(
            !text(&o.stderr).contains("/dev/null instead"),
            "{}",
            show(&o)
        );

        // Standard output to a regular file outside every grant is written.
        let log = case.outside.join("out.log");
        let o = case.run(
            &[],
            "echo written through stdout",
            Stdio::null(),
            Some(File::create(&log).unwrap().into()),
            None,
        );
        assert_eq!(o.status.code(), Some(0), "{user:?} {}", show(&o));
        assert_eq!(
            fs::read_to_string(&log).unwrap(),
            "written through stdout\n",
            "{user:?}"
        );
    }
}

#[test]
fn a_directory_on_stdout_or_stderr_is_replaced_by_dev_null() {
    for user in users() {
        let case = Case::new("dir-out", user);
        // Standard output a directory: the probe reports on standard error.
        let script = format!(
            "echo fd1 $(readlink /proc/$$/fd/1) >&2; exec 3>&1 1>&2; {}",
            probe_directory(3)
        );
        let o = case.run(
            &[],
            &script,
            Stdio::null(),
            Some(File::open(&case.outside).unwrap().into()),
            None,
        );
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{user:?} {}", show(&o));
        assert!(!err.contains(SECRET), "{user:?} listed: {}", show(&o));
        assert!(err.contains("fd1 /dev/null\n"), "{user:?} {}", show(&o));
        assert!(err.contains("listdir-refused"), "{user:?} {}", show(&o));
        assert!(err.contains("stat-refused"), "{user:?} {}", show(&o));
        assert!(
            err.contains(&format!(
                "{} ({}); the box gets /dev/null instead\n",
                warning("standard output", "a directory"),
                case.outside_str()
            )),
            "{user:?} {}",
            show(&o)
        );

        // Standard error a directory: the probe reports on standard output
        // (the warning had nowhere to go but /dev/null).
        let script = format!(
            "echo fd2 $(readlink /proc/$$/fd/2); exec 3>&2 2>&1; {}",
            probe_directory(3)
        );
        let o = case.run(
            &[],
            &script,
            Stdio::null(),
            None,
            Some(File::open(&case.outside).unwrap().into()),
        );
        let out = text(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{user:?} {}", show(&o));
        assert!(!out.contains(SECRET), "{user:?} listed: {}", show(&o));
        assert!(out.contains("fd2 /dev/null\n"), "{user:?} {}", show(&o));
        assert!(out.contains("listdir-refused"), "{user:?} {}", show(&o));
    }
}

#[test]
fn a_path_only_descriptor_on_stdin_is_replaced_by_dev_null() {
    for user in users() {
        let case = Case::new("opath", user);
        let o_path = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(&case.outside)
            .unwrap();
        let script = format!(
            "echo fd0 $(readlink /proc/$$/fd/0); exec 3<&0 </dev/null; {}",
            probe_directory(3)
        );
        let o = case.run(&[], &script, o_path.into(), None, None);
        let out = text(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{user:?} {}", show(&o));
        assert!(out.contains("fd0 /dev/null\n"), "{user:?} {}", show(&o));
        // fstatat through an O_PATH descriptor of a directory outside every
        // grant would name and size the file in it.
        assert!(out.contains("stat-refused"), "{user:?} {}", show(&o));
        assert!(!out.contains("stat-size"), "{user:?} {}", show(&o));
        assert!(
            text(&o.stderr).contains(&format!(
                "{} ({}); the box gets /dev/null instead\n",
                warning("standard input", "a path-only (O_PATH) descriptor"),
                case.outside_str()
            )),
            "{user:?} {}",
            show(&o)
        );
    }
}

/// Nothing is waiting on `listener` (a connection the box made would be in
/// its queue, handshake done, whatever the box did after).
fn nothing_queued(listener: &std::net::TcpListener) -> bool {
    listener.set_nonblocking(true).unwrap();
    matches!(listener.accept(), Err(e) if e.kind() == ErrorKind::WouldBlock)
}

/// Nothing arrived on `socket` (a datagram the box sent is in its queue).
fn nothing_received(socket: &std::net::UdpSocket) -> bool {
    socket.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    matches!(socket.recv(&mut buf), Err(e) if e.kind() == ErrorKind::WouldBlock)
}

#[test]
fn an_ip_socket_on_stdin_is_replaced_so_the_box_cannot_re_aim_it() {
    use std::net::{TcpListener, TcpStream, UdpSocket};
    // Disconnects the socket on fd 3 (connect AF_UNSPEC) and connects it to
    // the test's second listener, or sends a datagram to the test's socket.
    let reaim = |port: u16| {
        py(&format!(
            "import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
print(\"unspec\", libc.connect(3, (ctypes.c_char * 16)(), 16))
try:
    s = socket.socket(fileno=os.dup(3))
    if s.type == socket.SOCK_STREAM:
        s.connect((\"127.0.0.1\", {port}))
        s.send(b\"escaped\")
    else:
        s.sendto(b\"escaped\", (\"127.0.0.1\", {port}))
    print(\"re-aimed\")
except OSError as e:
    print(\"re-aim-refused\", e.errno)"
        ))
    };
    for backend in ["linux", "landlock"] {
        for user in users() {
            let case = Case::new(&format!("ip-{backend}"), user);
            let front = ["--backend", backend];
            // TCP: a connection to the test's loopback listener on stdin.
            let peer = TcpListener::bind("127.0.0.1:0").unwrap();
            let target = TcpListener::bind("127.0.0.1:0").unwrap();
            let stream = TcpStream::connect(peer.local_addr().unwrap()).unwrap();
            let (local, remote) = (stream.local_addr().unwrap(), stream.peer_addr().unwrap());
            let script = format!(
                "echo fd0 $(readlink /proc/$$/fd/0); exec 3<&0 </dev/null; {}",
                reaim(target.local_addr().unwrap().port())
            );
            let o = case.run(&front, &script, OwnedFd::from(stream).into(), None, None);
            assert!(nothing_queued(&target), "{backend} {user:?} {}", show(&o));
            assert_stdin_replaced(
                &o,
                &format!("{backend} {user:?}"),
                "re-aim-refused",
                "an IPv4 socket",
            );
            assert!(
                text(&o.stderr).contains(&format!(
                    "{} ({local} -> {remote}), which lives in the host's network: the box could \
                     re-aim it around the policy; the box gets /dev/null instead\n",
                    warning("standard input", "an IPv4 socket"),
                )),
                "{backend} {user:?} {}",
                show(&o)
            );
            // UDP: a socket on stdin could send to any address.
            let target = UdpSocket::bind("127.0.0.1:0").unwrap();
            let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
            let script = format!(
                "echo fd0 $(readlink /proc/$$/fd/0); exec 3<&0 </dev/null; {}",
                reaim(target.local_addr().unwrap().port())
            );
            let o = case.run(&front, &script, OwnedFd::from(udp).into(), None, None);
            assert!(nothing_received(&target), "{backend} {user:?} {}", show(&o));
            assert_stdin_replaced(
                &o,
                &format!("{backend} {user:?}"),
                "re-aim-refused",
                "an IPv4 socket",
            );
        }
    }
}

#[test]
fn a_connected_unix_socket_on_stdin_is_kept_and_a_datagram_one_is_replaced() {
    for backend in ["linux", "landlock"] {
        for user in users() {
            let case = Case::new(&format!("unix-{backend}"), user);
            let front = ["--backend", backend];
            // Twin: a socketpair is how runners often pass stdio; it is read.
            let (ours, theirs) = UnixStream::pair().unwrap();
            (&ours).write_all(b"through the socketpair\n").unwrap();
            drop(ours);
            let o = case.run(&front, "cat", OwnedFd::from(theirs).into(), None, None);
            assert_eq!(
                text(&o.stdout),
                "through the socketpair\n",
                "{backend} {user:?} {}",
                show(&o)
            );
            assert!(
                !text(&o.stderr).contains("/dev/null instead"),
                "{}",
                show(&o)
            );

            // A Unix datagram socket could send to a host socket path (the
            // landlock backend does not mediate pathname sockets below ABI 9).
            let host = case.dirs.root.join("host.sock");
            let listener = UnixDatagram::bind(&host).unwrap();
            fs::set_permissions(&host, fs::Permissions::from_mode(0o777)).unwrap();
            listener.set_nonblocking(true).unwrap();
            let script = format!(
                "echo fd0 $(readlink /proc/$$/fd/0); exec 3<&0 </dev/null; {}",
                py(&format!(
                    "import os, socket
try:
    socket.socket(fileno=os.dup(3)).sendto(b\"escaped\", \"{}\")
    print(\"sent\")
except OSError as e:
    print(\"send-refused\", e.errno)",
                    host.display()
                ))
            );
            let o = case.run(
                &front,
                &script,
                OwnedFd::from(UnixDatagram::unbound().unwrap()).into(),
                None,
                None,
            );
            let mut buf = [0u8; 16];
            assert!(
                matches!(listener.recv(&mut buf), Err(e) if e.kind() == ErrorKind::WouldBlock),
                "{backend} {user:?} {}",
                show(&o)
            );
            assert_stdin_replaced(
                &o,
                &format!("{backend} {user:?}"),
                "send-refused",
                "a Unix datagram socket",
            );
        }
    }
}

#[test]
fn a_regular_file_on_stdin_outside_the_grants_cannot_be_reopened_or_linked() {
    for backend in ["linux", "landlock"] {
        for user in users() {
            let case = Case::new(&format!("file-{backend}"), user);
            let file = case.outside.join(SECRET);
            // The run's user owns it (mode 0644, Case::new): only the sandbox
            // refuses its reopening for writing.
            let probe = py(&format!(
                "import ctypes, os
print(\"read\", os.read(3, 100))
for flags, name in ((os.O_WRONLY, \"write\"), (os.O_RDWR, \"rdwr\"), (os.O_RDONLY, \"read\")):
    try:
        os.open(\"/proc/self/fd/3\", flags)
        print(\"reopened-\" + name)
    except OSError as e:
        print(\"reopen-\" + name + \"-refused\", e.errno)
libc = ctypes.CDLL(None, use_errno=True)
r = libc.linkat(-100, b\"/proc/self/fd/3\", -100, b\"{ws}/linked\", 0x400)
print(\"linked\" if r == 0 else \"link-refused\")",
                ws = case.dirs.ws.display()
            ));
            let script = format!("exec 3<&0 </dev/null; {probe}");
            let o = case.run(
                &["--backend", backend],
                &script,
                File::open(&file).unwrap().into(),
                None,
                None,
            );
            let out = text(&o.stdout);
            assert!(
                out.contains("read b\"the secret's content\\n\""),
                "{backend} {user:?} {}",
                show(&o)
            );
            for refused in [
                "reopen-write-refused",
                "reopen-rdwr-refused",
                "reopen-read-refused",
                "link-refused",
            ] {
                assert!(
                    out.contains(refused),
                    "{backend} {user:?} {refused}: {}",
                    show(&o)
                );
            }
            assert!(!case.dirs.ws.join("linked").exists(), "{backend} {user:?}");
            assert_eq!(
                fs::read_to_string(&file).unwrap(),
                "the secret's content\n",
                "{backend} {user:?}"
            );
        }
    }
}

#[test]
fn closed_standard_descriptors_become_dev_null() {
    for user in users() {
        let case = Case::new("closed", user);
        // `sh -c 'exec terra ... <&- >&-'`: terra starts with 0 and 1 closed.
        let via = ["/bin/sh", "-c", "exec \"$0\" \"$@\" <&- >&-"];
        let mut cmd = case.command(
            &via,
            &[],
            "echo fd0 $(readlink /proc/$$/fd/0) fd1 $(readlink /proc/$$/fd/1) >&2; \
             echo to-stdout && cat && echo done >&2",
        );
        let o = cmd.output().unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{user:?} {}", show(&o));
        assert!(
            err.contains("fd0 /dev/null fd1 /dev/null\n"),
            "{user:?} {}",
            show(&o)
        );
        assert!(err.contains("done\n"), "{user:?} {}", show(&o));
        // A closed descriptor is no warning.
        assert!(!err.contains("/dev/null instead"), "{user:?} {}", show(&o));
    }
}

#[test]
fn descriptors_above_2_the_caller_leaves_open_do_not_reach_the_box() {
    for user in users() {
        let case = Case::new("above-2", user);
        // terra starts with a directory outside every grant on 3 and 7.
        let redirect = format!(
            "exec \"$0\" \"$@\" 3<{dir} 7<{dir}",
            dir = case.outside_str()
        );
        let mut cmd = case.command(
            &["/bin/sh", "-c", &redirect],
            &[],
            "for fd in /proc/$$/fd/*; do echo \"$fd $(readlink $fd)\"; done",
        );
        let o = cmd.output().unwrap();
        let out = text(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{user:?} {}", show(&o));
        assert!(out.contains("/fd/0 /dev/null\n"), "{user:?} {}", show(&o));
        assert!(!out.contains(&case.outside_str()), "{user:?} {}", show(&o));
    }
}

#[test]
#[ignore = "needs root: mknod"]
fn a_block_device_or_a_namespace_on_stdin_is_replaced_by_dev_null() {
    common::require_root("a_block_device_or_a_namespace_on_stdin_is_replaced_by_dev_null (mknod)");
    for user in users() {
        let case = Case::new("block", user);
        // A loop device's numbers, in the case's own directory.
        let node = case.outside.join("loop");
        let made = Command::new("mknod")
            .args(["-m", "600"])
            .arg(&node)
            .args(["b", "7", "0"])
            .status()
            .unwrap();
        assert!(made.success(), "mknod {}", node.display());
        let script = "echo fd0 $(readlink /proc/$$/fd/0); test -b /proc/$$/fd/0 && echo block";
        let o = case.run(&[], script, File::open(&node).unwrap().into(), None, None);
        let out = text(&o.stdout);
        assert!(!out.contains("block\n"), "{user:?} {}", show(&o));
        assert!(out.contains("fd0 /dev/null\n"), "{user:?} {}", show(&o));
        assert!(
            text(&o.stderr).contains(&format!(
                "{} ({}); the box gets /dev/null instead\n",
                warning("standard input", "a block device"),
                node.display()
            )),
            "{user:?} {}",
            show(&o)
        );
        // The host's network namespace, typed as a regular file.
        let ns = File::open("/proc/self/ns/net").unwrap();
        let o = case.run(
            &[],
            "echo fd0 $(readlink /proc/$$/fd/0)",
            ns.into(),
            None,
            None,
        );
        assert!(
            text(&o.stdout).contains("fd0 /dev/null\n"),
            "{user:?} {}",
            show(&o)
        );
        assert!(
            text(&o.stderr).contains(&format!(
                "{} (net:[",
                warning("standard input", "a kernel object, not a file")
            )),
            "{user:?} {}",
            show(&o)
        );
    }
}
