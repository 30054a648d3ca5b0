//! The launcher's command line, parsed strictly.

use std::ffi::OsString;

use terra_appcontainer::Role;

pub enum Args {
    /// `--canary PATH -- ARG0 [ARGS...]`: a launch; the spec is on stdin.
    Launch {
        canary: String,
        command: Vec<String>,
    },
    /// `--self-check ROLE CANARY`: the self-check worker, inside the AppContainer.
    SelfCheck { role: Role, canary: String },
}

const USAGE: &str = "usage: terra __sandbox_launcher --canary PATH -- ARG0 [ARGS...] (the launch spec on standard input)";

fn utf8(a: OsString) -> Result<String, String> {
    a.into_string()
        .map_err(|a| format!("argument {a:?} is not valid Unicode; {USAGE}"))
}

pub fn parse(argv: Vec<OsString>) -> Result<Args, String> {
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
            if it.next().is_some() {
                return Err("--self-check takes a role and a canary only".into());
            }
            Ok(Args::SelfCheck { role, canary })
        }
        Some("--canary") => {
            let canary = it
                .next()
                .transpose()?
                .ok_or(format!("--canary needs a path; {USAGE}"))?;
            if it.next().transpose()?.as_deref() != Some("--") {
                return Err(format!("no -- before the command; {USAGE}"));
            }
            let command = it.collect::<Result<Vec<String>, String>>()?;
            if command.is_empty() {
                return Err(format!("no command after --; {USAGE}"));
            }
            Ok(Args::Launch { canary, command })
        }
        _ => Err(USAGE.to_string()),
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
        match parse(argv(&["--canary", r"C:\c", "--", "prog", "a b"])).unwrap() {
            Args::Launch { canary, command } => {
                assert_eq!(canary, r"C:\c");
                assert_eq!(command, ["prog", "a b"]);
            }
            Args::SelfCheck { .. } => panic!("not a self-check"),
        }
        assert!(matches!(
            parse(argv(&["--self-check", "workload", r"C:\c"])).unwrap(),
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
            &["--self-check", "admin", "c"],
            &["--self-check", "workload"],
            &["--self-check", "workload", "c", "x"],
            &["--other"],
        ] {
            assert!(parse(argv(bad)).is_err(), "{bad:?}");
        }
    }
}
