//! compile, validate, inspect, hash, artifact-hash, init.
//!
//! Every input file is refused when it is larger than 1 MiB, before it is
//! parsed (metadata length first, then a capped read). Errors go to stderr as
//! `terra: <class>: <message>`; with `--json` an object with `ok`, `class` and
//! `message` also goes to stdout.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use terra_policy::{ErrorClass, Mir, PolicyError};

use super::{print_json, EXIT_OK};

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
    /// Check that FILE is canonical MIR v3.
    ///
    /// Exit 0: valid. Exit 2: readable but not canonical (unsorted, duplicate or
    /// unmerged records, uppercase host, unnormalized path). Exit 1: anything
    /// else (unreadable, too large, structurally damaged).
    Validate(FileArgs),
    /// Print the inspection JSON of a MIR v3 file (a readable projection of it).
    Inspect(FileArgs),
    /// Print the decision digest of a MIR v3 file as `sha256:<hex>`.
    ///
    /// The file must be canonical MIR; the digest is the SHA-256 of its bytes.
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
    /// The file to read (at most 1 MiB).
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
    let (json, result) = match cmd {
        FormatCommand::Compile(a) => (a.json.json, compile(&a)),
        FormatCommand::Validate(a) => (a.json.json, validate(&a)),
        FormatCommand::Inspect(a) => (a.json.json, inspect(&a)),
        FormatCommand::Hash(a) => (a.json.json, hash(&a)),
        FormatCommand::ArtifactHash(a) => (a.json.json, artifact_hash(&a)),
        FormatCommand::Init(a) => (a.json, init(a.json)),
    };
    match result {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(e) => {
            if json {
                let mut v =
                    json!({ "ok": false, "class": e.class().as_str(), "message": e.detail() });
                if e.class() == ErrorClass::NonCanonical {
                    v["valid"] = Value::Bool(false);
                }
                print_json(&v);
            }
            // Only `validate` reports a readable non-canonical document as a
            // finding (exit 2); for the other commands it is a failure.
            crate::fail(crate::Failure::Policy {
                error: &e.error,
                violations: e.class() == ErrorClass::NonCanonical && e.exit_violations,
            })
        }
    }
}

/// A refusal plus whether it is a finding of `validate` (exit 2).
struct CmdError {
    error: PolicyError,
    exit_violations: bool,
}

impl CmdError {
    fn class(&self) -> ErrorClass {
        self.error.class()
    }
    fn detail(&self) -> &str {
        self.error.detail()
    }
}

impl From<PolicyError> for CmdError {
    fn from(error: PolicyError) -> Self {
        CmdError {
            error,
            exit_violations: false,
        }
    }
}

type CmdResult = Result<(), CmdError>;

/// A MIR file: an oversized one is structural damage (format, spec section 2).
fn read_mir(path: &Path) -> Result<Mir, PolicyError> {
    let bytes = super::read_input(path, PolicyError::Format)?;
    Mir::decode(&bytes)
}

fn sha(hex: &str) -> String {
    format!("sha256:{hex}")
}

/// The JSON report of `compile` and `validate`: the MIR's size and digest,
/// and `fields`.
fn mir_json(mir: &Mir, digest: &str, fields: Value) -> Value {
    let mut v = json!({
        "ok": true,
        "bytes": mir.bytes().len(),
        "rules": mir.rules().len(),
        "destinations": mir.destinations().len(),
        "decisionDigest": digest,
    });
    if let (Some(o), Value::Object(extra)) = (v.as_object_mut(), fields) {
        o.extend(extra);
    }
    v
}

fn compile(a: &CompileArgs) -> CmdResult {
    let source = super::read_input(&a.source, PolicyError::Limit)?;
    let mir = terra_policy::compile_source(&source)?;
    super::write_output(&a.output, mir.bytes(), a.replace)?;
    let digest = sha(&mir.decision_digest());
    if a.json.json {
        print_json(&mir_json(
            &mir,
            &digest,
            json!({
                "output": a.output.display().to_string(),
                "sourceArtifactDigest": sha(&terra_policy::digest::artifact_digest(&source)),
            }),
        ));
    } else {
        println!(
            "compiled {} -> {} ({} bytes, {} rules, {} destinations)",
            a.source.display(),
            a.output.display(),
            mir.bytes().len(),
            mir.rules().len(),
            mir.destinations().len()
        );
        println!("decision digest {digest}");
    }
    Ok(())
}

fn validate(a: &FileArgs) -> CmdResult {
    let mir = read_mir(&a.file).map_err(|error| {
        let exit_violations = error.class() == ErrorClass::NonCanonical;
        CmdError {
            error,
            exit_violations,
        }
    })?;
    let digest = sha(&mir.decision_digest());
    if a.json.json {
        print_json(&mir_json(
            &mir,
            &digest,
            json!({ "valid": true, "file": a.file.display().to_string() }),
        ));
    } else {
        println!("valid: {} is canonical MIR v3 ({digest})", a.file.display());
    }
    Ok(())
}

fn inspect(a: &FileArgs) -> CmdResult {
    let mir = read_mir(&a.file)?;
    // The inspection JSON is machine output already; --json changes only errors.
    print!("{}", terra_policy::inspection_json(&mir));
    Ok(())
}

fn hash(a: &FileArgs) -> CmdResult {
    let mir = read_mir(&a.file)?;
    let digest = sha(&mir.decision_digest());
    if a.json.json {
        print_json(&json!({
            "ok": true,
            "algorithm": "sha256",
            "basis": "canonical-mir-v3-bytes",
            "digest": digest,
        }));
    } else {
        println!("{digest}");
    }
    Ok(())
}

fn artifact_hash(a: &FileArgs) -> CmdResult {
    let bytes = super::read_input(&a.file, PolicyError::Limit)?;
    let digest = sha(&terra_policy::digest::artifact_digest(&bytes));
    if a.json.json {
        print_json(
            &json!({ "ok": true, "algorithm": "sha256", "basis": "artifact-bytes", "digest": digest }),
        );
    } else {
        println!("{digest}");
    }
    Ok(())
}

fn init(json: bool) -> CmdResult {
    if json {
        print_json(&json!({ "ok": true, "source": terra_policy::DEFAULT_POLICY_SOURCE }));
    } else {
        print!("{}", terra_policy::DEFAULT_POLICY_SOURCE);
    }
    Ok(())
}
