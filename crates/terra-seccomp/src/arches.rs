//! Which system calls exist on which architecture, and the check that every
//! rule's `arch` list says exactly that. A table is refused when a rule
//! names a call an architecture lacks without excluding that architecture
//! (aarch64 has no `open`, `fork`, `dup2`, `stat`, `poll`, ...), and when a
//! rule excludes an architecture that has the call: the filter would quietly
//! lose it there (a ban of `chmod` on x86_64 does not cover `fchmodat`, and
//! a ban marked x86_64-only does not hold on aarch64). The numbers come from
//! seccompiler's table of each architecture, the one that compiles the
//! programs. Shared by the build script and the library.

use seccompiler::TargetArch;

use super::table::{Filter, ARCHES};

/// The seccompiler architecture of a table's architecture name.
pub fn target(name: &str) -> Option<TargetArch> {
    match name {
        "x86_64" => Some(TargetArch::x86_64),
        "aarch64" => Some(TargetArch::aarch64),
        _ => None,
    }
}

/// Why a table's rule does not match the architectures its call exists on.
#[derive(Debug, thiserror::Error)]
pub enum ArchError {
    #[error("unknown architecture {0}")]
    UnknownArch(&'static str),
    #[error("checking whether {syscall} exists: {message}")]
    Probe { syscall: String, message: String },
    #[error(
        "filter {filter}: {syscall} does not exist on {arch}: list the architectures it \
         exists on in the rule's \"arch\" (and cover what replaces it on {arch})"
    )]
    Missing {
        filter: String,
        syscall: String,
        arch: &'static str,
    },
    #[error(
        "filter {filter}: {syscall} exists on {arch} too, but its \"arch\" leaves {arch} out: \
         the rule would be dropped there"
    )]
    LeftOut {
        filter: String,
        syscall: String,
        arch: &'static str,
    },
    #[error("filter {filter}: no architecture has a system call {syscall}")]
    Nowhere { filter: String, syscall: String },
}

/// Whether `arch` has a system call named `syscall`.
pub fn exists(syscall: &str, arch: TargetArch) -> Result<bool, ArchError> {
    // A filter of one call without conditions: the only way seccompiler
    // can refuse it is a name it has no number for on `arch` (its frontend
    // error without a cause); any other error is reported, never taken for
    // an absent call.
    let probe = serde_json::json!({ "probe": {
        "mismatch_action": "allow",
        "match_action": { "errno": 1 },
        "filter": [{ "syscall": syscall }],
    }});
    let probe_error = |message: String| ArchError::Probe {
        syscall: syscall.to_string(),
        message,
    };
    let text = serde_json::to_vec(&probe).map_err(|e| probe_error(e.to_string()))?;
    match seccompiler::compile_from_json(text.as_slice(), arch) {
        Ok(_) => Ok(true),
        Err(e) => {
            let unknown_name = std::error::Error::source(&e)
                .is_some_and(|frontend| std::error::Error::source(frontend).is_none());
            if unknown_name {
                Ok(false)
            } else {
                Err(probe_error(e.to_string()))
            }
        }
    }
}

/// Refuses a filter whose rules do not say exactly on which architectures
/// their calls exist (message without the table's name).
pub fn check(f: &Filter) -> Result<(), ArchError> {
    for r in &f.rules {
        let mut on_any = false;
        for name in ARCHES {
            let arch = target(name).ok_or(ArchError::UnknownArch(name))?;
            let exists = exists(&r.syscall, arch)?;
            on_any |= exists;
            match (r.exists_on(name), exists) {
                (true, false) => {
                    return Err(ArchError::Missing {
                        filter: f.name.clone(),
                        syscall: r.syscall.clone(),
                        arch: name,
                    })
                }
                (false, true) => {
                    return Err(ArchError::LeftOut {
                        filter: f.name.clone(),
                        syscall: r.syscall.clone(),
                        arch: name,
                    })
                }
                _ => {}
            }
        }
        if !on_any {
            return Err(ArchError::Nowhere {
                filter: f.name.clone(),
                syscall: r.syscall.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::parse;

    fn check_text(rules: &str) -> Result<(), String> {
        let source = format!(
            r#"{{"deny": {{"about": "a test", "mismatch_action": "allow",
                "match_action": {{"errno": 1}}, "filter": [{rules}]}}}}"#
        );
        let filters = parse("test", &source)?;
        filters
            .iter()
            .try_for_each(check)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn numbers_are_looked_up_per_architecture() {
        for call in [
            "open", "fork", "vfork", "dup2", "stat", "lstat", "poll", "pipe", "chmod",
        ] {
            assert!(exists(call, TargetArch::x86_64).unwrap(), "{call}");
            assert!(!exists(call, TargetArch::aarch64).unwrap(), "{call}");
        }
        for call in [
            "openat",
            "clone",
            "dup3",
            "newfstatat",
            "ppoll",
            "pipe2",
            "fchmodat",
        ] {
            assert!(exists(call, TargetArch::x86_64).unwrap(), "{call}");
            assert!(exists(call, TargetArch::aarch64).unwrap(), "{call}");
        }
        assert!(!exists("no_such_call", TargetArch::x86_64).unwrap());
    }

    #[test]
    fn a_call_aarch64_lacks_is_refused_unless_marked_x86_64_only() {
        let e = check_text(r#"{"syscall": "open"}"#).unwrap_err();
        assert!(e.contains("open does not exist on aarch64"), "{e}");
        check_text(r#"{"syscall": "open", "arch": ["x86_64"]}"#).unwrap();
        let e = check_text(r#"{"syscall": "open", "arch": ["aarch64"]}"#).unwrap_err();
        assert!(e.contains("open exists on x86_64 too"), "{e}");
        let e = check_text(r#"{"syscall": "open", "arch": ["x86_64", "aarch64"]}"#).unwrap_err();
        assert!(e.contains("open does not exist on aarch64"), "{e}");
    }

    #[test]
    fn a_call_cannot_be_left_out_where_it_exists() {
        let e = check_text(r#"{"syscall": "openat", "arch": ["x86_64"]}"#).unwrap_err();
        assert!(e.contains("openat exists on aarch64 too"), "{e}");
        let e = check_text(r#"{"syscall": "open", "arch": []}"#).unwrap_err();
        assert!(e.contains("open exists on x86_64 too"), "{e}");
        check_text(r#"{"syscall": "openat"}"#).unwrap();
    }

    #[test]
    fn an_unknown_call_is_refused() {
        let e = check_text(r#"{"syscall": "no_such_call", "arch": []}"#).unwrap_err();
        assert!(
            e.contains("no architecture has a system call no_such_call"),
            "{e}"
        );
    }
}
