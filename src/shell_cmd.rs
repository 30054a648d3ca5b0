//! `terra completions SHELL` and `terra man`: generated from the same clap
//! definitions the command line is parsed with (clap_complete,
//! clap_mangen), so they cannot drift from it. `make install` installs both.

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;

/// A value parser that takes any string (terra checks it and refuses with
/// its own message and exit status) but offers `0` to completions, the man
/// page and `--help`.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub struct Offered(pub &'static [&'static str]);

impl clap::builder::TypedValueParser for Offered {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            self.0.iter().map(|v| clap::builder::PossibleValue::new(*v)),
        ))
    }
}

/// The shells `terra completions` writes a script for.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
    Powershell,
}

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: Shell,
}

/// terra's command line without the hidden role subcommands (`__vm`, ...),
/// which clap_complete would otherwise offer.
fn user_facing() -> clap::Command {
    let full = crate::Cli::command();
    let visible: Vec<clap::Command> = full
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let mut cmd = clap::Command::new("terra")
        .version(env!("CARGO_PKG_VERSION"))
        .propagate_version(true)
        .subcommand_required(true)
        .args(full.get_arguments().cloned())
        .subcommands(visible);
    if let Some(a) = full.get_about() {
        cmd = cmd.about(a.clone());
    }
    if let Some(a) = full.get_long_about() {
        cmd = cmd.long_about(a.clone());
    }
    cmd
}

/// Prints the completion script for `args.shell` on stdout.
pub fn completions(args: CompletionsArgs) -> ExitCode {
    use clap_complete::Shell as S;
    let shell = match args.shell {
        Shell::Bash => S::Bash,
        Shell::Zsh => S::Zsh,
        Shell::Fish => S::Fish,
        Shell::Powershell => S::PowerShell,
    };
    let mut cmd = user_facing();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "terra", &mut out);
    let script = complete_profiles(args.shell, &String::from_utf8_lossy(&out));
    write_out(script.as_bytes())
}

/// What the scripts run to list the profiles when completing `--profile`
/// (they change, so they are read when completing, not when generating).
const PROFILE_NAMES: &str = "terra profiles --names 2>/dev/null";

/// The script with `--profile`'s values read from `terra profiles` (bash,
/// zsh and fish; PowerShell's script is left as generated).
fn complete_profiles(shell: Shell, script: &str) -> String {
    let mut out = String::with_capacity(script.len() + 256);
    let mut after_profile = false;
    for line in script.split_inclusive('\n') {
        let line = match shell {
            // The case arm after `--profile)` offers files: offer the names.
            Shell::Bash if after_profile => {
                after_profile = false;
                line.replace(
                    "compgen -f \"${cur}\"",
                    &format!("compgen -W \"$({PROFILE_NAMES})\" -- \"${{cur}}\""),
                )
            }
            Shell::Bash => {
                after_profile = line.trim() == "--profile)";
                line.to_string()
            }
            Shell::Zsh if line.contains("--profile=[") => line.replace(
                ":NAME:_default'",
                &format!(":NAME:{{compadd -- ${{(f)\"$({PROFILE_NAMES})\"}}}}'"),
            ),
            Shell::Fish if line.contains(" -l profile ") => {
                format!("{} -f -a \"({PROFILE_NAMES})\"\n", line.trim_end())
            }
            _ => line.to_string(),
        };
        out.push_str(&line);
    }
    out
}

/// Prints terra's man page (roff, section 1) on stdout: the top-level
/// command, its subcommands listed by name (there is one page, no
/// `terra-run(1)`), each visible subcommand as a section, then examples,
/// exit status, files and where the documentation is.
pub fn man() -> ExitCode {
    let cmd = user_facing();
    let mut out = Vec::new();
    let page = clap_mangen::Man::new(cmd.clone());
    let head = page
        .render_title(&mut out)
        .and_then(|_| page.render_name_section(&mut out))
        .and_then(|_| page.render_synopsis_section(&mut out))
        .and_then(|_| page.render_description_section(&mut out))
        .and_then(|_| page.render_options_section(&mut out));
    if let Err(e) = head {
        eprintln!("terra: cannot render the man page: {e}");
        return ExitCode::from(1);
    }
    let _ = writeln!(out, ".SH COMMANDS");
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let _ = writeln!(out, ".TP\n\\fBterra {}\\fR", sub.get_name());
        if let Some(about) = sub.get_about() {
            let _ = writeln!(out, "{}", roff_text(&about.to_string()));
        }
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let _ = writeln!(out, ".SH \"TERRA {}\"", sub.get_name().to_uppercase());
        if let Some(about) = sub.get_long_about().or(sub.get_about()) {
            let _ = writeln!(out, "{}", roff_text(&about.to_string()));
        }
        let mut section = Vec::new();
        if clap_mangen::Man::new(sub.clone())
            .render_options_section(&mut section)
            .is_ok()
        {
            out.extend(strip_header(&section));
        }
    }
    out.extend_from_slice(MAN_TAIL.as_bytes());
    write_out(&out)
}

/// The page's last sections: examples, exit status, files, and where the
/// rest is documented (no other man page exists).
const MAN_TAIL: &str = r#".SH EXAMPLES
Run a test suite in the default box (the current directory writable, the
network off):
.PP
.RS 4
terra run \-\- cargo test
.RE
.PP
A first build that fetches its crates (the rust preset's caches and
registry hosts):
.PP
.RS 4
terra run \-\-preset rust \-\-preset\-net \-\- cargo build
.RE
.PP
Save that command line as a profile once it worked, and run with it later:
.PP
.RS 4
terra run \-\-preset rust \-\-preset\-net \-\-save\-profile rust\-net \-\- cargo build
.br
terra run \-\-profile rust\-net \-\- cargo test
.RE
.PP
See what a run would do, and what the last one did:
.PP
.RS 4
terra run \-\-dry\-run \-\- make
.br
terra runs show last
.RE
.SH "EXIT STATUS"
.B terra run
exits with the workload's own status, or:
.TP
.B 125
terra refused or failed before the workload started (policy, capabilities,
bindings, the command line).
.TP
.B 126
the workload could not be executed.
.TP
.B 127
the workload was not found on the box's PATH.
.TP
.B 128+N
the workload was killed by signal N (after \-\-timeout: 143, or 137 when the
grace ran out).
.PP
.B terra policy
exits 0 on success, 1 on a failure and 2 when a document is readable but has
violations (validate). Other commands exit 0 or 1.
.SH FILES
.TP
.I $XDG_CONFIG_HOME/terra/profiles/NAME.json
a profile (\-\-profile NAME; default.json when none is named; written by
\-\-save\-profile NAME), with NAME.limits.json and NAME.env.json beside it
(~/.config when XDG_CONFIG_HOME is unset).
.TP
.I $XDG_STATE_HOME/terra/runs/
each run's receipt and network log (terra runs; ~/.local/state when
XDG_STATE_HOME is unset).
.SH "SEE ALSO"
The documentation installed with terra or in its source tree: README.md,
docs/run.md (terra run, presets, profiles, receipts), docs/policy.md (the
policy format), docs/network.md, SECURITY.md.
"#;

/// Text as a roff paragraph: a line starting with `.` or `'` is escaped.
fn roff_text(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.starts_with('.') || l.starts_with('\'') {
                format!("\\&{l}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A section rendered alone starts with its own `.SH` line; the caller
/// wrote one naming the subcommand.
fn strip_header(section: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(section);
    text.lines()
        .filter(|l| !l.starts_with(".SH "))
        .flat_map(|l| format!("{l}\n").into_bytes())
        .collect()
}

fn write_out(bytes: &[u8]) -> ExitCode {
    let mut o = std::io::stdout().lock();
    match o.write_all(bytes).and_then(|_| o.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("terra: cannot write to standard output: {e}");
            ExitCode::from(1)
        }
    }
}
