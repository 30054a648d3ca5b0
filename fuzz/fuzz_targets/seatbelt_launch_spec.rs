//! The launcher's launch-spec decoder must never panic; whatever it accepts
//! must re-encode to exactly the bytes it was given (one canonical encoding),
//! validate, and render a profile that holds no grant's path as text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use terra_seatbelt::LaunchSpec;

fuzz_target!(|data: &[u8]| {
    let Ok(spec) = LaunchSpec::decode(data) else {
        return;
    };
    assert_eq!(spec.encode(), data, "accepted bytes are not canonical");
    spec.validate().expect("a decoded spec validates");
    if let Ok(profile) = terra_seatbelt::render(&spec) {
        // The two fixed patterns (new ptys, the xcrun cache) are the only
        // rule text with a slash; every path besides is a parameter.
        let text = profile
            .text
            .replace(terra_seatbelt::runtime::NEW_PTY_REGEX, "")
            .replace(terra_seatbelt::runtime::XCRUN_CACHE_REGEX, "");
        for (_, value) in &profile.parameters {
            // "/" alone is too short to tell apart from SBPL syntax.
            if value.len() > 1 {
                assert!(
                    !text.contains(value.as_str()),
                    "path text {value:?} inside the profile"
                );
            }
        }
    }
    let _ = terra_seatbelt::probes(&spec, "/private/tmp/terra-canary");
});
