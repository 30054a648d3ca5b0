//! The vm backend's control protocol decoder (terra_vm::proto), both
//! directions: fed in arbitrary pieces it must never panic, never buffer
//! more than one frame's limit plus what it was given, and every message it
//! returns must encode again to a frame it decodes to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use terra_vm::proto::{Decoder, FromGuest, ToGuest, HEADER, MAX_CONFIG};

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else { return };
    let cut = (split as usize).min(rest.len());
    let (a, b) = rest.split_at(cut);

    let mut d = Decoder::new();
    for piece in [a, b] {
        d.push(piece);
        assert!(d.room() <= HEADER + MAX_CONFIG);
        while let Ok(Some(m)) = d.next_from_guest() {
            let again = m.encode();
            let mut e = Decoder::new();
            e.push(&again);
            assert_eq!(e.next_from_guest().ok().flatten().as_ref(), Some(&m));
            if let FromGuest::Stdout(b) | FromGuest::Stderr(b) = &m {
                assert!(b.len() <= terra_vm::proto::MAX_DATA);
            }
        }
    }

    let mut d = Decoder::new();
    for piece in [a, b] {
        d.push(piece);
        while let Ok(Some(m)) = d.next_to_guest() {
            let again = m.encode().expect("a decoded message encodes");
            let mut e = Decoder::new();
            e.push(&again);
            assert_eq!(e.next_to_guest().ok().flatten().as_ref(), Some(&m));
            if let ToGuest::Stdin(b) = &m {
                assert!(b.len() <= terra_vm::proto::MAX_DATA);
            }
        }
    }
});
