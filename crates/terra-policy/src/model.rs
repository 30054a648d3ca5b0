//! The decision model of MIR v3 (made only by the builder, `builder.rs`).
//!
//! A [`Mir`] is immutable and always canonical: rules de-duplicated, merged and
//! sorted, destinations merged and sorted, limits checked after de-duplication.
//! The builder applies the merge table of spec section 2 ("Canonical form").

use crate::error::{PolicyError, Result};

/// Most filesystem rules after de-duplication.
pub const MAX_RULES: usize = 4096;
/// Most destinations after de-duplication.
pub const MAX_DESTINATIONS: usize = 1024;
/// Longest path, in bytes.
pub const MAX_PATH_LEN: usize = 4096;

macro_rules! coded_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $code:literal, $text:literal;)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            /// All values, in code order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The byte that encodes this value in MIR.
            pub fn code(self) -> u8 { match self { $($name::$variant => $code),+ } }
            /// The value a MIR byte encodes, if any.
            pub fn from_code(code: u8) -> Option<Self> { match code { $($code => Some($name::$variant),)+ _ => None } }
            /// The name used in JSON source and inspection output.
            pub fn name(self) -> &'static str { match self { $($name::$variant => $text),+ } }
            /// The value a JSON name stands for, if any.
            pub fn from_name(text: &str) -> Option<Self> { match text { $($text => Some($name::$variant),)+ _ => None } }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str(self.name()) }
        }
    };
}

coded_enum!(
    /// What a filesystem rule does.
    Access { Read = 1, "read"; Write = 2, "write"; Deny = 3, "deny"; DenyWrite = 4, "deny-write"; }
);
coded_enum!(
    /// What a rule's path is relative to.
    RootKind { MinimalRuntime = 1, "minimal-runtime"; Workspace = 2, "workspace"; Temp = 3, "temp"; Host = 4, "host"; }
);
coded_enum!(
    /// Whether a rule covers only its path or the whole subtree.
    Scope { Exact = 1, "exact"; Tree = 2, "tree"; }
);
coded_enum!(
    /// What resolution does when the rule's path does not exist.
    Missing { Error = 1, "error"; Skip = 2, "skip"; }
);
coded_enum!(
    /// How the workload reaches the network.
    NetworkMode { None = 1, "none"; Direct = 2, "direct"; Mediated = 3, "mediated"; }
);
coded_enum!(
    /// Whether the whole process tree must stay confined.
    ProcessTree { Disabled = 0, "disabled"; Required = 1, "required"; }
);
coded_enum!(
    /// What happens to writes outside the granted paths' view of the root.
    RootMode { ReadOnly = 1, "read-only"; EphemeralWrite = 2, "ephemeral-write"; }
);

/// The identity of a rule: two rules with the same target are merged.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    pub root: RootKind,
    /// Normalized: host paths absolute, symbolic-root paths relative (maybe "").
    pub path: String,
    pub scope: Scope,
    pub missing: Missing,
}

/// One canonical filesystem rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rule {
    pub target: Target,
    pub access: Access,
}

/// One canonical network destination (protocol is always TCP in MIR v3).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Destination {
    /// Lowercase, grammar-checked.
    pub host: String,
    pub port: u16,
    pub require_tls_sni: bool,
    pub allow_private_addresses: bool,
}

/// An immutable, canonical MIR v3 decision. Made only by [`crate::MirBuilder::build`]
/// or [`Mir::decode`]; its canonical bytes are computed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mir {
    rules: Vec<Rule>,
    network: NetworkMode,
    destinations: Vec<Destination>,
    process_tree: ProcessTree,
    root_mode: RootMode,
    bytes: Vec<u8>,
}

impl Mir {
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
    pub fn network(&self) -> NetworkMode {
        self.network
    }
    pub fn destinations(&self) -> &[Destination] {
        &self.destinations
    }
    pub fn process_tree(&self) -> ProcessTree {
        self.process_tree
    }
    pub fn root_mode(&self) -> RootMode {
        self.root_mode
    }
    /// The canonical MIR v3 bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    /// Lowercase hex SHA-256 of the canonical bytes.
    pub fn decision_digest(&self) -> String {
        crate::digest::sha256_hex(&self.bytes)
    }
    /// A decision of canonical parts, its bytes not yet set (the builder,
    /// which checked the parts, sets them next).
    pub(crate) fn from_parts(
        rules: Vec<Rule>,
        network: NetworkMode,
        destinations: Vec<Destination>,
        process_tree: ProcessTree,
        root_mode: RootMode,
    ) -> Mir {
        Mir {
            rules,
            network,
            destinations,
            process_tree,
            root_mode,
            bytes: Vec::new(),
        }
    }
    /// Sets the canonical bytes, once, right after [`Mir::from_parts`].
    pub(crate) fn set_bytes(&mut self, bytes: Vec<u8>) {
        self.bytes = bytes;
    }
}

/// Normalizes a rule path for its root (spec section 2, "Path normalization").
pub fn normalize_path(root: RootKind, path: &str) -> Result<String> {
    if path.len() > MAX_PATH_LEN {
        return Err(PolicyError::Limit(format!(
            "path of {} bytes; at most {MAX_PATH_LEN} are allowed",
            path.len()
        )));
    }
    if path.contains('\0') {
        return Err(PolicyError::Format(format!(
            "path {path:?} contains a NUL byte"
        )));
    }
    match root {
        RootKind::Host if !path.starts_with('/') => {
            return Err(PolicyError::Format(format!(
                "absolute path {path:?} must start with '/'"
            )))
        }
        RootKind::MinimalRuntime | RootKind::Workspace | RootKind::Temp
            if path.starts_with('/') =>
        {
            return Err(PolicyError::Format(format!(
                "relative path {path:?} must not start with '/'"
            )))
        }
        _ => {}
    }
    let mut segments = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                return Err(PolicyError::Format(format!(
                    "path {path:?} contains a '..' segment"
                )))
            }
            s => segments.push(s),
        }
    }
    let joined = segments.join("/");
    Ok(if root == RootKind::Host {
        format!("/{joined}")
    } else {
        joined
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization() {
        assert_eq!(
            normalize_path(RootKind::Workspace, "build//./output").unwrap(),
            "build/output"
        );
        assert_eq!(normalize_path(RootKind::Workspace, "").unwrap(), "");
        assert_eq!(normalize_path(RootKind::Workspace, "./").unwrap(), "");
        assert_eq!(normalize_path(RootKind::Host, "/").unwrap(), "/");
        assert_eq!(normalize_path(RootKind::Host, "//a/b/").unwrap(), "/a/b");
        assert!(normalize_path(RootKind::Host, "a").is_err());
        assert!(normalize_path(RootKind::Temp, "/a").is_err());
        assert!(normalize_path(RootKind::Temp, "a/../b").is_err());
        // Minimal-runtime paths are relative like workspace and temp ones.
        assert_eq!(
            normalize_path(RootKind::MinimalRuntime, "lib//./x86_64/").unwrap(),
            "lib/x86_64"
        );
        assert_eq!(normalize_path(RootKind::MinimalRuntime, "").unwrap(), "");
        assert!(normalize_path(RootKind::MinimalRuntime, "/lib").is_err());
        assert!(normalize_path(RootKind::MinimalRuntime, "a/../b").is_err());
    }
}
