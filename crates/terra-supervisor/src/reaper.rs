//! The process tree of a `landlock` backend run, which has no PID namespace:
//! the supervisor is the child subreaper of everything the workload starts,
//! so a daemon that double-forks and calls setsid is re-parented to it,
//! never to the host's init. When the workload has ended (or the deadline
//! killed it), [`stop_descendants`] kills and reaps every descendant left.

use std::collections::HashMap;
use std::fs;

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

use crate::error::{Error, Result};

/// Most rounds of [`stop_descendants`]: each round kills every descendant it
/// finds, so only processes forked during a round survive into the next.
const MAX_ROUNDS: usize = 1000;

/// Makes this process the child subreaper of its descendants.
pub fn become_subreaper() -> Result<()> {
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| Error::sys("prctl(PR_SET_CHILD_SUBREAPER)", e))
}

/// The parent pid in a `/proc/PID/stat` line (the field after the command,
/// which is in parentheses and may itself hold spaces and parentheses).
pub fn parent_of(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Every process's parent, from /proc.
fn parents() -> HashMap<i32, i32> {
    let mut map = HashMap::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return map;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(ppid) = fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .as_deref()
            .and_then(parent_of)
        {
            map.insert(pid, ppid);
        }
    }
    map
}

/// The descendants of `root` in `parents` (children before grandchildren).
pub fn descendants(parents: &HashMap<i32, i32>, root: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (&child, &parent) in parents {
            if parent == p && child != root && !out.contains(&child) {
                out.push(child);
                frontier.push(child);
            }
        }
    }
    out
}

/// Kills every descendant of this process with SIGKILL and reaps its
/// children, round after round, until /proc shows none. Returns how many
/// processes were killed.
pub fn stop_descendants() -> Result<usize> {
    let me = std::process::id() as i32;
    let mut killed = 0;
    for _ in 0..MAX_ROUNDS {
        let parents = parents();
        let found = descendants(&parents, me);
        if found.is_empty() {
            return Ok(killed);
        }
        for &pid in &found {
            if kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
                killed += 1;
            }
        }
        // Our own children (the first generation, and orphans re-parented to
        // us) die now; their children become ours and show up next round.
        for &pid in found.iter().filter(|p| parents.get(p) == Some(&me)) {
            match waitpid(Pid::from_raw(pid), None) {
                Ok(_) | Err(Errno::ECHILD) => {}
                Err(e) => return Err(Error::sys("waitpid", e)),
            }
        }
    }
    Err(Error::Unsupported(format!(
        "descendants of the workload were still being created after {MAX_ROUNDS} rounds of SIGKILL"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_after_the_command() {
        assert_eq!(parent_of("42 (sh) S 7 42 42 0 -1"), Some(7));
        assert_eq!(parent_of("42 (a) b) (c) R 9 1 1"), Some(9));
        assert_eq!(parent_of("42 (x"), None);
    }

    #[test]
    fn descendants_are_the_whole_subtree() {
        let parents: HashMap<i32, i32> =
            [(10, 1), (11, 10), (12, 11), (13, 1), (14, 12), (15, 13)].into();
        let mut d = descendants(&parents, 10);
        d.sort();
        assert_eq!(d, [11, 12, 14]);
        assert!(descendants(&parents, 14).is_empty());
    }
}
