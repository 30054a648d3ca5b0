//! A handed-off socket never leaves the broker's judgement: the socket the
//! broker connected lives in the host's network namespace, and no call the
//! workload makes on it (or on any socket: TCP Fast Open) can give it a new
//! destination. Each probe runs against unlisted host listeners on
//! 127.0.0.1, 127.0.0.2 and ::1 that must never see a connection or a
//! byte, and each has its twin: the listed destination still answers
//! through the same socket.

use super::*;

/// The listed destination: echoes each message as `echo:<message>` until
/// it reads `close\n`, then closes.
const ECHO_PY: &str = r#"
import socket, threading
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(128)
print("PORT", s.getsockname()[1], flush=True)
def serve(c):
    with c:
        while True:
            d = c.recv(100)
            if not d or d == b"close\n":
                return
            c.sendall(b"echo:" + d)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// Unlisted listeners on 127.0.0.1, 127.0.0.2 and ::1: a line `HIT ...` for
/// every connection and every read.
const SENTINEL_PY: &str = r#"
import select, socket
ls = []
for fam, ip in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET, "127.0.0.2"), (socket.AF_INET6, "::1")):
    s = socket.socket(fam)
    s.bind((ip, 0))
    s.listen(64)
    ls.append(s)
print("PORTS", *[s.getsockname()[1] for s in ls], flush=True)
conns = []
while True:
    r, _, _ = select.select(ls + conns, [], [])
    for x in r:
        if x in ls:
            c, a = x.accept()
            conns.append(c)
            print("HIT conn", a, flush=True)
        else:
            d = x.recv(100)
            if d:
                print("HIT data", d, flush=True)
            else:
                conns.remove(x)
                x.close()
"#;

const REAIM_PY: &str = include_str!("reaim.py");

/// A python3 server of this test, killed at drop.
struct Server {
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(script: &str) -> (Server, BufReader<std::process::ChildStdout>, String) {
    let mut child = Command::new(PY)
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    (Server { child }, out, first.trim_end().to_string())
}

/// The unlisted host listeners and what they saw.
struct Sentinel {
    ports: [u16; 3],
    hits: LineCounter,
    markers: usize,
    _server: Server,
}

impl Sentinel {
    fn start() -> Sentinel {
        let (server, out, first) = start(SENTINEL_PY);
        let ports: Vec<u16> = first
            .strip_prefix("PORTS ")
            .unwrap_or_else(|| panic!("expected PORTS, got {first:?}"))
            .split(' ')
            .map(|p| p.parse().unwrap())
            .collect();
        Sentinel {
            ports: [ports[0], ports[1], ports[2]],
            hits: LineCounter::start(out, |l| l.starts_with("HIT ")),
            markers: 0,
            _server: server,
        }
    }

    /// The connections and reads the listeners saw from anyone but this
    /// test: the test connects to each once and waits for those three
    /// (each listener accepts in order, so anything earlier is counted).
    fn others(&mut self) -> usize {
        for addr in [
            format!("127.0.0.1:{}", self.ports[0]),
            format!("127.0.0.2:{}", self.ports[1]),
            format!("[::1]:{}", self.ports[2]),
        ] {
            drop(std::net::TcpStream::connect(addr).unwrap());
        }
        self.markers += 3;
        let seen = self.hits.settled(self.markers);
        assert!(
            seen >= self.markers,
            "the listeners did not report the test's connections"
        );
        // A read the box made would come before the marker on its listener;
        // give the listener's output pipe a moment to carry it.
        std::thread::sleep(Duration::from_millis(200));
        self.hits.settled(self.markers) - self.markers
    }
}

/// A port free on the host now (bound to port 0 and released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `reaim.py MODE` in a box of `user` that lists the echo server (and
/// the HTTP server, for curl); every mode's first check: no unlisted host
/// listener (the sentinels) was reached.
fn probe(mode: &str, user: User, echo: u16, http: &Http, sentinel: &mut Sentinel) -> RunOutcome {
    let fx = BoxWorld::new(&format!("reaim-{mode}"), user);
    fs::write(fx.ws.join("reaim.py"), REAIM_PY).unwrap();
    let [u4, u4b, u6] = sentinel.ports;
    let free = free_port();
    let script = format!(
        "unset http_proxy https_proxy all_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY; \
         {PY} -u reaim.py {mode} {echo} {u4} {u4b} {u6} {free}; \
         {CURL} --tcp-fastopen --noproxy '*' http://127.0.0.1:{h}/fastopen; echo; \
         {CURL} --noproxy '*' http://127.0.0.1:{h}/after; echo",
        h = http.port
    );
    let r = fx.run(
        &[
            ("127.0.0.1", echo, false, true),
            ("127.0.0.1", http.port, false, true),
        ],
        &script,
    );
    assert!(
        r.stdout().contains("\ndone\n") || r.stdout().starts_with("done\n"),
        "{}",
        r.show()
    );
    // The twins: normal clients through the hand-off, after the probes; one
    // asked for Fast Open, is told it is not available and connects.
    assert!(
        r.stdout().contains("\nfrom-host /fastopen\n"),
        "{}",
        r.show()
    );
    assert!(r.stdout().ends_with("from-host /after\n"), "{}", r.show());
    // Every receipt line is an admitted hand-off to a listed port.
    for l in &r.lines {
        assert_eq!(l["path"], "handoff", "{}", r.show());
        assert_eq!(l["verdict"], "allowed", "{}", r.show());
        let to = l["address"].as_str().unwrap_or("");
        assert!(
            to.ends_with(&format!(":{echo}")) || to.ends_with(&format!(":{}", http.port)),
            "{}",
            r.show()
        );
    }
    assert_eq!(
        sentinel.others(),
        0,
        "an unlisted host listener was reached\n{}",
        r.show()
    );
    r
}

/// The lines of the run's stdout that start with `prefix`.
fn lines_with<'a>(out: &'a str, prefix: &str) -> Vec<&'a str> {
    out.lines().filter(|l| l.starts_with(prefix)).collect()
}

struct World {
    echo: u16,
    _echo: Server,
    http: Http,
    sentinel: Sentinel,
}

impl World {
    fn start() -> World {
        let (server, _out, first) = start(ECHO_PY);
        let echo = first.strip_prefix("PORT ").unwrap().parse().unwrap();
        World {
            echo,
            _echo: server,
            http: Http::start(),
            sentinel: Sentinel::start(),
        }
    }

    fn probe(&mut self, mode: &str, user: User) -> RunOutcome {
        probe(mode, user, self.echo, &self.http, &mut self.sentinel)
    }
}

/// connect() on a handed socket: AF_UNSPEC (which would disconnect it) is
/// refused with EPERM and a new address with EISCONN, and the socket still
/// talks to its listed peer; the same in a forked child and in a process
/// the socket was sent to (SCM_RIGHTS); IPv4 and IPv6 sockets. A socket of
/// the box's own is still disconnected and connected anew.
#[test]
fn handoff_connect_on_a_handed_socket_never_re_aims_it() {
    let mut w = World::start();
    for user in users() {
        let r = w.probe("connect", user);
        let out = r.stdout();
        let probes = lines_with(&out, "v4 connect ")
            .into_iter()
            .chain(lines_with(&out, "v6 connect "))
            .collect::<Vec<_>>();
        assert_eq!(probes.len(), 5, "{}", r.show());
        for l in probes {
            assert!(l.ends_with(" EPERM EISCONN True"), "{l}\n{}", r.show());
        }
        for fam in ["v4", "v6"] {
            for how in ["fork", "scm_rights"] {
                let want = format!("{fam} {how} EPERM EISCONN True");
                assert!(out.contains(&want), "{want}\n{}", r.show());
            }
        }
        assert!(out.contains("box-socket ok ok"), "{}", r.show());
    }
}

/// TCP Fast Open connects without connect(): MSG_FASTOPEN on sendto,
/// sendmsg (with msg_name) and sendmmsg, and TCP_FASTOPEN_CONNECT, fail
/// with EOPNOTSUPP on a handed socket (after a refused AF_UNSPEC) and on a
/// fresh socket of the box (so the filter answers, not the socket's state);
/// io_uring stays refused (EPERM). The handed socket still works.
#[test]
fn handoff_fast_open_is_refused_on_every_socket() {
    let mut w = World::start();
    for user in users() {
        let r = w.probe("fastopen", user);
        let out = r.stdout();
        let handed: Vec<&str> = out.lines().filter(|l| l.contains(" sendto ")).collect();
        let fresh: Vec<&str> = out.lines().filter(|l| l.contains(" fresh ")).collect();
        assert_eq!((handed.len(), fresh.len()), (5, 5), "{}", r.show());
        for l in handed {
            assert!(
                l.ends_with(" EPERM EOPNOTSUPP EOPNOTSUPP EOPNOTSUPP EOPNOTSUPP True"),
                "{l}\n{}",
                r.show()
            );
        }
        for l in fresh {
            assert!(
                l.ends_with(" EOPNOTSUPP EOPNOTSUPP EOPNOTSUPP EOPNOTSUPP"),
                "{l}\n{}",
                r.show()
            );
        }
        assert!(out.contains("io_uring EPERM"), "{}", r.show());
    }
}

/// sendto, sendmsg and sendmmsg with an address but without MSG_FASTOPEN on
/// a handed (connected TCP) socket: the kernel ignores the address, the
/// bytes reach only the connected, listed peer.
#[test]
fn handoff_send_with_an_address_reaches_only_the_connected_peer() {
    let mut w = World::start();
    for user in users() {
        let r = w.probe("send", user);
        let out = r.stdout();
        let sends: Vec<&str> = out.lines().filter(|l| l.contains(" send ")).collect();
        assert_eq!(sends.len(), 5, "{}", r.show());
        for l in sends {
            assert!(l.ends_with(" 3 True 4 True 5 True"), "{l}\n{}", r.show());
        }
    }
}

/// bind() and listen() on a handed socket fail (EINVAL) while it is
/// connected and after its connection ended (both sides closed: the box
/// bound it to a port by number, which it keeps), so no host port is
/// squatted or listened on; connect() on it is still refused, and
/// TCP_REPAIR (which could set new addresses) needs a capability over the
/// host's network namespace (EPERM). A socket of the box's own binds and
/// listens on the same port number.
#[test]
fn handoff_a_handed_socket_cannot_be_bound_or_listened_on() {
    let mut w = World::start();
    for user in users() {
        let r = w.probe("bind", user);
        let out = r.stdout();
        for fam in ["v4", "v6"] {
            let want = format!("{fam} bind EINVAL EINVAL ended EINVAL EINVAL EPERM EISCONN True");
            assert!(out.contains(&want), "{want}\n{}", r.show());
            let want = format!("{fam} repair EPERM");
            assert!(out.contains(&want), "{want}\n{}", r.show());
        }
        assert!(out.contains("box-socket ok ok"), "{}", r.show());
    }
}

/// A thread swaps the descriptor a bind() names between a box socket and a
/// handed socket whose connection ended, and the address between a path
/// and a free host port, for 2,000 calls: the handed socket never takes the
/// port (it keeps the port it was bound to by number). A check of the
/// socket followed by the kernel's own bind ("continue") lost this race
/// within a few dozen calls.
#[test]
fn handoff_a_thread_swapping_descriptors_never_binds_a_handed_socket() {
    let mut w = World::start();
    for user in users() {
        let r = w.probe("race", user);
        let out = r.stdout();
        let line = lines_with(&out, "race ").join("\n");
        assert_eq!(line, "race port-free 2000", "{}", r.show());
    }
}

/// The box's own sockets bind as the kernel binds them (bind() is not
/// intercepted): AF_UNIX paths (relative, absolute; the
/// workload's umask and uid; EADDRINUSE; EROFS on the read-only root;
/// ENOENT), abstract names, autobind, datagram sockets, inet and inet6
/// (EINVAL for a second bind, the AF_UNSPEC compatibility rule, a short
/// address, a family mismatch), netlink.
#[test]
fn handoff_the_box_sockets_bind_as_before() {
    let mut w = World::start();
    for user in users() {
        let r = w.probe("unixbind", user);
        let out = r.stdout();
        for want in [
            "unix relative ok reached 0o700 True",
            "unix absolute ok reached",
            "unix again EADDRINUSE",
            "unix abstract ok reached EADDRINUSE",
            "unix autobind ok True",
            "unix read-only EROFS",
            "unix no-dir ENOENT",
            "unix dgram ok",
            "inet ok EINVAL",
            "inet6 ok",
            "inet unspec-any ok",
            "inet short EINVAL",
            "inet6 family EAFNOSUPPORT",
            "netlink ok",
        ] {
            assert!(out.lines().any(|l| l == want), "{want}\n{}", r.show());
        }
    }
}
