//! `terra completions SHELL` and `terra man`: generated from the same clap
//! definitions the command line is parsed with (clap_complete,
//! clap_mangen), so they cannot drift from it. `make install` installs both.

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;

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
    write_out(&out)
}

/// Prints terra's man page (roff, section 1) on stdout: the top-level
/// command, then each visible subcommand as a section.
pub fn man() -> ExitCode {
    let cmd = user_facing();
    let mut out = Vec::new();
    if let Err(e) = clap_mangen::Man::new(cmd.clone()).render(&mut out) {
        eprintln!("terra: cannot render the man page: {e}");
        return ExitCode::from(1);
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
    write_out(&out)
}

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
