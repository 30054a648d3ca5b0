//! Which objects below a granted tree need an ACE of their own.
//!
//! A tree grant is **one** inheritable ACE (OBJECT_INHERIT_ACE |
//! CONTAINER_INHERIT_ACE) on the tree's root, written with SetSecurityInfo,
//! which applies it to every existing child that inherits (Windows'
//! automatic propagation, "Automatic Propagation of Inheritable ACEs" in
//! the Win32 security documentation) and removes those copies again when
//! the root's ACE is removed. This is how OpenAI Codex's Windows sandbox
//! grants a writable root (codex-rs/windows-sandbox-rs/src/acl.rs: one
//! SetNamedSecurityInfoW on the root with CONTAINER_INHERIT_ACE |
//! OBJECT_INHERIT_ACE). terra no longer opens, counts or rewrites objects
//! one by one, and there is no object cap: a repository with node_modules,
//! target/ and .venv is granted by one call per rule.
//!
//! Propagation stops at an object whose DACL is **protected**
//! (SE_DACL_PROTECTED: it inherits nothing). Such an object would keep no
//! ACE for the package, so the workload could not open it although the
//! policy grants its tree. [`scan`] finds them (reading, never writing),
//! and [`explicit_entries`] gives each one the covering rules' ACEs
//! directly, recorded in the ledger and removed like the others. A
//! protected directory's own children inherit from it again.
//!
//! Reparse points (junctions, symbolic links, mount points) below a tree
//! are not entered and get no explicit ACE; the root of an entry must not
//! be one (plan paths are resolved, so one that is now was swapped in after
//! resolution: refused). Directories are read in name order, so the result
//! does not depend on the order the filesystem lists entries in.

use std::collections::HashMap;

use crate::dacl::{DaclEntry, Origin};
use crate::error::{Error, Result};
use crate::path::PathStyle;
use crate::rights::NO_INHERITANCE;
use crate::spec::{GrantKind, Scope};

/// What a directory entry is, as its own attributes say (never following it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Directory,
    /// Junction, symbolic link, mount point or any other reparse point.
    ReparsePoint,
}

/// The filesystem as the scan sees it: the launcher implements it on
/// Windows (`terra-sandbox/src/windows/walk.rs`), the tests with a table.
pub trait Tree {
    /// What `path` is, without following it.
    fn kind(&self, path: &str) -> std::io::Result<Kind>;
    /// The entries of directory `dir` (names, not paths).
    fn children(&self, dir: &str) -> std::io::Result<Vec<(String, Kind)>>;
    /// True when `path`'s DACL is protected (inherits nothing from its parent).
    fn protected(&self, path: &str) -> std::io::Result<bool>;
}

/// One object with a protected DACL and the entries covering it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protected {
    pub path: String,
    pub kind: Kind,
    /// Indexes into the entries the scan was given, in entry order.
    pub entries: Vec<usize>,
}

/// The result of a scan.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Objects {
    /// Objects below tree roots looked at (read only).
    pub scanned: usize,
    /// Objects whose DACL is protected, in scan order.
    pub protected: Vec<Protected>,
    /// Reparse points met below tree entries and left alone.
    pub skipped: Vec<String>,
}

/// Scans the trees of `entries` on `tree`, in entry order. No cap: it only
/// reads.
pub fn scan(entries: &[DaclEntry], style: PathStyle, tree: &dyn Tree) -> Result<Objects> {
    let mut out = Objects::default();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut skipped: std::collections::HashSet<String> = std::collections::HashSet::new();
    let walk_err = |path: &str, reason: String| Error::Walk {
        path: path.to_string(),
        reason,
    };
    for (i, e) in entries.iter().enumerate() {
        let root_kind = tree
            .kind(&e.path)
            .map_err(|r| walk_err(&e.path, r.to_string()))?;
        if root_kind == Kind::ReparsePoint {
            return Err(walk_err(
                &e.path,
                "it is a reparse point (junction or link) now, not what the plan resolved; refusing to grant through it"
                    .into(),
            ));
        }
        if root_kind != Kind::Directory || e.scope == Scope::Exact {
            continue;
        }
        let mut stack = vec![e.path.clone()];
        while let Some(dir) = stack.pop() {
            let mut children = tree
                .children(&dir)
                .map_err(|r| walk_err(&dir, r.to_string()))?;
            // Popped from the end: push in reverse name order to visit in name order.
            children.sort_by(|a, b| b.0.cmp(&a.0));
            let mut dirs = Vec::new();
            for (name, kind) in children.into_iter().rev() {
                if name.is_empty()
                    || name == "."
                    || name == ".."
                    || name.contains(style.separator())
                {
                    return Err(walk_err(&dir, format!("a directory entry named {name:?}")));
                }
                let child = style.join(&dir, &name);
                if kind == Kind::ReparsePoint {
                    if skipped.insert(style.key(&child)) {
                        out.skipped.push(child);
                    }
                    continue;
                }
                out.scanned += 1;
                if tree
                    .protected(&child)
                    .map_err(|r| walk_err(&child, r.to_string()))?
                {
                    let slot = *index.entry(style.key(&child)).or_insert_with(|| {
                        out.protected.push(Protected {
                            path: child.clone(),
                            kind,
                            entries: Vec::new(),
                        });
                        out.protected.len() - 1
                    });
                    if !out.protected[slot].entries.contains(&i) {
                        out.protected[slot].entries.push(i);
                    }
                }
                if kind == Kind::Directory {
                    dirs.push(child);
                }
            }
            stack.extend(dirs.into_iter().rev());
        }
    }
    Ok(out)
}

/// The explicit entries the protected objects of `objects` get: each
/// covering entry's rights, inheritable on a directory (its children
/// inherit from it again), on the object alone for a file.
pub fn explicit_entries(entries: &[DaclEntry], objects: &Objects) -> Vec<DaclEntry> {
    let mut out = Vec::new();
    for p in &objects.protected {
        for &i in &p.entries {
            let e = &entries[i];
            let kind = match e.origin {
                Origin::Rule(k) => k,
                _ => GrantKind::Read,
            };
            let dir = p.kind == Kind::Directory;
            out.push(DaclEntry {
                path: p.path.clone(),
                scope: if dir { Scope::Tree } else { Scope::Exact },
                origin: Origin::Protected {
                    root: e.path.clone(),
                    kind,
                },
                allow: e.allow,
                deny: e.deny,
                inheritance: if dir { e.inheritance } else { NO_INHERITANCE },
            });
        }
    }
    out
}
