//! Host resolution (spec section 4): trusted bindings, realpath of every
//! candidate, missing handling, protect-create names, symlink escapes.

use std::io;
use std::path::{Path, PathBuf};

use crate::capability::{capability_for_access, non_fs_capabilities, Capability, CapabilitySet};
use crate::conflict::check_conflicts;
use crate::error::{PolicyError, Result};
use crate::evaluate::{Evaluation, RuleSet};
use crate::model::{
    Access, Destination, Mir, Missing, NetworkMode, ProcessTree, RootKind, RootMode,
};
use crate::resolved::{HostBindings, OmittedGrant, ResolvedRule};

/// Most minimal-runtime roots, counted after de-duplication by resolved path.
pub const MAX_MINIMAL_ROOTS: usize = 64;
/// Longest mediator id, in bytes.
pub const MAX_MEDIATOR_LEN: usize = 255;

/// The minimal-runtime roots used when none are given: whichever of these
/// exist. Programs need the executables and libraries, the alternatives links,
/// and the public CA certificates (Debian's /etc/ssl/certs and
/// /etc/ca-certificates, Fedora's /etc/pki/tls/certs and /etc/pki/ca-trust).
/// Never /etc/ssl as a whole: /etc/ssl/private holds the host's TLS keys.
/// A root is a directory (spec section 4), so the OpenSSL configuration file
/// /etc/ssl/openssl.cnf is not one; OpenSSL runs on its built-in defaults
/// when that file is missing.
pub const DEFAULT_MINIMAL_ROOT_CANDIDATES: [&str; 11] = [
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/etc/alternatives",
    "/etc/ssl/certs",
    "/etc/ca-certificates",
    "/etc/pki/tls/certs",
    "/etc/pki/ca-trust",
];

/// The default minimal-runtime roots on this host: the entries of
/// [`DEFAULT_MINIMAL_ROOT_CANDIDATES`] that exist (as directories, symlinks
/// followed), in that order. Resolution de-duplicates them by resolved path
/// (e.g. /bin -> /usr/bin).
pub fn default_minimal_roots() -> Vec<PathBuf> {
    DEFAULT_MINIMAL_ROOT_CANDIDATES
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .collect()
}

/// The host's kernel interfaces: procfs and sysfs at their fixed places.
const KERNEL_INTERFACES: [&str; 2] = ["/proc", "/sys"];

/// A write grant that would let the box change host kernel settings: a
/// resolved path in /proc or /sys, or one that holds them (`/`).
fn kernel_write_refusal(
    rule: usize,
    root: RootKind,
    written: &str,
    real: &str,
) -> Option<PolicyError> {
    let hit = KERNEL_INTERFACES
        .iter()
        .find(|k| inside(k, real) || inside(real, k))?;
    let what = if real == *hit {
        format!("{real}, a kernel interface")
    } else if inside(hit, real) {
        format!("{real}, inside the kernel interface {hit}")
    } else {
        format!("{real}, which holds the kernel interface {hit}")
    };
    Some(PolicyError::Unsupported(format!(
        "rule {rule} (write {root} {written:?}) resolves to {what}: a write grant there would \
         change host kernel settings; terra refuses write grants on /proc and /sys"
    )))
}

/// Checks a mediator id: non-empty, at most 255 bytes, UTF-8 (a `&str`), no
/// whitespace and no control characters.
pub fn validate_mediator(id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(PolicyError::Argument("mediator id is empty".into()));
    }
    if id.len() > MAX_MEDIATOR_LEN {
        return Err(PolicyError::Argument(format!(
            "mediator id of {} bytes; at most {MAX_MEDIATOR_LEN} are allowed",
            id.len()
        )));
    }
    if let Some(c) = id.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(PolicyError::Argument(format!(
            "mediator id {id:?} holds whitespace or a control character ({:?})",
            c
        )));
    }
    Ok(())
}

/// Bindings after validation: canonical directory paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalBindings {
    pub workspace: Option<String>,
    pub temp: Option<String>,
    /// De-duplicated by resolved path, first occurrence kept, order preserved.
    pub minimal_roots: Vec<String>,
    pub mediator: Option<String>,
}

/// ENOTDIR on every Unix terra targets (Linux, macOS, the BSDs).
const ENOTDIR: i32 = 20;

/// Only ENOENT and ENOTDIR mean "missing".
fn is_missing(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || (cfg!(unix) && e.raw_os_error() == Some(ENOTDIR))
}

fn utf8(path: PathBuf, what: &str) -> Result<String> {
    path.into_os_string()
        .into_string()
        .map_err(|p| PolicyError::Format(format!("{what}: resolved path {p:?} is not valid UTF-8")))
}

fn canonical_dir(path: &Path, what: &str) -> Result<String> {
    let real = std::fs::canonicalize(path)
        .map_err(|e| PolicyError::Io(format!("{what} {}: realpath failed: {e}", path.display())))?;
    let md = std::fs::metadata(&real)
        .map_err(|e| PolicyError::Io(format!("{what} {}: {e}", real.display())))?;
    if !md.is_dir() {
        return Err(PolicyError::Argument(format!(
            "{what} {} is not a directory",
            path.display()
        )));
    }
    utf8(real, what)
}

impl HostBindings {
    /// Canonicalizes every binding with realpath; each must be a directory.
    /// Minimal-runtime roots are de-duplicated by resolved path, at most 64.
    pub fn canonicalize(&self) -> Result<CanonicalBindings> {
        let workspace = self
            .workspace
            .as_deref()
            .map(|p| canonical_dir(p, "workspace binding"))
            .transpose()?;
        let temp = self
            .temp
            .as_deref()
            .map(|p| canonical_dir(p, "temp binding"))
            .transpose()?;
        let mut minimal_roots: Vec<String> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for root in &self.minimal_roots {
            let real = canonical_dir(root, "minimal-runtime root")?;
            if seen.insert(real.clone()) {
                minimal_roots.push(real);
                if minimal_roots.len() > MAX_MINIMAL_ROOTS {
                    return Err(PolicyError::Limit(format!(
                        "more than {MAX_MINIMAL_ROOTS} distinct minimal-runtime roots"
                    )));
                }
            }
        }
        if let Some(m) = &self.mediator {
            validate_mediator(m)?;
        }
        Ok(CanonicalBindings {
            workspace,
            temp,
            minimal_roots,
            mediator: self.mediator.clone(),
        })
    }
}

/// A decision resolved on this host and checked for conflicts, before any
/// backend's capabilities are compared. Immutable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    rules: RuleSet,
    omitted: Vec<OmittedGrant>,
    network: NetworkMode,
    mediator: Option<String>,
    destinations: Vec<Destination>,
    root_mode: RootMode,
    process_tree: ProcessTree,
    required: CapabilitySet,
    decision_digest: String,
    mir_bytes: Vec<u8>,
}

impl Resolution {
    /// Resolved rules in plan order.
    pub fn rules(&self) -> &[ResolvedRule] {
        self.rules.rules()
    }
    pub fn rule_set(&self) -> &RuleSet {
        &self.rules
    }
    /// Grants skipped because their target was missing, in MIR rule order.
    pub fn omitted(&self) -> &[OmittedGrant] {
        &self.omitted
    }
    pub fn network(&self) -> NetworkMode {
        self.network
    }
    /// The mediator id, present exactly when the network is mediated.
    pub fn mediator(&self) -> Option<&str> {
        self.mediator.as_deref()
    }
    pub fn destinations(&self) -> &[Destination] {
        &self.destinations
    }
    pub fn root_mode(&self) -> RootMode {
        self.root_mode
    }
    pub fn process_tree(&self) -> ProcessTree {
        self.process_tree
    }
    /// Exactly what the resolved plan requires (spec section 6).
    pub fn required_capabilities(&self) -> CapabilitySet {
        self.required
    }
    pub fn decision_digest(&self) -> &str {
        &self.decision_digest
    }
    pub fn mir_bytes(&self) -> &[u8] {
        &self.mir_bytes
    }
    /// Contract-2 permission of a canonical absolute path; `decisive` indexes [`Resolution::rules`].
    pub fn evaluate(&self, path: &str) -> Result<Evaluation> {
        self.rules.evaluate(path)
    }
    /// The capabilities required but not in `declared`, in bit order.
    pub fn missing_capabilities(&self, declared: CapabilitySet) -> Vec<Capability> {
        self.required.missing_from(declared)
    }
}

/// How one candidate path resolved.
enum Walk {
    /// It exists; its canonical path.
    Found(String),
    /// It does not exist (ENOENT or ENOTDIR in realpath terms).
    Missing(Absence),
}

/// Why a candidate is missing, with what the protect-create name needs.
enum Absence {
    /// `prefix` (canonical, an existing directory) holds no entry named
    /// `components[index]`.
    Absent { prefix: String, index: usize },
    /// `path` is on the way but is not a directory (ENOTDIR).
    NotDirectory { path: String },
    /// `path` is a symlink to nothing (ENOENT after following it).
    DanglingSymlink { path: String },
}

/// realpath of `base` + `components`, where `base` is canonical: one lstat per
/// component; a symlink is followed with realpath (chains and loops included,
/// so ELOOP is an error) and must stay inside `base` when `confine` is set.
/// Only ENOENT and ENOTDIR mean missing; any other error is io.
fn walk(
    base: &str,
    components: &[&str],
    confine: bool,
    escape: &dyn Fn(&str) -> PolicyError,
) -> Result<Walk> {
    let mut prefix = base.to_string();
    let last = components.len().saturating_sub(1);
    for (i, component) in components.iter().enumerate() {
        let next = join(&prefix, component);
        let md = match std::fs::symlink_metadata(&next) {
            Ok(md) => md,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Walk::Missing(Absence::Absent { prefix, index: i }))
            }
            Err(e) if is_missing(&e) => {
                return Ok(Walk::Missing(Absence::NotDirectory { path: prefix }))
            }
            Err(e) => return Err(PolicyError::Io(format!("lstat {next}: {e}"))),
        };
        let (real, is_dir) = if md.file_type().is_symlink() {
            match std::fs::canonicalize(&next) {
                Ok(real) => {
                    let real = utf8(real, &next)?;
                    if confine && !inside(base, &real) {
                        return Err(escape(&real));
                    }
                    let is_dir = std::fs::metadata(&real)
                        .map_err(|e| PolicyError::Io(format!("stat {real}: {e}")))?
                        .is_dir();
                    (real, is_dir)
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Ok(Walk::Missing(Absence::DanglingSymlink { path: next }))
                }
                Err(e) if is_missing(&e) => {
                    return Ok(Walk::Missing(Absence::NotDirectory { path: next }))
                }
                Err(e) => return Err(PolicyError::Io(format!("realpath {next}: {e}"))),
            }
        } else {
            (next, md.is_dir())
        };
        if !is_dir && i < last {
            return Ok(Walk::Missing(Absence::NotDirectory { path: real }));
        }
        prefix = real;
    }
    Ok(Walk::Found(prefix))
}

/// `path` is `root` or below it on a segment boundary.
fn inside(root: &str, path: &str) -> bool {
    crate::evaluate::is_same_or_ancestor(root, path)
}

/// The separator resolution joins a canonical base and a component with:
/// `/`, and `\` on Windows, where the bases are verbatim (`\\?\C:\...`)
/// paths, which take no `/` as a separator.
const SEP: char = if cfg!(windows) { '\\' } else { '/' };

fn join(base: &str, rest: &str) -> String {
    if rest.is_empty() {
        base.to_string()
    } else if base.ends_with(SEP) {
        format!("{base}{rest}")
    } else {
        format!("{base}{SEP}{rest}")
    }
}

fn escape_error(rule: usize, root: RootKind, base: &str, written: &str, real: &str) -> PolicyError {
    PolicyError::Format(format!(
        "rule {rule} ({root} {written:?}): resolves to {real}, outside its root {base}, through a symlink"
    ))
}

/// The protect-create name of an absent target: the existing canonical prefix
/// plus the absent components as written. A dangling symlink or a
/// non-directory on the path is refused (format).
fn protect_create_name(
    rule: usize,
    root: RootKind,
    relative: &str,
    components: &[&str],
    absence: Absence,
) -> Result<String> {
    let refuse = |why: String| {
        PolicyError::Format(format!(
            "rule {rule} ({root} {relative:?}): cannot protect the creation of an absent path: {why}"
        ))
    };
    match absence {
        Absence::Absent { prefix, index } => {
            Ok(join(&prefix, &components[index..].join(&SEP.to_string())))
        }
        Absence::NotDirectory { path } => Err(refuse(format!("{path} is not a directory"))),
        Absence::DanglingSymlink { path } => Err(refuse(format!("{path} is a dangling symlink"))),
    }
}

/// Resolves `mir` with `bindings` (spec section 4), then refuses conflicts
/// (spec section 5). No capability check: see [`Resolution::into_plan`].
pub fn resolve(mir: &Mir, bindings: &HostBindings) -> Result<Resolution> {
    let b = bindings.canonicalize()?;
    resolve_canonical(mir, &b)
}

/// [`resolve`] with bindings already canonicalized.
pub fn resolve_canonical(mir: &Mir, b: &CanonicalBindings) -> Result<Resolution> {
    let mediator = match mir.network() {
        NetworkMode::Mediated => match &b.mediator {
            Some(m) => Some(m.clone()),
            None => {
                return Err(PolicyError::Unsupported(
                    "network mode mediated needs a mediator binding, and none was given; falling back to ambient networking is forbidden"
                        .into(),
                ))
            }
        },
        _ => None,
    };
    let mut rules = Vec::new();
    let mut omitted = Vec::new();
    for (index, rule) in mir.rules().iter().enumerate() {
        let t = &rule.target;
        // A workspace or temp rule without its directory.
        let unbound = || {
            PolicyError::Unsupported(format!(
                "rule {index} ({} {} {:?}) needs a {} binding, and none was given",
                rule.access, t.root, t.path, t.root
            ))
        };
        let bases: Vec<&str> = match t.root {
            RootKind::Host => vec!["/"],
            RootKind::Workspace => vec![b.workspace.as_deref().ok_or_else(unbound)?],
            RootKind::Temp => vec![b.temp.as_deref().ok_or_else(unbound)?],
            RootKind::MinimalRuntime => {
                if b.minimal_roots.is_empty() {
                    return Err(PolicyError::Unsupported(format!(
                        "rule {index} ({} minimal-runtime {:?}) needs minimal-runtime roots, and none are bound",
                        rule.access, t.path
                    )));
                }
                b.minimal_roots.iter().map(String::as_str).collect()
            }
        };
        let relative = if t.root == RootKind::Host {
            t.path.trim_start_matches('/')
        } else {
            t.path.as_str()
        };
        let components: Vec<&str> = relative.split('/').filter(|c| !c.is_empty()).collect();
        let confine = t.root != RootKind::Host;
        for base in bases {
            let escape = |real: &str| escape_error(index, t.root, base, &t.path, real);
            match walk(base, &components, confine, &escape)? {
                Walk::Found(real) => {
                    if rule.access == Access::Write {
                        if let Some(e) = kernel_write_refusal(index, t.root, &t.path, &real) {
                            return Err(e);
                        }
                    }
                    rules.push(ResolvedRule {
                        access: rule.access,
                        path: real,
                        scope: t.scope,
                        protect_create: false,
                        source_rule: index,
                        source_root: t.root,
                    })
                }
                Walk::Missing(absence) => match (t.missing, rule.access) {
                    (Missing::Error, _) => {
                        return Err(PolicyError::Missing(format!(
                            "rule {index} ({} {} {:?}): {} does not exist (missing: error)",
                            rule.access,
                            t.root,
                            t.path,
                            join(base, relative)
                        )))
                    }
                    (Missing::Skip, Access::Read | Access::Write) => omitted.push(OmittedGrant {
                        access: rule.access,
                        path: join(base, relative),
                        source_rule: index,
                    }),
                    (Missing::Skip, Access::Deny | Access::DenyWrite) => rules.push(ResolvedRule {
                        access: rule.access,
                        path: protect_create_name(index, t.root, &t.path, &components, absence)?,
                        scope: t.scope,
                        protect_create: true,
                        source_rule: index,
                        source_root: t.root,
                    }),
                },
            }
        }
    }
    let rules = RuleSet::new(rules);
    check_conflicts(rules.rules())?;
    let mut required = non_fs_capabilities(mir);
    for r in rules.rules() {
        required.insert(capability_for_access(r.access));
        if r.protect_create {
            required.insert(Capability::FsProtectCreate);
        }
    }
    Ok(Resolution {
        rules,
        omitted,
        network: mir.network(),
        mediator,
        destinations: mir.destinations().to_vec(),
        root_mode: mir.root_mode(),
        process_tree: mir.process_tree(),
        required,
        decision_digest: mir.decision_digest(),
        mir_bytes: mir.bytes().to_vec(),
    })
}

impl Resolution {
    /// Joins resolutions of one decision made with different bindings into one
    /// (rules and omitted grants concatenated, plan order restored, conflicts
    /// checked again). Used by the benchmark to build the 4,096 x 64 plan that
    /// MIR v3 cannot name directly; every part must come from the same MIR.
    pub fn merge(parts: Vec<Resolution>) -> Result<Resolution> {
        let mut iter = parts.into_iter();
        let mut first = iter
            .next()
            .ok_or_else(|| PolicyError::Argument("no resolutions to merge".into()))?;
        let mut rules = first.rules.rules().to_vec();
        for part in iter {
            if part.mir_bytes != first.mir_bytes || part.mediator != first.mediator {
                return Err(PolicyError::Argument(
                    "resolutions of different decisions cannot be merged".into(),
                ));
            }
            rules.extend_from_slice(part.rules.rules());
            first.omitted.extend(part.omitted);
            first.required = CapabilitySet::from_bits(first.required.bits() | part.required.bits());
        }
        let set = RuleSet::new(rules);
        check_conflicts(set.rules())?;
        first.rules = set;
        Ok(first)
    }
}

// Resolution's tests make Unix trees (symlinks, /proc, /sys): Unix only.
#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::error::ErrorClass;
    use crate::model::Scope;
    use crate::plan::compile_plan;
    use crate::testing::{tmp, ws_tree};
    use crate::MirBuilder;
    use std::os::unix::fs::symlink;
    #[cfg(target_os = "linux")]
    use std::os::unix::fs::PermissionsExt;

    fn one(access: Access, root: RootKind, path: &str, scope: Scope, missing: Missing) -> Mir {
        let mut b = MirBuilder::new();
        b.add_rule(access, root, path, scope, missing).unwrap();
        b.build().unwrap()
    }

    /// The whole minimal runtime, readable.
    fn minimal_runtime() -> Mir {
        one(
            Access::Read,
            RootKind::MinimalRuntime,
            "",
            Scope::Tree,
            Missing::Error,
        )
    }

    /// One tree rule below the workspace.
    fn ws_one(access: Access, path: &str, missing: Missing) -> Mir {
        one(access, RootKind::Workspace, path, Scope::Tree, missing)
    }

    fn ws(dir: &str) -> HostBindings {
        HostBindings {
            workspace: Some(dir.into()),
            ..HostBindings::default()
        }
    }

    fn class(r: Result<Resolution>) -> (ErrorClass, String) {
        let e = r.unwrap_err();
        (e.class(), e.detail().to_string())
    }

    #[test]
    fn bindings_are_checked() {
        let (_t, d) = tmp();
        std::fs::write(format!("{d}/file"), b"").unwrap();
        let file = HostBindings {
            workspace: Some(format!("{d}/file").into()),
            ..HostBindings::default()
        };
        assert_eq!(
            file.canonicalize().unwrap_err().class(),
            ErrorClass::Argument
        );
        let absent = HostBindings {
            temp: Some(format!("{d}/absent").into()),
            ..HostBindings::default()
        };
        assert_eq!(absent.canonicalize().unwrap_err().class(), ErrorClass::Io);
        // De-duplicated by resolved path; at most 64 distinct.
        symlink(&d, format!("{d}/link")).unwrap();
        let dup = HostBindings {
            minimal_roots: vec![d.clone().into(), format!("{d}/link").into()],
            ..HostBindings::default()
        };
        assert_eq!(dup.canonicalize().unwrap().minimal_roots, vec![d.clone()]);
        let mut roots = vec![];
        for i in 0..65 {
            std::fs::create_dir(format!("{d}/r{i}")).unwrap();
            roots.push(PathBuf::from(format!("{d}/r{i}")));
        }
        let sixty_four = HostBindings {
            minimal_roots: roots[..64].to_vec(),
            ..HostBindings::default()
        };
        assert_eq!(sixty_four.canonicalize().unwrap().minimal_roots.len(), 64);
        let mut with_dups = roots[..64].to_vec();
        with_dups.extend(roots[..64].iter().cloned());
        let b = HostBindings {
            minimal_roots: with_dups,
            ..HostBindings::default()
        };
        assert_eq!(b.canonicalize().unwrap().minimal_roots.len(), 64);
        let too_many = HostBindings {
            minimal_roots: roots,
            ..HostBindings::default()
        };
        assert_eq!(
            too_many.canonicalize().unwrap_err().class(),
            ErrorClass::Limit
        );
    }

    #[test]
    fn write_grants_on_kernel_interfaces_are_refused() {
        for path in ["/sys", "/proc", "/proc/sys/kernel", "/sys/kernel", "/"] {
            if !std::path::Path::new(path).exists() {
                continue;
            }
            let m = one(
                Access::Write,
                RootKind::Host,
                path,
                Scope::Tree,
                Missing::Error,
            );
            let (c, msg) = class(resolve(&m, &HostBindings::default()));
            assert_eq!(c, ErrorClass::Unsupported, "{path}: {msg}");
            assert!(msg.contains("kernel interface"), "{path}: {msg}");
        }
        // Reading them stays possible; a write grant beside them too.
        for path in ["/sys", "/proc/sys/kernel"] {
            if std::path::Path::new(path).exists() {
                let m = one(
                    Access::Read,
                    RootKind::Host,
                    path,
                    Scope::Tree,
                    Missing::Error,
                );
                assert!(resolve(&m, &HostBindings::default()).is_ok(), "{path}");
            }
        }
        let (_t, d) = tmp();
        let m = one(
            Access::Write,
            RootKind::Host,
            &d,
            Scope::Tree,
            Missing::Error,
        );
        assert!(resolve(&m, &HostBindings::default()).is_ok());
        // Through a symlink: the resolved path counts.
        symlink("/sys", format!("{d}/s")).unwrap();
        let m = ws_one(Access::Write, "s", Missing::Error);
        let outside = resolve(&m, &ws(&d));
        assert!(outside.is_err());
        let m = one(
            Access::Write,
            RootKind::Host,
            &format!("{d}/s"),
            Scope::Tree,
            Missing::Error,
        );
        let (c, msg) = class(resolve(&m, &HostBindings::default()));
        assert_eq!(c, ErrorClass::Unsupported, "{msg}");
    }

    #[test]
    fn default_minimal_roots_leave_out_private_keys() {
        for c in DEFAULT_MINIMAL_ROOT_CANDIDATES {
            assert!(
                !inside(c, "/etc/ssl/private"),
                "{c} would expose /etc/ssl/private"
            );
        }
        assert!(DEFAULT_MINIMAL_ROOT_CANDIDATES.contains(&"/etc/ssl/certs"));
    }

    #[test]
    fn mediator_ids() {
        for ok in ["m", "broker-1", "ünïcode", &"x".repeat(255)] {
            assert!(validate_mediator(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "a b",
            "a\tb",
            "a\nb",
            "a\u{7f}",
            "a\u{85}b",
            "a\u{3000}b",
            &"x".repeat(256),
        ] {
            assert_eq!(
                validate_mediator(bad).unwrap_err().class(),
                ErrorClass::Argument,
                "{bad:?}"
            );
        }
        let b = HostBindings {
            mediator: Some("a b".into()),
            ..HostBindings::default()
        };
        assert_eq!(b.canonicalize().unwrap_err().class(), ErrorClass::Argument);
    }

    #[test]
    fn unbound_roots_and_mediator_are_unsupported() {
        let m = ws_one(Access::Read, "", Missing::Error);
        let (c, msg) = class(resolve(&m, &HostBindings::default()));
        assert_eq!(c, ErrorClass::Unsupported);
        assert!(msg.contains("workspace binding"), "{msg}");
        let m = one(
            Access::Write,
            RootKind::Temp,
            "",
            Scope::Tree,
            Missing::Error,
        );
        assert_eq!(
            class(resolve(&m, &HostBindings::default())).0,
            ErrorClass::Unsupported
        );
        let m = minimal_runtime();
        let (c, msg) = class(resolve(&m, &HostBindings::default()));
        assert_eq!(c, ErrorClass::Unsupported);
        assert!(msg.contains("minimal-runtime"), "{msg}");
        let mut b = MirBuilder::new();
        b.set_network(NetworkMode::Mediated);
        b.add_destination("example.com", 443, true, false).unwrap();
        let m = b.build().unwrap();
        let (c, msg) = class(resolve(&m, &HostBindings::default()));
        assert_eq!(c, ErrorClass::Unsupported);
        assert!(
            msg.contains("falling back to ambient networking is forbidden"),
            "{msg}"
        );
        let with = HostBindings {
            mediator: Some("netd".into()),
            ..HostBindings::default()
        };
        let r = resolve(&m, &with).unwrap();
        assert_eq!(r.mediator(), Some("netd"));
        assert!(r
            .required_capabilities()
            .contains(Capability::NetworkMediated));
        assert!(r
            .required_capabilities()
            .contains(Capability::NetworkRequireTlsSni));
        assert!(!r
            .required_capabilities()
            .contains(Capability::NetworkPrivateAddresses));
        // A mediator is dropped when the network is not mediated.
        let none = one(
            Access::Read,
            RootKind::Host,
            "/",
            Scope::Tree,
            Missing::Error,
        );
        assert_eq!(resolve(&none, &with).unwrap().mediator(), None);
    }

    #[test]
    fn minimal_runtime_resolves_once_per_root() {
        let (_t, d) = tmp();
        for r in ["a", "b", "c"] {
            std::fs::create_dir(format!("{d}/{r}")).unwrap();
        }
        let b = HostBindings {
            minimal_roots: ["a", "b", "c", "a"]
                .iter()
                .map(|r| PathBuf::from(format!("{d}/{r}")))
                .collect(),
            ..HostBindings::default()
        };
        let m = minimal_runtime();
        let r = resolve(&m, &b).unwrap();
        let paths: Vec<&str> = r.rules().iter().map(|x| x.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![format!("{d}/a"), format!("{d}/b"), format!("{d}/c")]
        );
        assert!(r
            .rules()
            .iter()
            .all(|x| x.source_root == RootKind::MinimalRuntime));
    }

    #[test]
    fn missing_targets() {
        let (_t, d) = tmp();
        std::fs::write(format!("{d}/file"), b"").unwrap();
        // ENOENT and ENOTDIR both mean missing.
        for rel in ["absent", "absent/deeper", "file/below"] {
            let m = ws_one(Access::Read, rel, Missing::Error);
            let (c, msg) = class(resolve(&m, &ws(&d)));
            assert_eq!(c, ErrorClass::Missing, "{rel}: {msg}");
            let m = ws_one(Access::Write, rel, Missing::Skip);
            let r = resolve(&m, &ws(&d)).unwrap();
            assert!(r.rules().is_empty());
            assert_eq!(
                r.omitted(),
                &[OmittedGrant {
                    access: Access::Write,
                    path: format!("{d}/{rel}"),
                    source_rule: 0
                }]
            );
            assert!(!r.required_capabilities().contains(Capability::FsWrite));
        }
        let m = one(
            Access::Read,
            RootKind::Host,
            &format!("{d}/nope"),
            Scope::Exact,
            Missing::Error,
        );
        assert_eq!(
            class(resolve(&m, &HostBindings::default())).0,
            ErrorClass::Missing
        );
    }

    #[test]
    fn protect_create_names() {
        let (_t, d) = tmp();
        std::fs::create_dir_all(format!("{d}/real/sub")).unwrap();
        symlink(format!("{d}/real"), format!("{d}/alias")).unwrap();
        std::fs::write(format!("{d}/file"), b"").unwrap();
        symlink(format!("{d}/gone"), format!("{d}/dangling")).unwrap();
        symlink(format!("{d}/file"), format!("{d}/filelink")).unwrap();
        for (rel, name) in [
            (".git", format!("{d}/.git")),
            ("real/sub/x/y", format!("{d}/real/sub/x/y")),
            ("alias/sub/new", format!("{d}/real/sub/new")),
            ("alias/absent/x", format!("{d}/real/absent/x")),
        ] {
            for access in [Access::Deny, Access::DenyWrite] {
                let m = ws_one(access, rel, Missing::Skip);
                let r = resolve(&m, &ws(&d)).unwrap();
                assert_eq!(r.rules().len(), 1);
                assert_eq!(r.rules()[0].path, name, "{rel}");
                assert!(r.rules()[0].protect_create);
                assert!(r
                    .required_capabilities()
                    .contains(Capability::FsProtectCreate));
                assert!(r.omitted().is_empty());
            }
        }
        // The same through a host rule.
        let m = one(
            Access::Deny,
            RootKind::Host,
            &format!("{d}/alias/n"),
            Scope::Exact,
            Missing::Skip,
        );
        assert_eq!(
            resolve(&m, &HostBindings::default()).unwrap().rules()[0].path,
            format!("{d}/real/n")
        );
        // A dangling symlink or a non-directory on the path is refused.
        for rel in ["dangling/x", "file/x", "filelink/x", "real/plain/x"] {
            if rel == "real/plain/x" {
                std::fs::write(format!("{d}/real/plain"), b"").unwrap();
            }
            let m = ws_one(Access::Deny, rel, Missing::Skip);
            let (c, msg) = class(resolve(&m, &ws(&d)));
            assert_eq!(c, ErrorClass::Format, "{rel}: {msg}");
        }
        // A present deny is not protect-create.
        let m = ws_one(Access::Deny, "real", Missing::Skip);
        let r = resolve(&m, &ws(&d)).unwrap();
        assert!(!r.rules()[0].protect_create);
        assert!(!r
            .required_capabilities()
            .contains(Capability::FsProtectCreate));
    }

    #[test]
    fn symlink_escape_is_refused() {
        let (_t, outside) = tmp();
        let (_t2, d) = tmp();
        std::fs::create_dir(format!("{d}/inside")).unwrap();
        symlink(&outside, format!("{d}/out")).unwrap();
        symlink(format!("{d}/inside"), format!("{d}/in")).unwrap();
        let m = ws_one(Access::Read, "out", Missing::Error);
        let (c, msg) = class(resolve(&m, &ws(&d)));
        assert_eq!(c, ErrorClass::Format);
        assert!(msg.contains("outside its root"), "{msg}");
        // Through the protect-create walk too.
        let m = ws_one(Access::Deny, "out/absent", Missing::Skip);
        assert_eq!(class(resolve(&m, &ws(&d))).0, ErrorClass::Format);
        // Temp and minimal-runtime roots are symbolic roots as well.
        let m = one(
            Access::Write,
            RootKind::Temp,
            "out",
            Scope::Tree,
            Missing::Error,
        );
        let t = HostBindings {
            temp: Some(d.clone().into()),
            ..HostBindings::default()
        };
        assert_eq!(class(resolve(&m, &t)).0, ErrorClass::Format);
        // A symlink that stays inside is fine and resolves to its target.
        let m = ws_one(Access::Read, "in", Missing::Error);
        assert_eq!(
            resolve(&m, &ws(&d)).unwrap().rules()[0].path,
            format!("{d}/inside")
        );
        // Host rules have no root to leave.
        let m = one(
            Access::Read,
            RootKind::Host,
            &format!("{d}/out"),
            Scope::Tree,
            Missing::Error,
        );
        assert_eq!(
            resolve(&m, &HostBindings::default()).unwrap().rules()[0].path,
            outside
        );
    }

    #[test]
    fn symlink_loop_is_io() {
        let (_t, d) = tmp();
        symlink(format!("{d}/b"), format!("{d}/a")).unwrap();
        symlink(format!("{d}/a"), format!("{d}/b")).unwrap();
        for missing in [Missing::Error, Missing::Skip] {
            for access in [Access::Read, Access::Deny] {
                let m = ws_one(access, "a/x", missing);
                let (c, msg) = class(resolve(&m, &ws(&d)));
                assert_eq!(c, ErrorClass::Io, "{msg}");
            }
        }
    }

    #[cfg(target_os = "linux")]
    fn euid() -> u32 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    }

    /// The EACCES check itself: run directly by a non-root user, or as root on
    /// a thread whose file access is uid 65534's.
    #[cfg(target_os = "linux")]
    fn check_eacces(d: &str) {
        for missing in [Missing::Error, Missing::Skip] {
            for access in [Access::Read, Access::Deny] {
                let m = ws_one(access, "locked/x", missing);
                let (c, msg) = class(resolve(&m, &ws(d)));
                assert_eq!(c, ErrorClass::Io, "{msg}");
                assert!(msg.contains("ermission denied"), "{msg}");
            }
        }
    }

    // Linux only: as root it takes 65534's file access with setfsuid.
    #[cfg(target_os = "linux")]
    #[test]
    fn permission_denied_is_io() {
        let (t, d) = tmp();
        std::fs::create_dir(format!("{d}/locked")).unwrap();
        std::fs::set_permissions(
            format!("{d}/locked"),
            std::fs::Permissions::from_mode(0o000),
        )
        .unwrap();
        if euid() == 0 {
            // Root ignores the mode bits: the check runs with 65534's file
            // access, below a tree 65534 may enter.
            std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            terra_test_support::users::with_nobody_file_access(|| check_eacces(&d));
        } else {
            check_eacces(&d);
        }
    }

    #[test]
    fn capabilities_are_checked_all_at_once() {
        let (_t, d) = tmp();
        let mut b = MirBuilder::new();
        ws_tree(&mut b, Access::Write, "", Missing::Error);
        ws_tree(&mut b, Access::DenyWrite, ".git", Missing::Skip);
        b.set_root_mode(RootMode::EphemeralWrite);
        let m = b.build().unwrap();
        let required = resolve(&m, &ws(&d)).unwrap().required_capabilities();
        assert_eq!(
            required.names(),
            vec![
                "fs-write",
                "network-none",
                "process-tree",
                "root-ephemeral-write",
                "fs-protect-create",
                "fs-deny-write"
            ]
        );
        let declared = CapabilitySet::parse(["fs-write", "network-none"]).unwrap();
        let e = compile_plan(&m, &ws(&d), declared).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Unsupported);
        for name in [
            "process-tree",
            "root-ephemeral-write",
            "fs-protect-create",
            "fs-deny-write",
        ] {
            assert!(e.detail().contains(name), "{}", e.detail());
        }
        assert!(e.detail().contains("4 capabilities"), "{}", e.detail());
        let plan = compile_plan(&m, &ws(&d), required).unwrap();
        assert_eq!(plan.required_capabilities(), required);
        assert_eq!(plan.decision_digest(), m.decision_digest());
        assert_eq!(plan.mir_bytes(), m.bytes());
        assert_eq!(
            plan.evaluate(&d).unwrap().permission,
            crate::evaluate::Permission::ReadWrite
        );
        assert_eq!(
            plan.evaluate(&format!("{d}/.git/x")).unwrap().permission,
            crate::evaluate::Permission::Read
        );
        // The static set reads the MIR alone.
        let stat = crate::capability::required_capabilities(&m);
        assert!(!stat.contains(Capability::FsProtectCreate));
        assert!(crate::capability::may_require_protect_create(&m));
    }

    #[test]
    fn conflicts_refuse_resolution() {
        let (_t, d) = tmp();
        std::fs::create_dir_all(format!("{d}/p/q")).unwrap();
        let mut b = MirBuilder::new();
        ws_tree(&mut b, Access::Deny, "p", Missing::Error);
        ws_tree(&mut b, Access::Read, "p/q", Missing::Error);
        let (c, msg) = class(resolve(&b.build().unwrap(), &ws(&d)));
        assert_eq!(c, ErrorClass::Conflict);
        assert!(
            msg.contains(&format!("{d}/p/q")) && msg.contains("before=read after=none"),
            "{msg}"
        );
    }

    /// The lstat walk gives what realpath gives, for every kind of path.
    #[test]
    fn walk_agrees_with_realpath() {
        let (_t, d) = tmp();
        std::fs::create_dir_all(format!("{d}/a/b/c")).unwrap();
        std::fs::write(format!("{d}/a/file"), b"").unwrap();
        symlink("../a/b", format!("{d}/a/rel")).unwrap(); // relative, with '..'
        symlink("rel/c", format!("{d}/a/chain")).unwrap(); // a chain
        symlink(format!("{d}/a/file"), format!("{d}/a/tofile")).unwrap();
        symlink("nowhere", format!("{d}/a/dangling")).unwrap();
        symlink(".", format!("{d}/a/self")).unwrap();
        symlink("/", format!("{d}/a/root")).unwrap();
        let rels = [
            "",
            "a",
            "a/b/c",
            "a/rel",
            "a/rel/c",
            "a/chain",
            "a/chain/x",
            "a/tofile",
            "a/tofile/x",
            "a/file",
            "a/file/x",
            "a/dangling",
            "a/dangling/x",
            "a/self/self/b",
            "a/root",
            "a/root/tmp",
            "x",
            "x/y",
            "a/b/x/y",
        ];
        for rel in rels {
            let path = if rel.is_empty() {
                d.clone()
            } else {
                format!("{d}/{rel}")
            };
            let m = one(
                Access::Read,
                RootKind::Host,
                &path,
                Scope::Exact,
                Missing::Skip,
            );
            let r = resolve(&m, &HostBindings::default()).unwrap();
            match std::fs::canonicalize(&path) {
                Ok(real) => {
                    assert_eq!(r.rules().len(), 1, "{rel}");
                    assert_eq!(r.rules()[0].path, real.to_str().unwrap(), "{rel}");
                }
                Err(e) => {
                    assert!(is_missing(&e), "{rel}: {e}");
                    assert_eq!(r.omitted().len(), 1, "{rel}");
                    assert!(r.rules().is_empty(), "{rel}");
                }
            }
        }
    }

    /// A large resolution: every candidate resolved and named as expected,
    /// the same result twice, and the first failing rule is the one named.
    #[test]
    fn large_resolutions_are_deterministic() {
        let (_t, d) = tmp();
        for i in (0..3000).step_by(3) {
            std::fs::create_dir(format!("{d}/e{i:04}")).unwrap();
        }
        let mut b = MirBuilder::new();
        for i in 0..3000 {
            let access = [Access::Read, Access::Deny, Access::DenyWrite][i % 3];
            ws_tree(&mut b, access, &format!("e{i:04}"), Missing::Skip);
        }
        let m = b.build().unwrap();
        assert_eq!(m.rules().len(), 3000);
        let r = resolve(&m, &ws(&d)).unwrap();
        // Every third target exists (all reads); the others are absent denies.
        assert_eq!(r.omitted().len(), 0);
        assert_eq!(r.rules().len(), 3000);
        for rule in r.rules() {
            let i: usize = rule.path[d.len() + 2..].parse().unwrap();
            assert_eq!(rule.protect_create, matches!(i % 3, 1 | 2), "{}", rule.path);
            assert_eq!(rule.source_rule, i);
        }
        let again = resolve(&m, &ws(&d)).unwrap();
        assert_eq!(again, r);
        // Two missing targets with missing: error, far apart: the first is named.
        let mut b = m.to_builder();
        ws_tree(&mut b, Access::Read, "a-first-missing", Missing::Error);
        ws_tree(&mut b, Access::Read, "z-last-missing", Missing::Error);
        let (c, msg) = class(resolve(&b.build().unwrap(), &ws(&d)));
        assert_eq!(c, ErrorClass::Missing);
        assert!(msg.contains("a-first-missing"), "{msg}");
    }

    #[test]
    fn default_minimal_roots_exist() {
        let roots = default_minimal_roots();
        for r in &roots {
            assert!(r.is_dir());
            assert!(DEFAULT_MINIMAL_ROOT_CANDIDATES.contains(&r.to_str().unwrap()));
        }
        if Path::new("/usr").is_dir() {
            assert_eq!(roots[0], PathBuf::from("/usr"));
        }
    }
}
