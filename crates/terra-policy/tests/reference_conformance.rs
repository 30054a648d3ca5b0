//! Conformance with the public reference of MIR v3 where the published vectors
//! say nothing: minimal-runtime rules with a relative path,
//! the exact escaping of inspection JSON, and the rule cap counted after
//! de-duplication. The repository's own vectors are in `tests/vectors`.
// Unix trees (symlinks, absolute / paths): Unix only.
#![cfg(unix)]

use std::os::unix::fs::symlink;
use std::path::PathBuf;

use terra_test_support::data::{own_vector, unhex};

use terra_policy::{
    compile_source, inspection_json, resolve, Access, Capability, ErrorClass, HostBindings, Mir,
    MirBuilder, Missing, Permission, RootKind, Scope,
};

fn vector(name: &str, ext: &str) -> String {
    String::from_utf8(own_vector(name, ext)).unwrap()
}

/// The 20-byte header of a MIR with `rules` records, network none, process
/// tree required, root read-only, followed by the given records.
fn mir_bytes(records: &[(u8, u8, u8, u8, &[u8])]) -> Vec<u8> {
    let mut b = b"MMIR\x00\x03\x00\x00".to_vec();
    b.extend_from_slice(&(records.len() as u32).to_be_bytes());
    b.extend_from_slice(&[1, 1, 1, 0, 0, 0, 0, 0]);
    for &(access, root, scope, missing, path) in records {
        b.extend_from_slice(&[1, access, root, scope, missing, 0, 0, 0]);
        b.extend_from_slice(&(path.len() as u32).to_be_bytes());
        b.extend_from_slice(path);
    }
    b
}

// ---------------------------------------------------------------------------
// Minimal-runtime rules with a relative path.

#[test]
fn minimal_runtime_relative_vector_decodes_as_canonical() {
    let bytes = unhex(vector("minimal-runtime-relative", "mir.hex"));
    assert_eq!(bytes.len(), 35);
    let mir = Mir::decode(&bytes).unwrap_or_else(|e| panic!("the reference accepts it: {e}"));
    assert_eq!(mir.bytes(), &bytes[..], "re-encodes byte for byte");
    assert_eq!(
        mir.decision_digest(),
        vector("minimal-runtime-relative", "sha256").trim()
    );
    assert_eq!(
        mir.decision_digest(),
        "b47fd5b3e1854e9f19fe3052b0d1ed8be42e3610e768068ebec570d40265e518"
    );
    let rule = &mir.rules()[0];
    assert_eq!(
        (
            rule.access,
            rule.target.root,
            rule.target.path.as_str(),
            rule.target.scope,
            rule.target.missing
        ),
        (
            Access::Read,
            RootKind::MinimalRuntime,
            "lib",
            Scope::Tree,
            Missing::Error
        )
    );
    assert_eq!(
        inspection_json(&mir),
        vector("minimal-runtime-relative", "inspect.json")
    );
    // The builder makes the same bytes from the same rule.
    let mut b = MirBuilder::new();
    b.add_rule(
        Access::Read,
        RootKind::MinimalRuntime,
        "./lib/",
        Scope::Tree,
        Missing::Error,
    )
    .unwrap();
    assert_eq!(b.build().unwrap(), mir);
}

#[test]
fn minimal_runtime_relative_records_follow_the_path_rules() {
    let canonical = mir_bytes(&[(1, 1, 2, 1, b"lib/x")]);
    assert!(Mir::decode(&canonical).is_ok());
    // Unnormalized: readable, but not canonical.
    for path in [&b"lib//x"[..], b"./lib/x", b"lib/x/"] {
        let e = Mir::decode(&mir_bytes(&[(1, 1, 2, 1, path)])).unwrap_err();
        assert_eq!(e.class(), ErrorClass::NonCanonical, "{path:?}: {e}");
    }
    // Absolute, '..', NUL: structural damage.
    for path in [&b"/lib"[..], b"lib/../x", b"li\0b"] {
        let e = Mir::decode(&mir_bytes(&[(1, 1, 2, 1, path)])).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Format, "{path:?}: {e}");
    }
    // Sorted by path bytes after the root: "" before "lib" before "lib/x".
    let sorted = mir_bytes(&[
        (1, 1, 2, 1, b""),
        (1, 1, 2, 1, b"lib"),
        (1, 1, 2, 1, b"lib/x"),
    ]);
    assert_eq!(Mir::decode(&sorted).unwrap().rules().len(), 3);
    let unsorted = mir_bytes(&[(1, 1, 2, 1, b"lib"), (1, 1, 2, 1, b"")]);
    assert_eq!(
        Mir::decode(&unsorted).unwrap_err().class(),
        ErrorClass::NonCanonical
    );
}

#[test]
fn the_source_still_cannot_write_a_minimal_runtime_path() {
    let doc = |path: &str| {
        format!(
            r#"{{"formatVersion":3,"filesystem":{{"default":"deny","rules":[{{"access":"read","path":{path}}}]}},"network":{{"mode":"none"}},"process":{{"treeConfinement":"required"}},"root":{{"mode":"read-only"}}}}"#
        )
    };
    for path in [
        r#"{"special":"minimal-runtime","relative":"lib"}"#,
        r#"{"root":"minimal-runtime","relative":"lib"}"#,
    ] {
        let e = compile_source(doc(path).as_bytes()).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Format, "{path}: {e}");
    }
    let m = compile_source(doc(r#"{"special":"minimal-runtime"}"#).as_bytes()).unwrap();
    assert_eq!(m.rules()[0].target.path, "");
}

use terra_test_support::dirs::canonical_tempdir as tmp;

fn one(access: Access, path: &str, scope: Scope, missing: Missing) -> Mir {
    let mut b = MirBuilder::new();
    b.add_rule(access, RootKind::MinimalRuntime, path, scope, missing)
        .unwrap();
    b.build().unwrap()
}

fn roots(dirs: &[&str]) -> HostBindings {
    HostBindings {
        minimal_roots: dirs.iter().map(PathBuf::from).collect(),
        ..HostBindings::default()
    }
}

/// Three roots: `a` holds `lib/` (a directory), `b` holds `lib/` too, `c`
/// holds `lib` as a regular file, `d` holds nothing.
fn runtime_tree() -> (tempfile::TempDir, [String; 4]) {
    let (t, d) = tmp();
    let names = ["a", "b", "c", "d"].map(|n| format!("{d}/{n}"));
    for n in &names {
        std::fs::create_dir(n).unwrap();
    }
    std::fs::create_dir_all(format!("{}/lib/x", names[0])).unwrap();
    std::fs::create_dir_all(format!("{}/lib/x", names[1])).unwrap();
    std::fs::write(format!("{}/lib", names[2]), b"").unwrap();
    (t, names)
}

#[test]
fn a_minimal_runtime_path_resolves_below_every_root() {
    let (_t, [a, b, _c, _d]) = runtime_tree();
    let mir = Mir::decode(&unhex(vector("minimal-runtime-relative", "mir.hex"))).unwrap();
    let r = resolve(&mir, &roots(&[&a, &b])).unwrap();
    let paths: Vec<(&str, RootKind, usize)> = r
        .rules()
        .iter()
        .map(|x| (x.path.as_str(), x.source_root, x.source_rule))
        .collect();
    let (al, bl) = (format!("{a}/lib"), format!("{b}/lib"));
    let mut want = vec![
        (al.as_str(), RootKind::MinimalRuntime, 0),
        (bl.as_str(), RootKind::MinimalRuntime, 0),
    ];
    want.sort();
    assert_eq!(paths, want);
    assert!(r.omitted().is_empty());
    // Evaluation: below the joined path, not beside it, not the root itself.
    for (path, want) in [
        (format!("{a}/lib"), Permission::Read),
        (format!("{a}/lib/x/y"), Permission::Read),
        (format!("{b}/lib/x"), Permission::Read),
        (a.clone(), Permission::None),
        (format!("{a}/libx"), Permission::None),
        (format!("{a}/bin"), Permission::None),
    ] {
        assert_eq!(r.evaluate(&path).unwrap().permission, want, "{path}");
    }
    // None bound: unsupported, as for a minimal-runtime rule without a path.
    let e = resolve(&mir, &HostBindings::default()).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Unsupported);
    assert!(e.detail().contains("minimal-runtime \"lib\""), "{e}");
}

#[test]
fn a_missing_minimal_runtime_path_follows_the_rule_s_missing_mode() {
    let (_t, [a, _b, c, d]) = runtime_tree();
    // ENOENT (d has no lib) and ENOTDIR (c/lib is a file, so c/lib/x cannot
    // exist) both mean missing.
    for (path, absent_root) in [("lib", &d), ("lib/x", &c)] {
        let absent = format!("{absent_root}/{path}");
        let bindings = roots(&[&a, absent_root]);
        // missing: error -> the resolution stops, naming the absent candidate.
        let e = resolve(
            &one(Access::Read, path, Scope::Tree, Missing::Error),
            &bindings,
        )
        .unwrap_err();
        assert_eq!(e.class(), ErrorClass::Missing, "{path}: {e}");
        assert!(e.detail().contains(&absent), "{e}");
        // A grant with missing: skip -> omitted for that root only.
        let r = resolve(
            &one(Access::Write, path, Scope::Tree, Missing::Skip),
            &bindings,
        )
        .unwrap();
        assert_eq!(r.rules().len(), 1, "{path}");
        assert_eq!(r.rules()[0].path, format!("{a}/{path}"));
        assert_eq!(r.omitted().len(), 1);
        assert_eq!(r.omitted()[0].path, absent);
    }
    // A deny or deny-write with missing: skip on an absent (ENOENT) target is
    // kept as protect-create, named below that root.
    for access in [Access::Deny, Access::DenyWrite] {
        let r = resolve(
            &one(access, "lib/x", Scope::Tree, Missing::Skip),
            &roots(&[&a, &d]),
        )
        .unwrap();
        let mut got: Vec<(String, bool)> = r
            .rules()
            .iter()
            .map(|x| (x.path.clone(), x.protect_create))
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![(format!("{a}/lib/x"), false), (format!("{d}/lib/x"), true)]
        );
        assert!(r
            .required_capabilities()
            .contains(Capability::FsProtectCreate));
    }
    // Through a non-directory (ENOTDIR) a protect-create name cannot be
    // made: refused, never guessed.
    let e = resolve(
        &one(Access::Deny, "lib/x", Scope::Tree, Missing::Skip),
        &roots(&[&c]),
    )
    .unwrap_err();
    assert_eq!(e.class(), ErrorClass::Format, "{e}");
}

#[test]
fn a_minimal_runtime_path_cannot_leave_its_root() {
    let (_t, outside) = tmp();
    let (_t2, d) = tmp();
    std::fs::create_dir(format!("{d}/root")).unwrap();
    symlink(&outside, format!("{d}/root/lib")).unwrap();
    let e = resolve(
        &one(Access::Read, "lib", Scope::Tree, Missing::Error),
        &roots(&[&format!("{d}/root")]),
    )
    .unwrap_err();
    assert_eq!(e.class(), ErrorClass::Format, "{e}");
    assert!(e.detail().contains("outside its root"), "{e}");
    // A symlink loop is a hard failure, whatever the missing mode.
    symlink("loop", format!("{d}/root/loop")).unwrap();
    for missing in [Missing::Error, Missing::Skip] {
        let e = resolve(
            &one(Access::Read, "loop/x", Scope::Tree, missing),
            &roots(&[&format!("{d}/root")]),
        )
        .unwrap_err();
        assert_eq!(e.class(), ErrorClass::Io, "{e}");
    }
}

// ---------------------------------------------------------------------------
// Inspection JSON escaping.

#[test]
fn inspection_escapes_control_bytes_and_del_like_the_reference() {
    let bytes = mir_bytes(&[(1, 2, 2, 1, b"a\x7fb\tc\nd")]);
    let mir = Mir::decode(&bytes).unwrap();
    let json = inspection_json(&mir);
    assert!(
        json.contains("\n        \"path\": \"a\\u007fb\\u0009c\\u000ad\",\n"),
        "{json}"
    );
    assert!(!json.contains('\u{7f}') && !json.contains('\t'), "{json}");
    // Every control byte, DEL, '"' and '\' in one path; UTF-8 stays verbatim.
    let mut path: Vec<u8> = (1u8..0x20).collect();
    path.extend_from_slice(b"\x7f\"\\/\xc3\xa9");
    let mir = Mir::decode(&mir_bytes(&[(1, 2, 2, 1, &path)])).unwrap();
    let mut want = String::from("\"");
    for b in 1u8..0x20 {
        want.push_str(&format!("\\u{b:04x}"));
    }
    want.push_str("\\u007f\\\"\\\\/\u{e9}\"");
    assert!(
        inspection_json(&mir).contains(&format!("\"path\": {want},\n")),
        "{}",
        inspection_json(&mir)
    );
}

// ---------------------------------------------------------------------------
// The rule cap counts after de-duplication, whatever the order.

fn many_rules(rules: &[String]) -> String {
    format!(
        r#"{{"formatVersion":3,"filesystem":{{"default":"deny","rules":[{}]}},"network":{{"mode":"none"}},"process":{{"treeConfinement":"required"}},"root":{{"mode":"read-only"}}}}"#,
        rules.join(",")
    )
}

fn rule(access: &str, rel: &str) -> String {
    format!(r#"{{"access":"{access}","path":{{"root":"workspace","relative":"{rel}"}}}}"#)
}

#[test]
fn the_rule_cap_counts_after_de_duplication_in_any_order() {
    let distinct: Vec<String> = (0..4096).map(|i| rule("read", &format!("r{i}"))).collect();
    // Each extra rule merges into a target already held: an exact duplicate,
    // a write absorbing a read, a deny absorbing (or absorbed by) the rest.
    for extra in [
        rule("read", "r17"),
        rule("write", "r17"),
        rule("deny", "r17"),
    ] {
        for extra_first in [false, true] {
            let mut rules = distinct.clone();
            if extra_first {
                rules.insert(0, extra.clone());
            } else {
                rules.push(extra.clone());
            }
            let m = compile_source(many_rules(&rules).as_bytes())
                .unwrap_or_else(|e| panic!("{extra} first={extra_first}: {e}"));
            assert_eq!(m.rules().len(), 4096, "{extra} first={extra_first}");
        }
    }
    // The case where the reference's answer depends on the order: at the cap,
    // a deny-write beside a grant would be the 4,097th record, but a later
    // deny on the same target takes the place of both. Counted after
    // de-duplication that is 4,096 records, in every order.
    let (deny_write, deny) = (rule("deny-write", "r17"), rule("deny", "r17"));
    let orders: [Vec<String>; 3] = [
        [distinct.clone(), vec![deny_write.clone(), deny.clone()]].concat(),
        [
            vec![deny.clone()],
            distinct.clone(),
            vec![deny_write.clone()],
        ]
        .concat(),
        [
            vec![deny_write.clone()],
            distinct.clone(),
            vec![deny.clone()],
        ]
        .concat(),
    ];
    for rules in orders {
        let m = compile_source(many_rules(&rules).as_bytes()).unwrap();
        assert_eq!(m.rules().len(), 4096);
        assert!(m
            .rules()
            .iter()
            .any(|r| r.target.path == "r17" && r.access == Access::Deny));
    }
    // 4,096 targets with a deny-write beside one grant are 4,097 records.
    for extra_first in [false, true] {
        let mut rules = distinct.clone();
        let extra = rule("deny-write", "r17");
        if extra_first {
            rules.insert(0, extra);
        } else {
            rules.push(extra);
        }
        let e = compile_source(many_rules(&rules).as_bytes()).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Limit, "{e}");
        assert!(e.detail().contains("4097"), "{e}");
    }
    // 4,097 distinct targets: refused, in either order.
    let mut rules = distinct.clone();
    rules.push(rule("read", "r4096"));
    for order in [rules.clone(), rules.into_iter().rev().collect()] {
        let e = compile_source(many_rules(&order).as_bytes()).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Limit, "{e}");
    }
    // The same through the builder and the decoder: MIR with 4,096 records.
    let m = compile_source(many_rules(&distinct).as_bytes()).unwrap();
    assert_eq!(Mir::decode(m.bytes()).unwrap(), m);
}
