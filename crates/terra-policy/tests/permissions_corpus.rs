//! Every case of the permissions corpus (spec/corpus/permissions, a copy of the published corpus), run
//! two ways through the library:
//! 1. directly on the resolved rules of the case, with the linear evaluator in
//!    written and reversed order, the indexed evaluator, and the conflict check;
//! 2. on a real filesystem: the case's nodes created under a temporary
//!    directory, a decision of `host` rules under it resolved with `resolve`
//!    (protect-create rules get `missing: skip`), queries evaluated on the plan.

use terra_test_support::data::{permission_cases, under, PermissionCase};

use terra_policy::evaluate::evaluate_rules;
use terra_policy::{
    check_conflicts, find_conflicts, resolve, Access, Capability, ErrorClass, HostBindings,
    MirBuilder, Missing, Permission, PolicyError, Reason, ResolvedRule, RootKind, RuleSet, Scope,
};

/// A corpus case in the library's types (`src` as the corpus says it).
#[derive(Debug)]
struct Case {
    src: PermissionCase,
    name: String,
    rules: Vec<(Access, Scope, String, bool)>,
    requires: Vec<Capability>,
    queries: Vec<(String, Permission, Reason)>,
    refused: Option<(Permission, Permission)>,
}

fn typed(src: PermissionCase) -> Case {
    let name = src.name.clone();
    let word = |what: &str, word: &str| -> ! { panic!("{name}: {what} {word}") };
    Case {
        rules: src
            .rules
            .iter()
            .map(|(a, s, path, pc)| {
                let access = Access::from_name(a).unwrap_or_else(|| word("access", a));
                let scope = Scope::from_name(s).unwrap_or_else(|| word("scope", s));
                (access, scope, path.clone(), *pc)
            })
            .collect(),
        requires: src
            .requires
            .iter()
            .map(|r| Capability::from_name(r).unwrap_or_else(|| word("requires", r)))
            .collect(),
        queries: src
            .queries
            .iter()
            .map(|(path, p, r)| {
                let perm = Permission::from_name(p).unwrap_or_else(|| word("permission", p));
                let reason = Reason::from_name(r).unwrap_or_else(|| word("reason", r));
                (path.clone(), perm, reason)
            })
            .collect(),
        refused: src.refused.as_ref().map(|(b, a)| {
            let before = Permission::from_name(b).unwrap_or_else(|| word("before", b));
            let after = Permission::from_name(a).unwrap_or_else(|| word("after", a));
            (before, after)
        }),
        name: name.clone(),
        src,
    }
}

fn cases() -> Vec<Case> {
    permission_cases().into_iter().map(typed).collect()
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

/// What the rules of a case require beyond fs-read/fs-write/fs-deny.
fn extra_required(caps: impl Iterator<Item = Capability>) -> Vec<Capability> {
    let mut v: Vec<Capability> = caps
        .filter(|c| matches!(c, Capability::FsProtectCreate | Capability::FsDenyWrite))
        .collect();
    v.sort();
    v
}

/// `e` is the conflict the case names: its class, and the permissions
/// before and after in its detail.
fn assert_conflict(c: &Case, e: &PolicyError, before: Permission, after: Permission) {
    assert_eq!(e.class(), ErrorClass::Conflict, "{}: {e}", c.name);
    let want = format!("before={before} after={after}");
    assert!(
        e.detail().contains(&want),
        "{}: {} lacks {want}",
        c.name,
        e.detail()
    );
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
                    assert_conflict(&c, &e, before, after);
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

#[test]
fn corpus_resolved_on_a_real_filesystem() {
    for c in cases() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let prefix = root.to_str().unwrap().to_string();
        c.src.make_nodes(&prefix);
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
                (Err(e), Some((before, after))) => assert_conflict(&c, &e, before, after),
                (got, want) => panic!(
                    "{}: resolve gave {got:?}, corpus says refused={want:?}",
                    c.name
                ),
            }
        }
    }
}
