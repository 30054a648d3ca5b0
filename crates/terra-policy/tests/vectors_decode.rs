//! Every published vector decodes, re-encodes byte for byte and has the published digest.

mod common;

use common::{spec_dir, unhex, VECTORS};

#[test]
fn vectors_decode_and_digest() {
    for name in VECTORS {
        let dir = spec_dir().join("vectors");
        let bytes = unhex(&std::fs::read_to_string(dir.join(format!("{name}.mir.hex"))).unwrap());
        let digest = std::fs::read_to_string(dir.join(format!("{name}.sha256"))).unwrap();
        let mir = terra_policy::Mir::decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(mir.bytes(), &bytes[..], "{name}");
        assert_eq!(mir.decision_digest(), digest.trim(), "{name}");
    }
}
