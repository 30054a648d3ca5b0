//! The broker's DNS response decoder and CNAME follower must never panic,
//! whatever a server sends; what they accept must stay within DNS's bounds.
//! The resolver configuration parser must never panic on any text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use terra_netd::dns::{follow, parse_response, Answer, TYPE_A, TYPE_AAAA};
use terra_netd::ResolverConfig;

fuzz_target!(|data: &[u8]| {
    if let Ok(resp) = parse_response(data) {
        assert!(resp.qname.wire().len() <= 255);
        let _ = resp.qname.to_dotted();
        for (owner, _) in &resp.answers {
            assert!(owner.wire().len() <= 255);
        }
        for qtype in [TYPE_A, TYPE_AAAA] {
            if let Ok(Answer::Alias { hops, .. }) = follow(&resp, qtype, 8) {
                assert!((1..=8).contains(&hops));
            }
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let c = ResolverConfig::parse(text, text);
        assert!(!c.nameservers.is_empty() && c.nameservers.len() <= 3);
        assert!(c.search.len() <= 6);
        let _ = c.candidates("pkg");
    }
});
