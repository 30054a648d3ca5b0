//! Mediated networking end to end through `terra run` (issue 5): real clients
//! (curl, `openssl s_client -proxy`, python3) inside the box reach servers
//! this test starts on the host's 127.0.0.1 only through the `__network`
//! broker, and each decision shows both in the client's error and in the
//! network receipt (JSON Lines in the run's state directory), which the run
//! receipt links (path, sha256, counts).
//!
//! Names: most cases use `localhost`, which the broker answers from
//! /etc/hosts (loopback, a private address: they set
//! `allowPrivateAddresses`; the private-address case leaves it out). The
//! broker's DNS resolver is exercised, as root, against a DNS server the
//! test starts on 127.0.0.153:53, with the test's own resolv.conf bound over
//! /etc/resolv.conf in a private mount namespace around `terra run`.
//!
//! When the suite runs as root every case runs again as uid/gid 65534
//! (`setpriv`), from a 0755 copy of the binary, with fixtures owned by 65534.
//! Needs curl, openssl and python3 (scripts/bootstrap.sh installs them).
// Linux only: runs boxes with the broker.
#![cfg(target_os = "linux")]

mod common;

use common::{require_root, terra_as, users, RunDirs, User, NOBODY};
use terra_test_support::http::HttpServer as Http;
use terra_test_support::process::LineCounter;

use std::fs;
use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

const PY: &str = "/usr/bin/python3";

// ------------------------------------------------------------------ host servers

const TLS_SERVER_PY: &str = r#"
import socket, ssl, sys, threading
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(64)
print("PORT", s.getsockname()[1], flush=True)
def serve(c):
    try:
        c.settimeout(20)
        t = ctx.wrap_socket(c, server_side=True)
        t.sendall(b"tls-hello-from-host\n")
        t.close()
    except Exception:
        pass
    finally:
        c.close()
while True:
    c, _ = s.accept()
    print("CONN", flush=True)
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// A TLS server (python3 ssl, a fresh self-signed certificate for
/// `localhost`) on the host's 127.0.0.1 that counts TCP connections.
struct Tls {
    port: u16,
    hits: LineCounter,
    child: Child,
    /// Holds the certificate and key.
    _dir: tempfile::TempDir,
}

impl Tls {
    fn start() -> Tls {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        let st = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .arg("ec_paramgen_curve:prime256v1")
            .args(["-nodes", "-days", "2", "-subj", "/CN=localhost", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "openssl req failed");
        let mut child = Command::new(PY)
            .arg("-c")
            .arg(TLS_SERVER_PY)
            .arg(&cert)
            .arg(&key)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (port, out) = first_line_port(child.stdout.take().unwrap());
        let hits = LineCounter::start(out, |l| l == "CONN");
        Tls {
            port,
            hits,
            child,
            _dir: dir,
        }
    }
}

/// Reads the `PORT <n>` line a helper server prints first; returns the port
/// and the rest of its output.
fn first_line_port(out: std::process::ChildStdout) -> (u16, BufReader<std::process::ChildStdout>) {
    let mut out = BufReader::new(out);
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let port = first
        .trim_end()
        .strip_prefix("PORT ")
        .unwrap_or_else(|| panic!("expected PORT <n>, got {first:?}"))
        .parse()
        .unwrap();
    (port, out)
}

impl Drop for Tls {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ------------------------------------------------------------------ fixture

/// One run's host side: workspace, state and runtime directories, home and
/// temp, owned by the run's user; removed at drop.
struct BoxWorld(RunDirs);

impl std::ops::Deref for BoxWorld {
    type Target = RunDirs;
    fn deref(&self) -> &RunDirs {
        &self.0
    }
}

/// A destination: host, port, requireTlsSni, allowPrivateAddresses.
type Dest<'a> = (&'a str, u16, bool, bool);

/// What a run gave: the CLI's output, the run receipt, the network receipt's lines.
struct RunOutcome {
    user: User,
    out: Output,
    receipt: Value,
    lines: Vec<Value>,
}

impl RunOutcome {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    fn code(&self) -> Option<i32> {
        self.out.status.code()
    }
    /// Everything, for assertion messages.
    fn show(&self) -> String {
        format!(
            "exit {:?}\nstdout:\n{}\nstderr:\n{}\nnetwork receipt:\n{:#?}",
            self.code(),
            self.stdout(),
            self.stderr(),
            self.lines
        )
    }
    fn net(&self) -> &Value {
        &self.receipt["network"]
    }
}

impl BoxWorld {
    fn new(name: &str, user: User) -> BoxWorld {
        BoxWorld(RunDirs::new("terra-net", name, user))
    }

    fn policy(&self, dests: &[Dest]) -> PathBuf {
        let allow: Vec<Value> = dests
            .iter()
            .map(|(h, p, sni, private)| {
                serde_json::json!({"protocol": "tcp", "host": h, "port": p,
                    "requireTlsSni": sni, "allowPrivateAddresses": private})
            })
            .collect();
        let v = serde_json::json!({
            "formatVersion": 3,
            "filesystem": {"default": "deny", "rules": [
                {"access": "read", "path": {"special": "minimal-runtime"}, "scope": "tree"},
                {"access": "write", "path": {"root": "workspace", "relative": ""}, "scope": "tree"},
                {"access": "write", "path": {"root": "temp", "relative": ""}, "scope": "tree"}
            ]},
            "network": {"mode": "mediated", "allow": allow},
            "process": {"treeConfinement": "required"},
            "root": {"mode": "read-only"}
        });
        let p = self.root.join("policy.json");
        fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
        p
    }

    /// The `terra run` command (not started): `args` before `--`, then `sh -c script`.
    fn command(&self, args: &[&str], script: &str) -> Command {
        self.command_via(&[], args, script)
    }

    /// [`BoxWorld::command`] with `via` (a program and its arguments) started as
    /// the run's user in front of terra.
    fn command_via(&self, via: &[&str], args: &[&str], script: &str) -> Command {
        self.chown_to_user(None);
        let mut cmd = terra_as(self.user, via);
        cmd.arg("run")
            .args(args)
            .arg("--workspace")
            .arg(&self.ws)
            .arg("--timeout")
            .arg("120s")
            .arg("--receipt")
            .arg(self.root.join("receipt.json"))
            .arg("--")
            .arg("/bin/sh")
            .arg("-c")
            .arg(script);
        self.run_env(&mut cmd, "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin");
        cmd
    }

    fn run(&self, dests: &[Dest], script: &str) -> RunOutcome {
        let p = self.policy(dests);
        self.run_args(&["--policy", p.to_str().unwrap()], script)
    }

    fn run_args(&self, args: &[&str], script: &str) -> RunOutcome {
        let out = self.command(args, script).output().unwrap();
        self.collect(out)
    }

    fn collect(&self, out: Output) -> RunOutcome {
        let receipt: Value = fs::read(self.root.join("receipt.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(Value::Null);
        let lines = receipt["network"]["receipt"]
            .as_str()
            .and_then(|p| fs::read_to_string(p).ok())
            .map(|t| {
                t.lines()
                    .map(|l| serde_json::from_str(l).expect("a network receipt line is JSON"))
                    .collect()
            })
            .unwrap_or_default();
        let _ = fs::remove_file(self.root.join("receipt.json"));
        RunOutcome {
            user: self.user,
            out,
            receipt,
            lines,
        }
    }

    /// The run directories under the state directory.
    fn run_dirs(&self) -> Vec<PathBuf> {
        list(&self.state.join("terra/runs"))
    }

    /// The runs' runtime directories (lock, pid files), removed at the end.
    fn runtime_dirs(&self) -> Vec<PathBuf> {
        list(&self.runtime.join("terra/runs"))
    }
}

fn list(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// The run's stdout is the proxy's 403 answer naming `reason`.
fn assert_403(r: &RunOutcome, reason: &str) {
    let out = r.stdout();
    assert!(out.starts_with("HTTP/1.1 403"), "{}", r.show());
    let header = format!("X-Terra-Refusal: {reason}");
    assert!(out.contains(&header), "{}", r.show());
}

/// The one network receipt line, or a failure that shows the run.
fn only_line(r: &RunOutcome) -> &Value {
    assert_eq!(r.lines.len(), 1, "one attempt expected\n{}", r.show());
    &r.lines[0]
}

/// A refused attempt: verdict, reason, and the run receipt's counts.
fn assert_refused_line(r: &RunOutcome, line: &Value, reason: &str, name: &str) {
    assert_eq!(line["verdict"], "refused", "{}", r.show());
    assert_eq!(line["reason"], reason, "{}", r.show());
    assert_eq!(line["name"], name, "{}", r.show());
    assert!(line["address"].is_null(), "{}", r.show());
}

/// The run receipt links the network receipt: path, sha256, counts.
fn assert_linked(r: &RunOutcome, admitted: u64, refused: u64) {
    let net = r.net();
    let path = net["receipt"].as_str().expect("network.receipt");
    let bytes = fs::read(path).unwrap();
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    let sum = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert_eq!(net["receiptSha256"], sum.as_str(), "{}", r.show());
    assert_eq!(
        net["attempts"],
        bytes.iter().filter(|b| **b == b'\n').count() as u64
    );
    assert_eq!(net["admitted"], admitted, "{}", r.show());
    assert_eq!(net["refused"], refused, "{}", r.show());
    let meta = fs::metadata(path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "owner-only");
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&meta),
        if r.user == User::Nobody {
            NOBODY
        } else {
            nix::unistd::geteuid().as_raw()
        }
    );
}

const CURL: &str = "curl -sS --max-time 30";

// ------------------------------------------------------------------ cases

#[test]
fn admitted_name_and_port_through_http_connect_socks5_and_plain_http() {
    let srv = Http::start();
    for user in users() {
        let fx = BoxWorld::new("admit", user);
        let before = srv.hits();
        let p = srv.port;
        let r = fx.run(
            &[("localhost", p, false, true)],
            &format!(
                "{CURL} http://localhost:{p}/plain; echo; \
                 {CURL} -p http://localhost:{p}/tunnel; echo; \
                 {CURL} -x socks5h://127.0.0.1:3128 http://localhost:{p}/socks; echo; \
                 env | grep -c '^[a-zA-Z_]*[pP][rR][oO][xX][yY]='"
            ),
        );
        assert_eq!(r.code(), Some(0), "{}", r.show());
        assert_eq!(
            r.stdout(),
            "from-host /plain\nfrom-host /tunnel\nfrom-host /socks\n8\n",
            "{}",
            r.show()
        );
        assert_eq!(srv.hits() - before, 3);
        assert_eq!(r.lines.len(), 3, "{}", r.show());
        let protocols: Vec<&str> = r
            .lines
            .iter()
            .map(|l| l["protocol"].as_str().unwrap())
            .collect();
        assert_eq!(protocols, ["http", "http-connect", "socks5"]);
        for l in &r.lines {
            assert_eq!(l["verdict"], "allowed", "{}", r.show());
            assert_eq!(l["name"], "localhost");
            assert_eq!(l["port"], p);
            assert_eq!(l["address"], format!("127.0.0.1:{p}"));
        }
        assert_linked(&r, 3, 0);
        assert_eq!(r.receipt["hostBindings"]["mediator"], "terra-netd/1");
        assert_eq!(r.net()["brokerEndedDuringRun"], false);
        assert_eq!(r.net()["brokerExit"], 0, "{}", r.show());
        // Only the receipts remain; the runtime directory (lock, pid files,
        // broker.pid among them) went with the run.
        for d in fx.run_dirs() {
            assert!(!d.join("broker.pid").exists());
            assert!(d.join("network.jsonl").exists());
        }
        assert_eq!(fx.runtime_dirs(), Vec::<PathBuf>::new());
    }
}

#[test]
fn unlisted_name_refused_with_403_and_socks5_rule_refusal() {
    let srv = Http::start();
    for user in users() {
        let fx = BoxWorld::new("unlisted", user);
        let before = srv.hits();
        let p = srv.port;
        // HTTP: 403 with the reason in the body and the header.
        let r = fx.run(
            &[("localhost", p, false, true)],
            &format!("{CURL} -i http://unlisted.test:{p}/"),
        );
        let out = r.stdout();
        assert_403(&r, "no-destination");
        assert!(out.contains("terra: connection refused: no-destination"));
        assert_refused_line(&r, only_line(&r), "no-destination", "unlisted.test");
        assert_linked(&r, 0, 1);
        assert_eq!(r.net()["refusedByReason"]["no-destination"], 1);
        // SOCKS5: the rule-set refusal (reply 0x02), curl's proxy error.
        let r = fx.run(
            &[("localhost", p, false, true)],
            &format!("{CURL} -x socks5h://127.0.0.1:3128 http://unlisted.test:{p}/; echo rc=$?"),
        );
        assert!(r.stdout().contains("rc=97"), "{}", r.show());
        assert!(r.stderr().contains("SOCKS5"), "{}", r.show());
        let line = only_line(&r);
        assert_eq!(line["protocol"], "socks5");
        assert_refused_line(&r, line, "no-destination", "unlisted.test");
        assert_eq!(srv.hits(), before, "nothing reached the server");
    }
}

#[test]
fn listed_name_on_another_port_refused_and_its_twin_admitted() {
    let srv = Http::start();
    let other = Http::start();
    for user in users() {
        let fx = BoxWorld::new("port", user);
        let (b1, b2) = (srv.hits(), other.hits());
        let r = fx.run(
            &[("localhost", srv.port, false, true)],
            &format!(
                "{CURL} -i http://localhost:{}/other; echo; {CURL} http://localhost:{}/listed",
                other.port, srv.port
            ),
        );
        let out = r.stdout();
        assert_403(&r, "no-destination");
        assert!(out.ends_with("from-host /listed"), "{}", r.show());
        assert_eq!(r.lines.len(), 2, "{}", r.show());
        assert_refused_line(&r, &r.lines[0], "no-destination", "localhost");
        assert_eq!(r.lines[0]["port"], other.port);
        assert_eq!(r.lines[1]["verdict"], "allowed");
        assert_linked(&r, 1, 1);
        assert_eq!(other.hits(), b2, "the unlisted port was never connected");
        assert_eq!(srv.hits(), b1 + 1);
    }
}

fn s_client(port: u16, servername: Option<&str>) -> String {
    let sn = match servername {
        Some(n) => format!("-servername {n}"),
        None => "-noservername".into(),
    };
    format!(
        "openssl s_client -proxy 127.0.0.1:3128 -connect localhost:{port} {sn} -ign_eof </dev/null 2>&1; echo rc=$?"
    )
}

#[test]
fn tls_sni_required_admits_the_matching_name() {
    let tls = Tls::start();
    let mut expect = 0;
    for user in users() {
        let fx = BoxWorld::new("sni-ok", user);
        let r = fx.run(
            &[("localhost", tls.port, true, true)],
            &s_client(tls.port, Some("localhost")),
        );
        expect += 1;
        let out = r.stdout();
        assert!(out.contains("tls-hello-from-host"), "{}", r.show());
        assert!(out.contains("CN = localhost"), "{}", r.show());
        let line = only_line(&r);
        assert_eq!(line["verdict"], "allowed", "{}", r.show());
        assert_eq!(line["protocol"], "http-connect");
        assert_eq!(line["sni"], "localhost");
        assert_linked(&r, 1, 0);
        assert_eq!(tls.hits.settled(expect), expect);
    }
}

#[test]
fn tls_sni_absent_refused() {
    let tls = Tls::start();
    for user in users() {
        let fx = BoxWorld::new("sni-absent", user);
        // A plain CONNECT carrying no TLS at all: the tunnel is confirmed (the
        // broker must see a ClientHello), then closed without an upstream.
        let r = fx.run(
            &[("localhost", tls.port, true, true)],
            &format!("{CURL} -p http://localhost:{}/; echo rc=$?", tls.port),
        );
        assert!(r.stdout().contains("rc=52"), "empty reply\n{}", r.show());
        let line = only_line(&r);
        assert_refused_line(&r, line, "sni-absent", "localhost");
        assert_linked(&r, 0, 1);
        // A ClientHello without a server name.
        let r = fx.run(
            &[("localhost", tls.port, true, true)],
            &s_client(tls.port, None),
        );
        assert!(!r.stdout().contains("tls-hello-from-host"), "{}", r.show());
        assert!(!r.stdout().contains("rc=0"), "{}", r.show());
        assert_refused_line(&r, only_line(&r), "sni-absent", "localhost");
        assert_eq!(tls.hits.settled(0), 0, "the TLS server was never connected");
    }
}

#[test]
fn tls_sni_mismatch_refused() {
    let tls = Tls::start();
    for user in users() {
        let fx = BoxWorld::new("sni-mismatch", user);
        let r = fx.run(
            &[("localhost", tls.port, true, true)],
            &s_client(tls.port, Some("other.test")),
        );
        let out = r.stdout();
        assert!(!out.contains("tls-hello-from-host"), "{}", r.show());
        assert!(
            !out.contains("CN = localhost"),
            "no certificate\n{}",
            r.show()
        );
        assert!(!out.contains("rc=0"), "{}", r.show());
        let line = only_line(&r);
        assert_refused_line(&r, line, "sni-mismatch", "localhost");
        assert_eq!(line["sni"], "other.test");
        assert_linked(&r, 0, 1);
        assert_eq!(tls.hits.settled(0), 0);
    }
}

#[test]
fn private_address_refused_without_the_flag() {
    let srv = Http::start();
    for user in users() {
        let fx = BoxWorld::new("private", user);
        let before = srv.hits();
        let r = fx.run(
            &[("localhost", srv.port, false, false)],
            &format!("{CURL} -i http://localhost:{}/", srv.port),
        );
        assert_403(&r, "private-address");
        let line = only_line(&r);
        assert_refused_line(&r, line, "private-address", "localhost");
        assert_eq!(line["resolved"][0], "127.0.0.1", "{}", r.show());
        assert_linked(&r, 0, 1);
        assert_eq!(srv.hits(), before);
        // The twin: the same destination with the flag is admitted.
        let r = fx.run(
            &[("localhost", srv.port, false, true)],
            &format!("{CURL} http://localhost:{}/twin", srv.port),
        );
        assert_eq!(r.stdout(), "from-host /twin", "{}", r.show());
        assert_eq!(srv.hits(), before + 1);
    }
}

#[test]
fn direct_connect_bypassing_the_proxy_fails_and_its_twin_through_the_proxy_works() {
    let srv = Http::start();
    for user in users() {
        let fx = BoxWorld::new("bypass", user);
        let before = srv.hits();
        let p = srv.port;
        let r = fx.run(
            &[("localhost", p, false, true)],
            &format!(
                "{CURL} --noproxy '*' http://127.0.0.1:{p}/direct; echo rc=$?; \
                 {PY} -c 'import socket; s=socket.socket(); s.settimeout(5); print(\"py\", s.connect_ex((\"127.0.0.1\", {p})))'; \
                 {CURL} http://localhost:{p}/proxied"
            ),
        );
        let out = r.stdout();
        assert!(
            out.contains("rc=7"),
            "connection refused in the box\n{}",
            r.show()
        );
        assert!(out.contains("py 111"), "ECONNREFUSED\n{}", r.show());
        assert!(out.ends_with("from-host /proxied"), "{}", r.show());
        assert_eq!(srv.hits(), before + 1, "only the proxied request arrived");
        assert_eq!(r.lines.len(), 1, "the direct attempts never met the broker");
        assert_linked(&r, 1, 0);
    }
}

const DNS_PY: &str = r#"
import socket, sys
port = int(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01"
try:
    s.sendto(q, ("127.0.0.1", port))
    print("udp-answer", s.recvfrom(512)[0][:2] == b"\x12\x34")
except Exception as e:
    print("udp-failed", type(e).__name__)
try:
    print("gai", socket.getaddrinfo("dns-probe.test", 80))
except Exception as e:
    print("gai-failed", type(e).__name__)
"#;

#[test]
fn dns_from_the_box_reaches_only_its_stub() {
    // A DNS-shaped responder on the host's loopback: the box cannot reach it.
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = udp.local_addr().unwrap().port();
    let packets = Arc::new(AtomicUsize::new(0));
    let pk = packets.clone();
    std::thread::spawn(move || {
        let mut b = [0u8; 512];
        while let Ok((n, from)) = udp.recv_from(&mut b) {
            pk.fetch_add(1, Ordering::SeqCst);
            let _ = udp.send_to(&b[..n], from);
        }
    });
    let srv = Http::start();
    for user in users() {
        let fx = BoxWorld::new("dns", user);
        fs::write(fx.ws.join("dns.py"), DNS_PY).unwrap();
        let before = packets.load(Ordering::SeqCst);
        let r = fx.run(
            &[("localhost", srv.port, false, true)],
            &format!("{PY} dns.py {port}; getent hosts dns-probe.test; echo getent=$?"),
        );
        let out = r.stdout();
        assert!(out.contains("udp-failed"), "{}", r.show());
        assert!(out.contains("gai-failed"), "{}", r.show());
        assert!(out.contains("getent=2"), "{}", r.show());
        assert_eq!(
            packets.load(Ordering::SeqCst),
            before,
            "no packet left the box"
        );
        // Names reach only the box's DNS stub: the broker refused the
        // unlisted name (A and AAAA) without asking any server.
        assert!(!r.lines.is_empty(), "{}", r.show());
        for l in &r.lines {
            assert_eq!(l["protocol"], "dns", "{}", r.show());
            assert_eq!(l["name"], "dns-probe.test", "{}", r.show());
            assert_eq!(l["reason"], "no-destination", "{}", r.show());
        }
        // The twin: the same script on the host reaches the responder.
        let host = Command::new(PY)
            .arg(fx.ws.join("dns.py"))
            .arg(port.to_string())
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&host.stdout).contains("udp-answer True"),
            "{}",
            String::from_utf8_lossy(&host.stdout)
        );
        assert!(packets.load(Ordering::SeqCst) > before);
    }
}

/// The run's broker (broker.pid): `terra __network` itself, cloned and
/// exec'd by the supervisor, with no launcher and no child of its own.
fn broker_process(fx: &BoxWorld) -> i32 {
    let broker = broker_pid(fx);
    assert_eq!(
        children(broker),
        Vec::<i32>::new(),
        "the broker is one process"
    );
    broker
}

fn broker_pid(fx: &BoxWorld) -> i32 {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        for d in fx.runtime_dirs() {
            if let Ok(t) = fs::read_to_string(d.join("broker.pid")) {
                if let Ok(p) = t.trim().parse() {
                    return p;
                }
            }
        }
        assert!(Instant::now() < until, "no broker.pid in {:?}", fx.runtime);
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Direct children of `pid`.
fn children(pid: i32) -> Vec<i32> {
    let pid = u32::try_from(pid).expect("a process id");
    let kids = terra_test_support::process::children(pid);
    kids.into_iter().map(|p| p as i32).collect()
}

/// Alive and not a zombie.
fn alive(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        })
        .unwrap_or(false)
}

fn wait_for_file(p: &Path, what: &str) {
    let until = Instant::now() + Duration::from_secs(60);
    while !p.exists() {
        assert!(
            Instant::now() < until,
            "{what}: {} never appeared",
            p.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill9(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

#[test]
fn broker_killed_mid_run_later_connections_fail_without_fallback() {
    let srv = Http::start();
    for user in users() {
        let fx = BoxWorld::new("killed", user);
        let before = srv.hits();
        let p = srv.port;
        let script = format!(
            "{CURL} http://localhost:{p}/before; echo; \
             {CURL} --noproxy '*' http://127.0.0.1:{p}/before-direct; echo; touch first-done; \
             while [ ! -e broker-killed ]; do sleep 0.05; done; \
             {CURL} http://localhost:{p}/after; echo after-rc=$?; \
             {CURL} -x socks5h://127.0.0.1:3128 http://localhost:{p}/after-socks; echo socks-rc=$?; \
             {CURL} --noproxy '*' http://127.0.0.1:{p}/after-direct; echo direct-rc=$?"
        );
        let child = fx
            .command(
                &[
                    "--policy",
                    fx.policy(&[("localhost", p, false, true), ("127.0.0.1", p, false, true)])
                        .to_str()
                        .unwrap(),
                ],
                &script,
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_file(&fx.ws.join("first-done"), "the first request");
        let broker = broker_process(&fx);
        assert!(alive(broker));
        kill9(broker);
        let until = Instant::now() + Duration::from_secs(30);
        while alive(broker) {
            assert!(Instant::now() < until, "the broker did not die");
            std::thread::sleep(Duration::from_millis(20));
        }
        fs::write(fx.ws.join("broker-killed"), b"").unwrap();
        let out = child.wait_with_output().unwrap();
        let r = fx.collect(out);
        let text = r.stdout();
        assert!(
            text.starts_with("from-host /before\nfrom-host /before-direct\n"),
            "{}",
            r.show()
        );
        for probe in ["after-rc=", "socks-rc=", "direct-rc="] {
            assert!(text.contains(probe), "{}", r.show());
            assert!(
                !text.contains(&format!("{probe}0")),
                "{probe}\n{}",
                r.show()
            );
        }
        assert!(!text.contains("from-host /after"), "{}", r.show());
        assert_eq!(
            srv.hits(),
            before + 2,
            "nothing fell back to a direct route"
        );
        assert_eq!(r.code(), Some(0), "the box kept running\n{}", r.show());
        assert!(
            r.stderr().contains("networking is unavailable"),
            "{}",
            r.show()
        );
        let net = r.net();
        assert_eq!(net["brokerEndedDuringRun"], true, "{}", r.show());
        assert_eq!(net["brokerExit"], 137, "{}", r.show());
        assert!(net["brokerEnded"].as_str().unwrap().contains("signal 9"));
        assert_eq!(net["brokerPid"], broker);
        assert_eq!(r.lines.len(), 2, "{}", r.show());
        assert_eq!(r.lines[1]["path"], "handoff", "{}", r.show());
        assert_linked(&r, 2, 0);
    }
}

const FLOOD_PY: &str = r#"
import resource, socket, sys, subprocess
n = int(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
held = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT localhost:")  # half a request, never finished
    held.append(s)
print("held", len(held), flush=True)
# While the flood is held the broker is at its cap (what a new request gets
# then is printed, not asserted: the half-open flows time out after 10 s).
r = subprocess.run(["curl", "-sS", "--max-time", "30", "-i", sys.argv[2] + "/during"], capture_output=True)
print("during", r.returncode, r.stdout.decode(errors="replace").split("\r\n")[0], flush=True)
for s in held:
    s.close()
print("released", flush=True)
"#;

#[test]
fn half_open_flood_the_broker_stays_up_and_bounded() {
    let srv = Http::start();
    for user in users() {
        let fx = BoxWorld::new("flood", user);
        fs::write(fx.ws.join("flood.py"), FLOOD_PY).unwrap();
        let before = srv.hits();
        let p = srv.port;
        // 1100 half-open connections against the default cap of 1024 flows
        // (plus 32 refusers): the broker must neither die nor serve beyond
        // its cap; once they are gone an admitted request works again.
        let r = fx.run(
            &[("localhost", p, false, true)],
            &format!(
                "{PY} flood.py 1100 http://localhost:{p}; \
                 for i in $(seq 1 100); do \
                   out=$({CURL} http://localhost:{p}/later) && break; sleep 0.2; done; \
                 echo \"later: $out\""
            ),
        );
        let out = r.stdout();
        assert!(out.contains("held 1100"), "{}", r.show());
        assert!(out.contains("released"), "{}", r.show());
        assert!(out.contains("later: from-host /later"), "{}", r.show());
        assert_eq!(srv.hits(), before + 1, "{}", r.show());
        let net = r.net();
        assert_eq!(net["brokerEndedDuringRun"], false, "{}", r.show());
        assert_eq!(net["brokerExit"], 0, "{}", r.show());
        assert!(
            net["refusedByReason"]["flow-limit"].as_u64().unwrap_or(0) > 0,
            "{}",
            serde_json::to_string_pretty(net).unwrap()
        );
        assert_eq!(net["admitted"], 1);
    }
}

fn assert_gone(pids: &[i32], what: &str) {
    let until = Instant::now() + Duration::from_secs(30);
    while pids.iter().any(|p| alive(*p)) {
        assert!(
            Instant::now() < until,
            "{what}: {pids:?} outlived the kill -9"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One process as /proc shows it.
struct Proc {
    pid: i32,
    cmdline: String,
    comm: String,
    status: String,
}

impl Proc {
    fn read(pid: i32) -> Proc {
        let f = |name: &str| fs::read(format!("/proc/{pid}/{name}")).unwrap_or_default();
        Proc {
            pid,
            cmdline: String::from_utf8_lossy(&f("cmdline"))
                .trim_end_matches('\0')
                .replace('\0', " "),
            comm: String::from_utf8_lossy(&f("comm")).trim_end().to_string(),
            status: String::from_utf8_lossy(&f("status")).into_owned(),
        }
    }
    /// A line of /proc/PID/status, e.g. `NoNewPrivs`.
    fn field(&self, name: &str) -> &str {
        self.status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
            .unwrap_or("")
    }
}

/// The process tree of a mediated run, read from /proc while the workload
/// sleeps: the supervisor, the broker and the box's init are each an exec
/// of terra named after their role (argv `terra __ROLE`, comm `terra`),
/// none shows /proc/self/exe, and each has no_new_privs and its seccomp
/// allowlist installed.
#[test]
fn ps_shows_each_role_as_terra_with_no_new_privs() {
    let srv = Http::start();
    for user in users() {
        let fx = BoxWorld::new("ps-roles", user);
        let policy = fx.policy(&[("localhost", srv.port, false, true)]);
        let mut child = fx
            .command(
                &["--policy", policy.to_str().unwrap()],
                "touch started; sleep 600",
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_file(&fx.ws.join("started"), "the workload");
        let cli = child.id() as i32; // setpriv execs terra: same pid
        let sup = children(cli);
        assert_eq!(sup.len(), 1, "one supervisor under the CLI");
        let supervisor = Proc::read(sup[0]);
        let roles: Vec<Proc> = children(supervisor.pid)
            .into_iter()
            .map(Proc::read)
            .collect();
        let shown: Vec<String> = std::iter::once(&supervisor)
            .chain(&roles)
            .map(|p| format!("{} {} [{}]", p.pid, p.cmdline, p.comm))
            .collect();
        let shown = shown.join("\n");
        assert!(
            supervisor.cmdline.starts_with("terra ")
                && supervisor.cmdline.contains(" __supervisor --request-fd "),
            "{user:?}:\n{shown}"
        );
        let mut cmdlines: Vec<&str> = roles.iter().map(|p| p.cmdline.as_str()).collect();
        cmdlines.sort_unstable();
        // `net`: the box makes its own network namespace (vm.rs).
        assert_eq!(
            cmdlines,
            ["terra __network", "terra __vm net"],
            "{user:?}: the supervisor's children\n{shown}"
        );
        for p in std::iter::once(&supervisor).chain(&roles) {
            assert!(!p.cmdline.contains("/proc/self/exe"), "{user:?}:\n{shown}");
            assert_eq!(p.comm, "terra", "{user:?}: comm of {}\n{shown}", p.cmdline);
            assert_eq!(
                p.field("NoNewPrivs"),
                "1",
                "{user:?}: {}\n{}",
                p.cmdline,
                p.status
            );
        }
        let broker = roles
            .iter()
            .find(|p| p.cmdline == "terra __network")
            .unwrap();
        assert_eq!(broker.pid, broker_pid(&fx), "broker.pid names it");
        // Each role runs under its own seccomp allowlist (Seccomp: 2, filter mode).
        for p in std::iter::once(&supervisor).chain(&roles) {
            assert_eq!(
                p.field("Seccomp"),
                "2",
                "{user:?}: {}\n{}",
                p.cmdline,
                p.status
            );
        }
        // The box's init is not the workload: its own namespaces' PID 1.
        let init = roles
            .iter()
            .find(|p| p.cmdline == "terra __vm net")
            .unwrap();
        assert_eq!(
            init.field("NSpid").split_whitespace().last(),
            Some("1"),
            "{}",
            init.status
        );
        kill9(cli);
        let _ = child.wait();
        assert_gone(
            &std::iter::once(supervisor.pid)
                .chain(roles.iter().map(|p| p.pid))
                .collect::<Vec<_>>(),
            &format!("kill -9 of the CLI as {user:?}"),
        );
    }
}

/// A role that makes a system call off its allowlist is killed, and the run
/// says so: the real `terra __vm`, `terra __network` and `terra __supervisor`
/// of a mediated run are made (ptrace, from outside) to call mount(2). The
/// run ends with 125, the line names the role (and, where the kernel's audit
/// record is readable — root — the call's number), the receipt carries it
/// for the two roles the supervisor outlives, and nothing of the run is left.
#[cfg(target_arch = "x86_64")]
#[test]
#[ignore = "needs root: ptrace of the run's roles"]
fn a_role_off_its_allowlist_is_killed_and_the_run_ends_125() {
    require_root("ptrace of the run's roles");
    let srv = Http::start();
    for user in users() {
        for role in ["terra __vm", "terra __network", "terra __supervisor"] {
            let fx = BoxWorld::new("role-killed", user);
            let policy = fx.policy(&[("localhost", srv.port, false, true)]);
            let child = fx
                .command(
                    &["--policy", policy.to_str().unwrap()],
                    "touch started; sleep 600",
                )
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            wait_for_file(&fx.ws.join("started"), "the workload");
            let cli = child.id() as i32;
            let sup = children(cli);
            assert_eq!(sup.len(), 1, "one supervisor under the CLI");
            let mut tree = vec![sup[0]];
            tree.extend(children(sup[0]));
            let target = tree
                .iter()
                .copied()
                .find(|&p| Proc::read(p).cmdline.starts_with(role))
                .unwrap_or_else(|| panic!("no {role} in {tree:?}"));
            terra_test_support::inject::syscall_in(target, libc::SYS_mount as u64)
                .unwrap_or_else(|e| panic!("{user:?} {role}: {e}"));
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            let what = format!("{user:?} {role}: {:?}\n{stderr}", out.status);
            assert_eq!(out.status.code(), Some(125), "{what}");
            let line = format!("role {role} killed by seccomp");
            assert!(stderr.contains(&line), "{what}");
            if user == User::Caller {
                assert!(
                    stderr.contains(&format!("{line}, syscall {}", libc::SYS_mount)),
                    "root reads the audit record: {what}"
                );
            }
            if role != "terra __supervisor" {
                let receipt: Value =
                    serde_json::from_slice(&fs::read(fx.root.join("receipt.json")).unwrap())
                        .unwrap();
                let killed = receipt["outcome"]["roleKilled"].as_str().unwrap_or("");
                assert!(killed.starts_with(&line), "{what}\n{receipt}");
                assert_eq!(receipt["outcome"]["exitCode"], 125, "{receipt}");
            }
            assert_gone(&tree, &what);
        }
    }
}

#[test]
fn kill9_of_the_cli_or_the_supervisor_leaves_no_broker() {
    let srv = Http::start();
    for user in users() {
        for target in ["cli", "supervisor"] {
            let fx = BoxWorld::new(&format!("kill9-{target}"), user);
            let policy = fx.policy(&[("localhost", srv.port, false, true)]);
            let mut child = fx
                .command(
                    &["--policy", policy.to_str().unwrap()],
                    "touch started; sleep 600",
                )
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            wait_for_file(&fx.ws.join("started"), "the workload");
            let broker = broker_process(&fx);
            assert!(alive(broker));
            let cli = child.id() as i32; // setpriv execs terra: same pid
            let victim = match target {
                "cli" => cli,
                _ => {
                    let sup = children(cli);
                    assert_eq!(sup.len(), 1, "one supervisor");
                    sup[0]
                }
            };
            kill9(victim);
            let _ = child.wait();
            assert_gone(&[broker], &format!("kill -9 of the {target} as {user:?}"));
        }
    }
}

#[test]
fn allow_net_adds_mediated_destinations_and_dry_run_shows_the_broker() {
    let srv = Http::start();
    for user in users() {
        let fx = BoxWorld::new("allow-net", user);
        let dest = format!("LocalHost:{}", srv.port);
        let r = fx.run_args(&["--allow-net", &dest, "--dry-run"], "true");
        let out = r.stdout();
        assert_eq!(r.code(), Some(0), "{}", r.show());
        assert!(out.contains("network:         mediated"), "{out}");
        assert!(
            out.contains(&format!("  allow tcp localhost:{}\n", srv.port)),
            "{out}"
        );
        assert!(
            out.contains(&format!("  + allow-net localhost:{}", srv.port)),
            "{out}"
        );
        assert!(out.contains("mediator:        terra-netd/1"), "{out}");
        assert!(out.contains("network broker (terra __network):"), "{out}");
        // The broker's part is what terra_netd describes (generated from the
        // tables its filters are built from), line for line.
        for line in terra_netd::describe().lines() {
            assert!(
                out.contains(&format!("  {line}\n")),
                "{line:?} missing:\n{out}"
            );
        }
        assert!(out.contains("HTTPS_PROXY=http://127.0.0.1:3128"), "{out}");
        assert!(out.contains("network-mediated"), "{out}");
        // A real run: --allow-net does not allow private addresses, and
        // localhost is one, so the broker refuses it (the run itself works).
        let before = srv.hits();
        let r = fx.run_args(
            &["--allow-net", &dest],
            &format!("{CURL} -i http://localhost:{}/", srv.port),
        );
        assert_eq!(r.code(), Some(0), "{}", r.show());
        assert!(
            r.stdout().contains("X-Terra-Refusal: private-address"),
            "{}",
            r.show()
        );
        assert_refused_line(&r, only_line(&r), "private-address", "localhost");
        assert_eq!(srv.hits(), before);
        assert_eq!(r.receipt["policy"]["source"], "default");
        // Network none (the default) has no broker, no proxy environment and
        // no network part in the receipt.
        let r = fx.run_args(&[], "env | grep -ci proxy; echo rc=$?");
        assert!(r.stdout().contains("0\nrc=1"), "{}", r.show());
        assert!(r.net().is_null(), "{}", r.show());
    }
}

#[test]
fn a_broker_that_cannot_start_refuses_the_run_and_its_twin_runs() {
    // In a user namespace of its own whose user.max_user_namespaces is 0
    // (a per-namespace limit: the host's is untouched), the broker's role
    // cannot create its namespaces. It is started before the box, so the
    // run is refused (125) and the workload never starts. The twin sets the
    // limit to 100 and runs.
    let srv = Http::start();
    for user in users() {
        for (limit, refused) in [("0", true), ("100", false)] {
            let fx = BoxWorld::new(&format!("no-broker-{limit}"), user);
            let policy = fx.policy(&[("localhost", srv.port, false, true)]);
            let via = [
                "unshare",
                "--user",
                "--map-root-user",
                "/bin/sh",
                "-c",
                &format!("echo {limit} > /proc/sys/user/max_user_namespaces && exec \"$@\""),
                "sh",
            ];
            let out = fx
                // The linux backend by name: `auto` would choose the
                // landlock backend here, which refuses mediated plans itself.
                .command_via(
                    &via,
                    &["--backend", "linux", "--policy", policy.to_str().unwrap()],
                    "touch ran",
                )
                .output()
                .unwrap();
            let r = fx.collect(out);
            if refused {
                assert_eq!(r.code(), Some(125), "{}", r.show());
                assert!(
                    r.stderr().contains("the network broker did not start"),
                    "{}",
                    r.show()
                );
                assert!(!fx.ws.join("ran").exists(), "the workload never started");
                assert!(
                    r.receipt["outcome"]["refused"]
                        .as_str()
                        .unwrap_or("")
                        .contains("network broker did not start"),
                    "{}",
                    r.show()
                );
            } else {
                assert_eq!(r.code(), Some(0), "{}", r.show());
                assert!(fx.ws.join("ran").exists());
                assert_eq!(r.net()["brokerExit"], 0, "{}", r.show());
            }
        }
    }
}

const NS_HTTP_PY: &str = r#"
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 0))
s.listen(16)
print("PORT", s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    print("CONN", flush=True)
    c.settimeout(10)
    try:
        data = b""
        while b"\r\n\r\n" not in data:
            d = c.recv(1024)
            if not d:
                break
            data += d
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nfrom-netns")
    except Exception:
        pass
    c.close()
"#;

/// A test host: a network namespace this test creates, joined to the host by
/// a veth pair on a /30 of 10.213.0.0/16, with an HTTP server on its
/// address. Removed (namespace and veth) on drop.
struct NsHost {
    ns: String,
    veth: String,
    addr: String,
    port: u16,
    hits: Option<LineCounter>,
    child: Option<Child>,
}

fn ip(args: &[&str]) {
    let st = Command::new("ip").args(args).status().unwrap();
    assert!(st.success(), "ip {args:?}");
}

impl NsHost {
    fn start() -> NsHost {
        let n = std::process::id() % 16000;
        let (a, b) = (n / 64, (n % 64) * 4);
        let ns = format!("terra-e2e-{}", std::process::id());
        let veth = format!("tve2e{n}h");
        let peer = format!("tve2e{n}n");
        // Leftovers of an earlier run with the same pid.
        let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        let _ = Command::new("ip")
            .args(["link", "del", &veth])
            .stderr(Stdio::null())
            .status();
        let mut host = NsHost {
            ns: ns.clone(),
            veth: veth.clone(),
            addr: format!("10.213.{a}.{}", b + 2),
            port: 0,
            hits: None,
            child: None,
        };
        ip(&["netns", "add", &ns]);
        ip(&["link", "add", &veth, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", &ns]);
        ip(&[
            "addr",
            "add",
            &format!("10.213.{a}.{}/30", b + 1),
            "dev",
            &veth,
        ]);
        ip(&["link", "set", &veth, "up"]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{}/30", host.addr),
            "dev",
            &peer,
        ]);
        ip(&["-n", &ns, "link", "set", &peer, "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns, PY, "-c", NS_HTTP_PY, &host.addr])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (port, out) = first_line_port(child.stdout.take().unwrap());
        host.child = Some(child);
        host.port = port;
        host.hits = Some(LineCounter::start(out, |l| l == "CONN"));
        host
    }

    fn hits_settled(&self, expect: usize) -> usize {
        self.hits.as_ref().unwrap().settled(expect)
    }
}

impl Drop for NsHost {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth])
            .status();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

#[test]
#[ignore = "needs root: ip netns add"]
fn a_test_host_in_its_own_network_namespace() {
    // Creating network namespaces and veth pairs needs root.
    require_root("a_test_host_in_its_own_network_namespace (ip netns add)");
    let host = NsHost::start();
    let (addr, port) = (host.addr.clone(), host.port);
    let mut expect = 0;
    for user in users() {
        let fx = BoxWorld::new("netns", user);
        // Listed as an IPv4 literal with private addresses allowed: admitted
        // through HTTP CONNECT and SOCKS5 (the literal is the name), and the
        // workload's own connect() is handed a socket the broker connected.
        let r = fx.run(
            &[(addr.as_str(), port, false, true)],
            &format!(
                "{CURL} -p http://{addr}:{port}/a; echo; \
                 {CURL} -x socks5h://127.0.0.1:3128 http://{addr}:{port}/b; echo; \
                 {CURL} --noproxy '*' --connect-timeout 5 http://{addr}:{port}/direct; echo direct-rc=$?; \
                 {CURL} --noproxy '*' --connect-timeout 5 http://{addr}:{}/other-port; echo other-rc=$?",
                port + 1
            ),
        );
        expect += 3;
        let out = r.stdout();
        assert!(
            out.starts_with("from-netns\nfrom-netns\nfrom-netnsdirect-rc=0\n"),
            "{}",
            r.show()
        );
        assert!(out.contains("other-rc=7"), "{}", r.show());
        assert_eq!(r.lines.len(), 4, "{}", r.show());
        let paths: Vec<&str> = r
            .lines
            .iter()
            .map(|l| l["path"].as_str().unwrap())
            .collect();
        assert_eq!(
            paths,
            ["relay", "relay", "handoff", "handoff"],
            "{}",
            r.show()
        );
        for l in &r.lines[..3] {
            assert_eq!(l["verdict"], "allowed", "{}", r.show());
            assert_eq!(l["address"], format!("{addr}:{port}"));
        }
        assert_eq!(r.lines[3]["reason"], "no-destination", "{}", r.show());
        assert_linked(&r, 3, 1);
        // The same literal without allowPrivateAddresses (10/8 is private):
        // refused through the proxy and on the workload's own connect().
        let r = fx.run(
            &[(addr.as_str(), port, false, false)],
            &format!(
                "{CURL} -i http://{addr}:{port}/c; \
                 {CURL} --noproxy '*' --connect-timeout 5 http://{addr}:{port}/d; echo direct-rc=$?"
            ),
        );
        assert!(
            r.stdout().contains("X-Terra-Refusal: private-address"),
            "{}",
            r.show()
        );
        assert!(r.stdout().contains("direct-rc=7"), "{}", r.show());
        assert_eq!(r.lines.len(), 2, "{}", r.show());
        assert_refused_line(&r, &r.lines[0], "private-address", &addr);
        assert_eq!(r.lines[1]["reason"], "private-address", "{}", r.show());
        assert_eq!(r.lines[1]["path"], "handoff", "{}", r.show());
        assert_eq!(
            host.hits_settled(expect),
            expect,
            "only the admitted requests arrived"
        );
    }
}

/// A bare git repository with one commit, served over "dumb" HTTP by
/// `python3 -m http.server` on the host's 127.0.0.1; counts requests for
/// the repository's refs (from the server's log on stderr).
struct GitServer {
    port: u16,
    head: String,
    refs_hits: LineCounter,
    child: Child,
}

/// A bare repository `srv/repo.git` under `dir` with one empty commit on
/// `main`: (the directory `srv`, the commit).
fn bare_repo(dir: &Path) -> (PathBuf, String) {
    let srv = dir.join("srv");
    let work = dir.join("work");
    fs::create_dir_all(&srv).unwrap();
    fs::create_dir_all(&work).unwrap();
    git(&["init", "-q", "--bare", "repo.git"], &srv);
    git(&["init", "-q"], &work);
    git(&["commit", "-q", "--allow-empty", "-m", "e2e"], &work);
    let head = git(&["rev-parse", "HEAD"], &work);
    let bare = srv.join("repo.git");
    git(
        &["push", "-q", bare.to_str().unwrap(), "HEAD:refs/heads/main"],
        &work,
    );
    (srv, head)
}

/// git with a fixed identity and no system configuration; its trimmed stdout.
fn git(args: &[&str], cwd: &Path) -> String {
    let out = Command::new("git")
        .args(["-c", "user.email=e2e@terra.test", "-c", "user.name=e2e"])
        .args(args)
        .current_dir(cwd)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl GitServer {
    fn start(dir: &Path) -> GitServer {
        let (srv, head) = bare_repo(dir);
        let bare = srv.join("repo.git");
        git(&["update-server-info"], &bare);
        let mut child = Command::new(PY)
            .args([
                "-u",
                "-m",
                "http.server",
                "0",
                "--bind",
                "127.0.0.1",
                "--directory",
            ])
            .arg(&srv)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = out.next().unwrap().unwrap();
        // "Serving HTTP on 127.0.0.1 port N (http://127.0.0.1:N/) ..."
        let port: u16 = first
            .split_whitespace()
            .skip_while(|w| *w != "port")
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        std::thread::spawn(move || for _ in out.map_while(Result::ok) {});
        let refs_hits = LineCounter::start(child.stderr.take().unwrap(), |l| {
            l.contains("GET /repo.git/info/refs")
        });
        GitServer {
            port,
            head,
            refs_hits,
            child,
        }
    }
}

impl Drop for GitServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn git_ls_remote_through_the_proxy_and_refused_on_an_unlisted_port() {
    let dir = tempfile::tempdir().unwrap();
    let git = GitServer::start(dir.path());
    let other = Http::start();
    let mut expect = 0;
    for user in users() {
        let fx = BoxWorld::new("git", user);
        // git (libcurl) takes http_proxy from the environment terra sets.
        let r = fx.run(
            &[("localhost", git.port, false, true)],
            &format!(
                "git ls-remote http://localhost:{}/repo.git; echo rc=$?; \
                 git ls-remote http://localhost:{}/repo.git 2>&1; echo rc=$?",
                git.port, other.port
            ),
        );
        expect += 1;
        let out = r.stdout();
        assert!(
            out.starts_with(&format!("{}\trefs/heads/main\nrc=0\n", git.head)),
            "{}",
            r.show()
        );
        assert!(
            out.contains("terra: connection refused: no-destination"),
            "git shows the broker's refusal\n{}",
            r.show()
        );
        assert!(out.ends_with("rc=128\n"), "{}", r.show());
        assert_eq!(r.lines[0]["verdict"], "allowed", "{}", r.show());
        let last = r.lines.last().unwrap();
        assert_refused_line(&r, last, "no-destination", "localhost");
        assert_eq!(last["port"], other.port);
        assert_eq!(other.hits(), 0);
        assert_eq!(git.refs_hits.settled(expect), expect);
    }
}

// ------------------------------------------------------------------ the broker's DNS resolver

#[path = "../crates/terra-netd/tests/common/dns_server.rs"]
mod dns_server;

#[path = "network_e2e/handoff.rs"]
mod handoff;
#[path = "network_e2e/reaim.rs"]
mod reaim;

/// Where the test's DNS server listens (a loopback address nothing else uses).
const DNS_ADDR: &str = "127.0.0.153:53";

/// The one DNS server of this test binary (its cases run in parallel and
/// share the address).
fn test_dns() -> &'static dns_server::DnsServer {
    static DNS: OnceLock<dns_server::DnsServer> = OnceLock::new();
    DNS.get_or_init(|| {
        dns_server::DnsServer::start(DNS_ADDR.parse().unwrap(), dns_server::test_zone())
    })
}

/// A resolver configuration `text` at `name` in the world's root, readable
/// by everyone (the broker's root binds it over /etc/resolv.conf).
fn resolver_config(fx: &BoxWorld, name: &str, text: &str) -> PathBuf {
    let p = fx.root.join(name);
    fs::write(&p, text).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
    p
}

/// `cmd` started inside a private mount namespace after the shell snippet
/// `setup` ran there (as the caller, before any setpriv in `cmd`); the
/// host's mounts are untouched.
fn in_mount_namespace(cmd: &Command, setup: &str) -> Command {
    let mut w = Command::new("/usr/bin/unshare");
    w.args(["--mount", "--propagation", "private", "/bin/sh", "-c"])
        .arg(format!("set -e; {setup}; exec \"$@\""))
        .arg("sh")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    w.env_clear();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            w.env(k, v);
        }
    }
    if let Some(d) = cmd.get_current_dir() {
        w.current_dir(d);
    }
    w.stdin(Stdio::null());
    w
}

/// `cmd` with `resolv` bound over /etc/resolv.conf.
fn with_resolv_conf(cmd: &Command, resolv: &Path) -> Command {
    in_mount_namespace(
        cmd,
        &format!("mount --bind '{}' /etc/resolv.conf", resolv.display()),
    )
}

#[test]
#[ignore = "needs root: port 53, mount namespace"]
fn dns_names_only_a_test_server_knows_resolve_through_the_broker() {
    require_root(
        "dns_names_only_a_test_server_knows_resolve_through_the_broker (port 53, mount namespace)",
    );
    let hosts = fs::read_to_string("/etc/hosts").unwrap_or_default();
    assert!(
        !hosts.contains("terra-test.example"),
        "the test's names must not be in /etc/hosts"
    );
    let dns = test_dns();
    let srv = Http::start();
    let srv6 = Http::start_on("[::1]:0", |path| format!("from-host {path}"));
    let (p, p6) = (srv.port, srv6.port);
    let z = |n: &str| format!("{n}.terra-test.example");
    let admitted = ["v4", "both", "alias", "big", "spoofed"];
    let refused = [
        ("gone", "NXDOMAIN:"),
        ("txt", "no-answer:"),
        ("slow", "timeout:"),
        ("broken", "server-failure:"),
    ];
    let mut dests: Vec<(String, u16)> = admitted.iter().map(|n| (z(n), p)).collect();
    dests.push((z("v6"), p6));
    dests.push(("pkg".to_owned(), p));
    dests.extend(refused.iter().map(|(n, _)| (z(n), p)));
    let dests: Vec<Dest> = dests
        .iter()
        .map(|(h, port)| (h.as_str(), *port, false, true))
        .collect();
    let mut script = String::new();
    for n in admitted {
        script += &format!("{CURL} http://{}:{p}/{n}; echo; ", z(n));
    }
    script += &format!("{CURL} -p http://{}:{p6}/v6; echo; ", z("v6"));
    script += &format!("{CURL} http://pkg:{p}/pkg; echo; ");
    for (n, _) in refused {
        script += &format!(
            "{CURL} -i http://{}:{p}/ | grep -i '^x-terra-refusal'; ",
            z(n)
        );
    }
    let mut served = 0;
    for user in users() {
        let fx = BoxWorld::new("dns-broker", user);
        let resolv = resolver_config(&fx, "resolv.conf", "nameserver 127.0.0.153\nsearch terra-test.example\noptions ndots:2 timeout:1 attempts:1\n");
        let policy = fx.policy(&dests);
        let cmd = fx.command(&["--policy", policy.to_str().unwrap()], &script);
        let out = with_resolv_conf(&cmd, &resolv).output().unwrap();
        let r = fx.collect(out);
        assert_eq!(r.code(), Some(0), "{}", r.show());
        let mut want: String = admitted
            .iter()
            .map(|n| format!("from-host /{n}\n"))
            .collect();
        want += "from-host /v6\nfrom-host /pkg\n";
        want += &"X-Terra-Refusal: resolve-failed\r\n".repeat(refused.len());
        assert_eq!(r.stdout(), want, "{}", r.show());
        served += admitted.len() + 1;
        assert_eq!(srv.hits(), served, "{}", r.show());
        assert_eq!(srv6.hits(), served / (admitted.len() + 1), "{}", r.show());
        assert_eq!(
            r.lines.len(),
            admitted.len() + 2 + refused.len(),
            "{}",
            r.show()
        );
        let (ok, bad) = r.lines.split_at(admitted.len() + 2);
        let v4 = vec![Value::from("127.0.0.1")];
        for (l, n) in ok.iter().zip(admitted) {
            assert_eq!(l["verdict"], "allowed", "{}", r.show());
            assert_eq!(l["name"], z(n).as_str(), "{}", r.show());
            assert_eq!(l["address"], format!("127.0.0.1:{p}"), "{}", r.show());
            let want = if n == "both" {
                vec![Value::from("127.0.0.1"), Value::from("::1")]
            } else {
                v4.clone()
            };
            assert_eq!(
                l["resolved"].as_array().unwrap(),
                &want,
                "{n}\n{}",
                r.show()
            );
        }
        assert_eq!(
            ok[admitted.len()]["address"],
            format!("[::1]:{p6}"),
            "{}",
            r.show()
        );
        assert_eq!(ok[admitted.len()]["resolved"][0], "::1", "{}", r.show());
        assert_eq!(ok[admitted.len() + 1]["name"], "pkg", "{}", r.show());
        assert_eq!(
            ok[admitted.len() + 1]["resolved"][0],
            "127.0.0.1",
            "{}",
            r.show()
        );
        for (l, (n, kind)) in bad.iter().zip(refused) {
            assert_refused_line(&r, l, "resolve-failed", &z(n));
            let detail = l["detail"].as_str().unwrap_or("");
            assert!(detail.starts_with(kind), "{n}: {detail}\n{}", r.show());
            assert!(!detail.contains("os error"), "no bare errno: {detail}");
        }
        assert_linked(&r, (admitted.len() + 2) as u64, refused.len() as u64);
        // The broker asked the test's server: over TCP after the truncated
        // answer, and for the search-domain name of "pkg", never "pkg" itself.
        assert!(dns.asked(&z("big"), "tcp"), "{:?}", dns.seen());
        assert!(dns.asked(&z("pkg"), "udp"), "{:?}", dns.seen());
        assert!(!dns.asked("pkg", "udp"), "{:?}", dns.seen());
        assert!(dns.asked(&z("slow"), "udp"), "{:?}", dns.seen());
    }
}

/// On many hosts /etc/resolv.conf is a symbolic link (to systemd-resolved's
/// file, say). The broker's root holds the file at its real path, and the
/// broker reads it there: names still resolve. Here an overlay over /etc
/// (in a private mount namespace) makes /etc/resolv.conf a link to a file
/// in the test's directory.
#[test]
#[ignore = "needs root: port 53, mount namespace"]
fn dns_resolv_conf_that_is_a_symbolic_link_is_followed() {
    require_root("dns_resolv_conf_that_is_a_symbolic_link_is_followed (port 53, mount namespace)");
    let dns = test_dns();
    let srv = Http::start();
    let p = srv.port;
    let name = "v4.terra-test.example";
    for (n, user) in users().into_iter().enumerate() {
        let fx = BoxWorld::new("dns-symlink", user);
        let target = resolver_config(
            &fx,
            "stub-resolv.conf",
            "nameserver 127.0.0.153\noptions timeout:1 attempts:1\n",
        );
        let (upper, work) = (fx.root.join("ovl-upper"), fx.root.join("ovl-work"));
        fs::create_dir_all(&upper).unwrap();
        fs::create_dir_all(&work).unwrap();
        std::os::unix::fs::symlink(&target, upper.join("resolv.conf")).unwrap();
        let policy = fx.policy(&[(name, p, false, true)]);
        let cmd = fx.command(
            &["--policy", policy.to_str().unwrap()],
            &format!("{CURL} http://{name}:{p}/linked"),
        );
        let setup = format!(
            "mount -t overlay overlay -o 'lowerdir=/etc,upperdir={},workdir={}' /etc; \
             test \"$(readlink /etc/resolv.conf)\" = '{}'",
            upper.display(),
            work.display(),
            target.display()
        );
        let r = fx.collect(in_mount_namespace(&cmd, &setup).output().unwrap());
        assert_eq!(r.stdout(), "from-host /linked", "{}", r.show());
        let line = only_line(&r);
        assert_eq!(line["verdict"], "allowed", "{}", r.show());
        assert_eq!(line["resolved"][0], "127.0.0.1", "{}", r.show());
        assert_eq!(srv.hits(), n + 1);
        assert!(dns.asked(name, "udp"), "{:?}", dns.seen());
    }
}
