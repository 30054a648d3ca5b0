//! The layers of the code point one way (docs/architecture.md, Crates):
//! between the crates, as their Cargo.toml files declare them, and between
//! the modules of each crate, as their `crate::` and `super::` paths use
//! them. These tests read the sources; they build nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The terra crates under `crates/`, by package name.
fn crate_dirs() -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        if dir.join("Cargo.toml").is_file() {
            let name = dir.file_name().unwrap().to_str().unwrap().to_string();
            out.insert(name, dir);
        }
    }
    assert!(
        out.contains_key("terra-kernel"),
        "no crates found in {out:?}"
    );
    out
}

/// The terra crates a manifest names in its dependency tables (normal,
/// build, per target; and dev-dependencies when `dev`), itself excluded.
fn terra_dependencies(name: &str, manifest: &Path, dev: bool) -> BTreeSet<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut deps = BTreeSet::new();
    let mut in_deps = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            let table = line.trim_end_matches(']');
            in_deps =
                table.ends_with("dependencies") && (dev || !table.ends_with("dev-dependencies"));
            continue;
        }
        if !in_deps {
            continue;
        }
        let key = line.split(['=', '.', ' ']).next().unwrap_or("");
        if key.starts_with("terra-") && key != name {
            deps.insert(key.to_string());
        }
    }
    deps
}

/// Crates that must never depend on each other, in either direction: the
/// broker and the sandbox meet only in the binary, and share what both need
/// of the kernel through terra-kernel.
const APART: &[(&str, &str)] = &[("terra-netd", "terra-sandbox")];

/// The lowest crates: no terra crate below them (test helpers aside).
const LOWEST: &[&str] = &["terra-kernel", "terra-policy", "terra-seccomp"];

#[test]
fn the_broker_and_the_sandbox_do_not_depend_on_each_other() {
    let dirs = crate_dirs();
    for (a, b) in APART {
        for (from, to) in [(a, b), (b, a)] {
            let deps = terra_dependencies(from, &dirs[*from].join("Cargo.toml"), true);
            assert!(
                !deps.contains(*to),
                "{from} depends on {to} (crates/{from}/Cargo.toml): the two meet only in the \
                 binary; what both need of the kernel belongs in terra-kernel"
            );
        }
    }
}

#[test]
fn the_crates_form_no_cycle_and_the_lowest_depend_on_no_terra_crate() {
    let dirs = crate_dirs();
    let graph: BTreeMap<String, BTreeSet<String>> = dirs
        .iter()
        .map(|(name, dir)| {
            let deps = terra_dependencies(name, &dir.join("Cargo.toml"), false);
            (name.clone(), deps)
        })
        .collect();
    for low in LOWEST {
        // Their tests may use a crate above them (terra-kernel's compile a
        // real filter); their code may not.
        let below = terra_dependencies(low, &dirs[*low].join("Cargo.toml"), false);
        assert!(
            below.is_empty(),
            "{low} is a lowest crate but depends on {below:?}"
        );
    }
    let cycles = cycles(&graph);
    assert!(
        cycles.is_empty(),
        "crates depend on each other in a cycle: {cycles:?}"
    );
}

/// The strongly connected parts (more than one node) of a directed graph.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.graph.contains_key(w) {
                    continue;
                }
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let l = self.low[v].min(self.low[w]);
                    self.low.insert(v, l);
                } else if self.on_stack.contains(w) {
                    let l = self.low[v].min(self.index[w]);
                    self.low.insert(v, l);
                }
            }
            if self.low[v] == self.index[v] {
                let mut part = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    part.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if part.len() > 1 {
                    part.sort();
                    self.out.push(part);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

/// The source with comments, string and character literals blanked and the
/// test-only modules (`#[cfg(test)] mod NAME { ... }`) removed: what is left
/// is the code whose paths name other modules.
fn code_only(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('#') || next == Some('"'))
            && !ident_char(b.get(i.wrapping_sub(1)).copied())
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                i += if b[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < b.len() && b[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    remove_test_modules(&out)
}

fn ident_char(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || c == '_')
}

fn remove_test_modules(code: &str) -> String {
    let mut out = code.to_string();
    let mut from = 0;
    while let Some(at) = out[from..].find("#[cfg(").map(|p| p + from) {
        let attr_end = match out[at..].find(")]") {
            Some(p) => at + p + 2,
            None => break,
        };
        let attr = &out[at..attr_end];
        let is_test = attr
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == "test");
        let rest = out[attr_end..].trim_start();
        if is_test && (rest.starts_with("mod ") || rest.starts_with("pub mod ")) {
            let open = match out[attr_end..].find(['{', ';']) {
                Some(p) => attr_end + p,
                None => break,
            };
            if out.as_bytes()[open] == b';' {
                from = attr_end;
                continue;
            }
            let mut depth = 0;
            let mut end = out.len();
            for (k, ch) in out[open..].char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = open + k + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            out.replace_range(at..end, "");
            from = at;
        } else {
            from = attr_end;
        }
    }
    out
}

/// The module path of each source file of a crate (`linux::vm` for
/// `src/linux/vm.rs`, `linux` for `src/linux/mod.rs`; the root is empty).
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_str().unwrap().to_string())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            out.insert(parts.join("::"), path);
        }
    }
    out
}

/// The paths (as segments) that start with `crate` or `super` in `code`:
/// each inline path, and every leaf of a `use` tree.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let words: Vec<(usize, &str)> = word_starts(code);
    for (at, w) in words {
        if w == "use" {
            let end = code[at..].find(';').map_or(code.len(), |p| at + p);
            expand_use(code[at + 3..end].trim(), &mut Vec::new(), &mut out);
        } else if w == "crate" || w == "super" {
            let mut segs = Vec::new();
            let mut rest = &code[at..];
            loop {
                let n = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                if n == 0 {
                    break;
                }
                segs.push(rest[..n].to_string());
                rest = &rest[n..];
                match rest.strip_prefix("::") {
                    Some(r) => rest = r,
                    None => break,
                }
            }
            out.push(segs);
        }
    }
    out.retain(|p| matches!(p.first().map(String::as_str), Some("crate" | "super")));
    out
}

/// The start of each identifier-like word that is not part of a longer
/// path segment after `::` or `.`.
fn word_starts(code: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (k, c) in code
        .char_indices()
        .chain(std::iter::once((code.len(), ' ')))
    {
        let is_ident = c.is_alphanumeric() || c == '_';
        match (start, is_ident) {
            (None, true) => start = Some(k),
            (Some(s), false) => {
                let before = code[..s].trim_end();
                if !before.ends_with("::") && !before.ends_with('.') {
                    out.push((s, &code[s..k]));
                }
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// Expands one `use` tree (`a::{b, c::{d, e as f}}`) into its leaf paths.
fn expand_use(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    let tree = tree.strip_prefix("::").unwrap_or(tree);
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open]
            .split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let n = prefix.len();
        prefix.extend(head);
        for part in split_top(inner) {
            expand_use(part, prefix, out);
        }
        prefix.truncate(n);
    } else {
        let path = tree.split(" as ").next().unwrap_or("").trim();
        if path.is_empty() {
            return;
        }
        let mut p = prefix.clone();
        p.extend(
            path.split("::")
                .map(|s| s.trim().to_string())
                .filter(|s| s != "self" && s != "*"),
        );
        out.push(p);
    }
}

/// Splits a `use` group's contents at its top-level commas.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (k, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// The module a path names: the longest known module prefix, from the crate
/// root (`crate::`) or from the parent of `from` (`super::`).
fn target(from: &str, path: &[String], known: &BTreeMap<String, PathBuf>) -> String {
    let mut cur: Vec<&str> = from.split("::").filter(|s| !s.is_empty()).collect();
    let mut segs = path.iter().map(String::as_str).peekable();
    match segs.peek() {
        Some(&"crate") => {
            cur.clear();
            segs.next();
        }
        _ => {
            while segs.peek() == Some(&"super") {
                segs.next();
                cur.pop();
            }
        }
    }
    for s in segs {
        let mut next = cur.clone();
        next.push(s);
        if known.contains_key(&next.join("::")) {
            cur = next;
        } else {
            break;
        }
    }
    cur.join("::")
}

/// Whether `a` is `b` or one of its ancestors.
fn ancestor_or_self(a: &str, b: &str) -> bool {
    a.is_empty() || a == b || b.starts_with(&format!("{a}::"))
}

/// Each crate's module graph: `m -> t` when module `m` names module `t` by
/// a `crate::` or `super::` path, neither being the other's ancestor (a
/// module and the modules it declares form the tree, not a layer).
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let known = modules(src);
    let mut graph = BTreeMap::new();
    for (m, file) in &known {
        let code = code_only(&std::fs::read_to_string(file).unwrap());
        let mut uses = BTreeSet::new();
        for p in crate_paths(&code) {
            let t = target(m, &p, &known);
            if !ancestor_or_self(&t, m) && !ancestor_or_self(m, &t) {
                uses.insert(t);
            }
        }
        graph.insert(m.clone(), uses);
    }
    graph
}

#[test]
fn the_modules_of_each_crate_form_no_cycle() {
    let mut found = Vec::new();
    let mut crates: Vec<(String, PathBuf)> = crate_dirs().into_iter().collect();
    crates.push(("terra".into(), root()));
    for (name, dir) in crates {
        let graph = module_graph(&dir.join("src"));
        for part in cycles(&graph) {
            let edges: Vec<String> = part
                .iter()
                .flat_map(|m| {
                    graph[m]
                        .iter()
                        .filter(|t| part.contains(t))
                        .map(move |t| format!("{m} -> {t}"))
                })
                .collect();
            found.push(format!("{name}: {}", edges.join(", ")));
        }
    }
    assert!(
        found.is_empty(),
        "modules that use each other (move what both need into the lower one):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_module_checker_sees_a_cycle_and_its_paths() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir(src.join("net")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod net;\n").unwrap();
    std::fs::write(
        src.join("a.rs"),
        "use crate::{b::{self, Thing as T}, net};\n// crate::c in a comment\n",
    )
    .unwrap();
    std::fs::write(
        src.join("b.rs"),
        "fn f() -> u8 { let s = \"crate::a\"; super::a::g() }\n#[cfg(test)]\nmod tests { use crate::net::x; }\n",
    )
    .unwrap();
    std::fs::write(src.join("net/mod.rs"), "mod x;\n").unwrap();
    std::fs::write(src.join("net/x.rs"), "use super::super::b::Thing;\n").unwrap();
    let graph = module_graph(src);
    assert_eq!(
        graph["a"],
        BTreeSet::from(["b".to_string(), "net".to_string()])
    );
    assert_eq!(graph["b"], BTreeSet::from(["a".to_string()]));
    assert_eq!(graph["net::x"], BTreeSet::from(["b".to_string()]));
    assert!(graph["net"].is_empty());
    assert_eq!(cycles(&graph), vec![vec!["a".to_string(), "b".to_string()]]);
}
