//! What passes between `terra run` and `terra __sandbox_launcher`, besides
//! the spec: the launcher's command line ([`LauncherArgs`], built by one and
//! parsed strictly by the other) and the status lines the launcher writes on
//! `--status-fd` before its exec ([`Status`], [`read_report`]). Plain Rust,
//! tested on every host.
//!
//! ```text
//! terra __sandbox_launcher --spec-fd N --canary PATH [--status-fd N] [--foreground] -- ARG0 [ARGS...]
//! ```
//!
//! Status lines, one per event, UTF-8, newline-terminated; the pipe closes
//! at the exec (close-on-exec), so end of file after `activation passed`
//! means the role runs:
//!
//! ```text
//! activation passed
//! refused WHY                  (exit 125, nothing was exec'd)
//! exec-failed CODE WHY         (exit CODE: 126 not executable, 127 not found)
//! ```

use std::ffi::OsString;

use crate::error::{Error, Result};

const USAGE: &str = "usage: terra __sandbox_launcher --spec-fd N --canary PATH [--status-fd N] [--foreground] -- ARG0 [ARGS...]";

/// The launcher's command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LauncherArgs {
    /// The descriptor carrying the launch spec.
    pub spec_fd: i32,
    /// The private file that must open before confinement and not after.
    pub canary: String,
    /// Where the launcher reports (terra run's pipe); closed by the exec.
    pub status_fd: Option<i32>,
    /// Make the launcher's process group the foreground group of the
    /// terminal on standard input first (terra run was in its foreground).
    pub foreground: bool,
    /// ARG0 and the role's arguments.
    pub command: Vec<OsString>,
}

fn descriptor(flag: &str, v: &str) -> Result<i32> {
    v.parse()
        .ok()
        .filter(|fd| *fd > 2)
        .ok_or(Error::Args(format!("{flag} {v}: not a descriptor above 2")))
}

impl LauncherArgs {
    /// Parses the arguments after `__sandbox_launcher`: every option at most
    /// once, descriptors above 2 and distinct, a command after `--`.
    pub fn parse(argv: Vec<OsString>) -> Result<LauncherArgs> {
        let usage = |why: String| Error::Args(format!("{why}; {USAGE}"));
        let mut spec_fd = None;
        let mut canary = None;
        let mut status_fd = None;
        let mut foreground = false;
        let mut it = argv.into_iter();
        while let Some(a) = it.next() {
            let a = a
                .into_string()
                .map_err(|a| usage(format!("option {a:?} is not UTF-8")))?;
            let mut value = |name: &str| -> Result<String> {
                it.next()
                    .and_then(|v| v.into_string().ok())
                    .ok_or_else(|| usage(format!("{name} needs a UTF-8 value")))
            };
            match a.as_str() {
                "--spec-fd" if spec_fd.is_none() => {
                    spec_fd = Some(descriptor("--spec-fd", &value("--spec-fd")?)?)
                }
                "--status-fd" if status_fd.is_none() => {
                    status_fd = Some(descriptor("--status-fd", &value("--status-fd")?)?)
                }
                "--canary" if canary.is_none() => canary = Some(value("--canary")?),
                "--foreground" if !foreground => foreground = true,
                "--" => {
                    let command: Vec<OsString> = it.collect();
                    if command.is_empty() {
                        return Err(usage("no command after --".into()));
                    }
                    let spec_fd = spec_fd.ok_or_else(|| usage("--spec-fd missing".into()))?;
                    if status_fd == Some(spec_fd) {
                        return Err(usage(
                            "--spec-fd and --status-fd name one descriptor".into(),
                        ));
                    }
                    return Ok(LauncherArgs {
                        spec_fd,
                        canary: canary.ok_or_else(|| usage("--canary missing".into()))?,
                        status_fd,
                        foreground,
                        command,
                    });
                }
                other => return Err(usage(format!("unexpected or repeated argument {other:?}"))),
            }
        }
        Err(usage("no -- before the command".into()))
    }

    /// The arguments after `__sandbox_launcher` that [`LauncherArgs::parse`]
    /// reads back as `self`.
    pub fn to_argv(&self) -> Vec<OsString> {
        let mut v: Vec<OsString> = vec![
            "--spec-fd".into(),
            self.spec_fd.to_string().into(),
            "--canary".into(),
            self.canary.clone().into(),
        ];
        if let Some(fd) = self.status_fd {
            v.push("--status-fd".into());
            v.push(fd.to_string().into());
        }
        if self.foreground {
            v.push("--foreground".into());
        }
        v.push("--".into());
        v.extend(self.command.iter().cloned());
        v
    }
}

/// One status line of the launcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// The profile is applied and every activation probe was refused.
    ActivationPassed,
    /// The launcher refused (exit 125); nothing was exec'd.
    Refused(String),
    /// The exec of the role failed (exit `code`).
    ExecFailed { code: u8, reason: String },
}

/// Longest status report read (a few lines).
pub const MAX_REPORT: usize = 64 * 1024;

impl Status {
    /// The line, newline included; newlines in the text become spaces.
    pub fn line(&self) -> String {
        let flat = |s: &str| s.replace(['\n', '\r'], " ");
        match self {
            Status::ActivationPassed => "activation passed\n".into(),
            Status::Refused(why) => format!("refused {}\n", flat(why)),
            Status::ExecFailed { code, reason } => {
                format!("exec-failed {code} {}\n", flat(reason))
            }
        }
    }

    fn parse(line: &str) -> Option<Status> {
        if line == "activation passed" {
            return Some(Status::ActivationPassed);
        }
        if let Some(why) = line.strip_prefix("refused ") {
            return Some(Status::Refused(why.into()));
        }
        let rest = line.strip_prefix("exec-failed ")?;
        let (code, reason) = rest.split_once(' ')?;
        let code: u8 = code.parse().ok().filter(|c| (126..=127).contains(c))?;
        Some(Status::ExecFailed {
            code,
            reason: reason.into(),
        })
    }
}

/// What terra run learned from the launcher's status pipe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// "passed", or why the launch was refused, or "not run" when the
    /// launcher said nothing (it died before, or could not write).
    pub activation: String,
    /// The launcher's refusal.
    pub refused: Option<String>,
    /// The exec of the role failed: its exit code and why.
    pub exec_failed: Option<(u8, String)>,
    /// End of file came after `activation passed` and nothing else: the
    /// role was exec'd.
    pub execed: bool,
}

/// Reads the whole status report (`bytes` up to end of file). A line that is
/// not a status line makes the report a refusal: the launcher writes only
/// these lines.
pub fn read_report(bytes: &[u8]) -> Report {
    let mut r = Report {
        activation: "not run".into(),
        refused: None,
        exec_failed: None,
        execed: false,
    };
    let text = String::from_utf8_lossy(bytes);
    let complete = text.ends_with('\n') || text.is_empty();
    let mut passed = false;
    for line in text.lines() {
        match Status::parse(line) {
            Some(Status::ActivationPassed) if !passed => {
                passed = true;
                r.activation = "passed".into();
            }
            Some(Status::Refused(why)) => {
                if !passed {
                    r.activation = why.clone();
                }
                r.refused.get_or_insert(why);
            }
            Some(Status::ExecFailed { code, reason }) => {
                r.exec_failed.get_or_insert((code, reason));
            }
            _ => {
                r.refused
                    .get_or_insert(format!("the launcher's status pipe held {line:?}"));
            }
        }
    }
    if !complete {
        r.refused
            .get_or_insert("the launcher's status report ends inside a line".into());
    }
    r.execed = passed && r.refused.is_none() && r.exec_failed.is_none();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn seatbelt_launcher_args_parse_and_round_trip() {
        let a = LauncherArgs::parse(argv(&[
            "--spec-fd",
            "5",
            "--canary",
            "/c",
            "--",
            "sh",
            "-c",
            "x",
        ]))
        .unwrap();
        assert_eq!((a.spec_fd, a.canary.as_str()), (5, "/c"));
        assert_eq!((a.status_fd, a.foreground), (None, false));
        assert_eq!(a.command, argv(&["sh", "-c", "x"]));
        let full = LauncherArgs {
            spec_fd: 9,
            canary: "/private/var/c".into(),
            status_fd: Some(12),
            foreground: true,
            command: argv(&["terra", "__network", "--startup-fd", "11"]),
        };
        assert_eq!(LauncherArgs::parse(full.to_argv()).unwrap(), full);
        assert_eq!(LauncherArgs::parse(a.to_argv()).unwrap(), a);
        // Arguments of the command that look like options stay the command's.
        let tricky = LauncherArgs {
            command: argv(&["sh", "--spec-fd", "--", "--foreground"]),
            ..full
        };
        assert_eq!(LauncherArgs::parse(tricky.to_argv()).unwrap(), tricky);
    }

    #[test]
    fn seatbelt_launcher_args_refuse_missing_repeated_or_low_values() {
        for bad in [
            &["--canary", "/c", "--", "sh"][..],
            &["--spec-fd", "5", "--", "sh"],
            &[
                "--spec-fd",
                "5",
                "--spec-fd",
                "6",
                "--canary",
                "/c",
                "--",
                "sh",
            ],
            &["--spec-fd", "2", "--canary", "/c", "--", "sh"],
            &["--spec-fd", "5", "--canary", "/c", "--"],
            &["--spec-fd", "5", "--canary", "/c", "sh"],
            &[
                "--spec-fd",
                "5",
                "--status-fd",
                "5",
                "--canary",
                "/c",
                "--",
                "sh",
            ],
            &[
                "--spec-fd",
                "5",
                "--status-fd",
                "1",
                "--canary",
                "/c",
                "--",
                "sh",
            ],
            &[
                "--foreground",
                "--foreground",
                "--spec-fd",
                "5",
                "--canary",
                "/c",
                "--",
                "sh",
            ],
            &["--other"],
        ] {
            assert!(LauncherArgs::parse(argv(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn seatbelt_status_report_round_trips_each_outcome() {
        let passed = read_report(Status::ActivationPassed.line().as_bytes());
        assert_eq!(passed.activation, "passed");
        assert!(passed.execed);
        let why = "activation check: OpenCanary(\"/c\") succeeded\nunder the profile";
        let refused = read_report(Status::Refused(why.into()).line().as_bytes());
        assert!(!refused.execed);
        assert_eq!(
            refused.refused.as_deref(),
            Some("activation check: OpenCanary(\"/c\") succeeded under the profile")
        );
        assert_eq!(refused.activation, refused.refused.clone().unwrap());
        let report = format!(
            "{}{}",
            Status::ActivationPassed.line(),
            Status::ExecFailed {
                code: 127,
                reason: "exec /x: No such file".into()
            }
            .line()
        );
        let failed = read_report(report.as_bytes());
        assert_eq!(failed.activation, "passed");
        assert_eq!(
            failed.exec_failed,
            Some((127, "exec /x: No such file".into()))
        );
        assert!(!failed.execed);
    }

    #[test]
    fn seatbelt_status_report_refuses_what_the_launcher_never_writes() {
        // Nothing: the launcher died before it could say anything.
        let none = read_report(b"");
        assert_eq!(none.activation, "not run");
        assert!(!none.execed);
        for odd in [
            &b"activation passed"[..],
            b"activation passed\nhello\n",
            b"exec-failed 1 x\n",
            b"exec-failed 126\n",
            b"\xff\n",
        ] {
            let r = read_report(odd);
            assert!(!r.execed, "{:?}", String::from_utf8_lossy(odd));
            assert!(r.refused.is_some(), "{:?}", String::from_utf8_lossy(odd));
        }
    }
}
