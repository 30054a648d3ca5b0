//! The process tree on macOS: how terra finds every process of one run,
//! also one that called `setsid` and forked again, and ends them all.
//!
//! macOS has no PID namespace or cgroup, but a Seatbelt profile is
//! inherited by every descendant and can never be removed, and libsandbox
//! answers, for any process of the same user, whether its profile would
//! allow an operation (`sandbox_check(pid, ...)`). The workload's profile
//! allows looking up one path, the run's **mark** (a name in the run's
//! private directory, outside every grant), and nothing about its sibling,
//! the **antimark**. A process belongs to the run exactly when it is
//! sandboxed, its profile allows the mark, and denies the antimark: an
//! unsandboxed process allows both, another run's profile denies both, and
//! a profile that allows broad lookups (an app's) allows both.
//!
//! [`sweep`] is the loop that ends them: list every process, kill those
//! that belong to the run, and list again until a pass finds none (a
//! process forked between the listing and the kill is found by the next
//! pass). It is plain Rust over three callbacks, so the loop is tested on
//! every host; crates/terra-sandbox/src/macos/tree.rs gives it the real
//! process list, `sandbox_check` and `kill`.

use crate::error::{Error, Result};
use crate::path::seatbelt_path;

/// The mark's file name in the run's directory.
pub const MARK_NAME: &str = "tree.mark";
/// The antimark's file name in the run's directory.
pub const ANTIMARK_NAME: &str = "tree.antimark";
/// The most passes a sweep makes before it gives up (a tree forking as
/// fast as it is killed).
pub const MAX_PASSES: usize = 200;

/// The two paths that identify one run's processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunMark {
    pub mark: String,
    pub antimark: String,
}

impl RunMark {
    /// The mark and antimark in the run's private directory `dir` (an
    /// absolute path; mapped to Seatbelt's form).
    pub fn in_dir(dir: &str) -> Result<RunMark> {
        let dir = seatbelt_path(dir)?;
        let join = |name: &str| {
            if dir == "/" {
                format!("/{name}")
            } else {
                format!("{dir}/{name}")
            }
        };
        Ok(RunMark {
            mark: join(MARK_NAME),
            antimark: join(ANTIMARK_NAME),
        })
    }
}

/// What `sandbox_check` said about one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// The process runs under a Seatbelt profile.
    pub sandboxed: bool,
    /// Its profile allows looking up the mark.
    pub mark_allowed: bool,
    /// Its profile allows looking up the antimark.
    pub antimark_allowed: bool,
}

impl Verdict {
    /// Whether the process carries this run's profile.
    pub fn is_this_run(self) -> bool {
        self.sandboxed && self.mark_allowed && !self.antimark_allowed
    }
}

/// How a sweep ended.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SweepReport {
    /// Processes killed (a process counted once, however many passes saw it).
    pub killed: Vec<i32>,
    /// Passes made (the last found none, unless `gave_up`).
    pub passes: usize,
    /// [`MAX_PASSES`] passes still found processes of the run.
    pub gave_up: bool,
}

/// Ends every process of the run: `list` gives every process id of the
/// host (the caller leaves out itself), `check` asks about one (None: the
/// process is gone or cannot be asked: it is skipped), `kill` sends it
/// SIGKILL. Passes repeat until one finds no process of the run.
pub fn sweep(
    mut list: impl FnMut() -> Vec<i32>,
    mut check: impl FnMut(i32) -> Option<Verdict>,
    mut kill: impl FnMut(i32),
) -> SweepReport {
    let mut report = SweepReport::default();
    while report.passes < MAX_PASSES {
        report.passes += 1;
        let found: Vec<i32> = list()
            .into_iter()
            .filter(|&pid| pid > 1)
            .filter(|&pid| check(pid).is_some_and(Verdict::is_this_run))
            .collect();
        if found.is_empty() {
            return report;
        }
        for pid in found {
            kill(pid);
            if !report.killed.contains(&pid) {
                report.killed.push(pid);
            }
        }
    }
    report.gave_up = true;
    report
}

/// The reaper's command line (`terra __sandbox_reaper`): the run's mark
/// and antimark. The reaper waits for end of file on its standard input
/// (terra run holds the only write end, so it comes when terra run closes
/// it at the run's end, or when terra run dies however it dies), sweeps,
/// and writes one [`SweepReport::line`] on its standard output.
pub fn reaper_argv(mark: &RunMark) -> Vec<String> {
    vec![
        "--mark".into(),
        mark.mark.clone(),
        "--antimark".into(),
        mark.antimark.clone(),
    ]
}

/// Parses what [`reaper_argv`] gives: both paths in Seatbelt's form, in
/// one directory, named [`MARK_NAME`] and [`ANTIMARK_NAME`].
pub fn parse_reaper_argv(argv: &[String]) -> Result<RunMark> {
    let usage = "usage: terra __sandbox_reaper --mark PATH --antimark PATH";
    let [flag_m, mark, flag_a, antimark] = argv else {
        return Err(Error::Args(format!("{} arguments; {usage}", argv.len())));
    };
    if flag_m != "--mark" || flag_a != "--antimark" {
        return Err(Error::Args(usage.into()));
    }
    let dir = mark
        .strip_suffix(MARK_NAME)
        .and_then(|d| d.strip_suffix('/'))
        .filter(|d| !d.is_empty())
        .ok_or_else(|| Error::Args(format!("--mark {mark:?} is not DIR/{MARK_NAME}; {usage}")))?;
    let expected = RunMark::in_dir(dir)?;
    if &expected.mark != mark || &expected.antimark != antimark {
        return Err(Error::Args(format!(
            "--mark and --antimark are not DIR/{MARK_NAME} and DIR/{ANTIMARK_NAME} of one directory in Seatbelt's form; {usage}"
        )));
    }
    Ok(expected)
}

impl SweepReport {
    /// The reaper's report: `swept KILLED PASSES` and ` gave-up` when it did.
    pub fn line(&self) -> String {
        format!(
            "swept {} {}{}\n",
            self.killed.len(),
            self.passes,
            if self.gave_up { " gave-up" } else { "" }
        )
    }

    /// Reads a report line back: the count of killed processes (their pids
    /// are not reported), the passes, whether it gave up.
    pub fn parse_line(text: &str) -> Option<(usize, usize, bool)> {
        let line = text.strip_suffix('\n')?;
        let mut f = line.split(' ');
        let (Some("swept"), Some(k), Some(p)) = (f.next(), f.next(), f.next()) else {
            return None;
        };
        let gave_up = match f.next() {
            None => false,
            Some("gave-up") => true,
            Some(_) => return None,
        };
        if f.next().is_some() {
            return None;
        }
        Some((k.parse().ok()?, p.parse().ok()?, gave_up))
    }
}

/// Refuses a mark that a grant of the plan would make readable: then
/// other processes could not be told apart by it. (The run's directory is
/// outside every grant already, as the canary's check proves; this says
/// so by name.)
pub fn check_mark_outside(spec: &crate::spec::LaunchSpec, mark: &RunMark) -> Result<()> {
    use crate::spec::GrantKind;
    for g in &spec.grants {
        if !matches!(g.kind, GrantKind::Read | GrantKind::Write) {
            continue;
        }
        for p in [&mark.mark, &mark.antimark] {
            let covered = crate::activation::covers(g.scope, &g.path, p);
            if covered {
                return Err(Error::Spec(format!(
                    "the run's mark {p} is inside the {} grant of {}: the run's processes could not be told apart",
                    g.kind.name(),
                    g.path
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const RUN: Verdict = Verdict {
        sandboxed: true,
        mark_allowed: true,
        antimark_allowed: false,
    };

    #[test]
    fn only_a_profile_allowing_the_mark_and_not_the_antimark_is_the_run() {
        assert!(RUN.is_this_run());
        for other in [
            // Not sandboxed: everything is allowed.
            Verdict {
                sandboxed: false,
                mark_allowed: true,
                antimark_allowed: true,
            },
            // Another run, or an app's profile that never names the mark.
            Verdict {
                mark_allowed: false,
                ..RUN
            },
            // A profile allowing broad lookups.
            Verdict {
                antimark_allowed: true,
                ..RUN
            },
        ] {
            assert!(!other.is_this_run(), "{other:?}");
        }
    }

    #[test]
    fn marks_sit_in_the_run_directory_in_seatbelt_form() {
        let m = RunMark::in_dir("/var/folders/ab/T/run").unwrap();
        assert_eq!(m.mark, "/private/var/folders/ab/T/run/tree.mark");
        assert_eq!(m.antimark, "/private/var/folders/ab/T/run/tree.antimark");
        assert!(RunMark::in_dir("relative").is_err());
    }

    /// A fake host: pid -> (verdict, children it forks when it is listed
    /// but not yet killed, as a tree racing the sweep would).
    struct Host {
        procs: BTreeMap<i32, Verdict>,
        forks: BTreeMap<i32, Vec<i32>>,
        killed: Vec<i32>,
    }

    #[test]
    fn a_setsid_double_fork_is_found_by_its_profile_and_killed() {
        let other = Verdict {
            sandboxed: false,
            mark_allowed: true,
            antimark_allowed: true,
        };
        // 10, 11: the run; 12: an unrelated process of the user; 13: a
        // process of another run. 11 forks 20 (which forks 30) while the
        // sweep runs: the grandchild of a double fork.
        let host = std::cell::RefCell::new(Host {
            procs: BTreeMap::from([
                (1, other),
                (10, RUN),
                (11, RUN),
                (12, other),
                (
                    13,
                    Verdict {
                        mark_allowed: false,
                        ..RUN
                    },
                ),
            ]),
            forks: BTreeMap::from([(11, vec![20]), (20, vec![30])]),
            killed: Vec::new(),
        });
        let report = sweep(
            || {
                let mut h = host.borrow_mut();
                let pids: Vec<i32> = h.procs.keys().copied().collect();
                // Each live process forks its children after being listed.
                for p in &pids {
                    if let Some(kids) = h.forks.remove(p) {
                        for k in kids {
                            h.procs.insert(k, RUN);
                        }
                    }
                }
                pids
            },
            |pid| host.borrow().procs.get(&pid).copied(),
            |pid| {
                let mut h = host.borrow_mut();
                h.procs.remove(&pid);
                h.forks.remove(&pid);
                h.killed.push(pid);
            },
        );
        let h = host.borrow();
        assert_eq!(report.killed, [10, 11, 20, 30]);
        assert!(!report.gave_up);
        assert_eq!(report.passes, 4);
        assert!(h.procs.contains_key(&12) && h.procs.contains_key(&13));
        assert!(h.procs.contains_key(&1));
        assert_eq!(h.killed, [10, 11, 20, 30]);
    }

    #[test]
    fn a_tree_that_outforks_the_sweep_is_reported() {
        let mut next = 100;
        let report = sweep(
            || {
                next += 1;
                vec![next]
            },
            |_| Some(RUN),
            |_| {},
        );
        assert!(report.gave_up);
        assert_eq!(report.passes, MAX_PASSES);
    }

    #[test]
    fn reaper_arguments_and_report_round_trip() {
        let m = RunMark::in_dir("/Users/a/.local/state/terra/runs/x").unwrap();
        assert_eq!(parse_reaper_argv(&reaper_argv(&m)).unwrap(), m);
        let other = RunMark::in_dir("/Users/a/other").unwrap();
        let mut mixed = reaper_argv(&m);
        mixed[3] = other.antimark;
        assert!(parse_reaper_argv(&mixed).is_err());
        let mut tmp = reaper_argv(&m);
        tmp[1] = "/tmp/x/tree.mark".into();
        tmp[3] = "/tmp/x/tree.antimark".into();
        assert!(parse_reaper_argv(&tmp).is_err(), "not in Seatbelt's form");
        assert!(parse_reaper_argv(&reaper_argv(&m)[..2]).is_err());
        let r = SweepReport {
            killed: vec![5, 6],
            passes: 3,
            gave_up: false,
        };
        assert_eq!(r.line(), "swept 2 3\n");
        assert_eq!(SweepReport::parse_line(&r.line()), Some((2, 3, false)));
        let g = SweepReport { gave_up: true, ..r };
        assert_eq!(SweepReport::parse_line(&g.line()), Some((2, 3, true)));
        for bad in ["", "swept 1 2", "swept 1\n", "swept 1 2 x\n", "swept a 2\n"] {
            assert_eq!(SweepReport::parse_line(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_grant_over_the_mark_is_refused() {
        use crate::spec::{Grant, GrantKind, LaunchSpec, Network, Role, Scope};
        let mark = RunMark::in_dir("/Users/a/.local/state/terra/runs/x").unwrap();
        let mut spec = LaunchSpec {
            role: Role::Workload,
            network: Network::None,
            executable: "/usr/bin/true".into(),
            mark: None,
            terminals: Vec::new(),
            grants: vec![Grant {
                kind: GrantKind::Read,
                scope: Scope::Tree,
                path: "/Users/a/.local/state/terra/runsx".into(),
            }],
        };
        assert!(check_mark_outside(&spec, &mark).is_ok());
        spec.grants[0].path = "/Users/a/.local".into();
        let e = check_mark_outside(&spec, &mark).unwrap_err();
        assert!(e.to_string().contains("could not be told apart"), "{e}");
        spec.grants[0].kind = GrantKind::Deny;
        assert!(check_mark_outside(&spec, &mark).is_ok());
    }
}
