//! Helpers shared by the policy crate's tests: the integration tests (`mod
//! common;`) and the unit tests (through `src/testing.rs`). Standard library
//! and tempfile only, so that both can build it.
#![allow(dead_code)] // each test binary uses some of them

use std::path::PathBuf;

/// The published vectors in `spec/vectors`, by name.
pub const VECTORS: [&str; 5] = [
    "minimal",
    "workspace",
    "deny-write",
    "mediated",
    "mediated-flags",
];

/// A temporary directory and its canonical path (the form resolution gives).
pub fn tmp() -> (tempfile::TempDir, String) {
    let t = tempfile::tempdir().unwrap();
    let p = std::fs::canonicalize(t.path())
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    (t, p)
}

/// The repository's `spec/` directory: the published vectors and corpora.
pub fn spec_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../spec"))
}

/// The bytes a hex text spells (a `.mir.hex` vector); white space around it
/// is ignored.
pub fn unhex(s: &str) -> Vec<u8> {
    let s = s.trim();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
