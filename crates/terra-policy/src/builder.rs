//! The builder, the only way to make a [`Mir`]: it applies the merge table
//! of spec section 2 ("Canonical form"), checks the limits after
//! de-duplication and computes the canonical bytes once.

use std::collections::BTreeMap;

use crate::error::{PolicyError, Result};
use crate::host::{classify_host, HostKind};
use crate::model::*;

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
        let mut mir = Mir::from_parts(
            rules,
            self.network,
            destinations,
            self.process_tree,
            self.root_mode,
        );
        mir.set_bytes(crate::encode::encode(&mir));
        Ok(mir)
    }
}

impl Mir {
    /// A builder that starts from this decision (used by composition).
    pub fn to_builder(&self) -> MirBuilder {
        let mut b = MirBuilder::new();
        for r in self.rules() {
            b.insert_rule(r.target.clone(), r.access);
        }
        for d in self.destinations() {
            b.insert_destination(d.clone());
        }
        b.network = self.network();
        b.process_tree = self.process_tree();
        b.root_mode = self.root_mode();
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{dest, ws_tree};

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
