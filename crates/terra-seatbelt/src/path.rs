//! Paths as Seatbelt matches them.
//!
//! Seatbelt compares the resolved path of each file operation, and on macOS
//! /tmp, /var and /etc are symlinks into /private. A rule on /tmp/x would
//! never match, so grants are rewritten to /private/tmp/x. The plan's paths
//! are already canonical on the host that resolved them; this module only
//! checks their shape and applies the /private mapping, so a plan resolved
//! elsewhere (a dry run on Linux) renders the profile macOS would get.

use crate::error::{Error, Result};

/// The top-level names macOS keeps under /private behind a symlink.
const PRIVATE_ALIASES: [&str; 3] = ["tmp", "var", "etc"];

/// `path` checked (absolute, normal, no NUL or newline) and mapped to the
/// form Seatbelt matches.
pub fn seatbelt_path(path: &str) -> Result<String> {
    let bad = |reason| Error::Path {
        path: path.to_string(),
        reason,
    };
    if !path.starts_with('/') {
        return Err(bad("not absolute"));
    }
    if path.contains(['\0', '\n']) {
        return Err(bad("contains NUL or a newline"));
    }
    if path != "/" && path.ends_with('/') {
        return Err(bad("ends with a slash"));
    }
    if path.len() > 1
        && path[1..]
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(bad("not normal (empty, . or .. component)"));
    }
    let first = path[1..].split('/').next().unwrap_or("");
    if PRIVATE_ALIASES.contains(&first) {
        return Ok(format!("/private{path}"));
    }
    Ok(path.to_string())
}

/// The proper ancestors of a normal absolute path, root first (`/a/b/c`
/// gives `/`, `/a`, `/a/b`). Path lookup needs metadata on each of them.
pub fn ancestors(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    if path == "/" {
        return out;
    }
    out.push("/".to_string());
    let mut at = 0;
    while let Some(i) = path[at + 1..].find('/') {
        at += 1 + i;
        out.push(path[..at].to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seatbelt_private_aliases_are_mapped() {
        assert_eq!(seatbelt_path("/tmp").unwrap(), "/private/tmp");
        assert_eq!(
            seatbelt_path("/var/folders/x").unwrap(),
            "/private/var/folders/x"
        );
        assert_eq!(seatbelt_path("/etc/hosts").unwrap(), "/private/etc/hosts");
        assert_eq!(seatbelt_path("/tmpfoo").unwrap(), "/tmpfoo");
        assert_eq!(seatbelt_path("/private/tmp").unwrap(), "/private/tmp");
    }

    #[test]
    fn seatbelt_rejects_non_normal_paths() {
        for p in ["rel", "/a/../b", "/a/./b", "/a//b", "/a/", "/a\nb", "/a\0b"] {
            assert!(seatbelt_path(p).is_err(), "{p:?} accepted");
        }
    }

    #[test]
    fn seatbelt_ancestors_root_first() {
        assert_eq!(ancestors("/a/b/c"), ["/", "/a", "/a/b"]);
        assert_eq!(ancestors("/a"), ["/"]);
        assert!(ancestors("/").is_empty());
    }
}
