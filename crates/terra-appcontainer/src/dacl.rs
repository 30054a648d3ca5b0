//! The DACL entries of a launch: for each grant, the rights the package
//! SID is allowed and explicitly denied on the path, and how the ACE is
//! inherited.
//!
//! Every entry names the per-launch package SID only (never a user, group
//! or ALL APPLICATION PACKAGES), so it changes nothing for any other token:
//! the AppContainer access check needs both the user's normal access and an
//! ACE for the package (or one of its capabilities), and the worker has no
//! capability.
//!
//! | rule | allow | deny |
//! |---|---|---|
//! | read | [`ALLOW_READ`] | [`DENY_WRITE`] (write, delete, permissions) |
//! | write | [`ALLOW_WRITE`] (no FILE_DELETE_CHILD) | [`DENY_PERMISSIONS`] |
//! | deny-write | nothing | [`DENY_WRITE`] |
//! | deny | nothing | [`DENY_ALL`] |
//! | ancestor kept in place | nothing | [`DENY_DELETE`] |
//!
//! Explicit deny ACEs come before allow ACEs in canonical order and
//! inherited ACEs after explicit ones, so a deny on a path inside a writable
//! tree wins over the write grant inherited from above, and a read grant's
//! denies make the subtree read-only even under a write grant.
//!
//! A read-only, deny-write or denied path inside a writable tree could be
//! moved away (renaming its parent needs DELETE on the parent, which the
//! write grant gives) and a fresh one made in its place; so every ancestor
//! between the writable tree's root and the protected path gets an
//! explicit deny of DELETE for the package SID, on that directory alone.

use crate::path::PathStyle;
use crate::rights::{
    ALLOW_READ, ALLOW_WRITE, CONTAINER_INHERIT_ACE, DENY_ALL, DENY_DELETE, DENY_PERMISSIONS,
    DENY_WRITE, NO_INHERITANCE, OBJECT_INHERIT_ACE,
};
use crate::spec::{Grant, GrantKind, Scope};

/// The placeholder the rendering shows for the package SID: the SID is
/// derived from the profile name, which is made fresh at each launch.
pub const PACKAGE_SID_PLACEHOLDER: &str = "S-1-15-2-…";

/// Why an entry is in the DACL plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A rule of the plan.
    Rule(GrantKind),
    /// An ancestor of `target` inside a writable tree, kept in place.
    KeepsInPlace { target: String },
    /// terra's own executable, so the self-check worker can start in the
    /// launch's AppContainer (added only when no grant covers it).
    Launcher,
    /// An object below the tree `root` whose DACL is protected (inherits
    /// nothing), given the `kind` rule's ACEs explicitly
    /// (`crate::objects::explicit_entries`).
    Protected { root: String, kind: GrantKind },
}

impl Origin {
    pub fn name(&self) -> &'static str {
        match self {
            Origin::Rule(k) => k.name(),
            Origin::KeepsInPlace { .. } => "keep-in-place",
            Origin::Launcher => "launcher",
            Origin::Protected { .. } => "protected",
        }
    }
}

/// One DACL change: ACEs for the package SID on `path`. A tree's ACEs are
/// inheritable and written to the root alone; Windows propagates them to
/// the children that inherit (`crate::objects`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaclEntry {
    pub path: String,
    pub scope: Scope,
    pub origin: Origin,
    /// Rights of the access-allowed ACE (0: no allow ACE).
    pub allow: u32,
    /// Rights of the access-denied ACE (0: no deny ACE).
    pub deny: u32,
    /// ACE flags on directories; files take none.
    pub inheritance: u32,
}

fn inheritance(scope: Scope) -> u32 {
    match scope {
        Scope::Tree => OBJECT_INHERIT_ACE | CONTAINER_INHERIT_ACE,
        Scope::Exact => NO_INHERITANCE,
    }
}

/// The entry of one grant.
pub fn entry_for(grant: &Grant) -> DaclEntry {
    let (allow, deny) = match grant.kind {
        GrantKind::Read => (ALLOW_READ, DENY_WRITE),
        GrantKind::Write => (ALLOW_WRITE, DENY_PERMISSIONS),
        GrantKind::DenyWrite => (0, DENY_WRITE),
        GrantKind::Deny => (0, DENY_ALL),
    };
    DaclEntry {
        path: grant.path.clone(),
        scope: grant.scope,
        origin: Origin::Rule(grant.kind),
        allow,
        deny,
        inheritance: inheritance(grant.scope),
    }
}

/// The entries of `grants` in their order, then the ancestors kept in
/// place (each once, in the order first needed).
pub fn dacl_entries(grants: &[Grant], style: PathStyle) -> Vec<DaclEntry> {
    let mut out: Vec<DaclEntry> = grants.iter().map(entry_for).collect();
    let mut kept: Vec<String> = Vec::new();
    let writable: Vec<&Grant> = grants
        .iter()
        .filter(|g| g.kind == GrantKind::Write && g.scope == Scope::Tree)
        .collect();
    for g in grants.iter().filter(|g| g.kind != GrantKind::Write) {
        for w in &writable {
            for a in style.ancestors_from(&w.path, &g.path) {
                let key = style.key(&a);
                if kept.contains(&key) {
                    continue;
                }
                kept.push(key);
                out.push(DaclEntry {
                    path: a,
                    scope: Scope::Exact,
                    origin: Origin::KeepsInPlace {
                        target: g.path.clone(),
                    },
                    allow: 0,
                    deny: DENY_DELETE,
                    inheritance: NO_INHERITANCE,
                });
            }
        }
    }
    out
}

/// True when a read or write grant among `grants` covers `path` (so the
/// package SID can already read it).
pub fn readable(grants: &[Grant], style: PathStyle, path: &str) -> bool {
    grants.iter().any(|g| {
        matches!(g.kind, GrantKind::Read | GrantKind::Write)
            && match g.scope {
                Scope::Tree => style.within(&g.path, path),
                Scope::Exact => style.key(&g.path) == style.key(path),
            }
    })
}

/// The deny rule covering `path`, if any.
pub fn denied_by<'a>(grants: &'a [Grant], style: PathStyle, path: &str) -> Option<&'a Grant> {
    grants.iter().find(|g| {
        g.kind == GrantKind::Deny
            && match g.scope {
                Scope::Tree => style.within(&g.path, path),
                Scope::Exact => style.key(&g.path) == style.key(path),
            }
    })
}
