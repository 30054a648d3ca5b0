//! Composition and comparison (spec section 8).
//!
//! [`restrict`] works on decisions (MIR). [`contains`], [`diff`] and
//! [`overlaps`] compare resolved plans region by region. The regions are every
//! named path of both plans plus, for each, one unnamed descendant
//! (`<path>/maelys-witness-K`, K the smallest integer no rule of either plan
//! names there). Permissions only change at named paths, so every other path
//! has the permission of the unnamed descendant of its deepest named ancestor
//! (or none in both plans when it has no named ancestor): these regions cover
//! the whole filesystem.
//!
//! The comparison walks the union of both plans' paths once in tree pre-order
//! with a stack of ancestors (O(n log n)), computing contract 2 for both plans
//! at every region; it never evaluates pairs of rules.

use std::collections::BTreeSet;

use crate::builder::MirBuilder;
use crate::conflict::{used_witnesses, witness_path};
use crate::error::{PolicyError, Result};
use crate::evaluate::{is_same_or_ancestor, tree_order, Permission};
use crate::model::{Access, Destination, Mir, NetworkMode, ProcessTree, RootMode, Scope};
use crate::resolve::Resolution;
use crate::resolved::ResolvedRule;

/// none < mediated < direct.
pub fn network_rank(mode: NetworkMode) -> u8 {
    match mode {
        NetworkMode::None => 0,
        NetworkMode::Mediated => 1,
        NetworkMode::Direct => 2,
    }
}

/// Narrows `base` by `overlay` (spec section 8). The overlay may hold only deny
/// and deny-write rules (else argument); its rules join the base through the
/// builder. Network: the narrower mode; two mediated lists intersect by (host,
/// port) with flags merged restrictively (TLS SNI or-ed, private addresses
/// and-ed), and an empty intersection gives none. Root: ephemeral-write only if
/// both are. Process tree: required if either requires it.
pub fn restrict(base: &Mir, overlay: &Mir) -> Result<Mir> {
    if let Some((i, r)) = overlay
        .rules()
        .iter()
        .enumerate()
        .find(|(_, r)| !matches!(r.access, Access::Deny | Access::DenyWrite))
    {
        return Err(PolicyError::Argument(format!(
            "the overlay may hold only deny and deny-write rules; its rule {i} is {} {} {:?}",
            r.access, r.target.root, r.target.path
        )));
    }
    let mut b = MirBuilder::new();
    for r in base.rules().iter().chain(overlay.rules()) {
        let t = &r.target;
        b.add_rule(r.access, t.root, &t.path, t.scope, t.missing)?;
    }
    let (mode, destinations): (NetworkMode, Vec<Destination>) =
        match (base.network(), overlay.network()) {
            (NetworkMode::Mediated, NetworkMode::Mediated) => {
                let mut common = Vec::new();
                for d in base.destinations() {
                    if let Some(o) = overlay
                        .destinations()
                        .iter()
                        .find(|o| o.host == d.host && o.port == d.port)
                    {
                        common.push(Destination {
                            host: d.host.clone(),
                            port: d.port,
                            require_tls_sni: d.require_tls_sni || o.require_tls_sni,
                            allow_private_addresses: d.allow_private_addresses
                                && o.allow_private_addresses,
                        });
                    }
                }
                if common.is_empty() {
                    (NetworkMode::None, common)
                } else {
                    (NetworkMode::Mediated, common)
                }
            }
            (a, o) => {
                let narrower = if network_rank(a) <= network_rank(o) {
                    a
                } else {
                    o
                };
                let list = match narrower {
                    NetworkMode::Mediated if a == NetworkMode::Mediated => {
                        base.destinations().to_vec()
                    }
                    NetworkMode::Mediated => overlay.destinations().to_vec(),
                    _ => Vec::new(),
                };
                (narrower, list)
            }
        };
    b.set_network(mode);
    for d in &destinations {
        b.add_destination(
            &d.host,
            d.port,
            d.require_tls_sni,
            d.allow_private_addresses,
        )?;
    }
    b.set_root_mode(
        if base.root_mode() == RootMode::EphemeralWrite
            && overlay.root_mode() == RootMode::EphemeralWrite
        {
            RootMode::EphemeralWrite
        } else {
            RootMode::ReadOnly
        },
    );
    b.set_process_tree(
        if base.process_tree() == ProcessTree::Required
            || overlay.process_tree() == ProcessTree::Required
        {
            ProcessTree::Required
        } else {
            ProcessTree::Disabled
        },
    );
    b.build()
}

/// One region and its permission in each of the two plans compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// A named path of either plan, or an unnamed descendant of one.
    pub path: String,
    /// False for the unnamed descendant `<named path>/maelys-witness-K`.
    pub named: bool,
    /// Permission in the first plan (boundary, before, first).
    pub first: Permission,
    /// Permission in the second plan (candidate, after, second).
    pub second: Permission,
}

/// Every region of the two plans' rules with both permissions, in tree pre-order.
pub fn regions(first: &[ResolvedRule], second: &[ResolvedRule]) -> Vec<Region> {
    const R: u8 = 1;
    const W: u8 = 2;
    const D: u8 = 4;
    const DW: u8 = 8;
    fn bit(a: Access) -> u8 {
        match a {
            Access::Read => R,
            Access::Write => W,
            Access::Deny => D,
            Access::DenyWrite => DW,
        }
    }
    fn perm(mask: u8) -> Permission {
        if mask & D != 0 {
            Permission::None
        } else if mask & W != 0 && mask & DW != 0 {
            Permission::Read
        } else if mask & W != 0 {
            Permission::ReadWrite
        } else if mask & R != 0 {
            Permission::Read
        } else {
            Permission::None
        }
    }
    // (path, plan, scope, access bit), sorted in tree order.
    let mut all: Vec<(&str, usize, Scope, u8)> = Vec::with_capacity(first.len() + second.len());
    for (plan, rules) in [first, second].into_iter().enumerate() {
        all.extend(
            rules
                .iter()
                .map(|r| (r.path.as_str(), plan, r.scope, bit(r.access))),
        );
    }
    all.sort_unstable_by(|a, b| tree_order(a.0, b.0));
    // Distinct paths with exact and tree masks per plan.
    struct Node<'a> {
        path: &'a str,
        exact: [u8; 2],
        tree: [u8; 2],
    }
    let mut nodes: Vec<Node> = Vec::new();
    for (path, plan, scope, b) in all {
        if nodes.last().map(|n| n.path) != Some(path) {
            nodes.push(Node {
                path,
                exact: [0; 2],
                tree: [0; 2],
            });
        }
        let n = nodes.last_mut().expect("just pushed");
        match scope {
            Scope::Exact => n.exact[plan] |= b,
            Scope::Tree => n.tree[plan] |= b,
        }
    }
    let used = used_witnesses(nodes.iter().map(|n| n.path));
    let mut out = Vec::with_capacity(nodes.len() * 2);
    let mut stack: Vec<(&str, [u8; 2])> = Vec::new();
    for n in &nodes {
        while let Some((top, _)) = stack.last() {
            if is_same_or_ancestor(top, n.path) {
                break;
            }
            stack.pop();
        }
        let inherited = stack.last().map(|s| s.1).unwrap_or([0; 2]);
        let here = [inherited[0] | n.tree[0], inherited[1] | n.tree[1]];
        out.push(Region {
            path: n.path.to_string(),
            named: true,
            first: perm(here[0] | n.exact[0]),
            second: perm(here[1] | n.exact[1]),
        });
        out.push(Region {
            path: witness_path(n.path, used.get(n.path)),
            named: false,
            first: perm(here[0]),
            second: perm(here[1]),
        });
        stack.push((n.path, here));
    }
    out
}

/// A difference in the plan-wide settings, first value then second.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SettingsDifference {
    /// Network modes when they differ.
    pub network: Option<(NetworkMode, NetworkMode)>,
    /// Destinations only in the first plan (exact equality, flags included).
    pub destinations_only_first: Vec<Destination>,
    /// Destinations only in the second plan.
    pub destinations_only_second: Vec<Destination>,
    /// Root modes when they differ.
    pub root: Option<(RootMode, RootMode)>,
    /// Process-tree settings when they differ.
    pub process_tree: Option<(ProcessTree, ProcessTree)>,
}

fn settings_difference(first: &Resolution, second: &Resolution) -> SettingsDifference {
    let a: BTreeSet<&Destination> = first.destinations().iter().collect();
    let b: BTreeSet<&Destination> = second.destinations().iter().collect();
    SettingsDifference {
        network: (first.network() != second.network())
            .then_some((first.network(), second.network())),
        destinations_only_first: a.difference(&b).map(|d| (*d).clone()).collect(),
        destinations_only_second: b.difference(&a).map(|d| (*d).clone()).collect(),
        root: (first.root_mode() != second.root_mode())
            .then_some((first.root_mode(), second.root_mode())),
        process_tree: (first.process_tree() != second.process_tree())
            .then_some((first.process_tree(), second.process_tree())),
    }
}

/// Whether `second` grants anything beyond `first` in the plan-wide settings:
/// a wider network mode, a destination `first` lacks while both are mediated,
/// ephemeral-write over read-only, process tree disabled where required.
fn settings_widened(
    first: &Resolution,
    second: &Resolution,
    d: &SettingsDifference,
) -> Vec<String> {
    let mut v = Vec::new();
    if network_rank(second.network()) > network_rank(first.network()) {
        v.push(format!(
            "network {} is wider than {}",
            second.network(),
            first.network()
        ));
    }
    if first.network() == NetworkMode::Mediated && second.network() == NetworkMode::Mediated {
        for dest in &d.destinations_only_second {
            v.push(format!(
                "destination {}:{} is not granted as such",
                dest.host, dest.port
            ));
        }
    }
    if second.root_mode() == RootMode::EphemeralWrite && first.root_mode() == RootMode::ReadOnly {
        v.push("root ephemeral-write is wider than read-only".into());
    }
    if second.process_tree() == ProcessTree::Disabled
        && first.process_tree() == ProcessTree::Required
    {
        v.push("process tree confinement disabled where it is required".into());
    }
    v
}

/// Report of [`contains`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainmentReport {
    /// True when the candidate grants nothing the boundary does not.
    pub contained: bool,
    /// Regions where the candidate's permission exceeds the boundary's
    /// (`first` = boundary, `second` = candidate).
    pub regions: Vec<Region>,
    /// Plan-wide settings where the candidate is wider, in words.
    pub settings: Vec<String>,
}

/// Whether `candidate` stays inside `boundary`: at every region its permission
/// is at most the boundary's (none < read < read-write), its network mode is
/// at most the boundary's (none < mediated < direct), and when both are
/// mediated each of its destinations is one of the boundary's (exact
/// equality); not ephemeral-write over read-only; not tree confinement
/// disabled where the boundary requires it.
pub fn contains(boundary: &Resolution, candidate: &Resolution) -> ContainmentReport {
    let regions: Vec<Region> = regions(boundary.rules(), candidate.rules())
        .into_iter()
        .filter(|r| r.second > r.first)
        .collect();
    let d = settings_difference(boundary, candidate);
    let settings = settings_widened(boundary, candidate, &d);
    ContainmentReport {
        contained: regions.is_empty() && settings.is_empty(),
        regions,
        settings,
    }
}

/// Report of [`diff`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffReport {
    /// Regions whose permission changed (`first` = before, `second` = after).
    pub regions: Vec<Region>,
    pub settings: SettingsDifference,
    /// Changes by which `after` grants more than `before` (what `--check` refuses),
    /// one line each: regions first, then settings.
    pub widened: Vec<String>,
}

impl DiffReport {
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty() && self.settings == SettingsDifference::default()
    }
}

/// Every difference between two resolved plans.
pub fn diff(before: &Resolution, after: &Resolution) -> DiffReport {
    let regions: Vec<Region> = regions(before.rules(), after.rules())
        .into_iter()
        .filter(|r| r.first != r.second)
        .collect();
    let settings = settings_difference(before, after);
    let mut widened: Vec<String> = regions
        .iter()
        .filter(|r| r.second > r.first)
        .map(|r| {
            if r.named {
                format!("path {}: {} -> {}", r.path, r.first, r.second)
            } else {
                format!(
                    "paths below {} that no rule names: {} -> {}",
                    crate::conflict::witness_parent(&r.path),
                    r.first,
                    r.second
                )
            }
        })
        .collect();
    widened.extend(settings_widened(before, after, &settings));
    DiffReport {
        regions,
        settings,
        widened,
    }
}

/// Report of [`overlaps`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlapReport {
    /// True when some region is granted (read or more) by both, or both reach the network.
    pub overlapping: bool,
    /// Regions both plans grant (`first`, `second` their permissions).
    pub regions: Vec<Region>,
    /// Whether both plans reach the network at all: both direct, direct and
    /// mediated, or mediated with a common destination.
    pub network: bool,
    /// Destinations both plans admit: the common ones (exact equality) when
    /// both are mediated, the mediated plan's when the other is direct.
    pub common_destinations: Vec<Destination>,
}

/// What two resolved plans both grant.
pub fn overlaps(first: &Resolution, second: &Resolution) -> OverlapReport {
    let regions: Vec<Region> = regions(first.rules(), second.rules())
        .into_iter()
        .filter(|r| r.first > Permission::None && r.second > Permission::None)
        .collect();
    let common_destinations: Vec<Destination> = match (first.network(), second.network()) {
        (NetworkMode::Mediated, NetworkMode::Mediated) => {
            let b: BTreeSet<&Destination> = second.destinations().iter().collect();
            first
                .destinations()
                .iter()
                .filter(|d| b.contains(d))
                .cloned()
                .collect()
        }
        (NetworkMode::Mediated, NetworkMode::Direct) => first.destinations().to_vec(),
        (NetworkMode::Direct, NetworkMode::Mediated) => second.destinations().to_vec(),
        _ => Vec::new(),
    };
    let network = match (first.network(), second.network()) {
        (NetworkMode::None, _) | (_, NetworkMode::None) => false,
        (NetworkMode::Direct, NetworkMode::Direct) => true,
        _ => !common_destinations.is_empty(),
    };
    OverlapReport {
        overlapping: !regions.is_empty() || network,
        regions,
        network,
        common_destinations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::evaluate_rules;
    use crate::model::Missing;
    use proptest::prelude::*;

    use crate::testing::{arb_rule, dest, host_tree};

    fn arb_rules() -> impl Strategy<Value = Vec<ResolvedRule>> {
        proptest::collection::vec(arb_rule(&["a", "b"]), 0..10)
    }

    fn all_paths() -> Vec<String> {
        let mut v = vec!["/".to_string()];
        let mut frontier = vec![String::new()];
        for _ in 0..5 {
            let mut next = Vec::new();
            for p in &frontier {
                for s in ["a", "b", "c"] {
                    next.push(format!("{p}/{s}"));
                }
            }
            v.extend(next.iter().cloned());
            frontier = next;
        }
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
        /// Each region's permissions are the evaluator's, and every path of a
        /// small universe has the permissions of some region (coverage).
        #[test]
        fn regions_agree_with_evaluator(a in arb_rules(), b in arb_rules()) {
            let regs = regions(&a, &b);
            for reg in &regs {
                prop_assert_eq!(reg.first, evaluate_rules(&a, &reg.path).unwrap().permission);
                prop_assert_eq!(reg.second, evaluate_rules(&b, &reg.path).unwrap().permission);
            }
            let pairs: BTreeSet<(Permission, Permission)> = regs.iter().map(|r| (r.first, r.second)).collect();
            for p in all_paths() {
                let pair = (evaluate_rules(&a, &p).unwrap().permission, evaluate_rules(&b, &p).unwrap().permission);
                prop_assert!(pair == (Permission::None, Permission::None) || pairs.contains(&pair),
                    "path {} has {:?}, which no region shows", p, pair);
            }
        }
    }

    fn mir(f: impl FnOnce(&mut MirBuilder)) -> Mir {
        let mut b = MirBuilder::new();
        f(&mut b);
        b.build().unwrap()
    }

    fn resolved(f: impl FnOnce(&mut MirBuilder)) -> Resolution {
        let m = mir(f);
        let b = crate::resolved::HostBindings {
            mediator: Some("m".into()),
            ..Default::default()
        };
        crate::resolve::resolve(&m, &b).unwrap()
    }

    #[test]
    fn settings_are_compared() {
        let mediated = |sni: bool| {
            resolved(move |b| {
                b.set_network(NetworkMode::Mediated);
                b.add_destination("a.example", 443, sni, false).unwrap();
            })
        };
        let direct = resolved(|b| {
            b.set_network(NetworkMode::Direct);
        });
        let none = resolved(|_| {});
        let ephemeral = resolved(|b| {
            b.set_root_mode(RootMode::EphemeralWrite);
            b.set_process_tree(ProcessTree::Disabled);
        });
        // Network order none < mediated < direct.
        assert!(contains(&direct, &mediated(false)).contained);
        assert!(contains(&mediated(false), &none).contained);
        assert!(!contains(&mediated(false), &direct).contained);
        assert!(!contains(&none, &mediated(false)).contained);
        // Destinations by exact equality: a stricter flag is still a different destination.
        let r = contains(&mediated(false), &mediated(true));
        assert!(!r.contained);
        assert!(r.settings[0].contains("a.example:443"), "{:?}", r.settings);
        assert!(contains(&mediated(true), &mediated(true)).contained);
        // Root and process tree.
        let r = contains(&none, &ephemeral);
        assert_eq!(r.settings.len(), 2, "{:?}", r.settings);
        assert!(contains(&ephemeral, &none).contained);
        // diff reports and classifies the same changes.
        let d = diff(&none, &ephemeral);
        assert_eq!(
            d.settings.root,
            Some((RootMode::ReadOnly, RootMode::EphemeralWrite))
        );
        assert_eq!(
            d.settings.process_tree,
            Some((ProcessTree::Required, ProcessTree::Disabled))
        );
        assert_eq!(d.widened.len(), 2);
        let d = diff(&ephemeral, &none);
        assert!(d.widened.is_empty() && !d.is_empty());
        let d = diff(&mediated(false), &mediated(true));
        assert_eq!(d.settings.destinations_only_first.len(), 1);
        assert_eq!(d.settings.destinations_only_second.len(), 1);
        assert!(diff(&none, &none).is_empty());
        // overlaps: the network is shared when both reach it.
        let o = overlaps(&direct, &mediated(false));
        assert!(o.network && o.overlapping);
        assert_eq!(o.common_destinations.len(), 1);
        assert!(!overlaps(&mediated(false), &mediated(true)).network);
        assert!(!overlaps(&none, &direct).overlapping);
        assert!(overlaps(&direct, &direct).network);
    }

    #[test]
    fn restrict_rules_and_settings() {
        let base = mir(|b| {
            host_tree(b, Access::Write, "/w", Missing::Error);
            b.set_network(NetworkMode::Mediated);
            b.add_destination("a.example", 443, false, true).unwrap();
            b.add_destination("b.example", 443, false, false).unwrap();
            b.set_root_mode(RootMode::EphemeralWrite);
            b.set_process_tree(ProcessTree::Disabled);
        });
        let overlay = mir(|b| {
            host_tree(b, Access::Deny, "/w/secret", Missing::Skip);
            host_tree(b, Access::DenyWrite, "/w/.git", Missing::Skip);
            b.set_network(NetworkMode::Mediated);
            b.add_destination("a.example", 443, true, true).unwrap();
            b.add_destination("c.example", 443, false, false).unwrap();
            b.set_root_mode(RootMode::ReadOnly);
            b.set_process_tree(ProcessTree::Disabled);
        });
        let m = restrict(&base, &overlay).unwrap();
        assert_eq!(m.rules().len(), 3);
        assert_eq!(m.network(), NetworkMode::Mediated);
        assert_eq!(m.destinations(), &[dest("a.example", 443, true, true)]);
        assert_eq!(m.root_mode(), RootMode::ReadOnly);
        assert_eq!(m.process_tree(), ProcessTree::Disabled);

        // Empty intersection -> none.
        let other = mir(|b| {
            b.set_network(NetworkMode::Mediated);
            b.add_destination("z.example", 80, false, false).unwrap();
        });
        let m = restrict(&base, &other).unwrap();
        assert_eq!(m.network(), NetworkMode::None);
        assert!(m.destinations().is_empty());
        assert_eq!(m.process_tree(), ProcessTree::Required);

        // Direct vs mediated -> mediated with the mediated list.
        let direct = mir(|b| {
            b.set_network(NetworkMode::Direct);
            b.set_root_mode(RootMode::EphemeralWrite);
        });
        let m = restrict(&direct, &overlay).unwrap();
        assert_eq!(m.network(), NetworkMode::Mediated);
        assert_eq!(m.destinations().len(), 2);
        assert_eq!(m.root_mode(), RootMode::ReadOnly);
        let m = restrict(&base, &direct).unwrap();
        assert_eq!(m.network(), NetworkMode::Mediated);
        assert_eq!(m.destinations().len(), 2);
        assert_eq!(m.root_mode(), RootMode::EphemeralWrite);
        let none = mir(|_| {});
        assert_eq!(
            restrict(&direct, &none).unwrap().network(),
            NetworkMode::None
        );

        // The overlay may not grant.
        let e = restrict(&base, &base).unwrap_err();
        assert_eq!(e.class(), crate::ErrorClass::Argument);
        assert!(
            e.detail().contains("only deny and deny-write"),
            "{}",
            e.detail()
        );
    }
}
