//! Every published vector decodes, re-encodes byte for byte and has the published digest.

use terra_test_support::data::{unhex, vector, PUBLISHED_VECTORS};

#[test]
fn vectors_decode_and_digest() {
    for name in PUBLISHED_VECTORS {
        let bytes = unhex(vector(name, "mir.hex"));
        let digest = String::from_utf8(vector(name, "sha256")).unwrap();
        let mir = terra_policy::Mir::decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(mir.bytes(), &bytes[..], "{name}");
        assert_eq!(mir.decision_digest(), digest.trim(), "{name}");
    }
}
