//! Transparent egress (issue 13): the workload's own connect(), without any
//! proxy setting, judged by the broker and answered with a socket the broker
//! connected (`path: "handoff"` in the network receipt). Real clients: curl
//! `--noproxy '*'`, a python3 raw socket, nc, git over git://, an SSH-like
//! banner server; names only a DNS server the test starts knows; refusals
//! with their receipt lines; the race of a thread rewriting the sockaddr;
//! 1,000 concurrent connects; the box's own loopback; AF_UNIX sockets on
//! read-only mounts refused, on the box's writable ones connected, under a
//! rewriting thread too.

use super::*;

/// A TCP server on the host's 127.0.0.1 that greets like an SSH server and
/// echoes one line (what an SSH client, a database driver or a Go dialer
/// needs from connect(): a real TCP stream).
const BANNER_PY: &str = r#"
import socket, threading
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(128)
print("PORT", s.getsockname()[1], flush=True)
def serve(c):
    with c:
        c.sendall(b"SSH-2.0-terra-test\r\n")
        f = c.makefile("rb")
        line = f.readline()
        c.sendall(b"echo " + line)
while True:
    c, _ = s.accept()
    print("CONN", flush=True)
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

struct Banner {
    port: u16,
    hits: LineCounter,
    child: Child,
}

impl Banner {
    fn start() -> Banner {
        let mut child = Command::new(PY)
            .arg("-c")
            .arg(BANNER_PY)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (port, out) = first_line_port(child.stdout.take().unwrap());
        let hits = LineCounter::start(out, |l| l == "CONN");
        Banner { port, hits, child }
    }
}

impl Drop for Banner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `git daemon` serving one bare repository over git:// on 127.0.0.1.
struct GitDaemon {
    port: u16,
    head: String,
    child: Child,
    _dir: tempfile::TempDir,
}

impl GitDaemon {
    fn start() -> GitDaemon {
        let dir = tempfile::tempdir().unwrap();
        let (srv, head) = bare_repo(dir.path());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("git")
            .args([
                "daemon",
                "--reuseaddr",
                "--export-all",
                "--listen=127.0.0.1",
            ])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", srv.display()))
            .arg(&srv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let until = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "git daemon did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        GitDaemon {
            port,
            head,
            child,
            _dir: dir,
        }
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The workload's side of the first case: a raw socket with a non-blocking
/// connect and poll, TCP_NODELAY set before connect, getpeername after; the
/// box's own loopback (server and client in the box); UDP elsewhere.
const RAW_PY: &str = r#"
import errno, fcntl, os, select, socket, sys, threading
port = int(sys.argv[1])
s = socket.socket()
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
s.setblocking(False)
r = s.connect_ex(("127.0.0.1", port))
assert r in (0, errno.EINPROGRESS), r
select.select([], [s], [], 10)
assert s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
nb = bool(fcntl.fcntl(s.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK)
ce = bool(fcntl.fcntl(s.fileno(), fcntl.F_GETFD) & fcntl.FD_CLOEXEC)
nd = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
print("raw", s.getpeername()[1] == port, "nonblocking", nb, "cloexec", ce, "nodelay", nd)
s.setblocking(True)
s.sendall(b"GET /raw HTTP/1.0\r\n\r\n")
print("raw-reply", s.recv(100).split(b"\r\n")[0].decode())
inherit = socket.socket()
os.set_inheritable(inherit.fileno(), True)
inherit.connect(("127.0.0.1", port))
print("inheritable", os.get_inheritable(inherit.fileno()))
# The box's own loopback: a server and a client inside the box.
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
threading.Thread(target=lambda: srv.accept()[0].sendall(b"in-box"), daemon=True).start()
c = socket.create_connection(srv.getsockname())
print("loopback", c.recv(10).decode())
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(b"x", ("192.0.2.1", 9))
except OSError as e:
    print("sendto", errno.errorcode.get(e.errno))
print("udp", errno.errorcode.get(u.connect_ex(("192.0.2.1", 53))))
t = socket.socket()
print("unlisted", errno.errorcode.get(t.connect_ex(("192.0.2.1", 80))))
"#;

#[test]
fn handoff_real_clients_reach_listed_literals_without_proxy_settings() {
    let srv = Http::start();
    let banner = Banner::start();
    let git = GitDaemon::start();
    for user in users() {
        let fx = BoxWorld::new("handoff", user);
        fs::write(fx.ws.join("raw.py"), RAW_PY).unwrap();
        let (p, b, g) = (srv.port, banner.port, git.port);
        let (hits, bhits) = (srv.hits(), banner.hits.settled(0));
        let script = format!(
            "unset http_proxy https_proxy all_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY; \
             {CURL} --noproxy '*' http://127.0.0.1:{p}/curl; echo; \
             {PY} raw.py {p}; \
             printf 'hello\\n' | nc -q 2 127.0.0.1 {b}; \
             git ls-remote git://127.0.0.1:{g}/repo.git; \
             {CURL} --noproxy '*' http://127.0.0.1:{}/unlisted-port; echo unlisted-port-rc=$?",
            p + 1
        );
        let r = fx.run(
            &[
                ("127.0.0.1", p, false, true),
                ("127.0.0.1", b, false, true),
                ("127.0.0.1", g, false, true),
            ],
            &script,
        );
        let out = r.stdout();
        assert!(out.starts_with("from-host /curl\n"), "{}", r.show());
        assert!(
            out.contains("raw True nonblocking True cloexec True nodelay 1"),
            "{}",
            r.show()
        );
        assert!(out.contains("raw-reply HTTP/1.1 200 OK"), "{}", r.show());
        assert!(out.contains("inheritable True"), "{}", r.show());
        assert!(out.contains("loopback in-box"), "{}", r.show());
        assert!(out.contains("udp ENETUNREACH"), "{}", r.show());
        assert!(out.contains("sendto ENETUNREACH"), "{}", r.show());
        assert!(out.contains("unlisted ECONNREFUSED"), "{}", r.show());
        assert!(
            out.contains("SSH-2.0-terra-test\r\necho hello\n"),
            "{}",
            r.show()
        );
        assert!(
            out.contains(&format!("{}\trefs/heads/main", git.head)),
            "{}",
            r.show()
        );
        // The box's loopback on a port nothing lists: the box's own, empty.
        assert!(out.contains("unlisted-port-rc=7"), "{}", r.show());
        assert_eq!(srv.hits(), hits + 3, "curl, raw, inheritable\n{}", r.show());
        assert_eq!(banner.hits.settled(bhits + 1), bhits + 1, "{}", r.show());
        let handed: Vec<&Value> = r
            .lines
            .iter()
            .filter(|l| l["path"] == "handoff" && l["verdict"] == "allowed")
            .collect();
        assert_eq!(handed.len(), 5, "{}", r.show());
        for l in &handed {
            assert_eq!(l["protocol"], "tcp", "{}", r.show());
            assert_eq!(l["name"], "127.0.0.1", "{}", r.show());
            assert_eq!(l["bytes_up"], 0, "the broker never sees the bytes");
        }
        let refused: Vec<(&str, &str)> = r
            .lines
            .iter()
            .filter(|l| l["verdict"] == "refused")
            .map(|l| {
                (
                    l["protocol"].as_str().unwrap_or(""),
                    l["address"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            refused,
            [
                ("udp", "192.0.2.1:9"),
                ("udp", "192.0.2.1:53"),
                ("tcp", "192.0.2.1:80")
            ],
            "{}",
            r.show()
        );
        for l in r.lines.iter().filter(|l| l["verdict"] == "refused") {
            assert_eq!(l["reason"], "no-destination", "{}", r.show());
            assert_eq!(l["path"], "handoff", "{}", r.show());
        }
        assert_linked(&r, 5, 3);
        assert!(
            r.stderr().contains("UDP 192.0.2.1:53 (no-destination)"),
            "{}",
            r.show()
        );
        assert!(
            !r.stderr().contains("--allow-net 192.0.2.1:53"),
            "{}",
            r.show()
        );
    }
}

/// Threads of one workload: one flips a sockaddr buffer between a listed
/// destination and an unlisted host port, the others connect() with it. A
/// connect judged for one address never reaches another: the host's
/// unlisted server never sees a connection.
const RACE_PY: &str = r#"
import ctypes, socket, struct, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
ok, bad = int(sys.argv[1]), int(sys.argv[2])
def sa(port):
    return struct.pack("=HH4s8x", socket.AF_INET, socket.htons(port), socket.inet_aton("127.0.0.1"))
a, b = sa(ok), sa(bad)
buf = ctypes.create_string_buffer(a, 16)
stop = False
def flip():
    while not stop:
        ctypes.memmove(buf, b, 16)
        ctypes.memmove(buf, a, 16)
threading.Thread(target=flip, daemon=True).start()
results = {"ok": 0, "refused": 0, "other": 0}
lock = threading.Lock()
def worker(n):
    for _ in range(n):
        s = socket.socket()
        r = libc.connect(s.fileno(), buf, 16)
        e = ctypes.get_errno()
        with lock:
            if r == 0:
                results["ok" if s.getpeername()[1] == ok else "other"] += 1
            elif e == 111:
                results["refused"] += 1
            else:
                results["other"] += 1
        s.close()
ts = [threading.Thread(target=worker, args=(100,)) for _ in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
stop = True
print("race", results["ok"], results["refused"], results["other"])
"#;

#[test]
fn handoff_a_thread_rewriting_the_sockaddr_never_reaches_an_unjudged_address() {
    let listed = Http::start();
    let unlisted = Http::start();
    for user in users() {
        let fx = BoxWorld::new("handoff-race", user);
        fs::write(fx.ws.join("race.py"), RACE_PY).unwrap();
        let before = unlisted.hits();
        let r = fx.run(
            &[("127.0.0.1", listed.port, false, true)],
            &format!("{PY} race.py {} {}", listed.port, unlisted.port),
        );
        let line = r
            .stdout()
            .lines()
            .find(|l| l.starts_with("race "))
            .unwrap_or_else(|| panic!("{}", r.show()))
            .to_string();
        let n: Vec<u64> = line[5..].split(' ').map(|x| x.parse().unwrap()).collect();
        assert_eq!(
            n[0] + n[1],
            400,
            "every connect ended as ok or refused\n{}",
            r.show()
        );
        assert_eq!(n[2], 0, "{}", r.show());
        assert!(
            n[0] > 0,
            "some connects were judged for the listed port\n{}",
            r.show()
        );
        // Give the unlisted server time to log anything that did arrive.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            unlisted.hits(),
            before,
            "the unlisted host port was never reached"
        );
    }
}

const MANY_PY: &str = r#"
import socket, sys
from concurrent.futures import ThreadPoolExecutor
port, n = int(sys.argv[1]), int(sys.argv[2])
def one(i):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(b"GET /many HTTP/1.0\r\n\r\n")
    ok = s.recv(12) == b"HTTP/1.1 200"
    s.close()
    return ok
with ThreadPoolExecutor(max_workers=100) as ex:
    print("many", sum(ex.map(one, range(n))))
"#;

#[test]
fn handoff_1000_concurrent_connects() {
    let srv = Http::start();
    for user in users() {
        let fx = BoxWorld::new("handoff-many", user);
        fs::write(fx.ws.join("many.py"), MANY_PY).unwrap();
        let before = srv.hits();
        let r = fx.run(
            &[("127.0.0.1", srv.port, false, true)],
            &format!("{PY} many.py {} 1000", srv.port),
        );
        assert!(r.stdout().contains("many 1000"), "{}", r.show());
        assert_eq!(srv.hits(), before + 1000);
        assert_linked(&r, 1000, 0);
    }
}

/// Names only the test's DNS server knows (not in /etc/hosts): the box asks
/// its own DNS stub, the broker resolves listed names and pins the answer,
/// and the workload's connect() to a pinned address is handed off.
#[test]
#[ignore = "needs root: port 53, mount namespace"]
fn handoff_names_only_a_dns_server_knows() {
    require_root("handoff_names_only_a_dns_server_knows (port 53, mount namespace)");
    let _dns = test_dns();
    let srv = Http::start();
    let srv6 = Http::start_on("[::1]:0", |path| format!("from-host {path}"));
    let banner = Banner::start();
    let git = GitDaemon::start();
    let (p, p6, b, g) = (srv.port, srv6.port, banner.port, git.port);
    // A port no other listed name uses: the other names resolve to the same
    // loopback addresses, and a connect is judged by address and port.
    let pb = p + 2;
    let z = |n: &str| format!("{n}.terra-test.example");
    let (v4, v6, both, gone) = (z("v4"), z("v6"), z("both"), z("gone"));
    let (doc, unlisted) = (z("doc"), z("v4-unlisted"));
    let script = format!(
        "{CURL} --noproxy '*' http://{v4}:{p}/v4; echo; \
         {CURL} --noproxy '*' -6 http://{v6}:{p6}/v6; echo; \
         {PY} -c 'import socket; s=socket.create_connection((\"{v4}\", {p})); print(\"py\", s.getpeername()[0])'; \
         dig +short @127.0.0.1 {v4} A; dig @127.0.0.1 {v4} MX | grep -o 'status: [A-Z]*'; \
         getent hosts {gone}; echo gone-rc=$?; \
         {CURL} --noproxy '*' http://{both}:{pb}/both; echo both-rc=$?; \
         {CURL} --noproxy '*' http://{doc}:81/port; echo port-rc=$?; \
         getent hosts {unlisted}; echo unlisted-rc=$?; \
         printf 'hi\\n' | nc -q 2 {v4} {b}; \
         git ls-remote git://{v4}:{g}/repo.git"
    );
    for user in users() {
        let fx = BoxWorld::new("handoff-dns", user);
        let resolv = resolver_config(
            &fx,
            "resolv.conf",
            "nameserver 127.0.0.153\noptions timeout:1 attempts:1\n",
        );
        let policy = fx.policy(&[
            (&v4, p, false, true),
            (&v6, p6, false, true),
            (&both, pb, false, false),
            (&gone, p, false, true),
            (&doc, 80, false, true),
            (&v4, b, false, true),
            (&v4, g, false, true),
        ]);
        let cmd = fx.command(&["--policy", policy.to_str().unwrap()], &script);
        let out = with_resolv_conf(&cmd, &resolv).output().unwrap();
        let r = fx.collect(out);
        let text = r.stdout();
        assert!(
            text.starts_with("from-host /v4\nfrom-host /v6\n"),
            "{}",
            r.show()
        );
        assert!(text.contains("py 127.0.0.1\n"), "{}", r.show());
        assert!(
            text.contains("\n127.0.0.1\nstatus: REFUSED\n"),
            "{}",
            r.show()
        );
        assert!(
            text.contains("gone-rc=2"),
            "NXDOMAIN in the box\n{}",
            r.show()
        );
        assert!(
            text.contains("both-rc=7"),
            "private address refused\n{}",
            r.show()
        );
        assert!(text.contains("port-rc=7"), "{}", r.show());
        assert!(text.contains("unlisted-rc=2"), "{}", r.show());
        assert!(
            text.contains("SSH-2.0-terra-test\r\necho hi\n"),
            "{}",
            r.show()
        );
        assert!(
            text.contains(&format!("{}\trefs/heads/main", git.head)),
            "{}",
            r.show()
        );
        let handed = |name: &str, reason: Option<&str>| {
            r.lines.iter().any(|l| {
                l["path"] == "handoff" && l["name"] == name && l["reason"].as_str() == reason
            })
        };
        assert!(handed(&v4, None), "{}", r.show());
        assert!(handed(&v6, None), "{}", r.show());
        assert!(handed(&both, Some("private-address")), "{}", r.show());
        assert!(
            handed(&doc, Some("no-destination")),
            "unlisted port\n{}",
            r.show()
        );
        let pinned = r
            .lines
            .iter()
            .find(|l| l["protocol"] == "dns" && l["name"] == v4.as_str())
            .unwrap_or_else(|| panic!("{}", r.show()));
        assert_eq!(pinned["verdict"], "allowed");
        assert_eq!(pinned["resolved"][0], "127.0.0.1");
        assert!(r.lines.iter().any(|l| l["protocol"] == "dns"
            && l["name"] == gone.as_str()
            && l["reason"] == "resolve-failed"));
        assert!(r.lines.iter().any(|l| l["protocol"] == "dns"
            && l["name"] == unlisted.as_str()
            && l["reason"] == "no-destination"));
    }
}

/// A destination that requires TLS SNI, reached by the workload's own
/// connect() (no proxy): the checked path. The workload gets one end of a
/// TCP pair in the box; the broker reads the ClientHello before it connects
/// anywhere, then relays (`path: "relay"`, protocol "tcp"). A wrong or
/// missing server name never reaches the server.
#[test]
#[ignore = "needs root: port 53, mount namespace"]
fn handoff_sni_destinations_take_the_checked_path() {
    require_root("handoff_sni_destinations_take_the_checked_path (port 53, mount namespace)");
    let _dns = test_dns();
    let tls = Tls::start();
    let name = "v4.terra-test.example";
    let port = tls.port;
    let s_client = |sn: &str| {
        format!(
            "openssl s_client -connect {name}:{port} {sn} -ign_eof </dev/null 2>&1 | grep -c tls-hello-from-host; "
        )
    };
    let script = format!(
        "unset http_proxy https_proxy all_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY; {}{}{}\
         {PY} -c 'import socket; s=socket.create_connection((\"{name}\", {port})); s.sendall(b\"plain\\n\"); print(\"peer\", s.getpeername()[0]); s.recv(1)'",
        s_client(&format!("-servername {name}")),
        s_client("-servername other.test"),
        s_client("-noservername"),
    );
    let mut expect = 0;
    for user in users() {
        let fx = BoxWorld::new("handoff-sni", user);
        let resolv = resolver_config(
            &fx,
            "resolv.conf",
            "nameserver 127.0.0.153\noptions timeout:1 attempts:1\n",
        );
        let policy = fx.policy(&[(name, port, true, true)]);
        let cmd = fx.command(&["--policy", policy.to_str().unwrap()], &script);
        let out = with_resolv_conf(&cmd, &resolv).output().unwrap();
        let r = fx.collect(out);
        expect += 1;
        assert!(
            r.stdout().starts_with("1\n0\n0\npeer 127.0.0.1\n"),
            "{}",
            r.show()
        );
        let tcp: Vec<&Value> = r.lines.iter().filter(|l| l["protocol"] == "tcp").collect();
        assert_eq!(tcp.len(), 4, "{}", r.show());
        assert_eq!(tcp[0]["verdict"], "allowed", "{}", r.show());
        assert_eq!(tcp[0]["path"], "relay", "{}", r.show());
        assert_eq!(tcp[0]["sni"], name, "{}", r.show());
        assert!(tcp[0]["bytes_down"].as_u64().unwrap() > 0, "{}", r.show());
        assert_eq!(tcp[1]["reason"], "sni-mismatch", "{}", r.show());
        assert_eq!(tcp[2]["reason"], "sni-absent", "{}", r.show());
        // Plain TCP, no TLS at all: no server name either.
        assert_eq!(tcp[3]["reason"], "sni-absent", "{}", r.show());
        assert_eq!(
            tls.hits.settled(expect),
            expect,
            "only the matching name connected"
        );
    }
}

/// A database on the host's loopback (redis-server on a port of its own),
/// reached by its real client from the box without any proxy: the listed
/// address and port go through the broker; the same port unlisted stays on
/// the box's own, empty loopback.
#[test]
fn handoff_a_database_on_the_host_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut redis = Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
        .arg("--dir")
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server (scripts/bootstrap.sh installs it)");
    let until = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < until, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let host_get = |key: &str| {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "get", key])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    for user in users() {
        let fx = BoxWorld::new("handoff-redis", user);
        let key = format!("from-box-{user:?}");
        let cli = format!("redis-cli -h 127.0.0.1 -p {port}");
        let r = fx.run(
            &[("127.0.0.1", port, false, true)],
            &format!("{cli} set {key} yes; {cli} get {key}"),
        );
        assert_eq!(r.stdout(), "OK\nyes\n", "{}", r.show());
        assert_eq!(host_get(&key), "yes", "the host's database has it");
        assert!(r
            .lines
            .iter()
            .all(|l| l["path"] == "handoff" && l["verdict"] == "allowed"));
        // Unlisted: the box's own loopback, where nothing listens.
        let r = fx.run(
            &[("127.0.0.1", port + 1, false, true)],
            &format!("{cli} set unlisted-{key} yes; echo rc=$?"),
        );
        assert!(!r.stdout().contains("OK"), "{}", r.show());
        assert_eq!(
            host_get(&format!("unlisted-{key}")),
            "",
            "never reached the host"
        );
        assert!(
            r.lines.is_empty(),
            "box-local: no broker decision\n{}",
            r.show()
        );
    }
    let _ = redis.kill();
    let _ = redis.wait();
}

// ------------------------------------------------------------------ AF_UNIX (issue 13)

/// A host service on an AF_UNIX stream socket (what docker.sock, D-Bus or
/// an agent is). It accepts in order and counts; a connection that sends
/// `marker` (the test's own) is answered on stdout with `MARK <n>`, the
/// connections accepted before it.
const UNIX_SERVER_PY: &str = r#"
import os, socket, sys, threading
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
os.chmod(sys.argv[1], 0o777)
s.listen(128)
print("PORT 0", flush=True)
def serve(c, before):
    with c:
        data = c.recv(100)
        if data == b"marker":
            print("MARK", before, flush=True)
        else:
            c.sendall(b"host-service")
n = 0
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c, n), daemon=True).start()
    n += 1
"#;

/// The host service of one case at `svc/host.sock` under the world's root,
/// started as the test's own user: a socket anyone may write, so only
/// terra's rule keeps the box from it.
struct HostUnix {
    sock: PathBuf,
    lines: Arc<std::sync::Mutex<Vec<String>>>,
    markers: usize,
    child: Child,
}

impl HostUnix {
    fn start(fx: &BoxWorld) -> HostUnix {
        let dir = fx.root.join("svc");
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let sock = dir.join("host.sock");
        let mut child = Command::new(PY)
            .arg("-c")
            .arg(UNIX_SERVER_PY)
            .arg(&sock)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (_, out) = first_line_port(child.stdout.take().unwrap());
        let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
        let l = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        HostUnix {
            sock,
            lines,
            markers: 0,
            child,
        }
    }

    /// The connections the server accepted from the box so far: the test
    /// connects itself and reads how many came before it (the server
    /// accepts in order, so every earlier connect is counted).
    fn box_connections(&mut self) -> usize {
        let mut c = std::os::unix::net::UnixStream::connect(&self.sock).unwrap();
        std::io::Write::write_all(&mut c, b"marker").unwrap();
        self.markers += 1;
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let marks: Vec<usize> = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .filter_map(|l| l.strip_prefix("MARK ")?.parse().ok())
                .collect();
            if marks.len() == self.markers {
                let before = marks.into_iter().max().unwrap_or(0);
                return before - (self.markers - 1);
            }
            assert!(Instant::now() < until, "the host service did not answer");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for HostUnix {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The world's policy (network mediated: the notification filter exists
/// only then) with `access` granted on `dir`.
fn unix_policy(fx: &BoxWorld, access: &str, dir: &Path) -> PathBuf {
    unix_policy_with(fx, access, dir, true)
}

/// [`unix_policy`], with network mediated or none.
fn unix_policy_with(fx: &BoxWorld, access: &str, dir: &Path, mediated: bool) -> PathBuf {
    let p = fx.policy(&[("127.0.0.1", 9, false, true)]);
    let mut v: Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
    if !mediated {
        v["network"] = serde_json::json!({"mode": "none"});
    }
    let rule = serde_json::json!({"access": access,
        "path": {"absolute": dir.to_str().unwrap()}, "scope": "tree"});
    v["filesystem"]["rules"].as_array_mut().unwrap().push(rule);
    fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    p
}

/// The workload's side: the host service in the granted directory
/// (directly, by a symlink in the workspace, through /proc/self/fd of an
/// O_PATH descriptor), then servers inside the box.
const UNIX_PY: &str = r#"
import errno, os, socket, sys, threading
host, mode = sys.argv[1], sys.argv[2]
def name(e):
    return errno.errorcode.get(e.errno, str(e.errno))
def talk(label, path, kind=socket.SOCK_STREAM):
    c = socket.socket(socket.AF_UNIX, kind)
    try:
        c.connect(path)
        c.sendall(label.encode())
        print(label, c.recv(100).decode(), flush=True)
    except OSError as e:
        print(label, name(e), flush=True)
if os.path.lexists("link.sock"):
    os.unlink("link.sock")
os.symlink(host, "link.sock")
opath = os.open(host, os.O_PATH)
talk("host", host)
talk("host-link", "link.sock")
talk("host-opath", "/proc/self/fd/%d" % opath)
if mode == "host-only":
    sys.exit(0)
def serve(path, family_name=None):
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(8)
    def loop():
        while True:
            c, _ = srv.accept()
            try:
                c.sendall(b"echo " + c.recv(100))
            except OSError:
                pass
            c.close()
    threading.Thread(target=loop, daemon=True).start()
for label, path in (("ws", os.getcwd() + "/ws.sock"), ("rel", "rel.sock"),
                    ("tmp", "/tmp/t.sock"), ("shm", "/dev/shm/s.sock"),
                    ("abstract", "\0terra-e2e-abstract")):
    serve(path)
    talk(label, path)
ws_fd = os.open("ws.sock", os.O_PATH)
talk("ws-opath", "/proc/self/fd/%d" % ws_fd)
# Non-blocking, and the socket keeps its flags.
c = socket.socket(socket.AF_UNIX)
c.setblocking(False)
c.connect("ws.sock")
print("nonblocking", c.getblocking() is False, c.getpeername() == os.getcwd() + "/ws.sock", flush=True)
# A datagram socket bound before its connect keeps its own address.
d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
d.bind("d-server.sock")
c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
c.bind("d-client.sock")
c.connect("d-server.sock")
c.send(b"dgram")
data, peer = d.recvfrom(100)
print("dgram", data.decode(), peer, flush=True)
talk("plain-file", "unix.py")
talk("missing", "nothing-here.sock")
"#;

/// The box's connect() to an AF_UNIX socket on a read-only mount (a read
/// grant holding a host service's socket) fails with EACCES, also through a
/// symlink or /proc/self/fd, and the host service never sees a connection;
/// sockets on the box's writable mounts (workspace, /tmp, /dev/shm) and
/// abstract names work. The twin: the same host service in a write grant is
/// reached, so the refusal is the rule's, not the socket's permissions.
#[test]
fn handoff_unix_sockets_on_read_only_mounts_are_refused() {
    unix_sockets_on_read_only_mounts_are_refused(true);
}

/// The same rule with network none (the default policy's mode): the box's
/// network service answers connect() without a broker.
#[test]
fn unix_sockets_on_read_only_mounts_are_refused_with_network_none() {
    unix_sockets_on_read_only_mounts_are_refused(false);
}

fn unix_sockets_on_read_only_mounts_are_refused(mediated: bool) {
    for user in users() {
        let fx = BoxWorld::new(if mediated { "unix-ro" } else { "unix-ro-none" }, user);
        fs::write(fx.ws.join("unix.py"), UNIX_PY).unwrap();
        let mut host = HostUnix::start(&fx);
        let dir = fx.root.join("svc");
        let script = format!("{PY} unix.py {} all", host.sock.display());
        let policy = unix_policy_with(&fx, "read", &dir, mediated);
        let mut cmd = fx.command(&["--policy", policy.to_str().unwrap()], &script);
        let r = fx.collect(cmd.output().unwrap());
        let out = r.stdout();
        for l in ["host EACCES", "host-link EACCES", "host-opath EACCES"] {
            assert!(out.contains(&format!("{l}\n")), "{l}\n{}", r.show());
        }
        for l in ["ws", "rel", "tmp", "shm", "abstract", "ws-opath"] {
            assert!(
                out.contains(&format!("{l} echo {l}\n")),
                "{l}\n{}",
                r.show()
            );
        }
        assert!(out.contains("nonblocking True True\n"), "{}", r.show());
        assert!(out.contains("dgram dgram d-client.sock\n"), "{}", r.show());
        assert!(out.contains("plain-file ECONNREFUSED\n"), "{}", r.show());
        assert!(out.contains("missing ENOENT\n"), "{}", r.show());
        assert_eq!(r.code(), Some(0), "{}", r.show());
        assert_eq!(host.box_connections(), 0, "{}", r.show());
        // The broker is not involved: no network receipt line.
        assert!(r.lines.is_empty(), "{}", r.show());

        // The twin: a write grant of the same directory.
        let policy = unix_policy_with(&fx, "write", &dir, mediated);
        let mut cmd = fx.command(
            &["--policy", policy.to_str().unwrap()],
            &format!("{PY} unix.py {} host-only", host.sock.display()),
        );
        let r = fx.collect(cmd.output().unwrap());
        let out = r.stdout();
        for l in ["host", "host-link", "host-opath"] {
            assert!(
                out.contains(&format!("{l} host-service\n")),
                "{l}\n{}",
                r.show()
            );
        }
        assert_eq!(host.box_connections(), 3, "{}", r.show());
    }
}

/// Threads of one workload: one flips a sockaddr_un between a socket in the
/// workspace, the host service's socket in a read grant, and that path
/// made an abstract name (which nothing serves); the others connect() with
/// it. Whatever the buffer holds when the kernel could read it again, no
/// connect reaches the host service.
const UNIX_RACE_PY: &str = r#"
import ctypes, errno, os, socket, struct, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
host = sys.argv[1].encode()
mine = (os.getcwd() + "/mine.sock").encode()
srv = socket.socket(socket.AF_UNIX)
srv.bind(mine)
srv.listen(128)
def loop():
    while True:
        srv.accept()[0].close()
threading.Thread(target=loop, daemon=True).start()
def sa(path):
    return struct.pack("=H", socket.AF_UNIX) + path.ljust(108, b"\0")
good, bad, abstract = sa(mine), sa(host), sa(b"\0" + host[1:])
buf = ctypes.create_string_buffer(good, 110)
stop = False
def flip():
    while not stop:
        ctypes.memmove(buf, bad, 110)
        ctypes.memmove(buf, good, 110)
        ctypes.memmove(buf, abstract, 110)
        ctypes.memmove(buf, good, 110)
threading.Thread(target=flip, daemon=True).start()
results = {"ok": 0, "eacces": 0, "refused": 0, "other": 0}
lock = threading.Lock()
def worker(n):
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX)
        r = libc.connect(s.fileno(), buf, 110)
        e = ctypes.get_errno()
        with lock:
            if r == 0:
                results["ok" if s.getpeername().encode() == mine else "other"] += 1
            elif e == errno.EACCES:
                results["eacces"] += 1
            elif e == errno.ECONNREFUSED:
                results["refused"] += 1
            else:
                results["other"] += 1
        s.close()
ts = [threading.Thread(target=worker, args=(100,)) for _ in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
stop = True
print("race", results["ok"], results["eacces"], results["refused"], results["other"])
"#;

#[test]
fn handoff_a_thread_rewriting_a_unix_sockaddr_never_reaches_a_read_only_socket() {
    for user in users() {
        let fx = BoxWorld::new("unix-race", user);
        fs::write(fx.ws.join("race.py"), UNIX_RACE_PY).unwrap();
        let mut host = HostUnix::start(&fx);
        let dir = fx.root.join("svc");
        let policy = unix_policy(&fx, "read", &dir);
        let mut cmd = fx.command(
            &["--policy", policy.to_str().unwrap()],
            &format!("{PY} race.py {}", host.sock.display()),
        );
        let r = fx.collect(cmd.output().unwrap());
        let line = r
            .stdout()
            .lines()
            .find(|l| l.starts_with("race "))
            .unwrap_or_else(|| panic!("{}", r.show()))
            .to_string();
        let n: Vec<u64> = line[5..].split(' ').map(|x| x.parse().unwrap()).collect();
        assert_eq!(n[0] + n[1] + n[2], 400, "{}", r.show());
        assert_eq!(n[3], 0, "no connect ended elsewhere\n{}", r.show());
        assert!(
            n[0] > 0,
            "some connects reached the workspace\n{}",
            r.show()
        );
        assert_eq!(host.box_connections(), 0, "{}", r.show());
    }
}

/// The workload's side: the host service's directory is the run's standard
/// input (moved to fd 3), held open in the box's init and the workload.
const UNIX_FD_PY: &str = r#"
import errno, socket, sys
for label, path in (("own-fd", "/proc/self/fd/3/host.sock"),
                    ("init-fd", "/proc/1/fd/0/host.sock"),
                    ("granted", sys.argv[1])):
    c = socket.socket(socket.AF_UNIX)
    try:
        c.connect(path)
        c.sendall(label.encode())
        print(label, c.recv(100).decode(), flush=True)
    except OSError as e:
        print(label, errno.errorcode.get(e.errno, str(e.errno)), flush=True)
"#;

/// A host directory given as the caller's standard input never enters the
/// box (terra run puts /dev/null there and says so), so neither the
/// workload's descriptor nor the box init's reaches its sockets, even when
/// the same directory is also granted writable, while the grant's own path
/// reaches the host service.
#[test]
fn handoff_a_host_directory_held_open_in_the_box_does_not_reach_its_sockets() {
    for user in users() {
        let fx = BoxWorld::new("unix-fd", user);
        fs::write(fx.ws.join("fd.py"), UNIX_FD_PY).unwrap();
        let mut host = HostUnix::start(&fx);
        let dir = fx.root.join("svc");
        let script = format!("exec 3<&0 0</dev/null; {PY} fd.py {}", host.sock.display());
        for (access, granted) in [("read", "EACCES"), ("write", "host-service")] {
            let policy = unix_policy(&fx, access, &dir);
            let mut cmd = fx.command(&["--policy", policy.to_str().unwrap()], &script);
            cmd.stdin(fs::File::open(&dir).unwrap());
            let r = fx.collect(cmd.output().unwrap());
            let out = r.stdout();
            assert!(out.contains("own-fd ENOTDIR\n"), "{access}\n{}", r.show());
            // The init's /proc entry: no directory there either (root), or
            // not even readable (65534).
            assert!(
                out.contains("init-fd ENOTDIR\n") || out.contains("init-fd EACCES\n"),
                "{access}\n{}",
                r.show()
            );
            assert!(
                r.stderr().contains("standard input is a directory"),
                "{access}\n{}",
                r.show()
            );
            assert!(
                out.contains(&format!("granted {granted}\n")),
                "{access}\n{}",
                r.show()
            );
            let reached = usize::from(access == "write");
            assert_eq!(host.box_connections(), reached, "{access}\n{}", r.show());
        }
    }
}

/// Threads of one workload: a connect() on descriptor 100 while one thread
/// flips the sockaddr between a box-local inet address (a server in the
/// box) and the read-only host socket, and another dup2()s an AF_UNIX
/// socket and the inet socket onto descriptor 100 in turn. If the kernel
/// ran any call again after the service's look ("continue"), it could find
/// the unix socket and the path; the AF_UNIX sockets never end connected
/// and the host service accepts nothing.
const UNIX_SWAP_PY: &str = r#"
import ctypes, os, socket, struct, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
host = sys.argv[1].encode()
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(512)
port = srv.getsockname()[1]
def serve():
    while True:
        srv.accept()[0].close()
threading.Thread(target=serve, daemon=True).start()
inet = struct.pack("=HH4s8x", socket.AF_INET, socket.htons(port),
                   socket.inet_aton("127.0.0.1")).ljust(110, b"\0")
unix = struct.pack("=H", socket.AF_UNIX) + host.ljust(108, b"\0")
buf = ctypes.create_string_buffer(inet, 110)
F = 100
cur = {"i": -1, "u": -1}
stop = False
def flip():
    while not stop:
        ctypes.memmove(buf, unix, 110)
        ctypes.memmove(buf, inet, 110)
def swap():
    while not stop:
        i, u = cur["i"], cur["u"]
        if i < 0:
            continue
        try:
            os.dup2(u, F)
            os.dup2(i, F)
        except OSError:
            pass
for f in (flip, swap):
    threading.Thread(target=f, daemon=True).start()
done = unix_connected = inet_connected = 0
for _ in range(400):
    i, u = socket.socket(), socket.socket(socket.AF_UNIX)
    os.dup2(i.fileno(), F)
    cur["i"], cur["u"] = i.fileno(), u.fileno()
    r = libc.connect(F, buf, 110)
    cur["i"] = -1
    done += 1
    for s, name in ((u, "unix"), (i, "inet")):
        try:
            s.getpeername()
            if name == "unix":
                unix_connected += 1
            else:
                inet_connected += 1
        except OSError:
            pass
    i.close()
    u.close()
stop = True
print("swap", done, unix_connected, inet_connected)
"#;

#[test]
fn handoff_a_thread_swapping_descriptors_never_reaches_a_read_only_socket() {
    for user in users() {
        let fx = BoxWorld::new("unix-swap", user);
        fs::write(fx.ws.join("swap.py"), UNIX_SWAP_PY).unwrap();
        let mut host = HostUnix::start(&fx);
        let dir = fx.root.join("svc");
        let policy = unix_policy(&fx, "read", &dir);
        let mut cmd = fx.command(
            &["--policy", policy.to_str().unwrap()],
            &format!("{PY} swap.py {}", host.sock.display()),
        );
        let r = fx.collect(cmd.output().unwrap());
        let line = r
            .stdout()
            .lines()
            .find(|l| l.starts_with("swap "))
            .unwrap_or_else(|| panic!("{}", r.show()))
            .to_string();
        let n: Vec<u64> = line[5..].split(' ').map(|x| x.parse().unwrap()).collect();
        assert_eq!(n[0], 400, "{}", r.show());
        assert_eq!(n[1], 0, "an AF_UNIX socket got connected\n{}", r.show());
        assert_eq!(host.box_connections(), 0, "{}", r.show());
    }
}
