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
