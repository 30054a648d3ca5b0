//! The box's DNS stub answers whatever the workload sends: `stub::answer`
//! must never panic, must answer only queries, and every answer must keep
//! the query's id and fit the size it was given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::IpAddr;
use terra_netd::stub::{answer, Lookup, StubLookup};

struct Fixed;

impl StubLookup for Fixed {
    fn lookup(&self, name: &str, _qtype: u16) -> Lookup {
        match name.len() % 3 {
            0 => Lookup::Addresses(vec![
                IpAddr::from([192, 0, 2, 1]),
                IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1]),
            ]),
            1 => Lookup::NxDomain,
            _ => Lookup::ServFail,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    for max in [512usize, 65535] {
        if let Some(resp) = answer(data, &Fixed, max) {
            assert!(resp.len() <= max);
            assert!(resp.len() >= 12);
            assert_eq!(resp[..2], data[..2], "the query's id");
            assert!(resp[2] & 0x80 != 0, "QR set");
        }
    }
});
