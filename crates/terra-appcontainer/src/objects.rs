//! Which objects a launch changes, counted before any is changed.
//!
//! The launcher sets the ACEs itself, object by object, instead of letting
//! Windows propagate an inheritable ACE down a tree: so it decides what is
//! walked. A reparse point (junction, symbolic link, mount point) below a
//! tree grant gets no ACE and is not entered: what it points to keeps its
//! own DACL, which names no package SID, so a link inside the workspace
//! cannot carry a grant to somewhere else. The root of an entry must not be
//! a reparse point either (plan paths are resolved, so one that is now was
//! swapped in after resolution: refused).
//!
//! At most [`MAX_OBJECTS`] distinct objects per launch; the walk stops at
//! the first object past the cap and the refusal names the grant that
//! overflowed it. Directories are read in name order, so the walk and the
//! refusal do not depend on the order the filesystem lists entries in.

use std::collections::HashSet;

use crate::dacl::DaclEntry;
use crate::error::{Error, Result};
use crate::path::PathStyle;
use crate::spec::Scope;

/// The most distinct files and directories one launch changes the DACL of.
pub const MAX_OBJECTS: usize = 16_384;

/// What a directory entry is, as its own attributes say (never following it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Directory,
    /// Junction, symbolic link, mount point or any other reparse point.
    ReparsePoint,
}

/// The filesystem as the walk sees it: the launcher implements it on
/// Windows (`terra-sandbox/src/windows/walk.rs`), the tests with a table.
pub trait Tree {
    /// What `path` is, without following it.
    fn kind(&self, path: &str) -> std::result::Result<Kind, String>;
    /// The entries of directory `dir` (names, not paths), at most `max + 1`
    /// of them (more proves the cap is passed).
    fn children(&self, dir: &str, max: usize) -> std::result::Result<Vec<(String, Kind)>, String>;
}

/// One object and the entries whose ACEs it receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub path: String,
    pub kind: Kind,
    /// Indexes into the entries the walk was given, in entry order.
    pub entries: Vec<usize>,
}

/// The result of a walk.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Objects {
    /// Every object changed, in walk order.
    pub objects: Vec<Object>,
    /// Objects reached by each entry (an object reached by two entries
    /// counts for each).
    pub per_entry: Vec<usize>,
    /// Reparse points met below tree entries and left alone.
    pub skipped: Vec<String>,
}

/// Walks `entries` on `tree`, in entry order, counting distinct objects
/// against `cap` ([`MAX_OBJECTS`] for a launch).
pub fn walk(
    entries: &[DaclEntry],
    style: PathStyle,
    tree: &dyn Tree,
    cap: usize,
) -> Result<Objects> {
    let mut out = Objects {
        per_entry: vec![0; entries.len()],
        ..Objects::default()
    };
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut skipped: HashSet<String> = HashSet::new();
    for (i, e) in entries.iter().enumerate() {
        let overflow = || Error::ObjectCap {
            kind: e.origin.name(),
            path: e.path.clone(),
            cap,
        };
        let walk_err = |path: &str, reason: String| Error::Walk {
            path: path.to_string(),
            reason,
        };
        let root_kind = tree.kind(&e.path).map_err(|r| walk_err(&e.path, r))?;
        if root_kind == Kind::ReparsePoint {
            return Err(walk_err(
                &e.path,
                "it is a reparse point (junction or link) now, not what the plan resolved; refusing to grant through it"
                    .into(),
            ));
        }
        let mut stack = vec![(e.path.clone(), root_kind)];
        while let Some((path, kind)) = stack.pop() {
            let key = style.key(&path);
            let slot = match index.get(&key) {
                Some(&k) => k,
                None => {
                    if out.objects.len() == cap {
                        return Err(overflow());
                    }
                    out.objects.push(Object {
                        path: path.clone(),
                        kind,
                        entries: Vec::new(),
                    });
                    index.insert(key, out.objects.len() - 1);
                    out.objects.len() - 1
                }
            };
            if !out.objects[slot].entries.contains(&i) {
                out.objects[slot].entries.push(i);
                out.per_entry[i] += 1;
            }
            if kind != Kind::Directory || e.scope == Scope::Exact {
                continue;
            }
            let mut children = tree.children(&path, cap).map_err(|r| walk_err(&path, r))?;
            if children.len() > cap {
                return Err(overflow());
            }
            // Popped from the end: push in reverse name order to visit in name order.
            children.sort_by(|a, b| b.0.cmp(&a.0));
            for (name, child_kind) in children {
                if name.is_empty()
                    || name == "."
                    || name == ".."
                    || name.contains(style.separator())
                {
                    return Err(walk_err(&path, format!("a directory entry named {name:?}")));
                }
                let child = style.join(&path, &name);
                if child_kind == Kind::ReparsePoint {
                    if skipped.insert(style.key(&child)) {
                        out.skipped.push(child);
                    }
                    continue;
                }
                stack.push((child, child_kind));
            }
        }
    }
    Ok(out)
}
