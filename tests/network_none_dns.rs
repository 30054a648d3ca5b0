//! Network none says so at once: the box's DNS stub answers every name
//! REFUSED at once (UDP and TCP), and the run says each name asked once, as
//! it is asked, with the `--allow-net NAME:443` that would admit it; a
//! client's retries of one name are said once. As the caller and, as root,
//! as 65534.
#![cfg(target_os = "linux")]

mod common;

use std::time::{Duration, Instant};

use common::{show, terra_as, users, RunDirs};

/// Asks pypi.org three times and files.pythonhosted.org once through the
/// resolver, then pypi.org once more by hand over UDP and over TCP, printing
/// each answer's rcode.
const PROBE: &str = r#"
import socket, struct
for n in ["pypi.org", "pypi.org", "pypi.org", "files.pythonhosted.org"]:
    try:
        socket.getaddrinfo(n, 443)
        print("RESOLVED", n)
    except socket.gaierror as e:
        print("FAILED", n)
q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04pypi\x03org\x00\x00\x01\x00\x01"
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(2)
u.sendto(q, ("127.0.0.1", 53))
r = u.recv(512)
print("UDP rcode", r[3] & 15)
t = socket.create_connection(("127.0.0.1", 53), timeout=2)
t.sendall(struct.pack("!H", len(q)) + q)
r = t.recv(514)
print("TCP rcode", r[5] & 15)
"#;

#[test]
fn network_none_refuses_every_name_at_once_and_says_each_once() {
    for user in users() {
        let dirs = RunDirs::new("terra-nonedns", "probe", user);
        dirs.chown_to_user(None);
        let mut c = terra_as(dirs.user, &[]);
        dirs.run_env(&mut c, "/usr/bin:/bin");
        c.args(["run", "-q", "--", "python3", "-c", PROBE]);
        let t0 = Instant::now();
        let o = c.output().unwrap();
        let took = t0.elapsed();
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{user:?}: {}", show(&o));
        assert_eq!(out.matches("FAILED").count(), 4, "{}", show(&o));
        assert!(!out.contains("RESOLVED"), "{}", show(&o));
        // REFUSED (5), over both transports.
        assert!(
            out.contains("UDP rcode 5\n") && out.contains("TCP rcode 5\n"),
            "{}",
            show(&o)
        );
        // One line per name, however often it was asked.
        for name in ["pypi.org", "files.pythonhosted.org"] {
            let line = format!(
                "terra: network none: {name} was asked for and refused (the box has no network); \
                 --allow-net {name}:443 would admit it\n"
            );
            assert_eq!(err.matches(&line).count(), 1, "{name}: {}", show(&o));
        }
        assert_eq!(
            err.matches("terra: network none:").count(),
            2,
            "{}",
            show(&o)
        );
        // At once: no resolver timeout (1 s each in the box's resolv.conf).
        assert!(took < Duration::from_secs(3), "{took:?}: {}", show(&o));
    }
}

#[test]
fn the_box_resolv_conf_says_the_stub_refuses() {
    for user in users() {
        let dirs = RunDirs::new("terra-nonedns", "resolv", user);
        dirs.chown_to_user(None);
        let mut c = terra_as(dirs.user, &[]);
        dirs.run_env(&mut c, "/usr/bin:/bin");
        c.args(["run", "-q", "--", "cat", "/etc/resolv.conf"]);
        let o = c.output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.starts_with(
                "# terra: network none: the box's DNS stub refuses every name at once\n"
            ) && out.contains("nameserver 127.0.0.1\n"),
            "{}",
            show(&o)
        );
    }
}

#[test]
fn network_none_turns_package_manager_retries_off() {
    for user in users() {
        let dirs = RunDirs::new("terra-nonedns", "retries", user);
        dirs.chown_to_user(None);
        let env_of = |extra: &[&str]| {
            let mut c = terra_as(dirs.user, &[]);
            dirs.run_env(&mut c, "/usr/bin:/bin");
            c.args(["run", "-q"]).args(extra).args([
                "--",
                "sh",
                "-c",
                "echo \"$CARGO_NET_RETRY/$PIP_RETRIES/$npm_config_fetch_retries\"",
            ]);
            let o = c.output().unwrap();
            (String::from_utf8_lossy(&o.stdout).into_owned(), show(&o))
        };
        let (out, o) = env_of(&[]);
        assert_eq!(out, "0/0/0\n", "{user:?}: {o}");
        // --env overrides them.
        let (out, o) = env_of(&["--env", "CARGO_NET_RETRY=2"]);
        assert_eq!(out, "2/0/0\n", "{user:?}: {o}");
        // Twin: with a network (mediated), retries are the tools' own.
        let (out, o) = env_of(&["--allow-net", "example.test:443"]);
        assert_eq!(out, "//\n", "{user:?}: {o}");
    }
}

#[test]
fn the_receipt_records_the_names_and_a_failed_run_ends_with_them() {
    for user in users() {
        let dirs = RunDirs::new("terra-nonedns", "receipt", user);
        dirs.chown_to_user(None);
        let receipt = dirs.root.join("ws/r.json");
        let go = |script: &str| {
            let mut c = terra_as(dirs.user, &[]);
            dirs.run_env(&mut c, "/usr/bin:/bin");
            c.args(["run", "--receipt"])
                .arg(&receipt)
                .args(["--", "python3", "-c", script]);
            let o = c.output().unwrap();
            let r: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&receipt).unwrap()).unwrap();
            (o, r)
        };
        let ask = "import socket, sys\n\
                   for n in ['pypi.org', 'pypi.org', 'files.pythonhosted.org']:\n\
                   \x20   try: socket.getaddrinfo(n, 443)\n\
                   \x20   except socket.gaierror: pass\n";
        let (o, r) = go(&format!("{ask}sys.exit(1)"));
        assert_eq!(o.status.code(), Some(1), "{user:?}: {}", show(&o));
        assert_eq!(
            r["dnsRefused"],
            serde_json::json!(["pypi.org", "files.pythonhosted.org"]),
            "{}",
            show(&o)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(
                "terra: the network is off (network none) and the box asked for 2 names:\n\
                 terra:   pypi.org: --allow-net pypi.org:443 (or --preset python --preset-net)\n\
                 terra:   files.pythonhosted.org: --allow-net files.pythonhosted.org:443 \
                 (or --preset python --preset-net)\n"
            ),
            "{}",
            show(&o)
        );
        // A run that succeeds: recorded, said as asked, no closing lines.
        let (o, r) = go(ask);
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        assert_eq!(r["dnsRefused"].as_array().map(Vec::len), Some(2));
        assert!(!String::from_utf8_lossy(&o.stderr).contains("the network is off"));
        // Nothing asked: an empty list.
        let (_, r) = go("pass");
        assert_eq!(r["dnsRefused"], serde_json::json!([]));
    }
}
