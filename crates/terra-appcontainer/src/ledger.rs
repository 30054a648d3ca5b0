//! The ledger: every ACE and AppContainer profile a launch adds, written
//! before each change, so that nothing outlives a run that did not end in
//! order (Ctrl-C, Ctrl-Break, a closed console, a killed `terra` or
//! launcher).
//!
//! One file per launcher in terra's state directory
//! (`%LOCALAPPDATA%\terra\state\ledger\PID-START.ledger`), rewritten
//! atomically (a temporary file, flushed, renamed over the old one) before
//! each profile or ACE is added. It names its owner: the launcher's
//! process id and its creation time, so a reused process id is not taken
//! for the owner. The launcher removes what it added when it ends in order
//! and then its ledger; anything left is cleaned by `terra run` when its
//! launcher has exited, and by every later launch: a ledger whose owner is
//! gone is undone in reverse order (ACEs first, then the profile) and
//! removed.
//!
//! ```text
//! terra-appcontainer-ledger 1
//! owner PID START
//! profile HEX                 (the profile's name)
//! ace HEX HEX                 (the package SID as text, the path)
//! ```

use crate::error::{Error, Result};
use crate::path::windows_path;
use crate::spec::is_profile_name;

const MAGIC: &str = "terra-appcontainer-ledger 1";
/// The most records one ledger holds (grants, keep-in-place and protected
/// objects of one launch, and its profile).
pub const MAX_RECORDS: usize = 1 << 16;

/// The launcher that owns a ledger: its process id and creation time (a
/// FILETIME), which together name one process for as long as the machine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner {
    pub pid: u32,
    pub start: u64,
}

/// One thing a launch added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// An AppContainer profile (`terra.` and 32 hex digits).
    Profile { name: String },
    /// ACEs naming `sid` on `path` (and what Windows propagated from them).
    Ace { sid: String, path: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ledger {
    pub owner: Owner,
    pub records: Vec<Record>,
}

impl Owner {
    /// The ledger's file name.
    pub fn file_name(self) -> String {
        format!("{}-{:016x}.ledger", self.pid, self.start)
    }

    /// The owner a ledger file name names (None for any other name).
    pub fn from_file_name(name: &str) -> Option<Owner> {
        let (pid, rest) = name.strip_suffix(".ledger")?.split_once('-')?;
        let canonical = !pid.is_empty()
            && pid.bytes().all(|b| b.is_ascii_digit())
            && (pid == "0" || !pid.starts_with('0'))
            && rest.len() == 16
            && rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !canonical {
            return None;
        }
        Some(Owner {
            pid: pid.parse().ok()?,
            start: u64::from_str_radix(rest, 16).ok()?,
        })
    }
}

fn err(what: &str) -> Error {
    Error::Ledger(what.to_string())
}

fn sid_ok(sid: &str) -> bool {
    // An AppContainer package SID: S-1-15-2- and decimal sub-authorities.
    sid.strip_prefix("S-1-15-2-").is_some_and(|r| {
        !r.is_empty()
            && r.split('-')
                .all(|a| !a.is_empty() && a.bytes().all(|b| b.is_ascii_digit()))
    })
}

impl Ledger {
    pub fn new(owner: Owner) -> Ledger {
        Ledger {
            owner,
            records: Vec::new(),
        }
    }

    /// Adds a record, refusing one the decoder would refuse.
    pub fn push(&mut self, record: Record) -> Result<()> {
        check(&record)?;
        if self.records.len() == MAX_RECORDS {
            return Err(err("too many records"));
        }
        self.records.push(record);
        Ok(())
    }

    /// What cleanup undoes, in order: the reverse of what was added.
    pub fn undo_order(&self) -> impl Iterator<Item = &Record> {
        self.records.iter().rev()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut s = format!("{MAGIC}\nowner {} {}\n", self.owner.pid, self.owner.start);
        for r in &self.records {
            match r {
                Record::Profile { name } => s.push_str(&format!("profile {}\n", hex(name))),
                Record::Ace { sid, path } => {
                    s.push_str(&format!("ace {} {}\n", hex(sid), hex(path)))
                }
            }
        }
        s.into_bytes()
    }

    /// Parses exactly what [`Ledger::encode`] writes.
    pub fn decode(bytes: &[u8]) -> Result<Ledger> {
        let text = std::str::from_utf8(bytes).map_err(|_| err("not UTF-8"))?;
        let body = text
            .strip_suffix('\n')
            .ok_or_else(|| err("does not end with a newline"))?;
        let mut lines = body.split('\n');
        if lines.next() != Some(MAGIC) {
            return Err(err("wrong magic line"));
        }
        let owner = lines
            .next()
            .and_then(|l| l.strip_prefix("owner "))
            .and_then(|l| l.split_once(' '))
            .and_then(|(p, s)| Some((p.parse::<u32>().ok()?, s.parse::<u64>().ok()?)))
            .map(|(pid, start)| Owner { pid, start })
            .ok_or_else(|| err("second line is not an owner line"))?;
        let mut ledger = Ledger::new(owner);
        for line in lines {
            let f: Vec<&str> = line.split(' ').collect();
            let record = match f.as_slice() {
                ["profile", name] => Record::Profile { name: unhex(name)? },
                ["ace", sid, path] => Record::Ace {
                    sid: unhex(sid)?,
                    path: unhex(path)?,
                },
                _ => return Err(err("a line that is neither profile nor ace")),
            };
            ledger.push(record)?;
        }
        if ledger.encode() != bytes {
            return Err(err("not in canonical form"));
        }
        Ok(ledger)
    }
}

/// True when a ledger must be undone now: its owner is not running (the
/// same process id with the same creation time). `running` asks the OS.
pub fn is_stale(owner: Owner, running: impl Fn(Owner) -> bool) -> bool {
    !running(owner)
}

fn check(r: &Record) -> Result<()> {
    match r {
        Record::Profile { name } if is_profile_name(name) => Ok(()),
        Record::Profile { name } => Err(Error::Ledger(format!(
            "{name:?} is not a profile name terra makes"
        ))),
        Record::Ace { sid, path } => {
            if !sid_ok(sid) {
                return Err(Error::Ledger(format!("{sid:?} is not a package SID")));
            }
            match windows_path(path) {
                Ok(p) if &p == path => Ok(()),
                _ => Err(Error::Ledger(format!(
                    "{path:?} is not a canonical Windows path"
                ))),
            }
        }
    }
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(h: &str) -> Result<String> {
    if h.is_empty()
        || !h.len().is_multiple_of(2)
        || !h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(err("a field is not lowercase hex"));
    }
    let bytes: Vec<u8> = (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap_or(0))
        .collect();
    String::from_utf8(bytes).map_err(|_| err("a field is not UTF-8"))
}
