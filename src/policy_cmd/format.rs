//! compile, validate, inspect, hash, artifact-hash, init.
//!
//! Every input file is refused when it is larger than 1 MiB, before it is
//! parsed (metadata length first, then a capped read). Errors go to stderr as
//! `terra: <class>: <message>`; with `--json` an object with `ok`, `class` and
//! `message` also goes to stdout.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use terra_policy::report::{self, Report};
use terra_policy::{Mir, PolicyError};

use super::Refusal;

#[derive(Debug, Subcommand)]
pub enum FormatCommand {
    /// Compile a JSON source v3 policy into canonical MIR v3 bytes.
    ///
    /// The output is written atomically: an anonymous file in the output's
    /// directory is written, flushed to disk and linked as OUTPUT. An
    /// existing OUTPUT is only replaced with --replace, and only when it is a
    /// regular file (a symlink, FIFO or device there is refused, untouched).
    /// On any failure, or when killed, nothing is left behind. Prints the
    /// decision digest.
    Compile(CompileArgs),
    /// Check that FILE is canonical MIR v3 (or a JSON source v3 that compiles).
    ///
    /// Exit 0: valid. Exit 2: readable but not canonical (unsorted, duplicate or
    /// unmerged records, uppercase host, unnormalized path). Exit 1: anything
    /// else (unreadable, too large, structurally damaged).
    Validate(FileArgs),
    /// Print the inspection JSON of a MIR v3 file or of a JSON source v3 compiled in memory.
    Inspect(FileArgs),
    /// Print the decision digest of a policy as `sha256:<hex>`.
    ///
    /// FILE is canonical MIR v3, or a JSON source v3 compiled in memory; the
    /// digest is the SHA-256 of the canonical MIR bytes.
    /// Two sources with the same meaning compile to the same decision digest.
    Hash(FileArgs),
    /// Print the artifact digest of any file as `sha256:<hex>`.
    ///
    /// It identifies bytes (for example a source file), not a decision.
    ArtifactHash(FileArgs),
    /// Print terra's default policy source (JSON source v3).
    ///
    /// It grants the workspace read-write, the minimal runtime read-only and a
    /// private temp directory read-write; no network; the whole process tree
    /// confined; the root read-only. Save it, edit it, compile it.
    Init(JsonFlag),
}

#[derive(Debug, Args)]
pub struct CompileArgs {
    /// The JSON source v3 policy to compile.
    source: PathBuf,
    /// Where to write the canonical MIR v3 bytes.
    #[arg(long, short, value_name = "FILE")]
    output: PathBuf,
    /// Replace OUTPUT if it already exists.
    #[arg(long)]
    replace: bool,
    #[command(flatten)]
    json: JsonFlag,
}

#[derive(Debug, Args)]
pub struct FileArgs {
    /// The file to read (at most 1 MiB): MIR v3 or JSON source v3 (artifact-hash: any file).
    file: PathBuf,
    #[command(flatten)]
    json: JsonFlag,
}

#[derive(Debug, Args)]
pub struct JsonFlag {
    /// Print a JSON object on stdout instead of human text.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: FormatCommand) -> ExitCode {
    let validating = matches!(cmd, FormatCommand::Validate(_));
    // The inspection JSON is machine output already; --json changes only errors.
    let inspecting = matches!(cmd, FormatCommand::Inspect(_));
    let (json, result) = match cmd {
        FormatCommand::Compile(a) => (a.json.json, compile(&a)),
        FormatCommand::Validate(a) => (a.json.json, validate(&a.file)),
        FormatCommand::Inspect(a) => (a.json.json, inspect(&a.file)),
        FormatCommand::Hash(a) => (
            a.json.json,
            read_policy(&a.file).map(|(m, _)| report::decision_hash(&m)),
        ),
        FormatCommand::ArtifactHash(a) => (a.json.json, artifact_hash(&a.file)),
        FormatCommand::Init(a) => (a.json, Ok(report::init())),
    };
    // Only `validate` reports a readable non-canonical document as a
    // finding (exit 2); for the other commands it is a failure.
    super::finish(result, json, json && !inspecting, validating)
}

/// A policy file for hash, inspect and validate: canonical MIR v3 (magic
/// `MMIR`; an oversized file is structural damage, format), or a JSON source
/// v3 compiled in memory. True when it was MIR.
fn read_policy(path: &Path) -> Result<(Mir, bool), Refusal> {
    let at = super::about(path);
    let bytes = super::read_input(path, PolicyError::Format).map_err(&at)?;
    if bytes.starts_with(terra_policy::codec::MAGIC) {
        Ok((Mir::decode(&bytes).map_err(&at)?, true))
    } else {
        Ok((terra_policy::compile_source(&bytes).map_err(&at)?, false))
    }
}

fn compile(a: &CompileArgs) -> Result<Report, Refusal> {
    let at = super::about(&a.source);
    let source = super::read_input(&a.source, PolicyError::Limit).map_err(&at)?;
    let mir = terra_policy::compile_source(&source).map_err(&at)?;
    super::write_output(&a.output, mir.bytes(), a.replace).map_err(super::about(&a.output))?;
    let (name, output) = (
        a.source.display().to_string(),
        a.output.display().to_string(),
    );
    Ok(report::compiled(&mir, &name, &source, &output))
}

fn validate(file: &Path) -> Result<Report, Refusal> {
    let (mir, was_mir) = read_policy(file)?;
    let name = file.display().to_string();
    Ok(if was_mir {
        report::validated(&mir, &name)
    } else {
        report::validated_source(&mir, &name)
    })
}

fn inspect(file: &Path) -> Result<Report, Refusal> {
    let text = terra_policy::inspection_json(&read_policy(file)?.0);
    Ok(Report {
        violations: false,
        json: serde_json::Value::Null,
        text,
    })
}

fn artifact_hash(file: &Path) -> Result<Report, Refusal> {
    let bytes = super::read_input(file, PolicyError::Limit).map_err(super::about(file))?;
    Ok(report::artifact_hash(&bytes))
}
