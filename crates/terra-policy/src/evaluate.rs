//! Permissions of a path under contract 2 (spec section 5).
//!
//! [`RuleSet`] holds resolved rules in plan order plus a by-path hash index,
//! so one evaluation costs one hash probe per ancestor of the queried path
//! (O(depth) expected), never a scan of every rule. [`evaluate_rules`] is the
//! plain linear evaluator over rules in any order; tests use it as a reference.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

use crate::error::{PolicyError, Result};
use crate::model::{Access, Scope};
use crate::resolved::ResolvedRule;

/// What a path may be used for. Ordered: none < read < read-write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Permission {
    None,
    Read,
    ReadWrite,
}

impl Permission {
    pub fn name(self) -> &'static str {
        match self {
            Permission::None => "none",
            Permission::Read => "read",
            Permission::ReadWrite => "read-write",
        }
    }
    pub fn from_name(name: &str) -> Option<Permission> {
        [Permission::None, Permission::Read, Permission::ReadWrite]
            .into_iter()
            .find(|p| p.name() == name)
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a path has its permission (the table of spec section 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    DefaultDeny,
    DenyRule,
    WriteRule,
    ReadRule,
    DenyWriteRule,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::DefaultDeny => "default-deny",
            Reason::DenyRule => "deny-rule",
            Reason::WriteRule => "write-rule",
            Reason::ReadRule => "read-rule",
            Reason::DenyWriteRule => "deny-write-rule",
        }
    }
    pub fn from_name(name: &str) -> Option<Reason> {
        [
            Reason::DefaultDeny,
            Reason::DenyRule,
            Reason::WriteRule,
            Reason::ReadRule,
            Reason::DenyWriteRule,
        ]
        .into_iter()
        .find(|r| r.name() == name)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The verdict for one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evaluation {
    pub permission: Permission,
    pub reason: Reason,
    /// Index (into the rules evaluated) of the decisive rule: the most specific
    /// applicable rule of the kind that decided (longest path; at one path exact
    /// before tree; then first in order). `None` for default-deny.
    pub decisive: Option<usize>,
    /// How many rules apply to the path.
    pub applicable: usize,
}

/// Refuses a path that is not canonical and absolute: it must start with '/',
/// hold no empty, '.' or '..' segment (so no '//' and no trailing '/', except
/// "/" itself) and no NUL byte.
pub fn check_canonical_path(path: &str) -> Result<()> {
    let bad =
        |why: &str| PolicyError::NonCanonical(format!("path {path:?} is not canonical: {why}"));
    if !path.starts_with('/') {
        return Err(bad("it must start with '/'"));
    }
    if path.contains('\0') {
        return Err(bad("it contains a NUL byte"));
    }
    if path == "/" {
        return Ok(());
    }
    for segment in path[1..].split('/') {
        match segment {
            "" => return Err(bad("it holds an empty segment ('//' or a trailing '/')")),
            "." | ".." => return Err(bad("it holds a '.' or '..' segment")),
            _ => {}
        }
    }
    Ok(())
}

/// Whether a rule at `rule_path` with `scope` applies to the canonical `path`.
/// Tree scope matches on segment boundaries; the tree of "/" covers everything.
pub fn rule_applies(rule_path: &str, scope: Scope, path: &str) -> bool {
    match scope {
        Scope::Exact => rule_path == path,
        Scope::Tree => is_same_or_ancestor(rule_path, path),
    }
}

/// `a` equals `b` or is an ancestor of `b` on segment boundaries.
pub(crate) fn is_same_or_ancestor(a: &str, b: &str) -> bool {
    a == "/" || (b.starts_with(a) && (b.len() == a.len() || b.as_bytes()[a.len()] == b'/'))
}

/// Orders paths so that every path comes right before its descendants
/// (pre-order of the tree): bytes compared with '/' ranking lowest.
pub(crate) fn tree_order(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len().min(b.len());
    // Skip the common prefix eight bytes at a time, then compare one byte.
    let mut i = 0;
    while i + 8 <= n && a[i..i + 8] == b[i..i + 8] {
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    if i == n {
        return a.len().cmp(&b.len());
    }
    let key = |c: u8| if c == b'/' { 0u8 } else { c };
    key(a[i]).cmp(&key(b[i]))
}

/// Plan order (spec section 5): grants, then deny-writes, then denies; within a
/// group shorter path first, then bytes, tree before exact, read before write.
pub fn plan_order(a: &ResolvedRule, b: &ResolvedRule) -> Ordering {
    fn group(x: Access) -> u8 {
        match x {
            Access::Read | Access::Write => 0,
            Access::DenyWrite => 1,
            Access::Deny => 2,
        }
    }
    fn scope_rank(s: Scope) -> u8 {
        match s {
            Scope::Tree => 0,
            Scope::Exact => 1,
        }
    }
    group(a.access)
        .cmp(&group(b.access))
        .then(a.path.len().cmp(&b.path.len()))
        .then_with(|| a.path.as_bytes().cmp(b.path.as_bytes()))
        .then(scope_rank(a.scope).cmp(&scope_rank(b.scope)))
        .then(a.access.code().cmp(&b.access.code()))
        .then(a.source_rule.cmp(&b.source_rule))
}

/// Accumulates applicable rules while walking a path's ancestors.
#[derive(Default)]
struct Verdict {
    best: [Option<usize>; 4], // read, write, deny, deny-write
    applicable: usize,
}

fn slot(a: Access) -> usize {
    match a {
        Access::Read => 0,
        Access::Write => 1,
        Access::Deny => 2,
        Access::DenyWrite => 3,
    }
}

impl Verdict {
    fn add(&mut self, rules: &[ResolvedRule], index: usize) {
        self.applicable += 1;
        let rule = &rules[index];
        let best = &mut self.best[slot(rule.access)];
        let replace = match *best {
            None => true,
            Some(old) => {
                let old = &rules[old];
                rule.path.len() > old.path.len()
                    || (rule.path.len() == old.path.len()
                        && rule.scope == Scope::Exact
                        && old.scope == Scope::Tree)
            }
        };
        if replace {
            *best = Some(index);
        }
    }

    fn finish(self) -> Evaluation {
        let [read, write, deny, deny_write] = self.best;
        let (permission, reason, decisive) = if deny.is_some() {
            (Permission::None, Reason::DenyRule, deny)
        } else if write.is_some() && deny_write.is_some() {
            (Permission::Read, Reason::DenyWriteRule, deny_write)
        } else if write.is_some() {
            (Permission::ReadWrite, Reason::WriteRule, write)
        } else if read.is_some() {
            (Permission::Read, Reason::ReadRule, read)
        } else {
            (Permission::None, Reason::DefaultDeny, None)
        };
        Evaluation {
            permission,
            reason,
            decisive,
            applicable: self.applicable,
        }
    }
}

/// Contract 2 over `rules` in any order, by a linear scan. `decisive` indexes `rules`.
pub fn evaluate_rules(rules: &[ResolvedRule], path: &str) -> Result<Evaluation> {
    check_canonical_path(path)?;
    let mut v = Verdict::default();
    for (i, r) in rules.iter().enumerate() {
        if rule_applies(&r.path, r.scope, path) {
            v.add(rules, i);
        }
    }
    Ok(v.finish())
}

/// FNV-1a, 64 bits: a fixed, fast hash for the path index (collisions only
/// cost a string comparison).
fn path_hash(path: &str) -> u64 {
    path.bytes().fold(FNV_OFFSET, fnv_step)
}

/// The keys of [`RuleSet`]'s map are already hashes: use them as they are.
#[derive(Debug, Default, Clone, Copy)]
struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = fnv_step(self.0, b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv_step(h: u64, b: u8) -> u64 {
    (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
}

/// Resolved rules in plan order with an index for fast evaluation. Immutable.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuleSet {
    rules: Vec<ResolvedRule>,
    /// (hash of the path, index into `rules`), sorted, so the rules named by
    /// one path (and any hash collision) are one contiguous run.
    by_path: Vec<(u64, u32)>,
    /// Path hash -> the run of `by_path` with that hash (start, end).
    runs: HashMap<u64, (u32, u32), BuildHasherDefault<IdentityHasher>>,
}

impl RuleSet {
    /// Sorts `rules` into plan order and drops exact duplicates (same access,
    /// path and scope; the one from the lowest source rule stays).
    pub fn new(mut rules: Vec<ResolvedRule>) -> RuleSet {
        rules.sort_unstable_by(plan_order);
        rules.dedup_by(|later, kept| {
            later.access == kept.access && later.scope == kept.scope && later.path == kept.path
        });
        let mut by_path: Vec<(u64, u32)> = rules
            .iter()
            .enumerate()
            .map(|(i, r)| (path_hash(&r.path), i as u32))
            .collect();
        by_path.sort_unstable();
        let mut runs: HashMap<u64, (u32, u32), BuildHasherDefault<IdentityHasher>> =
            HashMap::default();
        for (at, &(h, _)) in by_path.iter().enumerate() {
            runs.entry(h).or_insert((at as u32, at as u32)).1 = at as u32 + 1;
        }
        RuleSet {
            rules,
            by_path,
            runs,
        }
    }

    /// The rules in plan order.
    pub fn rules(&self) -> &[ResolvedRule] {
        &self.rules
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Contract 2 for a canonical absolute path. `decisive` indexes [`RuleSet::rules`].
    pub fn evaluate(&self, path: &str) -> Result<Evaluation> {
        check_canonical_path(path)?;
        Ok(self.evaluate_canonical(path))
    }

    /// Like [`RuleSet::evaluate`] for a path the caller already knows is canonical.
    pub fn evaluate_canonical(&self, path: &str) -> Evaluation {
        let mut v = Verdict::default();
        // The hash of every prefix falls out of one pass over the path.
        let bytes = path.as_bytes();
        let mut h = fnv_step(FNV_OFFSET, b'/');
        self.visit(&mut v, "/", h, path == "/");
        if path != "/" {
            for (i, &b) in bytes.iter().enumerate().skip(1) {
                if b == b'/' {
                    self.visit(&mut v, &path[..i], h, false);
                }
                h = fnv_step(h, b);
            }
            self.visit(&mut v, path, h, true);
        }
        v.finish()
    }

    /// Adds the rules named exactly `prefix`: tree rules always, exact ones when
    /// `prefix` is the queried path itself.
    fn visit(&self, v: &mut Verdict, prefix: &str, h: u64, is_self: bool) {
        debug_assert_eq!(h, path_hash(prefix));
        let Some(&(start, end)) = self.runs.get(&h) else {
            return;
        };
        for &(_, i) in &self.by_path[start as usize..end as usize] {
            let r = &self.rules[i as usize];
            if r.path == prefix && (is_self || r.scope == Scope::Tree) {
                v.add(&self.rules, i as usize);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::r;

    #[test]
    fn canonical_paths() {
        for ok in ["/", "/a", "/a/b", "/a.b/..c", "/..."] {
            assert!(check_canonical_path(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "a", "/a/", "//", "//a", "/a//b", "/a/./b", "/a/..", "/.", "/a\0",
        ] {
            let e = check_canonical_path(bad).unwrap_err();
            assert_eq!(e.class(), crate::ErrorClass::NonCanonical, "{bad}");
        }
    }

    #[test]
    fn segment_boundaries_and_root() {
        assert!(rule_applies("/a", Scope::Tree, "/a/b"));
        assert!(rule_applies("/a", Scope::Tree, "/a"));
        assert!(!rule_applies("/a", Scope::Tree, "/ab"));
        assert!(rule_applies("/", Scope::Tree, "/"));
        assert!(rule_applies("/", Scope::Tree, "/x/y"));
        assert!(!rule_applies("/", Scope::Exact, "/x"));
        assert!(!rule_applies("/a", Scope::Exact, "/a/b"));
    }

    #[test]
    fn tree_order_is_preorder() {
        let mut v = vec!["/a/b", "/a-b", "/a", "/", "/a/b/c", "/b", "/a.b"];
        v.sort_by(|a, b| tree_order(a, b));
        assert_eq!(v, vec!["/", "/a", "/a/b", "/a/b/c", "/a-b", "/a.b", "/b"]);
    }

    proptest::proptest! {
        #[test]
        fn tree_order_matches_mapped_bytes(a in "[/a-b.-]{0,20}", b in "[/a-b.-]{0,20}") {
            let key = |c: u8| if c == b'/' { 0u8 } else { c };
            let want = a.bytes().map(key).cmp(b.bytes().map(key));
            proptest::prop_assert_eq!(tree_order(&a, &b), want);
            let long_a = format!("/common/prefix/longer/than/eight{a}");
            let long_b = format!("/common/prefix/longer/than/eight{b}");
            proptest::prop_assert_eq!(tree_order(&long_a, &long_b), want);
        }
    }

    #[test]
    fn plan_order_groups() {
        let set = RuleSet::new(vec![
            r(Access::Deny, Scope::Exact, "/a"),
            r(Access::DenyWrite, Scope::Tree, "/a/b"),
            r(Access::Write, Scope::Exact, "/a"),
            r(Access::Read, Scope::Exact, "/a"),
            r(Access::Read, Scope::Tree, "/bb"),
            r(Access::Read, Scope::Tree, "/c"),
            r(Access::Read, Scope::Tree, "/c"),
        ]);
        let got: Vec<(Access, Scope, &str)> = set
            .rules()
            .iter()
            .map(|x| (x.access, x.scope, x.path.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (Access::Read, Scope::Exact, "/a"),
                (Access::Write, Scope::Exact, "/a"),
                (Access::Read, Scope::Tree, "/c"),
                (Access::Read, Scope::Tree, "/bb"),
                (Access::DenyWrite, Scope::Tree, "/a/b"),
                (Access::Deny, Scope::Exact, "/a"),
            ]
        );
    }

    #[test]
    fn decisive_rule_is_most_specific_of_its_kind() {
        let set = RuleSet::new(vec![
            r(Access::Deny, Scope::Tree, "/"),
            r(Access::Deny, Scope::Tree, "/a"),
            r(Access::Deny, Scope::Exact, "/a"),
            r(Access::Read, Scope::Tree, "/a"),
        ]);
        let e = set.evaluate("/a").unwrap();
        assert_eq!(
            (e.permission, e.reason, e.applicable),
            (Permission::None, Reason::DenyRule, 4)
        );
        let d = &set.rules()[e.decisive.unwrap()];
        assert_eq!(
            (d.access, d.scope, d.path.as_str()),
            (Access::Deny, Scope::Exact, "/a")
        );
        let e = set.evaluate("/a/x").unwrap();
        assert_eq!(e.applicable, 3);
        assert_eq!(set.rules()[e.decisive.unwrap()].path, "/a");
        let e = set.evaluate("/b").unwrap();
        assert_eq!(
            (e.applicable, set.rules()[e.decisive.unwrap()].path.as_str()),
            (1, "/")
        );
        let empty = RuleSet::new(vec![]);
        let e = empty.evaluate("/").unwrap();
        assert_eq!(
            (e.permission, e.reason, e.decisive, e.applicable),
            (Permission::None, Reason::DefaultDeny, None, 0)
        );
        assert!(empty.evaluate("/a/").is_err());
    }
}
