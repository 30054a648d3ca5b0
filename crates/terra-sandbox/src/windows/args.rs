//! The launcher's command line, parsed strictly.

use super::error::Error;
use std::ffi::OsString;

use terra_appcontainer::Role;

pub enum Args {
    /// `--canary PATH --job HANDLE -- ARG0 [ARGS...]`: a launch; the spec is
    /// on stdin; HANDLE the launcher job's query-only handle (hex).
    Launch {
        canary: String,
        job: usize,
        command: Vec<String>,
    },
    /// `--self-check ROLE CANARY PROGRAM`: the self-check worker, inside
    /// the AppContainer.
    SelfCheck {
        role: Role,
        canary: String,
        program: String,
    },
}

const USAGE: &str = "usage: terra __sandbox_launcher --canary PATH --job HANDLE -- ARG0 [ARGS...] (the launch spec on standard input)";

/// A handle value as `terra run` writes it: `0x` and lowercase hex.
pub fn parse_handle(text: &str) -> Option<usize> {
    let hex = text.strip_prefix("0x")?;
    let canonical = !hex.is_empty()
        && hex.len() <= 16
        && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        && (hex == "0" || !hex.starts_with('0'));
    if !canonical {
        return None;
    }
    usize::from_str_radix(hex, 16).ok().filter(|&h| h != 0)
}

fn utf8(a: OsString) -> Result<String, Error> {
    a.into_string()
        .map_err(|a| Error::Refused(format!("argument {a:?} is not valid Unicode; {USAGE}")))
}

pub fn parse(argv: Vec<OsString>) -> Result<Args, Error> {
    let mut it = argv.into_iter().map(utf8);
    match it.next().transpose()?.as_deref() {
        Some("--self-check") => {
            let role = match it.next().transpose()?.as_deref() {
                Some("workload") => Role::Workload,
                Some("broker") => Role::Broker,
                _ => return Err("--self-check needs a role (workload or broker)".into()),
            };
            let canary = it
                .next()
                .transpose()?
                .ok_or("--self-check needs the canary's path")?;
            let program = it
                .next()
                .transpose()?
                .ok_or("--self-check needs the program's path")?;
            if it.next().is_some() {
                return Err("--self-check takes a role, a canary and a program only".into());
            }
            Ok(Args::SelfCheck {
                role,
                canary,
                program,
            })
        }
        Some("--canary") => {
            let canary = it
                .next()
                .transpose()?
                .ok_or(format!("--canary needs a path; {USAGE}"))?;
            if it.next().transpose()?.as_deref() != Some("--job") {
                return Err(format!("no --job after the canary; {USAGE}").into());
            }
            let job = it
                .next()
                .transpose()?
                .as_deref()
                .and_then(parse_handle)
                .ok_or(format!("--job needs a handle value (0x and hex); {USAGE}"))?;
            if it.next().transpose()?.as_deref() != Some("--") {
                return Err(format!("no -- before the command; {USAGE}").into());
            }
            let command = it.collect::<Result<Vec<String>, Error>>()?;
            if command.is_empty() {
                return Err(format!("no command after --; {USAGE}").into());
            }
            Ok(Args::Launch {
                canary,
                job,
                command,
            })
        }
        _ => Err(USAGE.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_a_launch_and_a_self_check() {
        match parse(argv(&[
            "--canary", r"C:\c", "--job", "0x1a4", "--", "prog", "a b",
        ]))
        .unwrap()
        {
            Args::Launch {
                canary,
                job,
                command,
            } => {
                assert_eq!(canary, r"C:\c");
                assert_eq!(job, 0x1a4);
                assert_eq!(command, ["prog", "a b"]);
            }
            Args::SelfCheck { .. } => panic!("not a self-check"),
        }
        assert!(matches!(
            parse(argv(&["--self-check", "workload", r"C:\c", r"C:\p.exe"])).unwrap(),
            Args::SelfCheck {
                role: Role::Workload,
                ..
            }
        ));
    }

    #[test]
    fn refuses_anything_else() {
        for bad in [
            &[][..],
            &["--canary"],
            &["--canary", "c", "prog"],
            &["--canary", "c", "--"],
            &["--canary", "c", "--job", "--", "p"],
            &["--canary", "c", "--job", "0x0", "--", "p"],
            &["--canary", "c", "--job", "1a4", "--", "p"],
            &["--canary", "c", "--job", "0x01a4", "--", "p"],
            &["--self-check", "admin", "c"],
            &["--self-check", "workload"],
            &["--self-check", "workload", "c"],
            &["--self-check", "workload", "c", "p", "x"],
            &["--other"],
        ] {
            assert!(parse(argv(bad)).is_err(), "{bad:?}");
        }
    }
}
