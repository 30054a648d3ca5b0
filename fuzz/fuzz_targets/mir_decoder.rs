//! The MIR decoder must never panic; whatever it accepts must be exactly its
//! own canonical encoding.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(mir) = terra_policy::Mir::decode(data) {
        assert_eq!(mir.bytes(), data, "accepted bytes must be canonical");
        let _ = terra_policy::inspection_json(&mir);
    }
});
