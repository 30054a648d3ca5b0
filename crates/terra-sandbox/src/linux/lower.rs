//! Lowering: resolved rules + modes -> an ordered mount program. Pure (the only
//! host input is a `kind` oracle that says whether a path is a file, a
//! directory or missing), so it is unit-tested with hand-made rules.

use terra_policy::{Access, ResolvedRule, RootMode, Scope};

use super::error::SandboxError;

/// What a host path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    Dir,
    File,
    /// A character device, or (`block`) a block device.
    Device {
        block: bool,
    },
    Missing,
}

/// One step of the mount program. Every `path` is an absolute path inside the
/// box (the same as on the host for host content).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MountOp {
    /// Bind the host path at the same path (recursive), read-only unless `writable`.
    Bind {
        path: String,
        dir: bool,
        writable: bool,
    },
    /// Bind the host directory `source` at `path` read-write (the box's /tmp).
    BindTemp { source: String, path: String },
    /// An exact-scope directory grant outside every tree grant: an empty
    /// directory in the box root (its contents are not granted).
    EmptyDir { path: String },
    /// A new procfs of the box's PID namespace, with sensitive entries masked.
    Proc { path: String },
    /// A small /dev: host null, zero, full, random, urandom, tty bound; private
    /// devpts, /dev/shm tmpfs.
    Dev { path: String },
    /// A device node a rule names (e.g. /dev/dri/renderD128), bound alone at
    /// its path, read-only unless `writable`; the one kind of bind without
    /// nodev. `block` for a block device.
    Device {
        path: String,
        writable: bool,
        block: bool,
    },
    /// A file synthesized by terra, bound read-only (never the host's).
    Synth { path: String, content: String },
    /// A host symlink recreated in the box root (e.g. /lib -> usr/lib) whose
    /// target is granted.
    Symlink { path: String, target: String },
    /// A directory between a writable bind and a protected path below it,
    /// bound onto itself so that it is a mount point: renaming or removing it
    /// then fails (EBUSY), so the protection cannot be carried away with it.
    Pin { path: String },
    /// deny-write: the path (and every mount below it) re-bound read-only.
    ReadOnly { path: String },
    /// deny of a directory: an empty read-only tmpfs over it.
    MaskDir { path: String },
    /// deny of a file: an empty read-only file over it.
    MaskFile { path: String },
    /// An absent denied name inside a writable bind: the placeholder terra
    /// made on the host is covered like `MaskFile`; a placeholder that is
    /// not there refuses the box (the name would be creatable).
    MaskPlaceholder { path: String },
    /// deny of an absent path: an empty read-only directory created in the box
    /// root (never on the host), so nothing can be created there.
    ProtectCreate { path: String },
    /// Final: the root tmpfs remounted read-only (root mode read-only).
    RootReadOnly,
}

impl MountOp {
    pub fn describe(&self) -> String {
        match self {
            MountOp::Bind {
                path,
                dir,
                writable,
            } => format!(
                "bind {} {path} ({})",
                if *dir { "dir " } else { "file" },
                if *writable { "read-write" } else { "read-only" }
            ),
            MountOp::BindTemp { source, path } => {
                format!("bind dir  {source} at {path} (read-write, run temp)")
            }
            MountOp::EmptyDir { path } => {
                format!("mkdir     {path} (exact grant: the directory only, empty)")
            }
            MountOp::Proc { path } => {
                format!("proc      {path} (box PID namespace; sys, irq, bus, fs read-only; kcore, keys, sysrq-trigger, slabinfo, ... masked)")
            }
            MountOp::Dev { path } => {
                format!("dev       {path} (null zero full random urandom tty; devpts; shm tmpfs)")
            }
            MountOp::Device {
                path,
                writable,
                block,
            } => format!(
                "device    {path} ({} {})",
                if *block { "block" } else { "char" },
                if *writable { "read-write" } else { "read-only" }
            ),
            MountOp::Synth { path, .. } => format!("synth     {path} (generated, read-only)"),
            MountOp::Symlink { path, target } => format!("symlink   {path} -> {target}"),
            MountOp::Pin { path } => {
                format!("pin       {path} (ancestor of a protected path: a mount point, so it cannot be renamed)")
            }
            MountOp::ReadOnly { path } => {
                format!("readonly  {path} (deny-write: re-bound read-only, recursive)")
            }
            MountOp::MaskDir { path } => format!("mask dir  {path} (deny: empty read-only tmpfs)"),
            MountOp::MaskFile { path } => format!("mask file {path} (deny: empty read-only file)"),
            MountOp::MaskPlaceholder { path } => format!(
                "mask file {path} (deny of a name that does not exist: terra's placeholder, covered)"
            ),
            MountOp::ProtectCreate { path } => {
                format!(
                    "protect   {path} (absent deny: empty read-only placeholder in the box root)"
                )
            }
            MountOp::RootReadOnly => "readonly  / (root mode read-only)".to_string(),
        }
    }
}

/// Inputs besides the rules.
pub struct LowerInput<'a> {
    pub rules: &'a [ResolvedRule],
    pub root_mode: RootMode,
    /// Canonical host path of the run's temp dir, bound at /tmp.
    pub temp_dir: &'a str,
    /// Synthesized files (path, content).
    pub synth: Vec<(String, String)>,
    /// Host symlinks at the top level: (path, link text, canonical target).
    pub top_symlinks: Vec<(String, String, String)>,
}

/// True when a tree rule at `tree` covers `p` (segment boundaries; `/` covers all).
pub fn covers(tree: &str, p: &str) -> bool {
    tree == "/"
        || p == tree
        || (p.len() > tree.len() && p.starts_with(tree) && p.as_bytes()[tree.len()] == b'/')
}

fn depth(p: &str) -> usize {
    p.split('/').filter(|s| !s.is_empty()).count()
}

/// A grant after de-duplication: tree-like (tree scope, or a file) or an exact directory.
#[derive(Debug, Clone)]
struct Grant {
    path: String,
    write: bool,
    tree: bool,
    dir: bool,
}

/// Builds the mount program. Errors name the rule that cannot be enforced.
pub fn lower(
    input: &LowerInput<'_>,
    kind: &dyn Fn(&str) -> NodeKind,
) -> Result<Vec<MountOp>, SandboxError> {
    // 1. Grants, de-duplicated by (path, tree-like) keeping the strongest access.
    let mut grants: Vec<Grant> = Vec::new();
    let mut devices: Vec<MountOp> = Vec::new();
    for r in input
        .rules
        .iter()
        .filter(|r| matches!(r.access, Access::Read | Access::Write))
    {
        let k = kind(&r.path);
        if k == NodeKind::Missing {
            return Err(SandboxError::InvalidPlan(format!(
                "granted path {} does not exist on this host",
                r.path
            )));
        }
        if let NodeKind::Device { block } = k {
            // A rule that names the node itself: that node alone, at its
            // path (tree grants that merely hold devices keep nodev).
            devices.push(MountOp::Device {
                path: r.path.clone(),
                writable: r.access == Access::Write,
                block,
            });
            continue;
        }
        let tree = r.scope == Scope::Tree || k == NodeKind::File;
        let write = r.access == Access::Write;
        match grants
            .iter_mut()
            .find(|g| g.path == r.path && g.tree == tree)
        {
            Some(g) => g.write |= write,
            None => grants.push(Grant {
                path: r.path.clone(),
                write,
                tree,
                dir: k == NodeKind::Dir,
            }),
        }
    }
    // Access already given to `p` by a tree-like grant other than `skip`.
    let covering = |p: &str, skip: usize, grants: &[Grant]| -> Option<bool> {
        grants
            .iter()
            .enumerate()
            .filter(|(i, g)| *i != skip && g.tree && covers(&g.path, p))
            .map(|(_, g)| g.write)
            .max()
    };

    // The run temp dir is bound read-write at /tmp. When its host path is
    // itself under /tmp, binding it at that path too would put the directory
    // inside itself (a loop for `find`, `du` or `rm -r` in /tmp, and a mount
    // point created on the host inside the temp dir): rules under it then
    // apply at their /tmp name only.
    let temp = input.temp_dir;
    let temp_inside_tmp = covers("/tmp", temp) && temp != "/tmp";
    let mut layered: Vec<(usize, MountOp)> = Vec::new();
    for (i, g) in grants.iter().enumerate() {
        if temp_inside_tmp && covers(temp, &g.path) {
            continue; // /tmp shows the same files, writable
        }
        let parent = covering(&g.path, i, &grants);
        if parent.is_some_and(|w| w >= g.write) {
            continue; // an enclosing tree grant already gives as much
        }
        let op = if g.tree {
            MountOp::Bind {
                path: g.path.clone(),
                dir: g.dir,
                writable: g.write,
            }
        } else if parent.is_none() {
            MountOp::EmptyDir {
                path: g.path.clone(),
            }
        } else {
            continue; // exact dir under a covering tree grant: keeps the covering access
        };
        layered.push((depth(&g.path), op));
    }
    // Base layout, ordered with the grants by depth (a grant of "/" comes first).
    layered.push((
        1,
        MountOp::BindTemp {
            source: input.temp_dir.to_string(),
            path: "/tmp".into(),
        },
    ));
    layered.push((
        1,
        MountOp::Proc {
            path: "/proc".into(),
        },
    ));
    layered.push((
        1,
        MountOp::Dev {
            path: "/dev".into(),
        },
    ));
    // Device nodes after the layout they sit in (the box's /dev), the
    // strongest access when two rules name one node.
    devices.sort_by(|a, b| match (a, b) {
        (
            MountOp::Device {
                path: p,
                writable: w,
                ..
            },
            MountOp::Device {
                path: q,
                writable: v,
                ..
            },
        ) => p.cmp(q).then(v.cmp(w)),
        _ => std::cmp::Ordering::Equal,
    });
    devices.dedup_by(|a, b| match (a, b) {
        (MountOp::Device { path: p, .. }, MountOp::Device { path: q, .. }) => p == q,
        _ => false,
    });
    for d in devices {
        if let MountOp::Device { path, .. } = &d {
            layered.push((depth(path).max(2), d));
        }
    }
    layered.sort_by_key(|(d, _)| *d);
    let mut ops: Vec<MountOp> = layered.into_iter().map(|(_, op)| op).collect();

    for (path, content) in &input.synth {
        ops.push(MountOp::Synth {
            path: path.clone(),
            content: content.clone(),
        });
    }

    let writable_binds: Vec<&Grant> = grants.iter().filter(|g| g.write && g.tree).collect();
    let visible = |p: &str| {
        grants
            .iter()
            .any(|g| covers(&g.path, p) && (g.tree || g.path == p))
    };
    let has_below = |p: &str| grants.iter().any(|g| covers(p, &g.path));
    // The run temp dir is also visible at /tmp: denies under it apply there
    // too (there only, when its host path is under /tmp, see above).
    let aliases = |p: &str| -> Vec<String> {
        if !covers(temp, p) {
            return vec![p.to_string()];
        }
        let at_tmp = format!("/tmp{}", &p[temp.len()..]);
        if temp_inside_tmp {
            vec![at_tmp]
        } else {
            vec![p.to_string(), at_tmp]
        }
    };

    // 2. deny-write: read-only re-binds.
    let mut protect: Vec<MountOp> = Vec::new();
    for r in input.rules.iter().filter(|r| r.access == Access::DenyWrite) {
        if r.protect_create {
            if writable_binds.iter().any(|g| covers(&g.path, &r.path)) || covers(temp, &r.path) {
                // terra's placeholder holds the name (see `placeholders`).
                for p in aliases(&r.path) {
                    protect.push(MountOp::MaskPlaceholder { path: p });
                }
            }
            continue; // otherwise absent and not creatable through any writable bind
        }
        let touches_writable = writable_binds
            .iter()
            .any(|g| covers(&g.path, &r.path) || covers(&r.path, &g.path));
        if touches_writable || covers(temp, &r.path) {
            for p in aliases(&r.path) {
                protect.push(MountOp::ReadOnly { path: p });
            }
        }
    }

    // 3. deny: masks.
    for r in input.rules.iter().filter(|r| r.access == Access::Deny) {
        if r.protect_create {
            if writable_binds.iter().any(|g| covers(&g.path, &r.path)) || covers(temp, &r.path) {
                // terra's placeholder holds the name (see `placeholders`).
                for p in aliases(&r.path) {
                    protect.push(MountOp::MaskPlaceholder { path: p });
                }
                continue;
            }
            if visible(&r.path) {
                continue; // under a read-only bind: creation fails with EROFS
            }
            protect.push(MountOp::ProtectCreate {
                path: r.path.clone(),
            });
            continue;
        }
        if !(visible(&r.path) || has_below(&r.path) || covers(temp, &r.path)) {
            continue; // not in the box at all
        }
        let op = |p: String| match kind(&r.path) {
            NodeKind::File => MountOp::MaskFile { path: p },
            _ => MountOp::MaskDir { path: p },
        };
        for p in aliases(&r.path) {
            protect.push(op(p));
        }
    }

    // 4. Pins: every directory strictly between the deepest writable bind that
    // holds a protected path and that path, so that renaming an ancestor
    // cannot move the protection away and leave the name free to re-create.
    // Pins come before every protective mount, so binding them recursively
    // keeps the binds below.
    let mut writable_roots: Vec<&str> = writable_binds.iter().map(|g| g.path.as_str()).collect();
    writable_roots.push("/tmp");
    let mut pins: Vec<String> = Vec::new();
    for op in &protect {
        let target = match op {
            MountOp::ReadOnly { path }
            | MountOp::MaskDir { path }
            | MountOp::MaskFile { path }
            | MountOp::MaskPlaceholder { path } => path,
            _ => continue,
        };
        let Some(root) = writable_roots
            .iter()
            .filter(|b| covers(b, target) && **b != target.as_str())
            .max_by_key(|b| b.len())
        else {
            continue;
        };
        let mut d = parent_of(target);
        while d.len() > root.len() && covers(root, &d) {
            pins.push(d.clone());
            d = parent_of(&d);
        }
    }
    pins.sort_by(|a, b| depth(a).cmp(&depth(b)).then_with(|| a.cmp(b)));
    pins.dedup();
    ops.extend(pins.into_iter().map(|path| MountOp::Pin { path }));
    ops.extend(protect);

    // 5. Top-level host symlinks (merged /usr) whose target is granted.
    for (path, text, target) in &input.top_symlinks {
        if visible(target) && !grants.iter().any(|g| covers(&g.path, path)) {
            ops.push(MountOp::Symlink {
                path: path.clone(),
                target: text.clone(),
            });
        }
    }

    if input.root_mode == RootMode::ReadOnly {
        ops.push(MountOp::RootReadOnly);
    }
    Ok(ops)
}

/// The absent denied paths (deny and deny-write with protect-create) that a
/// writable host bind, or the run's temp directory, could create: each
/// needs a placeholder on the host for the run, which the deny mount then
/// covers (`lower` masks them). The caller makes them before the box's
/// mounts apply and removes them afterwards.
pub fn placeholders(rules: &[ResolvedRule], temp_dir: &str) -> Vec<String> {
    let writable: Vec<&ResolvedRule> = rules
        .iter()
        .filter(|r| r.access == Access::Write && !r.protect_create)
        .collect();
    let mut out: Vec<String> = rules
        .iter()
        .filter(|r| r.protect_create && matches!(r.access, Access::Deny | Access::DenyWrite))
        .filter(|r| {
            covers(temp_dir, &r.path)
                || writable
                    .iter()
                    .any(|g| g.scope == Scope::Tree && covers(&g.path, &r.path))
        })
        .map(|r| r.path.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The parent of an absolute path ("/" for a top-level path).
fn parent_of(p: &str) -> String {
    match p.rfind('/') {
        Some(0) | None => "/".to_string(),
        Some(i) => p[..i].to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Access::{Deny, DenyWrite, Read, Write};

    /// Tree rules on host paths.
    fn tree(rules: &[(Access, &str)]) -> Vec<ResolvedRule> {
        rules
            .iter()
            .map(|(a, p)| ResolvedRule::host(*a, Scope::Tree, p))
            .collect()
    }

    /// Index of the first op that `f` accepts.
    fn first(ops: &[MountOp], f: impl Fn(&MountOp) -> bool) -> usize {
        ops.iter().position(f).expect("an op of that kind")
    }

    fn kinds(p: &str) -> NodeKind {
        if p.ends_with(".txt") {
            NodeKind::File
        } else if p.contains("absent") {
            NodeKind::Missing
        } else {
            NodeKind::Dir
        }
    }

    fn run(rules: &[ResolvedRule], mode: RootMode) -> Result<Vec<MountOp>, SandboxError> {
        lower(
            &LowerInput {
                rules,
                root_mode: mode,
                temp_dir: "/t/run",
                synth: vec![],
                top_symlinks: vec![],
            },
            &kinds,
        )
    }

    #[test]
    fn nested_grants_only_bind_when_they_add_access() {
        let ops = run(
            &[
                ResolvedRule::host(Access::Read, Scope::Tree, "/a"),
                ResolvedRule::host(Access::Write, Scope::Tree, "/a/b"),
                ResolvedRule::host(Access::Read, Scope::Tree, "/a/b/c"),
                ResolvedRule::host(Access::Read, Scope::Exact, "/x/y.txt"),
            ],
            RootMode::ReadOnly,
        )
        .unwrap();
        assert!(ops.contains(&MountOp::Bind {
            path: "/a".into(),
            dir: true,
            writable: false
        }));
        assert!(ops.contains(&MountOp::Bind {
            path: "/a/b".into(),
            dir: true,
            writable: true
        }));
        assert!(!ops
            .iter()
            .any(|o| matches!(o, MountOp::Bind { path, .. } if path == "/a/b/c")));
        assert!(ops.contains(&MountOp::Bind {
            path: "/x/y.txt".into(),
            dir: false,
            writable: false
        }));
        let a = first(
            &ops,
            |o| matches!(o, MountOp::Bind { path, .. } if path == "/a"),
        );
        let ab = first(
            &ops,
            |o| matches!(o, MountOp::Bind { path, .. } if path == "/a/b"),
        );
        assert!(a < ab, "parents are mounted first");
        assert_eq!(ops.last(), Some(&MountOp::RootReadOnly));
    }

    #[test]
    fn a_rule_naming_a_device_binds_that_node_alone_after_the_box_dev() {
        let kind = |p: &str| match p {
            "/dev/kvm" => NodeKind::Device { block: false },
            "/dev/sdz" => NodeKind::Device { block: true },
            _ => NodeKind::Dir,
        };
        let rules = [
            ResolvedRule::host(Access::Read, Scope::Exact, "/dev/kvm"),
            ResolvedRule::host(Access::Write, Scope::Exact, "/dev/kvm"),
            ResolvedRule::host(Access::Read, Scope::Exact, "/dev/sdz"),
        ];
        let ops = lower(
            &LowerInput {
                rules: &rules,
                root_mode: RootMode::ReadOnly,
                temp_dir: "/t/run",
                synth: vec![],
                top_symlinks: vec![],
            },
            &kind,
        )
        .unwrap();
        let kvm: Vec<&MountOp> = ops
            .iter()
            .filter(|o| matches!(o, MountOp::Device { path, .. } if path == "/dev/kvm"))
            .collect();
        // Two rules, one node: the stronger access.
        assert_eq!(
            kvm,
            [&MountOp::Device {
                path: "/dev/kvm".into(),
                writable: true,
                block: false
            }]
        );
        assert!(ops.contains(&MountOp::Device {
            path: "/dev/sdz".into(),
            writable: false,
            block: true
        }));
        let dev = first(&ops, |o| matches!(o, MountOp::Dev { .. }));
        let node = first(&ops, |o| matches!(o, MountOp::Device { .. }));
        assert!(dev < node, "the box's /dev first");
        assert!(!ops.iter().any(|o| matches!(o, MountOp::Bind { .. })));
    }

    #[test]
    fn exact_dir_outside_trees_is_an_empty_dir() {
        let ops = run(
            &[ResolvedRule::host(Access::Read, Scope::Exact, "/e")],
            RootMode::EphemeralWrite,
        )
        .unwrap();
        assert!(ops.contains(&MountOp::EmptyDir { path: "/e".into() }));
        assert!(!ops.contains(&MountOp::RootReadOnly));
    }

    #[test]
    fn ancestors_of_protected_paths_inside_writable_binds_are_pinned_first() {
        let ops = run(
            &tree(&[
                (Write, "/w"),
                (DenyWrite, "/w/a/b/ro"),
                (Deny, "/w/a/c/secret"),
                (Deny, "/w/top"),
                (Read, "/r"),
                (Deny, "/r/x/secret"),
            ]),
            RootMode::ReadOnly,
        )
        .unwrap();
        let pins: Vec<&str> = ops
            .iter()
            .filter_map(|op| match op {
                MountOp::Pin { path } => Some(path.as_str()),
                _ => None,
            })
            .collect();
        // Not /w (already a bind), not under the read-only /r (rename fails there).
        assert_eq!(pins, ["/w/a", "/w/a/b", "/w/a/c"]);
        let first_protect = first(&ops, |op| {
            matches!(op, MountOp::ReadOnly { .. } | MountOp::MaskDir { .. })
        });
        let last_pin = ops
            .iter()
            .rposition(|op| matches!(op, MountOp::Pin { .. }))
            .unwrap();
        assert!(last_pin < first_protect, "{ops:?}");
    }

    #[test]
    fn deny_and_deny_write() {
        let ops = run(
            &tree(&[
                (Write, "/w"),
                (DenyWrite, "/w/ro"),
                (Deny, "/w/secret"),
                (Deny, "/w/key.txt"),
                (Deny, "/elsewhere"),
                (DenyWrite, "/elsewhere2"),
            ]),
            RootMode::ReadOnly,
        )
        .unwrap();
        assert!(ops.contains(&MountOp::ReadOnly {
            path: "/w/ro".into()
        }));
        assert!(ops.contains(&MountOp::MaskDir {
            path: "/w/secret".into()
        }));
        assert!(ops.contains(&MountOp::MaskFile {
            path: "/w/key.txt".into()
        }));
        assert!(!ops.iter().any(|o| format!("{o:?}").contains("elsewhere")));
        let ro = first(&ops, |o| matches!(o, MountOp::ReadOnly { .. }));
        let mask = first(&ops, |o| matches!(o, MountOp::MaskDir { .. }));
        assert!(ro < mask);
    }

    #[test]
    fn deny_under_temp_is_applied_at_both_names() {
        let ops = run(
            &tree(&[(Write, "/t/run"), (Deny, "/t/run/s")]),
            RootMode::ReadOnly,
        )
        .unwrap();
        for p in ["/t/run/s", "/tmp/s"] {
            assert!(ops.contains(&MountOp::MaskDir { path: p.into() }), "{p}");
        }
    }

    #[test]
    fn temp_under_slash_tmp_is_bound_at_slash_tmp_only() {
        let lower_with = |temp: &str| {
            lower(
                &LowerInput {
                    rules: &[
                        ResolvedRule::host(Access::Write, Scope::Tree, temp),
                        ResolvedRule::host(Access::Deny, Scope::Tree, &format!("{temp}/s")),
                        ResolvedRule::host(Access::DenyWrite, Scope::Tree, &format!("{temp}/r")),
                    ],
                    root_mode: RootMode::ReadOnly,
                    temp_dir: temp,
                    synth: vec![],
                    top_symlinks: vec![],
                },
                &kinds,
            )
            .unwrap()
        };
        let ops = lower_with("/tmp/terra-tmp-1");
        let paths: Vec<String> = ops.iter().map(|o| format!("{o:?}")).collect();
        assert!(
            !paths.iter().any(|p| p.contains("path: \"/tmp/terra-tmp-1")),
            "nothing is mounted at the temp dir's own name: {paths:?}"
        );
        assert!(ops.contains(&MountOp::MaskDir {
            path: "/tmp/s".into()
        }));
        assert!(ops.contains(&MountOp::ReadOnly {
            path: "/tmp/r".into()
        }));
        // Twin: a temp dir elsewhere keeps both names.
        let ops = lower_with("/var/tmp/terra-tmp-1");
        for p in ["/var/tmp/terra-tmp-1/s", "/tmp/s"] {
            assert!(ops.contains(&MountOp::MaskDir { path: p.into() }), "{p}");
        }
        assert!(ops
            .iter()
            .any(|o| matches!(o, MountOp::Bind { path, .. } if path == "/var/tmp/terra-tmp-1")));
    }

    #[test]
    fn protect_create() {
        let mut pc = ResolvedRule::host(Access::Deny, Scope::Tree, "/w/absent");
        pc.protect_create = true;
        // The absent path under a grant of /w with `access`.
        let under = |access, pc: &ResolvedRule, mode| {
            run(
                &[ResolvedRule::host(access, Scope::Tree, "/w"), pc.clone()],
                mode,
            )
        };
        // Under a writable bind: the placeholder terra makes is masked, and
        // `placeholders` names it.
        let ops = under(Write, &pc, RootMode::ReadOnly).unwrap();
        assert!(ops.contains(&MountOp::MaskPlaceholder {
            path: "/w/absent".into()
        }));
        let rules = [ResolvedRule::host(Write, Scope::Tree, "/w"), pc.clone()];
        assert_eq!(placeholders(&rules, "/t/run"), ["/w/absent"]);
        let rules = [ResolvedRule::host(Read, Scope::Tree, "/w"), pc.clone()];
        assert!(
            placeholders(&rules, "/t/run").is_empty(),
            "read-only: none needed"
        );
        let ops = under(Read, &pc, RootMode::ReadOnly).unwrap();
        assert!(
            !ops.iter()
                .any(|o| matches!(o, MountOp::ProtectCreate { .. })),
            "read-only bind already stops it"
        );
        pc.path = "/nowhere/absent".into();
        let ops = under(Read, &pc, RootMode::EphemeralWrite).unwrap();
        assert!(ops.contains(&MountOp::ProtectCreate {
            path: "/nowhere/absent".into()
        }));
    }

    #[test]
    fn missing_grant_is_refused_and_covers_respects_segments() {
        assert!(run(
            &[ResolvedRule::host(Access::Read, Scope::Tree, "/absent")],
            RootMode::ReadOnly
        )
        .is_err());
        assert!(covers("/a", "/a/b") && covers("/a", "/a") && covers("/", "/x"));
        assert!(!covers("/a", "/ab") && !covers("/a/b", "/a"));
    }
}
