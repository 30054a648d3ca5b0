//! Paths as the windows backend grants them.
//!
//! A plan is resolved on the host that runs it. On Windows its paths are
//! what terra-policy made of `std::fs::canonicalize`: verbatim
//! (`\\?\C:\Users\me\proj`), with the rule's relative part joined by `\`.
//! [`windows_path`] turns that into the one form the launch spec carries
//! (`C:\Users\me\proj\src`): the verbatim prefix dropped, any `/` made `\`
//! (NTFS names cannot hold `/`, so it is always a separator), the drive letter in
//! upper case, and every component checked. Anything else is refused:
//! UNC and device paths, `.` and `..`, empty components, reserved names
//! (CON, NUL, COM1, ...), names ending in a dot or a space (Windows would
//! silently strip them), alternate data streams (`:`), and the characters
//! Windows refuses in names.
//!
//! A dry run elsewhere (Linux) has the Linux plan's paths: they are shown
//! as given, marked as not Windows-canonical ([`PathStyle::Foreign`]), and
//! never reach a launch spec.

use crate::error::{Error, Result};

/// How the paths of a plan are to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathStyle {
    /// Resolved on Windows: canonical Windows paths, compared without case.
    Windows,
    /// Resolved on another host (a dry run): `/`-separated, as given,
    /// compared byte for byte; not Windows-canonical.
    Foreign,
}

/// The longest path, in UTF-16 units, the launcher handles (`\\?\` paths
/// reach 32,767 units).
pub const MAX_PATH_UNITS: usize = 32_000;

const RESERVED: [&str; 22] = [
    "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8",
    "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
];

impl PathStyle {
    pub fn separator(self) -> char {
        match self {
            PathStyle::Windows => '\\',
            PathStyle::Foreign => '/',
        }
    }

    /// `path` checked and put in this style's canonical form.
    pub fn canonical(self, path: &str) -> Result<String> {
        match self {
            PathStyle::Windows => windows_path(path),
            PathStyle::Foreign => foreign_path(path),
        }
    }

    /// True when `path` is `root` or below it, on a component boundary
    /// (Windows: without regard to case).
    pub fn within(self, root: &str, path: &str) -> bool {
        let (root, path) = match self {
            PathStyle::Windows => (fold(root), fold(path)),
            PathStyle::Foreign => (root.to_string(), path.to_string()),
        };
        let sep = self.separator();
        if path == root {
            return true;
        }
        let root = root.strip_suffix(sep).unwrap_or(&root);
        path.strip_prefix(root)
            .is_some_and(|rest| rest.starts_with(sep))
    }

    /// The key two paths of this style compare equal by.
    pub fn key(self, path: &str) -> String {
        match self {
            PathStyle::Windows => fold(path),
            PathStyle::Foreign => path.to_string(),
        }
    }

    /// The proper ancestors of `path` from `root` (included) down, when
    /// `path` is strictly below `root`. Taken from `path` itself, so they
    /// are spelled as the path spells them.
    pub fn ancestors_from(self, root: &str, path: &str) -> Vec<String> {
        if !self.within(root, path) || self.key(root) == self.key(path) {
            return Vec::new();
        }
        let sep = self.separator();
        let mut out = Vec::new();
        for (i, ch) in path.char_indices() {
            if ch != sep {
                continue;
            }
            // The root of a volume keeps its separator (`/`, `C:\`).
            let is_root = i == 0 || (self == PathStyle::Windows && i == 2);
            let prefix = if is_root { &path[..=i] } else { &path[..i] };
            if self.within(root, prefix) {
                out.push(prefix.to_string());
            }
        }
        out
    }

    /// `dir` joined with a child's `name`.
    pub fn join(self, dir: &str, name: &str) -> String {
        let sep = self.separator();
        if dir.ends_with(sep) {
            format!("{dir}{name}")
        } else {
            format!("{dir}{sep}{name}")
        }
    }
}

/// Case folding for comparisons: NTFS compares names through its upcase
/// table; Unicode lower-casing agrees with it for every name terra is
/// likely to meet (and only decides which rules nest, never what a rule
/// grants).
fn fold(path: &str) -> String {
    path.to_lowercase()
}

fn bad(path: &str, reason: impl Into<String>) -> Error {
    Error::Path {
        path: path.to_string(),
        reason: reason.into(),
    }
}

/// The canonical Windows form of `path` (see the module's documentation).
pub fn windows_path(path: &str) -> Result<String> {
    let body = path.strip_prefix(r"\\?\").unwrap_or(path);
    if body.starts_with(r"UNC\") || body.starts_with(r"\\") || body.starts_with("//") {
        return Err(bad(
            path,
            "a UNC or device path; only local drive paths are granted",
        ));
    }
    let body = body.replace('/', "\\");
    let bytes = body.as_bytes();
    if bytes.len() < 3 || !bytes[0].is_ascii_alphabetic() || bytes[1] != b':' || bytes[2] != b'\\' {
        return Err(bad(path, r"not an absolute drive path (X:\...)"));
    }
    if body.encode_utf16().count() > MAX_PATH_UNITS {
        return Err(bad(
            path,
            format!("longer than {MAX_PATH_UNITS} UTF-16 units"),
        ));
    }
    let drive = bytes[0].to_ascii_uppercase() as char;
    let rest = &body[3..];
    if rest.is_empty() {
        return Ok(format!("{drive}:\\"));
    }
    for component in rest.split('\\') {
        check_component(path, component)?;
    }
    Ok(format!("{drive}:\\{rest}"))
}

fn check_component(path: &str, c: &str) -> Result<()> {
    if c.is_empty() {
        return Err(bad(
            path,
            "an empty component (a doubled or trailing separator)",
        ));
    }
    if c == "." || c == ".." {
        return Err(bad(path, "a . or .. component (not normal)"));
    }
    if c.ends_with('.') || c.ends_with(' ') {
        return Err(bad(
            path,
            format!("component {c:?} ends with a dot or a space, which Windows strips"),
        ));
    }
    if let Some(ch) = c
        .chars()
        .find(|ch| (*ch as u32) < 0x20 || matches!(ch, '<' | '>' | ':' | '"' | '|' | '?' | '*'))
    {
        return Err(bad(
            path,
            format!(
                "component {c:?} holds {ch:?}, which Windows refuses in a name (or a stream name)"
            ),
        ));
    }
    let stem = c.split('.').next().unwrap_or(c).trim_end_matches(' ');
    if RESERVED.iter().any(|r| r.eq_ignore_ascii_case(stem)) {
        return Err(bad(
            path,
            format!("component {c:?} is a reserved device name"),
        ));
    }
    Ok(())
}

/// A foreign path (a dry run on another host): absolute, normal, no NUL or
/// newline; kept as given.
fn foreign_path(path: &str) -> Result<String> {
    if !path.starts_with('/') {
        return Err(bad(path, "not absolute"));
    }
    if path.contains(['\0', '\n']) {
        return Err(bad(path, "contains NUL or a newline"));
    }
    if path != "/"
        && (path.ends_with('/')
            || path[1..]
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == ".."))
    {
        return Err(bad(path, "not normal (empty, . or .. component)"));
    }
    Ok(path.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appcontainer_windows_paths_are_made_canonical() {
        assert_eq!(
            windows_path(r"\\?\C:\Users\me\proj").unwrap(),
            r"C:\Users\me\proj"
        );
        assert_eq!(
            windows_path(r"\\?\c:\Users\me\proj/src/lib").unwrap(),
            r"C:\Users\me\proj\src\lib"
        );
        assert_eq!(windows_path(r"d:\").unwrap(), r"D:\");
        assert_eq!(windows_path(r"C:\a b\été.txt").unwrap(), r"C:\a b\été.txt");
    }

    #[test]
    fn appcontainer_windows_paths_refuse_what_windows_would_reinterpret() {
        for p in [
            r"\\server\share\x",
            r"\\?\UNC\server\share",
            r"C:",
            r"C:relative",
            r"relative\x",
            r"C:\a\..\b",
            r"C:\a\.\b",
            r"C:\a\\b",
            r"C:\a\",
            r"C:\a.",
            r"C:\a ",
            r"C:\file.txt:stream",
            r"C:\a*b",
            "C:\\a\u{1}b",
            r"C:\dir\NUL",
            r"C:\dir\con.txt",
            r"C:\dir\COM1",
            r"/usr/bin",
        ] {
            assert!(windows_path(p).is_err(), "{p:?} accepted");
        }
        // Names that only look reserved are fine.
        assert!(windows_path(r"C:\dir\CONSOLE").is_ok());
        assert!(windows_path(r"C:\dir\nul_x").is_ok());
    }

    #[test]
    fn appcontainer_within_is_component_wise_and_case_blind_on_windows() {
        let w = PathStyle::Windows;
        assert!(w.within(r"C:\Proj", r"c:\proj\src"));
        assert!(w.within(r"C:\Proj", r"C:\PROJ"));
        assert!(!w.within(r"C:\Proj", r"C:\Project"));
        assert!(w.within(r"C:\", r"C:\x"));
        let f = PathStyle::Foreign;
        assert!(f.within("/w", "/w/a"));
        assert!(!f.within("/w", "/W/a"));
        assert!(!f.within("/w", "/wx"));
        assert!(f.within("/", "/wx"));
    }

    #[test]
    fn appcontainer_ancestors_from_a_root_down() {
        let w = PathStyle::Windows;
        assert_eq!(
            w.ancestors_from(r"C:\w", r"C:\w\a\b\secret"),
            [r"C:\w", r"C:\w\a", r"C:\w\a\b"]
        );
        assert_eq!(w.ancestors_from(r"C:\w", r"C:\w\s"), [r"C:\w"]);
        assert!(w.ancestors_from(r"C:\w", r"C:\w").is_empty());
        assert!(w.ancestors_from(r"C:\w", r"C:\x\s").is_empty());
        assert_eq!(PathStyle::Foreign.ancestors_from("/", "/a/b"), ["/", "/a"]);
    }

    #[test]
    fn appcontainer_foreign_paths_are_kept_as_given() {
        assert_eq!(foreign_path("/tmp/x").unwrap(), "/tmp/x");
        for p in ["tmp", "/a/../b", "/a/", "/a\nb"] {
            assert!(foreign_path(p).is_err(), "{p:?}");
        }
    }
}
