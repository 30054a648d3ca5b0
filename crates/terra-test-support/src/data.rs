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
    assert!(s.len() % 2 != 1, "odd number of hex digits");
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

/// One case of the permissions corpus (`spec/corpus/permissions/*.case`), as
/// its text says it; the suites turn the words into their own types.
#[derive(Debug, Clone)]
pub struct PermissionCase {
    /// The file name.
    pub name: String,
    /// `rule ACCESS SCOPE PATH [protect-create]`: access, scope, path, protect-create.
    pub rules: Vec<(String, String, String, bool)>,
    /// `node KIND PATH`: directory, file or absent.
    pub nodes: Vec<(String, String)>,
    /// `requires CAPABILITY`.
    pub requires: Vec<String>,
    /// `query PATH PERMISSION REASON`.
    pub queries: Vec<(String, String, String)>,
    /// `compile refused before=P after=Q`; None for `compile accepted`.
    pub refused: Option<(String, String)>,
}

impl PermissionCase {
    /// Parses one case; fails on an unknown directive or without a compile line.
    pub fn parse(name: &str, text: &str) -> PermissionCase {
        let mut c = PermissionCase {
            name: name.into(),
            rules: vec![],
            nodes: vec![],
            requires: vec![],
            queries: vec![],
            refused: None,
        };
        let mut compile_seen = false;
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let w: Vec<&str> = line.split_whitespace().collect();
            let word = |i: usize| -> String {
                w.get(i)
                    .unwrap_or_else(|| panic!("{name}: too few words: {line}"))
                    .to_string()
            };
            match w[0] {
                "rule" => {
                    let pc = match w.get(4) {
                        None => false,
                        Some(&"protect-create") => true,
                        Some(x) => panic!("{name}: unknown rule flag {x}"),
                    };
                    c.rules.push((word(1), word(2), word(3), pc));
                }
                "node" => c.nodes.push((word(1), word(2))),
                "requires" => c.requires.push(word(1)),
                "query" => c.queries.push((word(1), word(2), word(3))),
                "compile" => {
                    compile_seen = true;
                    match w.get(1) {
                        Some(&"accepted") => {}
                        Some(&"refused") => {
                            let before = word(2).strip_prefix("before=").map(String::from);
                            let after = word(3).strip_prefix("after=").map(String::from);
                            c.refused = Some((before.expect(line), after.expect(line)));
                        }
                        x => panic!("{name}: compile {x:?}"),
                    }
                }
                x => panic!("{name}: unknown directive {x}"),
            }
        }
        assert!(compile_seen, "{name}: no compile line");
        c
    }

    /// Creates the case's nodes under `root` (absent ones are not created;
    /// rule targets no node names are unnamed ancestors: directories), then
    /// checks that the absent ones do not exist.
    pub fn make_nodes(&self, root: &str) {
        for (kind, path) in &self.nodes {
            let p = PathBuf::from(under(root, path));
            match kind.as_str() {
                "directory" => std::fs::create_dir_all(&p).unwrap(),
                "file" => {
                    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                    std::fs::write(&p, b"x").unwrap();
                }
                "absent" => {}
                k => panic!("{}: node kind {k}", self.name),
            }
        }
        for (_, _, path, protect_create) in &self.rules {
            let p = PathBuf::from(under(root, path));
            if !protect_create && !p.exists() {
                std::fs::create_dir_all(&p).unwrap();
            }
        }
        for (kind, path) in &self.nodes {
            if kind == "absent" {
                let p = under(root, path);
                assert!(!Path::new(&p).exists(), "{}: {path} exists", self.name);
            }
        }
    }
}

/// Every case of the permissions corpus.
pub fn permission_cases() -> Vec<PermissionCase> {
    corpus_cases("permissions", 26)
        .iter()
        .map(|(name, text)| PermissionCase::parse(name, text))
        .collect()
}

/// A corpus path (absolute, "/" for the root) placed under `prefix`; the
/// path itself when `prefix` is empty.
pub fn under(prefix: &str, path: &str) -> String {
    if prefix.is_empty() {
        path.to_string()
    } else if path == "/" {
        prefix.to_string()
    } else {
        format!("{prefix}{path}")
    }
}
