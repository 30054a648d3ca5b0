//! The conformance data the suites read: the repository's `spec/` directory
//! (vectors and corpora), and the hex encoding its `.hex` files use.

use std::path::{Path, PathBuf};

/// The repository's `spec/` directory.
pub fn spec_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec")
}

/// The bytes of `spec/vectors/<name>.<ext>`.
pub fn vector(name: &str, ext: &str) -> Vec<u8> {
    let p = spec_dir().join("vectors").join(format!("{name}.{ext}"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Decodes hex text (surrounding white space ignored); panics on anything else.
pub fn unhex(s: impl AsRef<[u8]>) -> Vec<u8> {
    let s = std::str::from_utf8(s.as_ref())
        .expect("hex text is ASCII")
        .trim();
    assert!(s.len() % 2 == 0, "odd number of hex digits");
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16)
                .unwrap_or_else(|e| panic!("not hex at {i}: {:?}: {e}", &s[i..i + 2]))
        })
        .collect()
}

/// The `*.<ext>` files of `dir`, sorted; fails unless there are at least `min`
/// (the whole corpus, not a stray subset).
pub fn corpus_files(dir: &Path, ext: &str, min: usize) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    files.sort();
    assert!(
        files.len() >= min,
        "expected the whole corpus {}, found {} cases",
        dir.display(),
        files.len()
    );
    files
}
