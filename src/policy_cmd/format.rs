//! compile, validate, inspect, hash, artifact-hash, init.
//!
//! Every input file is refused when it is larger than 1 MiB, before it is
//! parsed (metadata length first, then a capped read). Errors go to stderr as
//! `terra: <class>: <message>`; with `--json` an object with `ok`, `class` and
//! `message` also goes to stdout.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use terra_policy::{ErrorClass, Mir, PolicyError};

use super::{EXIT_FAILURE, EXIT_OK, EXIT_VIOLATIONS};

/// Largest input file any format command reads (source, MIR or artifact).
const MAX_INPUT_LEN: u64 = 1 << 20;

#[derive(Debug, Subcommand)]
pub enum FormatCommand {
    /// Compile a JSON source v3 policy into canonical MIR v3 bytes.
    ///
    /// The output is written atomically: a temporary file in the output's
    /// directory is written, flushed to disk and renamed over OUTPUT. An
    /// existing OUTPUT is only replaced with --replace. On any failure nothing
    /// is left behind. Prints the decision digest.
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
            eprintln!("terra: {}: {}", e.class(), e.detail());
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
            if e.class() == ErrorClass::NonCanonical && e.exit_violations {
                ExitCode::from(EXIT_VIOLATIONS)
            } else {
                ExitCode::from(EXIT_FAILURE)
            }
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

fn print_json(v: &Value) {
    let mut out = io::stdout().lock();
    let _ = serde_json::to_writer_pretty(&mut out, v);
    let _ = out.write_all(b"\n");
}

fn io_error(what: &str, path: &Path, e: &io::Error) -> PolicyError {
    PolicyError::Io(format!("{what} {}: {e}", path.display()))
}

/// Reads at most 1 MiB: the metadata length is checked first, then the read
/// is capped, so a file that grows in between is refused too. `too_big` makes
/// the refusal (its class depends on what the file is).
fn read_capped(path: &Path, too_big: fn(String) -> PolicyError) -> Result<Vec<u8>, PolicyError> {
    let file = File::open(path).map_err(|e| io_error("cannot open", path, &e))?;
    let meta = file
        .metadata()
        .map_err(|e| io_error("cannot stat", path, &e))?;
    if meta.is_dir() {
        return Err(PolicyError::Io(format!(
            "{} is a directory",
            path.display()
        )));
    }
    let refuse = |len: String| {
        too_big(format!(
            "{} is {len} bytes; at most {MAX_INPUT_LEN} (1 MiB) are read",
            path.display()
        ))
    };
    if meta.len() > MAX_INPUT_LEN {
        return Err(refuse(meta.len().to_string()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_INPUT_LEN + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error("cannot read", path, &e))?;
    if bytes.len() as u64 > MAX_INPUT_LEN {
        return Err(refuse("more than 1048576".into()));
    }
    Ok(bytes)
}

/// A MIR file: an oversized one is structural damage (format, spec section 2).
fn read_mir(path: &Path) -> Result<Mir, PolicyError> {
    let bytes = read_capped(path, PolicyError::Format)?;
    Mir::decode(&bytes)
}

fn sha(hex: &str) -> String {
    format!("sha256:{hex}")
}

fn compile(a: &CompileArgs) -> CmdResult {
    let source = read_capped(&a.source, PolicyError::Limit)?;
    let mir = terra_policy::compile_source(&source)?;
    if !a.replace && fs::symlink_metadata(&a.output).is_ok() {
        return Err(exists(&a.output).into());
    }
    write_atomically(&a.output, mir.bytes(), a.replace)?;
    let digest = sha(&mir.decision_digest());
    if a.json.json {
        print_json(&json!({
            "ok": true,
            "output": a.output.display().to_string(),
            "bytes": mir.bytes().len(),
            "rules": mir.rules().len(),
            "destinations": mir.destinations().len(),
            "decisionDigest": digest,
            "sourceArtifactDigest": sha(&terra_policy::digest::artifact_digest(&source)),
        }));
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

fn exists(path: &Path) -> PolicyError {
    PolicyError::Argument(format!(
        "{} already exists; pass --replace to replace it",
        path.display()
    ))
}

/// Writes `bytes` to a fresh temporary file beside `output`, syncs it, then
/// renames it into place (or, without `replace`, links it so an existing file
/// is never clobbered). The temporary file is removed on every failure.
fn write_atomically(output: &Path, bytes: &[u8], replace: bool) -> Result<(), PolicyError> {
    let name = output.file_name().ok_or_else(|| {
        PolicyError::Argument(format!("output {} names no file", output.display()))
    })?;
    let dir = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp = None;
    for attempt in 0..100u32 {
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".terra-tmp-{}-{attempt}", std::process::id()));
        let path = dir.join(tmp_name);
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(f) => {
                tmp = Some((path, f));
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_error("cannot create a temporary file in", &dir, &e)),
        }
    }
    let Some((tmp_path, mut file)) = tmp else {
        return Err(PolicyError::Io(format!(
            "cannot create a temporary file in {}",
            dir.display()
        )));
    };
    let result = (|| {
        file.write_all(bytes)
            .map_err(|e| io_error("cannot write", &tmp_path, &e))?;
        file.sync_all()
            .map_err(|e| io_error("cannot sync", &tmp_path, &e))?;
        drop(file);
        if replace {
            fs::rename(&tmp_path, output).map_err(|e| io_error("cannot replace", output, &e))?;
        } else {
            // A hard link fails if OUTPUT appeared meanwhile; never clobber it.
            match fs::hard_link(&tmp_path, output) {
                Ok(()) => {
                    let _ = fs::remove_file(&tmp_path);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(exists(output)),
                Err(_) => {
                    // File systems without hard links: re-check, then rename.
                    if fs::symlink_metadata(output).is_ok() {
                        return Err(exists(output));
                    }
                    fs::rename(&tmp_path, output)
                        .map_err(|e| io_error("cannot create", output, &e))?;
                }
            }
        }
        // Make the rename durable. Directories cannot be opened for syncing on
        // every platform; the data itself is already synced.
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp_path);
    }
    result
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
        print_json(&json!({
            "ok": true,
            "valid": true,
            "file": a.file.display().to_string(),
            "bytes": mir.bytes().len(),
            "rules": mir.rules().len(),
            "destinations": mir.destinations().len(),
            "decisionDigest": digest,
        }));
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
    let bytes = read_capped(&a.file, PolicyError::Limit)?;
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
