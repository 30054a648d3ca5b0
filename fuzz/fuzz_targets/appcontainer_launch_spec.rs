//! The Windows launcher's launch-spec decoder must never panic; whatever it
//! accepts must re-encode to exactly the bytes it was given (one canonical
//! encoding), validate, and make a launch plan whose every DACL entry names
//! a path of the spec (or terra's own executable).
#![no_main]

use libfuzzer_sys::fuzz_target;
use terra_appcontainer::{LaunchPlan, LaunchSpec};

const LAUNCHER: &str = r"C:\Program Files\terra\terra.exe";

fuzz_target!(|data: &[u8]| {
    let Ok(spec) = LaunchSpec::decode(data) else {
        return;
    };
    assert_eq!(spec.encode(), data, "accepted bytes are not canonical");
    spec.validate().expect("a decoded spec validates");
    if let Ok(plan) = LaunchPlan::from_spec(&spec, LAUNCHER) {
        assert_eq!(plan.spec().expect("a plan of a spec has a spec"), spec);
        for e in &plan.entries {
            let from_spec = spec
                .grants
                .iter()
                .any(|g| plan.style.within(&e.path, &g.path) || plan.style.within(&g.path, &e.path));
            assert!(from_spec || e.path == LAUNCHER, "entry on {} from nowhere", e.path);
        }
    }
});
