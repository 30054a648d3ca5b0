//! Network none's name service: every question is refused at once, and
//! each name the box asks is said once, as it is asked, on the box's
//! standard error with the flag that would admit it. (Without it a closed
//! port 53 answers "try again", and cargo and pip retry for seconds with
//! nothing said.)

use std::collections::HashSet;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

use crate::stub::{Lookup, StubLookup};

/// Most names said in one run; later ones are refused without a word.
pub const MAX_SAID: usize = 64;

/// The refusing lookup of network none.
pub struct Refusing {
    report: Mutex<std::fs::File>,
    seen: Mutex<HashSet<String>>,
}

impl Refusing {
    /// Says names on `report` (the box's standard error).
    pub fn new(report: OwnedFd) -> Refusing {
        Refusing {
            report: Mutex::new(std::fs::File::from(report)),
            seen: Mutex::new(HashSet::new()),
        }
    }
}

/// The line said for `name` the first time it is asked.
pub fn line(name: &str) -> String {
    format!(
        "terra: network none: {name} was asked for and refused (the box has no network); \
         --allow-net {name}:443 would admit it\n"
    )
}

/// The name a [`line`] says, or None for any other text.
pub fn name_of(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("terra: network none: ")?;
    let (name, _) = rest.split_once(" was asked for and refused ")?;
    sayable(name).then_some(name)
}

/// A name as the stub gives it is lowercase letters, digits, `-`, `_` and
/// dots; anything else is not said (it could carry terminal controls).
fn sayable(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl StubLookup for Refusing {
    fn lookup(&self, name: &str, _qtype: u16) -> Lookup {
        let first = {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.len() < MAX_SAID && seen.insert(name.to_owned())
        };
        if first && sayable(name) {
            let mut out = self.report.lock().unwrap_or_else(|e| e.into_inner());
            let _ = out.write_all(line(name).as_bytes());
        }
        Lookup::Refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn each_name_is_refused_every_time_and_said_once() {
        let (mut r, w) = std::io::pipe().unwrap();
        let l = Refusing::new(OwnedFd::from(w));
        for name in [
            "pypi.org",
            "pypi.org",
            "index.crates.io",
            "pypi.org",
            "bad\u{1b}[2J",
        ] {
            assert!(matches!(l.lookup(name, 1), Lookup::Refused));
        }
        drop(l);
        let mut said = String::new();
        r.read_to_string(&mut said).unwrap();
        assert_eq!(
            said,
            format!("{}{}", line("pypi.org"), line("index.crates.io"))
        );
        assert!(said.contains("--allow-net pypi.org:443"));
        assert_eq!(name_of(&line("pypi.org")), Some("pypi.org"));
        assert_eq!(
            name_of("terra: network none: x y was asked for and refused (z"),
            None
        );
        assert_eq!(name_of("anything else"), None);
    }
}
