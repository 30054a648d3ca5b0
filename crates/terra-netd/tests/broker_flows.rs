//! The broker in-process against real servers and real clients (curl, openssl)
//! on 127.0.0.1, through the real box service and fd passing.
// Linux only: the box service passes sockets over SCM_RIGHTS (fdpass).
#![cfg(target_os = "linux")]

mod common;

use std::io::{Read, Write};

use common::*;
use terra_netd::tls::build_client_hello;

#[test]
fn plain_http_absolute_form_admitted() {
    let Served { server, port, h } = served(false, true);
    let (code, body) = curl_http_proxy(h.proxy, &[&format!("http://svc.test:{port}/hello?x=1")]);
    assert_eq!(code, 0, "{body}");
    assert_eq!(body, "hello /hello?x=1\n");
    assert_eq!(server.hits(), 1);
    let lines = h.receipts_at_least(1);
    let r = find(&lines, "svc.test", port);
    assert_eq!(r["protocol"], "http");
    assert_eq!(r["verdict"], "allowed");
    assert_eq!(r["reason"], serde_json::Value::Null);
    assert_eq!(r["resolved"], serde_json::json!(["127.0.0.1"]));
    assert_eq!(r["address"], format!("127.0.0.1:{port}"));
    assert!(r["bytes_up"].as_u64().unwrap() > 0);
    assert!(r["bytes_down"].as_u64().unwrap() >= body.len() as u64);
    assert!(r["time"].as_str().unwrap().ends_with('Z'));
    assert!(r["duration_ms"].is_u64());
}

#[test]
fn socks5_domain_admitted() {
    let Served {
        server: _server,
        port,
        h,
    } = served(false, true);
    let (code, body) = curl_socks_proxy(h.proxy, &[&format!("http://svc.test:{port}/s")]);
    assert_eq!(code, 0);
    assert_eq!(body, "hello /s\n");
    let lines = h.receipts_at_least(1);
    let r = find(&lines, "svc.test", port);
    assert_eq!(r["protocol"], "socks5");
    assert_eq!(r["verdict"], "allowed");
}

#[test]
fn socks5_ip_literal_only_when_listed() {
    let server = hello_server();
    let port = server.addr.port();
    let h = Harness::start(vec![pat("127.0.0.1", port, false, true)], &[], limits());
    // curl --socks5 resolves locally and sends the IPv4 address (ATYP 1).
    let socks5_local = |url: &str| curl(&["--socks5", &h.proxy.to_string(), url]);
    let (code, body) = socks5_local(&format!("http://127.0.0.1:{port}/ip"));
    assert_eq!(code, 0);
    assert_eq!(body, "hello /ip\n");
    // The same literal on a port that is not listed.
    let other = hello_server();
    let (code, _) = socks5_local(&format!("http://127.0.0.1:{}/ip", other.addr.port()));
    assert_ne!(code, 0);
    assert_eq!(other.hits(), 0);
    let lines = h.receipts_at_least(2);
    assert_eq!(find(&lines, "127.0.0.1", port)["verdict"], "allowed");
    let r = find(&lines, "127.0.0.1", other.addr.port());
    assert_eq!(r["reason"], "no-destination");
}

#[test]
fn connect_with_tls_sni_admitted_curl_and_openssl() {
    let tls = TlsServer::start("svc.test");
    let h = Harness::start(
        vec![pat("svc.test", tls.port, true, true)],
        &["svc.test"],
        limits(),
    );
    let url = format!("https://svc.test:{}/", tls.port);
    let (code, body) = curl_http_proxy(h.proxy, &["-k", &url]);
    assert_eq!(code, 0, "curl through the broker failed");
    assert!(body.contains("s_server"), "{body}");
    let lines = h.receipts_at_least(1);
    let r = find(&lines, "svc.test", tls.port);
    assert_eq!(r["protocol"], "http-connect");
    assert_eq!(r["sni"], "svc.test");
    assert_eq!(r["verdict"], "allowed");

    // SOCKS5 with the name: success reply first, then the ClientHello decides.
    let (code, body) = curl_socks_proxy(h.proxy, &["-k", &url]);
    assert_eq!(code, 0, "curl through SOCKS5 failed");
    assert!(body.contains("s_server"), "{body}");
    let lines = h.receipts_at_least(2);
    assert!(
        lines.iter().any(|l| l["protocol"] == "socks5"
            && l["sni"] == "svc.test"
            && l["verdict"] == "allowed"),
        "{lines:?}"
    );

    // openssl s_client through the HTTP proxy, SNI set to the name.
    let out = std::process::Command::new("openssl")
        .args(["s_client", "-proxy", &h.proxy.to_string(), "-connect"])
        .arg(format!("svc.test:{}", tls.port))
        .args(["-servername", "svc.test", "-brief"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CONNECTION ESTABLISHED"), "{err}");
}

#[test]
fn unlisted_name_refused_without_lookup() {
    let server = hello_server();
    let port = server.addr.port();
    let h = Harness::start(
        vec![pat("svc.test", port, false, true)],
        &["svc.test", "other.test"],
        limits(),
    );
    let (code, body) = curl_http_proxy(
        h.proxy,
        &["-w", "%{http_code}", &format!("http://other.test:{port}/")],
    );
    assert_eq!(code, 0);
    assert!(body.contains("no-destination"), "{body}");
    assert!(body.ends_with("403"), "{body}");
    // CONNECT to an unlisted name: curl reports the refused tunnel.
    let (code, _) = curl_http_proxy(h.proxy, &["-k", &format!("https://other.test:{port}/")]);
    assert_eq!(code, 56);
    // SOCKS5: reply 0x02.
    let mut s = socks5_greeted(h.proxy);
    s.write_all(&socks5_request(1, &socks5_domain("other.test"), port))
        .unwrap();
    let reply = read_all(&mut s);
    assert_eq!(&reply[..2], &[5, 2]);
    assert_eq!(server.hits(), 0);
    assert_eq!(h.lookups(), 0, "an unlisted name must never be resolved");
    let lines = h.receipts_at_least(3);
    assert_eq!(lines.len(), 3);
    for l in &lines {
        assert_eq!(l["verdict"], "refused");
        assert_eq!(l["reason"], "no-destination");
        assert_eq!(l["address"], serde_json::Value::Null);
    }
}

#[test]
fn listed_name_on_another_port_refused() {
    let server = hello_server();
    let port = server.addr.port();
    let h = Harness::start(
        vec![pat("svc.test", 1, false, true)],
        &["svc.test"],
        limits(),
    );
    let (_, body) = curl_http_proxy(h.proxy, &[&format!("http://svc.test:{port}/")]);
    assert!(body.contains("no-destination"), "{body}");
    assert_eq!(server.hits(), 0);
    assert_eq!(h.receipts_at_least(1)[0]["reason"], "no-destination");
}

#[test]
fn sni_absent_and_mismatched_refused() {
    let Served { server, port, h } = served(true, true);
    let target = format!("svc.test:{port}");

    // Plain bytes after CONNECT: no ClientHello, no SNI.
    let mut s = raw(h.proxy);
    assert!(connect_head(&mut s, &target).starts_with("HTTP/1.1 200"));
    s.write_all(b"GET / HTTP/1.1\r\nHost: svc.test\r\n\r\n")
        .unwrap();
    assert!(read_all(&mut s).is_empty());

    // A ClientHello without server_name.
    let mut s = raw(h.proxy);
    assert!(connect_head(&mut s, &target).starts_with("HTTP/1.1 200"));
    s.write_all(&build_client_hello(None)).unwrap();
    assert!(read_all(&mut s).is_empty());

    // A ClientHello naming another server.
    let mut s = raw(h.proxy);
    assert!(connect_head(&mut s, &target).starts_with("HTTP/1.1 200"));
    s.write_all(&build_client_hello(Some("evil.test"))).unwrap();
    assert!(read_all(&mut s).is_empty());

    // Plain HTTP to an SNI-only destination: refused before anything.
    let (_, body) = curl_http_proxy(h.proxy, &[&format!("http://svc.test:{port}/")]);
    assert!(body.contains("sni-absent"), "{body}");

    // openssl s_client with a mismatched -servername.
    let out = std::process::Command::new("openssl")
        .args([
            "s_client",
            "-proxy",
            &h.proxy.to_string(),
            "-connect",
            &target,
            "-servername",
            "cdn.test",
            "-brief",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("CONNECTION ESTABLISHED"));

    assert_eq!(server.hits(), 0, "no refused flow may reach the server");
    let lines = h.receipts_at_least(5);
    let reasons: Vec<&str> = lines
        .iter()
        .map(|l| l["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons.iter().filter(|r| **r == "sni-absent").count(),
        3,
        "{reasons:?}"
    );
    assert_eq!(
        reasons.iter().filter(|r| **r == "sni-mismatch").count(),
        2,
        "{reasons:?}"
    );
    assert!(lines.iter().any(|l| l["sni"] == "evil.test"));
    assert!(lines.iter().any(|l| l["sni"] == "cdn.test"));
    assert_eq!(h.lookups(), 0, "refused before resolution");
}

#[test]
fn private_address_needs_the_flag() {
    let Served { server, port, h } = served(false, false);
    let (_, body) = curl_http_proxy(h.proxy, &[&format!("http://svc.test:{port}/")]);
    assert!(body.contains("private-address"), "{body}");
    let (code, _) = curl_socks_proxy(h.proxy, &[&format!("http://svc.test:{port}/")]);
    assert_ne!(code, 0);
    assert_eq!(server.hits(), 0);
    let lines = h.receipts_at_least(2);
    for l in &lines {
        assert_eq!(l["reason"], "private-address");
        assert_eq!(l["resolved"], serde_json::json!(["127.0.0.1"]));
        assert_eq!(l["address"], serde_json::Value::Null);
    }
}

#[test]
fn malformed_input_is_refused_and_recorded() {
    let Served { server, port, h } = served(true, true);
    let target = format!("svc.test:{port}");

    // SOCKS4 and other unknown first bytes.
    for first in [
        &[4u8, 1, 0, 80, 127, 0, 0, 1, 0][..],
        &[0x16, 3, 1, 0, 5],
        &[0],
    ] {
        let mut s = raw(h.proxy);
        s.write_all(first).unwrap();
        assert!(read_all(&mut s).is_empty());
    }
    // SOCKS5 request with a bad version after a good greeting.
    let mut s = socks5_greeted(h.proxy);
    s.write_all(&[4, 1, 0, 1, 127, 0, 0, 1, 0, 80]).unwrap();
    assert_eq!(&read_all(&mut s)[..2], &[5, 1]);
    // Oversized header.
    let mut s = raw(h.proxy);
    let mut big = format!("CONNECT {target} HTTP/1.1\r\nX-Big: ").into_bytes();
    big.resize(40 * 1024, b'a');
    let _ = s.write_all(&big);
    let resp = String::from_utf8_lossy(&read_all(&mut s)).into_owned();
    assert!(
        resp.starts_with("HTTP/1.1 400") && resp.contains("malformed-request"),
        "{resp}"
    );
    // Invalid and non-canonical names.
    for name in ["SVC.test", "svc..test", "-svc.test", "svc.test."] {
        let mut s = raw(h.proxy);
        let head = connect_head(&mut s, &format!("{name}:{port}"));
        assert!(head.starts_with("HTTP/1.1 403"), "{name}: {head}");
    }
    // Truncated ClientHello, then the client goes away.
    let mut s = raw(h.proxy);
    assert!(connect_head(&mut s, &target).starts_with("HTTP/1.1 200"));
    let hello = build_client_hello(Some("svc.test"));
    s.write_all(&hello[..hello.len() / 2]).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(read_all(&mut s).is_empty());
    // A ClientHello with a corrupt length.
    let mut s = raw(h.proxy);
    assert!(connect_head(&mut s, &target).starts_with("HTTP/1.1 200"));
    let mut bad = hello.clone();
    bad[3] = 0xff;
    bad[4] = 0xff;
    s.write_all(&bad).unwrap();
    assert!(read_all(&mut s).is_empty());

    let lines = h.receipts_at_least(11);
    assert_eq!(lines.len(), 11, "{lines:?}");
    let count = |reason: &str| lines.iter().filter(|l| l["reason"] == reason).count();
    assert_eq!(count("malformed-request"), 7, "{lines:?}");
    assert_eq!(count("malformed-name"), 4, "{lines:?}");
    assert_eq!(server.hits(), 0);

    // The broker is still serving.
    let mut s = raw(h.proxy);
    assert!(connect_head(&mut s, &target).starts_with("HTTP/1.1 200"));
    s.write_all(&hello).unwrap();
    s.write_all(b"rest").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let _ = read_all(&mut s);
    let lines = h.receipts_at_least(12);
    let last = lines.last().unwrap();
    assert_eq!(last["verdict"], "allowed");
    assert_eq!(last["bytes_up"], (hello.len() + 4) as u64);
    assert_eq!(server.hits(), 1);
}

#[test]
fn broker_gone_means_no_network() {
    let Served { server, port, h } = served(false, true);
    let url = format!("http://svc.test:{port}/");
    let (code, body) = curl_http_proxy(h.proxy, &[&url]);
    assert_eq!((code, body.as_str()), (0, "hello /\n"));
    h.kill_broker();
    for _ in 0..3 {
        let (code, body) = curl_http_proxy(h.proxy, &[&url]);
        assert_ne!(code, 0, "{body}");
        assert!(body.is_empty());
    }
    let (code, _) = curl_socks_proxy(h.proxy, &[&url]);
    assert_ne!(code, 0);
    assert_eq!(
        server.hits(),
        1,
        "nothing reaches the server once the broker is gone"
    );
}

#[test]
fn half_close_is_relayed() {
    // An echo-until-EOF server: it answers only after the client half-closes.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        s.write_all(&all).unwrap();
        s.write_all(b"|done").unwrap();
    });
    let h = Harness::start(
        vec![pat("echo.test", port, false, true)],
        &["echo.test"],
        limits(),
    );
    let mut s = raw(h.proxy);
    assert!(connect_head(&mut s, &format!("echo.test:{port}")).starts_with("HTTP/1.1 200"));
    let payload = vec![7u8; 300_000];
    s.write_all(&payload).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let back = read_all(&mut s);
    assert_eq!(back.len(), payload.len() + 5);
    assert!(back.ends_with(b"|done"));
    let lines = h.receipts_at_least(1);
    assert_eq!(lines[0]["bytes_up"], 300_000);
    assert_eq!(lines[0]["bytes_down"], 300_005);
}

#[test]
fn idle_flows_are_closed() {
    // A server that accepts and then says nothing, keeping its end open.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            keep.lock().unwrap().push(s);
        }
    });
    let mut lim = limits();
    lim.idle_timeout_ms = 300;
    let h = Harness::start(
        vec![pat("quiet.test", port, false, true)],
        &["quiet.test"],
        lim,
    );
    let mut s = raw(h.proxy);
    assert!(connect_head(&mut s, &format!("quiet.test:{port}")).starts_with("HTTP/1.1 200"));
    // Neither side sends: the broker ends the flow by itself.
    assert!(read_all(&mut s).is_empty());
    let lines = h.receipts_at_least(1);
    assert_eq!(lines[0]["verdict"], "allowed");
    assert_eq!(lines[0]["bytes_down"], 0);
    // The slot is released right after the receipt is written.
    for _ in 0..500 {
        if h.broker.active_flows() == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(h.broker.active_flows(), 0);
}

#[test]
fn socks5_ipv6_and_other_commands_refused() {
    let Served { server, port, h } = served(false, true);
    // IPv6 literal request: the host grammar has no IPv6 literal.
    let mut s = socks5_greeted(h.proxy);
    let ipv6 = [&[4u8][..], &std::net::Ipv6Addr::LOCALHOST.octets()].concat();
    s.write_all(&socks5_request(1, &ipv6, port)).unwrap();
    assert_eq!(&read_all(&mut s)[..2], &[5, 2]);
    // BIND (command 2): not supported.
    let mut s = socks5_greeted(h.proxy);
    s.write_all(&socks5_request(2, &socks5_domain("svc.test"), port))
        .unwrap();
    assert_eq!(&read_all(&mut s)[..2], &[5, 7]);
    // A greeting that offers no method at all.
    let mut s = raw(h.proxy);
    s.write_all(&[5, 0]).unwrap();
    assert_eq!(read_all(&mut s), vec![5, 0xff]);
    // Only username/password offered: no acceptable method.
    let mut s = raw(h.proxy);
    s.write_all(&[5, 1, 2]).unwrap();
    assert_eq!(read_all(&mut s), vec![5, 0xff]);
    let lines = h.receipts_at_least(4);
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["reason"] == "malformed-name")
            .count(),
        1
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["reason"] == "malformed-request")
            .count(),
        3
    );
    assert_eq!(server.hits(), 0);
}
