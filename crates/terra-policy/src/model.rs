//! The decision model of MIR v3 and the builder that is the only way to make one.
//!
//! A [`Mir`] is immutable and always canonical: rules de-duplicated, merged and
//! sorted, destinations merged and sorted, limits checked after de-duplication.
//! The builder applies the merge table of spec section 2 ("Canonical form").

use std::collections::BTreeMap;

use crate::error::{PolicyError, Result};
use crate::host::{classify_host, HostKind};

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

/// An immutable, canonical MIR v3 decision. Made only by [`MirBuilder::build`]
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
    /// A builder that starts from this decision (used by composition).
    pub fn to_builder(&self) -> MirBuilder {
        let mut b = MirBuilder::new();
        for r in &self.rules {
            b.insert_rule(r.target.clone(), r.access);
        }
        for d in &self.destinations {
            b.insert_destination(d.clone());
        }
        b.network = self.network;
        b.process_tree = self.process_tree;
        b.root_mode = self.root_mode;
        b
    }
}

/// What one target holds while building: at most one grant, a deny-write, or a deny.
#[derive(Debug, Clone, Copy, Default)]
struct TargetState {
    grant: Option<Access>,
    deny_write: bool,
    deny: bool,
}

/// Builds a canonical [`Mir`]. Defaults: no rules, network none, process tree
/// required, root read-only.
#[derive(Debug, Clone)]
pub struct MirBuilder {
    targets: BTreeMap<Target, TargetState>,
    destinations: BTreeMap<(String, u16), (bool, bool)>,
    network: NetworkMode,
    process_tree: ProcessTree,
    root_mode: RootMode,
}

impl Default for MirBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl MirBuilder {
    pub fn new() -> Self {
        MirBuilder {
            targets: BTreeMap::new(),
            destinations: BTreeMap::new(),
            network: NetworkMode::None,
            process_tree: ProcessTree::Required,
            root_mode: RootMode::ReadOnly,
        }
    }

    /// Adds a rule. `path` is normalized; for `Host` it must be absolute, for
    /// the symbolic roots (`MinimalRuntime`, `Workspace`, `Temp`) relative,
    /// where "" is the root itself. A minimal-runtime rule with a relative path
    /// is valid MIR (the JSON source cannot write one, the reference's builder
    /// and decoder can); it resolves below every minimal-runtime root.
    pub fn add_rule(
        &mut self,
        access: Access,
        root: RootKind,
        path: &str,
        scope: Scope,
        missing: Missing,
    ) -> Result<&mut Self> {
        let path = normalize_path(root, path)?;
        self.insert_rule(
            Target {
                root,
                path,
                scope,
                missing,
            },
            access,
        );
        Ok(self)
    }

    fn insert_rule(&mut self, target: Target, access: Access) {
        let state = self.targets.entry(target).or_default();
        if state.deny {
            return; // a deny absorbs every later rule of its target
        }
        match access {
            Access::Deny => {
                *state = TargetState {
                    grant: None,
                    deny_write: false,
                    deny: true,
                }
            }
            Access::DenyWrite => state.deny_write = true,
            Access::Read | Access::Write => state.grant = state.grant.max(Some(access)),
        }
    }

    /// How many filesystem records the rules added so far make, after
    /// de-duplication and merging (what [`MirBuilder::build`] checks).
    pub fn rule_count(&self) -> usize {
        self.targets
            .values()
            .map(|s| {
                usize::from(s.grant.is_some()) + usize::from(s.deny_write) + usize::from(s.deny)
            })
            .sum()
    }

    /// How many destinations the ones added so far make, after merging.
    pub fn destination_count(&self) -> usize {
        self.destinations.len()
    }

    pub fn set_network(&mut self, mode: NetworkMode) -> &mut Self {
        self.network = mode;
        self
    }

    /// Adds a TCP destination. The host is checked and lowercased; duplicates
    /// merge restrictively (TLS SNI or-ed, private addresses and-ed).
    pub fn add_destination(
        &mut self,
        host: &str,
        port: u16,
        require_tls_sni: bool,
        allow_private_addresses: bool,
    ) -> Result<&mut Self> {
        let host = host.to_ascii_lowercase();
        let kind = classify_host(&host)?;
        if port == 0 {
            return Err(PolicyError::Argument(format!(
                "destination {host}: port must be 1..65535"
            )));
        }
        if kind == HostKind::Ipv4Literal && require_tls_sni {
            return Err(PolicyError::Argument(format!(
                "destination {host}:{port}: an IPv4 literal cannot require TLS SNI"
            )));
        }
        self.insert_destination(Destination {
            host,
            port,
            require_tls_sni,
            allow_private_addresses,
        });
        Ok(self)
    }

    fn insert_destination(&mut self, d: Destination) {
        self.destinations
            .entry((d.host, d.port))
            .and_modify(|(sni, private)| {
                *sni |= d.require_tls_sni;
                *private &= d.allow_private_addresses;
            })
            .or_insert((d.require_tls_sni, d.allow_private_addresses));
    }

    pub fn set_process_tree(&mut self, tree: ProcessTree) -> &mut Self {
        self.process_tree = tree;
        self
    }

    pub fn set_root_mode(&mut self, mode: RootMode) -> &mut Self {
        self.root_mode = mode;
        self
    }

    /// Checks limits and network consistency, then returns the canonical decision.
    pub fn build(&self) -> Result<Mir> {
        let mut rules = Vec::new();
        for (target, state) in &self.targets {
            let accesses = [
                state.grant,
                state.deny.then_some(Access::Deny),
                state.deny_write.then_some(Access::DenyWrite),
            ];
            let mut accesses: Vec<Access> = accesses.into_iter().flatten().collect();
            accesses.sort();
            for access in accesses {
                rules.push(Rule {
                    target: target.clone(),
                    access,
                });
            }
        }
        if rules.len() > MAX_RULES {
            return Err(PolicyError::Limit(format!(
                "{} filesystem rules after de-duplication; at most {MAX_RULES} are allowed",
                rules.len()
            )));
        }
        let destinations: Vec<Destination> = self
            .destinations
            .iter()
            .map(|((host, port), (sni, private))| Destination {
                host: host.clone(),
                port: *port,
                require_tls_sni: *sni,
                allow_private_addresses: *private,
            })
            .collect();
        if destinations.len() > MAX_DESTINATIONS {
            return Err(PolicyError::Limit(format!(
                "{} destinations after de-duplication; at most {MAX_DESTINATIONS} are allowed",
                destinations.len()
            )));
        }
        match (self.network, destinations.is_empty()) {
            (NetworkMode::Mediated, true) => {
                return Err(PolicyError::Format(
                    "network mode mediated needs at least one destination".into(),
                ))
            }
            (NetworkMode::None | NetworkMode::Direct, false) => {
                return Err(PolicyError::Format(format!(
                    "network mode {} takes no destinations",
                    self.network
                )))
            }
            _ => {}
        }
        let mut mir = Mir {
            rules,
            network: self.network,
            destinations,
            process_tree: self.process_tree,
            root_mode: self.root_mode,
            bytes: Vec::new(),
        };
        mir.bytes = crate::codec::encode(&mir);
        Ok(mir)
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
    use crate::testing::{dest, ws_tree};

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

    #[test]
    fn merge_table() {
        let mut b = MirBuilder::new();
        ws_tree(&mut b, Access::Read, "a", Missing::Error);
        ws_tree(&mut b, Access::Write, "a", Missing::Error);
        ws_tree(&mut b, Access::DenyWrite, "a", Missing::Error);
        ws_tree(&mut b, Access::Deny, "b", Missing::Error);
        ws_tree(&mut b, Access::Write, "b", Missing::Error);
        ws_tree(&mut b, Access::Read, "a", Missing::Skip);
        let m = b.build().unwrap();
        let got: Vec<(&str, Access, Missing)> = m
            .rules()
            .iter()
            .map(|r| (r.target.path.as_str(), r.access, r.target.missing))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", Access::Write, Missing::Error),
                ("a", Access::DenyWrite, Missing::Error),
                ("a", Access::Read, Missing::Skip),
                ("b", Access::Deny, Missing::Error),
            ]
        );
    }

    #[test]
    fn destinations_merge_restrictively() {
        let mut b = MirBuilder::new();
        b.set_network(NetworkMode::Mediated);
        b.add_destination("A.example", 443, false, true).unwrap();
        b.add_destination("a.example", 443, true, false).unwrap();
        let m = b.build().unwrap();
        assert_eq!(m.destinations(), &[dest("a.example", 443, true, false)]);
    }
}
