//! The sweep that undoes what a launcher that is gone left behind: every
//! stale ledger's records, newest first (ACEs through `acl`, profiles
//! through `profile`), then the ledger itself.

use terra_appcontainer::ledger::{is_stale, Ledger, Owner, Record};

use super::error::Error;
use super::ledger::{dir, running, write_atomic};

/// Undoes one record: every ACE naming the SID on the path (Windows
/// removes the copies it propagated), or the profile.
fn undo(r: &Record) -> Result<(), Error> {
    match r {
        Record::Ace { sid, path } => super::acl::remove_sid_string(path, sid),
        Record::Profile { name } => super::profile::delete(name),
    }
}

/// Undoes every ledger whose owner is gone, in reverse order of what it
/// recorded, and removes it; a ledger that cannot be read is left alone
/// and named. Returns what could not be cleaned.
pub fn sweep() -> Vec<String> {
    let mut problems = Vec::new();
    let dir = match dir() {
        Ok(d) => d,
        Err(e) => return vec![e.to_string()],
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return problems; // no ledger was ever written here
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_str().unwrap_or_default();
        // A temporary file of a rewrite its owner never finished.
        if let Some(owner) = name.strip_suffix(".tmp").and_then(Owner::from_file_name) {
            if is_stale(owner, running) {
                let _ = std::fs::remove_file(entry.path());
            }
            continue;
        }
        let Some(owner) = Owner::from_file_name(name) else {
            continue;
        };
        if !is_stale(owner, running) {
            continue;
        }
        let path = entry.path();
        let ledger = match std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| Ledger::decode(&b).map_err(|e| e.to_string()))
        {
            Ok(l) if l.owner == owner => l,
            Ok(_) => {
                problems.push(format!("{}: names another owner", path.display()));
                continue;
            }
            Err(e) => {
                problems.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        let mut left = Vec::new();
        for r in ledger.undo_order() {
            if let Err(e) = undo(r) {
                problems.push(e.to_string());
                left.push(r.clone());
            }
        }
        if left.is_empty() {
            if let Err(e) = std::fs::remove_file(&path) {
                problems.push(format!("{}: {e}", path.display()));
            }
        } else {
            left.reverse();
            let rest = Ledger {
                owner,
                records: left,
            };
            if let Err(e) = write_atomic(&path, &rest.encode()) {
                problems.push(e.to_string());
            }
        }
    }
    problems
}
