//! The broker's bounded TLS ClientHello parser must never panic, never claim
//! more bytes than it was given, and agree with itself when fed incrementally.
#![no_main]

use libfuzzer_sys::fuzz_target;
use terra_netd::tls::{parse_client_hello, read_client_hello, HelloProgress};

fuzz_target!(|data: &[u8]| {
    let _ = parse_client_hello(data);
    match read_client_hello(data) {
        Ok(HelloProgress::Done { len, sni }) => {
            assert!(len <= data.len());
            // The same records alone give the same answer.
            assert_eq!(
                read_client_hello(&data[..len]),
                Ok(HelloProgress::Done { len, sni })
            );
        }
        Ok(HelloProgress::Need(n)) => assert!(n >= 1),
        Err(_) => {}
    }
});
