//! Conflict detection (spec section 5, "Conflicts"): refuse a plan that means
//! something different under the older most-specific-wins reading.
//!
//! Deny-write rules are left out. For every rule path P and one fresh
//! descendant of it (`P/maelys-witness-K`, K the smallest integer such that no
//! rule names that path) the contract-2 permission is compared with the
//! most-specific-wins permission.
//!
//! The search is O(n log n): the distinct paths are sorted in tree pre-order
//! (bytes with '/' lowest, so each path comes right before its descendants)
//! and walked once with a stack of ancestors. Each stack entry carries what the
//! tree rules of the ancestors contribute: for contract 2 the deepest tree rule
//! of each access kind, for most-specific-wins the winner among tree rules (the
//! strongest tree rule of the deepest ancestor that has any). No pair of rules
//! is ever compared.

use std::collections::HashMap;

use crate::error::{PolicyError, Result};
use crate::evaluate::{is_same_or_ancestor, tree_order, Permission};
use crate::model::{Access, Scope};
use crate::resolved::ResolvedRule;

/// The prefix of witness descendants' names.
pub const WITNESS_PREFIX: &str = "maelys-witness-";

/// A path whose permission differs between the two readings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The differing path: a rule path, or the witness descendant of one.
    pub path: String,
    /// True when `path` is a witness (`<rule path>/maelys-witness-K`).
    pub witness: bool,
    /// Most-specific-wins permission (the older reading).
    pub before: Permission,
    /// Contract-2 permission (what terra enforces).
    pub after: Permission,
    /// The rule that decides the older reading (none means default deny).
    pub before_rule: Option<ResolvedRule>,
    /// The rule that decides contract 2 (none means default deny).
    pub after_rule: Option<ResolvedRule>,
}

fn describe(rule: &Option<ResolvedRule>) -> String {
    match rule {
        Some(r) => format!("{} {} {}", r.access, r.scope, r.path),
        None => "no rule (default deny)".to_string(),
    }
}

impl Conflict {
    /// What to change so that both readings agree.
    pub fn remedy(&self) -> String {
        match (&self.before_rule, &self.after_rule) {
            (Some(b), Some(a)) if self.after == Permission::None && a.access == Access::Deny => format!(
                "a grant inside a denied region has no effect: remove the grant `{}` or narrow the deny `{}` so that it does not cover {}",
                describe(&Some(b.clone())),
                describe(&Some(a.clone())),
                self.path
            ),
            (Some(b), Some(a)) if self.after > self.before => format!(
                "a narrower read does not take write access away: replace the read `{}` with `deny-write {} {}` (keeping `{}` in force), or narrow `{}`",
                describe(&Some(b.clone())),
                b.scope,
                b.path,
                describe(&Some(a.clone())),
                describe(&Some(a.clone()))
            ),
            _ => "rewrite the rules so that the most specific rule and the contract-2 verdict agree".to_string(),
        }
    }

    /// The refusal.
    pub fn to_error(&self) -> PolicyError {
        PolicyError::Conflict(format!(
            "{}{} means {} under most-specific-wins but {} under contract 2 (before={} after={}); \
             most-specific-wins is decided by {}, contract 2 by {}; remedy: {}",
            if self.witness {
                "any path below "
            } else {
                "path "
            },
            if self.witness {
                format!("{} that no rule names", witness_parent(&self.path))
            } else {
                self.path.clone()
            },
            self.before,
            self.after,
            self.before,
            self.after,
            describe(&self.before_rule),
            describe(&self.after_rule),
            self.remedy()
        ))
    }
}

const READ: usize = 0;
const WRITE: usize = 1;
const DENY: usize = 2;

fn slot(a: Access) -> Option<usize> {
    match a {
        Access::Read => Some(READ),
        Access::Write => Some(WRITE),
        Access::Deny => Some(DENY),
        Access::DenyWrite => None,
    }
}

/// The rules named by one distinct path: one representative per scope and access.
struct Node<'a> {
    path: &'a str,
    exact: [Option<u32>; 3],
    tree: [Option<u32>; 3],
}

/// What the tree rules of a path and its ancestors contribute.
#[derive(Clone, Copy)]
struct Inherited {
    /// The deepest tree rule of each access kind (contract 2).
    deepest: [Option<u32>; 3],
    /// The most-specific-wins winner among tree rules.
    winner: Option<u32>,
}

/// Strongest of one path's rules of one scope: deny over write over read.
fn strongest(slots: &[Option<u32>; 3]) -> Option<u32> {
    slots[DENY].or(slots[WRITE]).or(slots[READ])
}

fn contract2(slots: &[Option<u32>; 3]) -> (Permission, Option<u32>) {
    if slots[DENY].is_some() {
        (Permission::None, slots[DENY])
    } else if slots[WRITE].is_some() {
        (Permission::ReadWrite, slots[WRITE])
    } else if slots[READ].is_some() {
        (Permission::Read, slots[READ])
    } else {
        (Permission::None, None)
    }
}

fn msw_permission(rules: &[ResolvedRule], winner: Option<u32>) -> Permission {
    match winner.map(|i| rules[i as usize].access) {
        Some(Access::Read) => Permission::Read,
        Some(Access::Write) => Permission::ReadWrite,
        _ => Permission::None,
    }
}

/// The directory a witness path stands below (`/ws` for `/ws/maelys-witness-0`).
pub fn witness_parent(witness: &str) -> &str {
    match witness.rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((parent, _)) => parent,
    }
}

/// A witness path as users read it: `/ws/*`, the paths below `/ws` that no
/// rule names (the witness's own name is internal).
pub fn witness_shown(witness: &str) -> String {
    match witness_parent(witness) {
        "/" => "/*".to_string(),
        p => format!("{p}/*"),
    }
}

/// `K` when `segment` is `maelys-witness-K` with K in canonical decimal.
fn witness_number(segment: &str) -> Option<u64> {
    let digits = segment.strip_prefix(WITNESS_PREFIX)?;
    if digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    digits.parse().ok()
}

fn parent_and_name(path: &str) -> Option<(&str, &str)> {
    if path == "/" {
        return None;
    }
    let slash = path.rfind('/')?;
    Some((
        if slash == 0 { "/" } else { &path[..slash] },
        &path[slash + 1..],
    ))
}

/// For each path that has witness-named children among `paths`, the sorted K's in use.
pub(crate) fn used_witnesses<'a, I: IntoIterator<Item = &'a str>>(
    paths: I,
) -> HashMap<&'a str, Vec<u64>> {
    let mut used: HashMap<&str, Vec<u64>> = HashMap::new();
    for p in paths {
        if let Some((parent, name)) = parent_and_name(p) {
            if let Some(k) = witness_number(name) {
                used.entry(parent).or_default().push(k);
            }
        }
    }
    for v in used.values_mut() {
        v.sort_unstable();
        v.dedup();
    }
    used
}

/// `<path>/maelys-witness-K` with K the smallest integer not in `used` (sorted).
pub(crate) fn witness_path(path: &str, used: Option<&Vec<u64>>) -> String {
    let mut k = 0u64;
    if let Some(used) = used {
        for &u in used {
            if u == k {
                k += 1;
            } else if u > k {
                break;
            }
        }
    }
    if path == "/" {
        format!("/{WITNESS_PREFIX}{k}")
    } else {
        format!("{path}/{WITNESS_PREFIX}{k}")
    }
}

/// Every path (rule paths and their witnesses) where the two readings differ,
/// in tree pre-order (a path before its witness, a witness before the
/// descendants of its path). O(n log n) in the number of rules.
pub fn find_conflicts(rules: &[ResolvedRule]) -> Vec<Conflict> {
    walk(rules, false)
}

/// Refuses (class conflict) at the first path where the readings differ.
pub fn check_conflicts(rules: &[ResolvedRule]) -> Result<()> {
    match walk(rules, true).into_iter().next() {
        Some(c) => Err(c.to_error()),
        None => Ok(()),
    }
}

fn walk(rules: &[ResolvedRule], first_only: bool) -> Vec<Conflict> {
    let mut order: Vec<u32> = (0..rules.len() as u32)
        .filter(|&i| rules[i as usize].access != Access::DenyWrite)
        .collect();
    order.sort_unstable_by(|&a, &b| {
        tree_order(&rules[a as usize].path, &rules[b as usize].path).then(a.cmp(&b))
    });
    let mut nodes: Vec<Node> = Vec::new();
    for &i in &order {
        let r = &rules[i as usize];
        if nodes.last().map(|n| n.path) != Some(r.path.as_str()) {
            nodes.push(Node {
                path: &r.path,
                exact: [None; 3],
                tree: [None; 3],
            });
        }
        let node = nodes.last_mut().expect("just pushed");
        let s = slot(r.access).expect("deny-write filtered out");
        let slots = if r.scope == Scope::Exact {
            &mut node.exact
        } else {
            &mut node.tree
        };
        slots[s].get_or_insert(i);
    }
    let used = used_witnesses(nodes.iter().map(|n| n.path));
    let mut out = Vec::new();
    let mut stack: Vec<(&str, Inherited)> = Vec::new();
    let rule = |i: Option<u32>| i.map(|i| rules[i as usize].clone());
    for node in &nodes {
        while let Some((top, _)) = stack.last() {
            if is_same_or_ancestor(top, node.path) {
                break;
            }
            stack.pop();
        }
        let parent = stack.last().map(|(_, inh)| *inh).unwrap_or(Inherited {
            deepest: [None; 3],
            winner: None,
        });
        let mut here = parent;
        for (slot, tree) in here.deepest.iter_mut().zip(node.tree) {
            if tree.is_some() {
                *slot = tree;
            }
        }
        if let Some(w) = strongest(&node.tree) {
            here.winner = Some(w);
        }
        // The path itself: exact rules of the path join the inherited tree rules.
        let mut at_path = here.deepest;
        for (slot, exact) in at_path.iter_mut().zip(node.exact) {
            if exact.is_some() {
                *slot = exact;
            }
        }
        let (after, after_rule) = contract2(&at_path);
        let msw_winner = strongest(&node.exact).or(here.winner);
        let before = msw_permission(rules, msw_winner);
        if before != after {
            out.push(Conflict {
                path: node.path.to_string(),
                witness: false,
                before,
                after,
                before_rule: rule(msw_winner),
                after_rule: rule(after_rule),
            });
            if first_only {
                return out;
            }
        }
        // The witness: only tree rules of the path and its ancestors apply.
        let (after, after_rule) = contract2(&here.deepest);
        let before = msw_permission(rules, here.winner);
        if before != after {
            out.push(Conflict {
                path: witness_path(node.path, used.get(node.path)),
                witness: true,
                before,
                after,
                before_rule: rule(here.winner),
                after_rule: rule(after_rule),
            });
            if first_only {
                return out;
            }
        }
        stack.push((node.path, here));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use crate::testing::{arb_rule, r};

    /// Quadratic reference: every rule path and its witness, every rule scanned.
    fn reference(rules: &[ResolvedRule]) -> Vec<(String, Permission, Permission)> {
        let rules: Vec<&ResolvedRule> = rules
            .iter()
            .filter(|r| r.access != Access::DenyWrite)
            .collect();
        let mut paths: Vec<&str> = rules.iter().map(|r| r.path.as_str()).collect();
        paths.sort();
        paths.dedup();
        let mut queries = Vec::new();
        for p in &paths {
            queries.push(p.to_string());
            let mut k = 0;
            loop {
                let w = if *p == "/" {
                    format!("/maelys-witness-{k}")
                } else {
                    format!("{p}/maelys-witness-{k}")
                };
                if !paths.iter().any(|q| *q == w) {
                    queries.push(w);
                    break;
                }
                k += 1;
            }
        }
        let mut out = Vec::new();
        for q in queries {
            let applicable: Vec<&&ResolvedRule> = rules
                .iter()
                .filter(|r| crate::evaluate::rule_applies(&r.path, r.scope, &q))
                .collect();
            let after = if applicable.iter().any(|r| r.access == Access::Deny) {
                Permission::None
            } else if applicable.iter().any(|r| r.access == Access::Write) {
                Permission::ReadWrite
            } else if applicable.iter().any(|r| r.access == Access::Read) {
                Permission::Read
            } else {
                Permission::None
            };
            let rank = |r: &ResolvedRule| {
                (
                    r.path.len(),
                    r.path.clone().into_bytes(),
                    r.scope == Scope::Exact,
                    match r.access {
                        Access::Deny => 3,
                        Access::Write => 2,
                        _ => 1,
                    },
                )
            };
            let winner = applicable.iter().max_by_key(|r| rank(r));
            let before = match winner.map(|r| r.access) {
                Some(Access::Read) => Permission::Read,
                Some(Access::Write) => Permission::ReadWrite,
                _ => Permission::None,
            };
            if before != after {
                out.push((q, before, after));
            }
        }
        out.sort();
        out
    }

    fn fast(rules: &[ResolvedRule]) -> Vec<(String, Permission, Permission)> {
        let mut v: Vec<_> = find_conflicts(rules)
            .into_iter()
            .map(|c| (c.path, c.before, c.after))
            .collect();
        v.sort();
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
        #[test]
        fn matches_quadratic_reference(rules in proptest::collection::vec(arb_rule(&["a", "b", "maelys-witness-0"]), 0..12)) {
            let expected = reference(&rules);
            prop_assert_eq!(fast(&rules), expected.clone());
            let mut reversed = rules.clone();
            reversed.reverse();
            prop_assert_eq!(fast(&reversed), expected.clone());
            prop_assert_eq!(check_conflicts(&rules).is_err(), !expected.is_empty());
        }
    }

    /// The reference and the fast search find the same, non-empty, conflicts
    /// on known cases (so the property test compares something).
    #[test]
    fn known_conflicts() {
        let rules = [
            r(Access::Deny, Scope::Tree, "/a"),
            r(Access::Read, Scope::Exact, "/a"),
        ];
        let want = vec![("/a".to_string(), Permission::Read, Permission::None)];
        assert_eq!(reference(&rules), want);
        assert_eq!(fast(&rules), want);
        let rules = [
            r(Access::Write, Scope::Tree, "/a"),
            r(Access::Read, Scope::Tree, "/a/b"),
        ];
        let want = vec![
            ("/a/b".to_string(), Permission::Read, Permission::ReadWrite),
            (
                "/a/b/maelys-witness-0".to_string(),
                Permission::Read,
                Permission::ReadWrite,
            ),
        ];
        assert_eq!(reference(&rules), want);
        assert_eq!(fast(&rules), want);
        // A conflict at the path only: the exact write wins at /a under
        // most-specific-wins; its unnamed children are denied in both readings.
        let rules = [
            r(Access::Read, Scope::Tree, "/"),
            r(Access::Deny, Scope::Tree, "/a"),
            r(Access::Write, Scope::Exact, "/a"),
        ];
        let want = vec![("/a".to_string(), Permission::ReadWrite, Permission::None)];
        assert_eq!(reference(&rules), want);
        assert_eq!(fast(&rules), want);
    }

    #[test]
    fn witness_numbering() {
        let rules = [
            r(Access::Read, Scope::Tree, "/w"),
            r(Access::Deny, Scope::Tree, "/w/maelys-witness-0"),
            r(Access::Deny, Scope::Tree, "/w/maelys-witness-2"),
            r(Access::Deny, Scope::Tree, "/w/maelys-witness-1/x"),
        ];
        let used = used_witnesses(rules.iter().map(|r| r.path.as_str()));
        assert_eq!(witness_path("/w", used.get("/w")), "/w/maelys-witness-1");
        assert_eq!(witness_path("/", None), "/maelys-witness-0");
        assert_eq!(witness_number("maelys-witness-01"), None);
        assert_eq!(witness_number("maelys-witness-"), None);
        assert_eq!(witness_number("maelys-witness-10"), Some(10));
    }

    #[test]
    fn diagnostic_names_everything() {
        let rules = vec![
            r(Access::Deny, Scope::Tree, "/w/p"),
            r(Access::Read, Scope::Tree, "/w/p/q"),
        ];
        let e = check_conflicts(&rules).unwrap_err();
        assert_eq!(e.class(), crate::ErrorClass::Conflict);
        let m = e.detail();
        for part in [
            "/w/p/q",
            "before=read after=none",
            "read tree /w/p/q",
            "deny tree /w/p",
            "remedy:",
        ] {
            assert!(m.contains(part), "{m} lacks {part}");
        }
        let rules = vec![
            r(Access::Write, Scope::Tree, "/w"),
            r(Access::Read, Scope::Exact, "/w/M"),
        ];
        let e = check_conflicts(&rules).unwrap_err();
        assert!(
            e.detail().contains("before=read after=read-write"),
            "{}",
            e.detail()
        );
        assert!(
            e.detail().contains("deny-write exact /w/M"),
            "{}",
            e.detail()
        );
    }

    #[test]
    fn deny_write_is_left_out() {
        let rules = vec![
            r(Access::Write, Scope::Tree, "/w"),
            r(Access::DenyWrite, Scope::Tree, "/w/.git"),
        ];
        assert!(check_conflicts(&rules).is_ok());
    }
}
