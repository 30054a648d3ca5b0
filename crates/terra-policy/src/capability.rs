//! Backend capabilities (spec section 6): twelve stable names, one bit each.

use std::fmt;

use crate::error::{PolicyError, Result};
use crate::model::{Access, Mir, Missing, NetworkMode, ProcessTree, RootMode};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    FsRead,
    FsWrite,
    FsDeny,
    NetworkNone,
    NetworkDirect,
    NetworkMediated,
    ProcessTree,
    RootEphemeralWrite,
    NetworkRequireTlsSni,
    NetworkPrivateAddresses,
    FsProtectCreate,
    FsDenyWrite,
}

impl Capability {
    /// All capabilities in bit order.
    pub const ALL: [Capability; 12] = [
        Capability::FsRead,
        Capability::FsWrite,
        Capability::FsDeny,
        Capability::NetworkNone,
        Capability::NetworkDirect,
        Capability::NetworkMediated,
        Capability::ProcessTree,
        Capability::RootEphemeralWrite,
        Capability::NetworkRequireTlsSni,
        Capability::NetworkPrivateAddresses,
        Capability::FsProtectCreate,
        Capability::FsDenyWrite,
    ];

    /// The stable name.
    pub fn name(self) -> &'static str {
        match self {
            Capability::FsRead => "fs-read",
            Capability::FsWrite => "fs-write",
            Capability::FsDeny => "fs-deny",
            Capability::NetworkNone => "network-none",
            Capability::NetworkDirect => "network-direct",
            Capability::NetworkMediated => "network-mediated",
            Capability::ProcessTree => "process-tree",
            Capability::RootEphemeralWrite => "root-ephemeral-write",
            Capability::NetworkRequireTlsSni => "network-require-tls-sni",
            Capability::NetworkPrivateAddresses => "network-private-addresses",
            Capability::FsProtectCreate => "fs-protect-create",
            Capability::FsDenyWrite => "fs-deny-write",
        }
    }

    pub fn from_name(name: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The bit of this capability: 1 << position in [`Capability::ALL`].
    pub fn bit(self) -> u16 {
        1 << (Capability::ALL.iter().position(|c| *c == self).unwrap_or(0) as u16)
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of capabilities as a bit mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct CapabilitySet(u16);

impl CapabilitySet {
    pub const EMPTY: CapabilitySet = CapabilitySet(0);

    pub fn from_bits(bits: u16) -> CapabilitySet {
        CapabilitySet(bits & 0x0fff)
    }
    pub fn bits(self) -> u16 {
        self.0
    }
    pub fn with(self, c: Capability) -> CapabilitySet {
        CapabilitySet(self.0 | c.bit())
    }
    pub fn insert(&mut self, c: Capability) {
        self.0 |= c.bit();
    }
    pub fn contains(self, c: Capability) -> bool {
        self.0 & c.bit() != 0
    }
    /// Members in bit order.
    pub fn iter(self) -> impl Iterator<Item = Capability> {
        Capability::ALL
            .into_iter()
            .filter(move |c| self.contains(*c))
    }
    /// What `self` needs that `available` lacks, in bit order.
    pub fn missing_from(self, available: CapabilitySet) -> Vec<Capability> {
        self.iter().filter(|c| !available.contains(*c)).collect()
    }
}

impl CapabilitySet {
    /// Every capability.
    pub const ALL: CapabilitySet = CapabilitySet(0x0fff);

    /// Parses stable names; an unknown name is an argument error.
    pub fn parse<'a, I: IntoIterator<Item = &'a str>>(names: I) -> Result<CapabilitySet> {
        let mut set = CapabilitySet::EMPTY;
        for name in names {
            match Capability::from_name(name) {
                Some(c) => set.insert(c),
                None => {
                    let known: Vec<&str> = Capability::ALL.iter().map(|c| c.name()).collect();
                    return Err(PolicyError::Argument(format!(
                        "unknown capability {name:?}; known: {}",
                        known.join(", ")
                    )));
                }
            }
        }
        Ok(set)
    }

    /// The names in bit order, comma-separated.
    pub fn names(self) -> Vec<&'static str> {
        self.iter().map(Capability::name).collect()
    }
}

/// The fs capability an access kind needs.
pub fn capability_for_access(access: Access) -> Capability {
    match access {
        Access::Read => Capability::FsRead,
        Access::Write => Capability::FsWrite,
        Access::Deny => Capability::FsDeny,
        Access::DenyWrite => Capability::FsDenyWrite,
    }
}

/// The capabilities of everything but the filesystem rules (spec section 6):
/// exactly one network-mode bit, process-tree when required,
/// root-ephemeral-write when ephemeral, the destination-flag bits when any
/// destination sets them.
pub(crate) fn non_fs_capabilities(mir: &Mir) -> CapabilitySet {
    let mut set = CapabilitySet::EMPTY;
    set.insert(match mir.network() {
        NetworkMode::None => Capability::NetworkNone,
        NetworkMode::Direct => Capability::NetworkDirect,
        NetworkMode::Mediated => Capability::NetworkMediated,
    });
    if mir.process_tree() == ProcessTree::Required {
        set.insert(Capability::ProcessTree);
    }
    if mir.root_mode() == RootMode::EphemeralWrite {
        set.insert(Capability::RootEphemeralWrite);
    }
    if mir.destinations().iter().any(|d| d.require_tls_sni) {
        set.insert(Capability::NetworkRequireTlsSni);
    }
    if mir.destinations().iter().any(|d| d.allow_private_addresses) {
        set.insert(Capability::NetworkPrivateAddresses);
    }
    set
}

/// The capabilities a decision requires before host resolution: one fs bit per
/// access kind its rules use plus [`non_fs_capabilities`]. Checks nothing.
///
/// Resolution can change the fs part: an omitted grant needs nothing, and a
/// kept protect-create rule adds `fs-protect-create` (see
/// [`may_require_protect_create`]). `Resolution::required_capabilities` is exact.
pub fn required_capabilities(mir: &Mir) -> CapabilitySet {
    let mut set = non_fs_capabilities(mir);
    for rule in mir.rules() {
        set.insert(capability_for_access(rule.access));
    }
    set
}

/// Whether resolution may keep a protect-create rule (a deny or deny-write with
/// `missing: skip`), which would require `fs-protect-create`.
pub fn may_require_protect_create(mir: &Mir) -> bool {
    mir.rules().iter().any(|r| {
        matches!(r.access, Access::Deny | Access::DenyWrite) && r.target.missing == Missing::Skip
    })
}

impl FromIterator<Capability> for CapabilitySet {
    fn from_iter<I: IntoIterator<Item = Capability>>(iter: I) -> Self {
        let mut s = CapabilitySet::EMPTY;
        for c in iter {
            s.insert(c);
        }
        s
    }
}
