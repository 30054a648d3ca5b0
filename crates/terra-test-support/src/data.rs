//! The conformance data the suites read: the repository's `spec/` directory
//! (vectors and corpora), and the hex encoding its `.hex` files use.

use std::path::{Path, PathBuf};

/// `rel` under the repository's root.
pub fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// The repository's `spec/` directory: the published vectors and corpora.
pub fn spec_dir() -> PathBuf {
    repo_path("spec")
}

/// The bytes of `path`; fails naming it.
pub fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The bytes of the published vector `spec/vectors/<name>.<ext>`.
pub fn vector(name: &str, ext: &str) -> Vec<u8> {
    read(&spec_dir().join("vectors").join(format!("{name}.{ext}")))
}

/// The bytes of `crates/terra-policy/tests/vectors/<name>.<ext>`: the
/// vectors this repository adds where the published ones say nothing.
pub fn own_vector(name: &str, ext: &str) -> Vec<u8> {
    read(&repo_path("crates/terra-policy/tests/vectors").join(format!("{name}.{ext}")))
}

/// The names of the published vectors (`spec/vectors/<name>.*`).
pub const PUBLISHED_VECTORS: [&str; 5] = [
    "minimal",
    "workspace",
    "deny-write",
    "mediated",
    "mediated-flags",
];

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

/// The cases of `spec/corpus/<corpus>` (its `*.case` files, sorted): each
/// file's name and text. Fails unless there are at least `min` (the whole
/// corpus, not a stray subset).
pub fn corpus_cases(corpus: &str, min: usize) -> Vec<(String, String)> {
    let dir = spec_dir().join("corpus").join(corpus);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "case"))
        .collect();
    files.sort();
    assert!(
        files.len() >= min,
        "expected the whole corpus {}, found {} cases",
        dir.display(),
        files.len()
    );
    files
        .iter()
        .map(|p| {
            let text =
                String::from_utf8(read(p)).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.file_name().unwrap().to_string_lossy().into_owned(), text)
        })
        .collect()
}
