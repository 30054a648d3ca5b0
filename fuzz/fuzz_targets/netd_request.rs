//! The broker's proxy request parsers (HTTP CONNECT / absolute-form, SOCKS5)
//! must never panic, never consume more than they were given, and whatever
//! they accept must be judged by the matcher without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use terra_netd::proxy::{
    http_head_len, parse_authority, parse_http_head, socks5_greeting, socks5_request, HttpKind,
    Protocol, MAX_HTTP_HEAD,
};
use terra_netd::{judge, Pattern, Request};
use terra_policy::NetworkMode;

fn judge_name(name: &str, port: u16) {
    let patterns = [
        Pattern::parse("api.example.com", 443, true, false).unwrap(),
        Pattern::parse("*.example.org", 80, false, false).unwrap(),
    ];
    for sni in [None, Some(name)] {
        let _ = judge(
            NetworkMode::Mediated,
            &patterns,
            &Request {
                name,
                port,
                sni,
                resolves_private: false,
            },
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some(&first) = data.first() else { return };
    match Protocol::detect(first) {
        Some(Protocol::Http) => {
            if let Some(len) = http_head_len(data) {
                assert!(len <= data.len());
                if let Ok(req) = parse_http_head(&data[..len]) {
                    assert!(len <= MAX_HTTP_HEAD);
                    assert!(req.port >= 1);
                    if let HttpKind::Forward { head } = &req.kind {
                        assert!(head.ends_with(b"Connection: close\r\n\r\n"));
                    }
                    judge_name(&req.host, req.port);
                }
            }
        }
        Some(Protocol::Socks5) => {
            if let Ok(Some((_, used))) = socks5_greeting(data) {
                assert!(used <= data.len());
                if let Ok(Some((req, n))) = socks5_request(&data[used..]) {
                    assert!(n <= data.len() - used);
                    judge_name(&req.host.as_name(), req.port);
                }
            }
        }
        None => {}
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_authority(text, Some(80));
        let _ = parse_authority(text, None);
    }
});
