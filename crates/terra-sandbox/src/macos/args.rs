//! The launcher's command line, parsed strictly: every option once, the
//! role's argv after `--`.

use std::ffi::OsString;

pub struct Args {
    pub spec_fd: i32,
    pub canary: String,
    pub command: Vec<OsString>,
}

const USAGE: &str = "usage: terra __sandbox_launcher --spec-fd N --canary PATH -- ARG0 [ARGS...]";

pub fn parse(argv: Vec<OsString>) -> Result<Args, String> {
    let mut spec_fd = None;
    let mut canary = None;
    let mut it = argv.into_iter();
    while let Some(a) = it.next() {
        let a = a
            .into_string()
            .map_err(|a| format!("option {a:?} is not UTF-8; {USAGE}"))?;
        let mut value = |name: &str| -> Result<String, String> {
            it.next()
                .and_then(|v| v.into_string().ok())
                .ok_or(format!("{name} needs a UTF-8 value; {USAGE}"))
        };
        match a.as_str() {
            "--spec-fd" if spec_fd.is_none() => {
                let v = value("--spec-fd")?;
                let fd: i32 = v
                    .parse()
                    .ok()
                    .filter(|fd| *fd > 2)
                    .ok_or(format!("--spec-fd {v}: not a descriptor above 2"))?;
                spec_fd = Some(fd);
            }
            "--canary" if canary.is_none() => canary = Some(value("--canary")?),
            "--" => {
                let command: Vec<OsString> = it.collect();
                if command.is_empty() {
                    return Err(format!("no command after --; {USAGE}"));
                }
                return Ok(Args {
                    spec_fd: spec_fd.ok_or(format!("--spec-fd missing; {USAGE}"))?,
                    canary: canary.ok_or(format!("--canary missing; {USAGE}"))?,
                    command,
                });
            }
            other => {
                return Err(format!(
                    "unexpected or repeated argument {other:?}; {USAGE}"
                ))
            }
        }
    }
    Err(format!("no -- before the command; {USAGE}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_the_spec_fd_the_canary_and_the_command() {
        let a = parse(argv(&[
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
        assert_eq!(a.command, argv(&["sh", "-c", "x"]));
    }

    #[test]
    fn refuses_missing_repeated_or_low_values() {
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
            &["--other"],
        ] {
            assert!(parse(argv(bad)).is_err(), "{bad:?}");
        }
    }
}
