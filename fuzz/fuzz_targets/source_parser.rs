//! The JSON source parser must never panic; whatever it accepts must be a
//! canonical MIR that decodes back to itself and renders as inspection JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(mir) = terra_policy::compile_source(data) {
        let again = terra_policy::Mir::decode(mir.bytes()).expect("compiled MIR must decode");
        assert_eq!(again, mir);
        let json = terra_policy::inspection_json(&mir);
        assert!(json.ends_with("}\n"));
    }
});
