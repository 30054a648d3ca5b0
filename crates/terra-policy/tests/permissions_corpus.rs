//! Every case of the permissions corpus (spec/corpus/permissions, a copy of the published corpus), run
//! two ways through the library:
//! 1. directly on the resolved rules of the case, with the linear evaluator in
//!    written and reversed order, the indexed evaluator, and the conflict check;
//! 2. on a real filesystem: the case's nodes created under a temporary
//!    directory, a decision of `host` rules under it resolved with `resolve`
//!    (protect-create rules get `missing: skip`), queries evaluated on the plan.

use std::path::{Path, PathBuf};

use terra_test_support::data::corpus_cases;

use terra_policy::evaluate::evaluate_rules;
use terra_policy::{
    check_conflicts, find_conflicts, resolve, Access, Capability, ErrorClass, HostBindings,
    MirBuilder, Missing, Permission, Reason, ResolvedRule, RootKind, RuleSet, Scope,
};

#[derive(Debug)]
struct Case {
    name: String,
    rules: Vec<(Access, Scope, String, bool)>,
    nodes: Vec<(String, String)>,
    requires: Vec<Capability>,
    queries: Vec<(String, Permission, Reason)>,
    refused: Option<(Permission, Permission)>,
}

fn parse(name: &str, text: &str) -> Case {
    let mut c = Case {
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
        match w[0] {
            "rule" => {
                let access =
                    Access::from_name(w[1]).unwrap_or_else(|| panic!("{name}: access {line}"));
                let scope =
                    Scope::from_name(w[2]).unwrap_or_else(|| panic!("{name}: scope {line}"));
                let pc = match w.get(4) {
                    None => false,
                    Some(&"protect-create") => true,
                    Some(x) => panic!("{name}: unknown rule flag {x}"),
                };
                c.rules.push((access, scope, w[3].to_string(), pc));
            }
            "node" => c.nodes.push((w[1].to_string(), w[2].to_string())),
            "requires" => c
                .requires
                .push(Capability::from_name(w[1]).unwrap_or_else(|| panic!("{name}: {line}"))),
            "query" => c.queries.push((
                w[1].to_string(),
                Permission::from_name(w[2]).unwrap_or_else(|| panic!("{name}: {line}")),
                Reason::from_name(w[3]).unwrap_or_else(|| panic!("{name}: {line}")),
            )),
            "compile" => {
                compile_seen = true;
                match w[1] {
                    "accepted" => {}
                    "refused" => {
                        let before = w[2].strip_prefix("before=").and_then(Permission::from_name);
                        let after = w[3].strip_prefix("after=").and_then(Permission::from_name);
                        c.refused = Some((before.expect(line), after.expect(line)));
                    }
                    x => panic!("{name}: compile {x}"),
                }
            }
            x => panic!("{name}: unknown directive {x}"),
        }
    }
    assert!(compile_seen, "{name}: no compile line");
    c
}

fn cases() -> Vec<Case> {
    corpus_cases("permissions", 26)
        .iter()
        .map(|(name, text)| parse(name, text))
        .collect()
}

fn resolved(c: &Case, prefix: &str) -> Vec<ResolvedRule> {
    c.rules
        .iter()
        .enumerate()
        .map(|(i, (access, scope, path, pc))| ResolvedRule {
            access: *access,
            path: under(prefix, path),
            scope: *scope,
            protect_create: *pc,
            source_rule: i,
            source_root: RootKind::Host,
        })
        .collect()
}

fn under(prefix: &str, path: &str) -> String {
    if prefix.is_empty() {
        path.to_string()
    } else if path == "/" {
        prefix.to_string()
    } else {
        format!("{prefix}{path}")
    }
}

/// What the rules of a case require beyond fs-read/fs-write/fs-deny.
fn extra_required(caps: impl Iterator<Item = Capability>) -> Vec<Capability> {
    let mut v: Vec<Capability> = caps
        .filter(|c| matches!(c, Capability::FsProtectCreate | Capability::FsDenyWrite))
        .collect();
    v.sort();
    v
}

#[test]
fn corpus_against_the_evaluator() {
    for c in cases() {
        let written = resolved(&c, "");
        let mut reversed = written.clone();
        reversed.reverse();
        for rules in [&written, &reversed] {
            let set = RuleSet::new(rules.clone());
            for (path, perm, reason) in &c.queries {
                let e = evaluate_rules(rules, path).unwrap();
                assert_eq!(
                    (e.permission, e.reason),
                    (*perm, *reason),
                    "{}: linear {path}",
                    c.name
                );
                if *reason != Reason::DefaultDeny {
                    let d = &rules[e.decisive.expect("decisive rule")];
                    assert!(
                        d.path == *path
                            || path.starts_with(&format!("{}/", d.path))
                            || d.path == "/"
                    );
                }
                let i = set.evaluate(path).unwrap();
                assert_eq!(
                    (i.permission, i.reason, i.applicable),
                    (*perm, *reason, e.applicable),
                    "{}: indexed {path}",
                    c.name
                );
                assert_eq!(
                    i.decisive
                        .map(|x| &set.rules()[x])
                        .map(|r| (&r.path, r.access, r.scope)),
                    e.decisive
                        .map(|x| &rules[x])
                        .map(|r| (&r.path, r.access, r.scope)),
                    "{}: decisive {path}",
                    c.name
                );
            }
            match (check_conflicts(rules), c.refused) {
                (Ok(()), None) => assert!(find_conflicts(rules).is_empty()),
                (Err(e), Some((before, after))) => {
                    assert_eq!(e.class(), ErrorClass::Conflict, "{}", c.name);
                    let want = format!("before={before} after={after}");
                    assert!(
                        e.detail().contains(&want),
                        "{}: {} lacks {want}",
                        c.name,
                        e.detail()
                    );
                    let first = &find_conflicts(rules)[0];
                    assert_eq!((first.before, first.after), (before, after), "{}", c.name);
                }
                (got, want) => panic!(
                    "{}: conflict check gave {got:?}, corpus says {want:?}",
                    c.name
                ),
            }
        }
        let mut caps = vec![];
        for r in &written {
            if r.access == Access::DenyWrite {
                caps.push(Capability::FsDenyWrite);
            }
            if r.protect_create {
                caps.push(Capability::FsProtectCreate);
            }
        }
        caps.dedup();
        let mut want = c.requires.clone();
        want.sort();
        assert_eq!(
            extra_required(caps.into_iter()),
            want,
            "{}: requires",
            c.name
        );
    }
}

fn make_nodes(c: &Case, root: &Path) {
    for (kind, path) in &c.nodes {
        let p = PathBuf::from(under(root.to_str().unwrap(), path));
        match kind.as_str() {
            "directory" => std::fs::create_dir_all(&p).unwrap(),
            "file" => {
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, b"x").unwrap();
            }
            "absent" => {}
            k => panic!("{}: node kind {k}", c.name),
        }
    }
    // Rule targets that are not named are unnamed ancestors: directories.
    for (_, _, path, pc) in &c.rules {
        let p = PathBuf::from(under(root.to_str().unwrap(), path));
        if !pc && !p.exists() {
            std::fs::create_dir_all(&p).unwrap();
        }
    }
    for (kind, path) in &c.nodes {
        if kind == "absent" {
            assert!(
                !Path::new(&under(root.to_str().unwrap(), path)).exists(),
                "{}: {path} exists",
                c.name
            );
        }
    }
}

#[test]
fn corpus_resolved_on_a_real_filesystem() {
    for c in cases() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let prefix = root.to_str().unwrap().to_string();
        make_nodes(&c, &root);
        for order in [false, true] {
            let mut rules = c.rules.clone();
            if order {
                rules.reverse();
            }
            let mut b = MirBuilder::new();
            for (access, scope, path, pc) in &rules {
                let missing = if *pc { Missing::Skip } else { Missing::Error };
                b.add_rule(
                    *access,
                    RootKind::Host,
                    &under(&prefix, path),
                    *scope,
                    missing,
                )
                .unwrap();
            }
            let mir = b.build().unwrap();
            let result = resolve(&mir, &HostBindings::default());
            match (result, c.refused) {
                (Ok(res), None) => {
                    for (path, perm, reason) in &c.queries {
                        let e = res.evaluate(&under(&prefix, path)).unwrap();
                        assert_eq!(
                            (e.permission, e.reason),
                            (*perm, *reason),
                            "{}: {path}",
                            c.name
                        );
                    }
                    let mut want = c.requires.clone();
                    want.sort();
                    assert_eq!(
                        extra_required(res.required_capabilities().iter()),
                        want,
                        "{}",
                        c.name
                    );
                    let pcs: Vec<&ResolvedRule> =
                        res.rules().iter().filter(|r| r.protect_create).collect();
                    assert_eq!(
                        pcs.len(),
                        c.rules.iter().filter(|r| r.3).count(),
                        "{}",
                        c.name
                    );
                    for r in pcs {
                        assert!(
                            c.rules
                                .iter()
                                .any(|x| x.3 && under(&prefix, &x.2) == r.path),
                            "{}: {}",
                            c.name,
                            r.path
                        );
                    }
                }
                (Err(e), Some((before, after))) => {
                    assert_eq!(e.class(), ErrorClass::Conflict, "{}: {e}", c.name);
                    let want = format!("before={before} after={after}");
                    assert!(
                        e.detail().contains(&want),
                        "{}: {} lacks {want}",
                        c.name,
                        e.detail()
                    );
                }
                (got, want) => panic!(
                    "{}: resolve gave {got:?}, corpus says refused={want:?}",
                    c.name
                ),
            }
        }
    }
}
