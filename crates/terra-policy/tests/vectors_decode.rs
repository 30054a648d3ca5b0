//! Every published vector decodes, re-encodes byte for byte and has the published digest.

use std::path::PathBuf;

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/vectors")
}

fn unhex(s: &str) -> Vec<u8> {
    let s = s.trim();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn vectors_decode_and_digest() {
    for name in [
        "minimal",
        "workspace",
        "deny-write",
        "mediated",
        "mediated-flags",
    ] {
        let dir = vectors_dir();
        let bytes = unhex(&std::fs::read_to_string(dir.join(format!("{name}.mir.hex"))).unwrap());
        let digest = std::fs::read_to_string(dir.join(format!("{name}.sha256"))).unwrap();
        let mir = terra_policy::Mir::decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(mir.bytes(), &bytes[..], "{name}");
        assert_eq!(mir.decision_digest(), digest.trim(), "{name}");
    }
}
