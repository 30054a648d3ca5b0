//! Backend capabilities (spec section 6): twelve stable names, one bit each.

use std::fmt;

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

impl FromIterator<Capability> for CapabilitySet {
    fn from_iter<I: IntoIterator<Item = Capability>>(iter: I) -> Self {
        let mut s = CapabilitySet::EMPTY;
        for c in iter {
            s.insert(c);
        }
        s
    }
}
