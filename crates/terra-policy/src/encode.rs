//! MIR v3 canonical bytes: the encoder and the format's constants (the
//! decoder is `codec.rs`).

use crate::model::Mir;

/// Largest MIR document, in bytes.
pub const MAX_MIR_LEN: usize = 1 << 20;
pub const MAGIC: &[u8; 4] = b"MMIR";
pub const VERSION: u16 = 3;
pub const HEADER_LEN: usize = 20;
pub(crate) const RULE_KIND: u8 = 1;
pub(crate) const DESTINATION_KIND: u8 = 2;
pub(crate) const PROTOCOL_TCP: u8 = 1;
pub(crate) const FLAG_REQUIRE_TLS_SNI: u8 = 0x01;
pub(crate) const FLAG_ALLOW_PRIVATE: u8 = 0x02;

/// Encodes a canonical model. Called once, by the builder.
pub(crate) fn encode(mir: &Mir) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(HEADER_LEN + mir.rules().len() * 16 + mir.destinations().len() * 24);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&(mir.rules().len() as u32).to_be_bytes());
    out.push(mir.network().code());
    out.push(mir.process_tree().code());
    out.push(mir.root_mode().code());
    out.push(0);
    out.extend_from_slice(&(mir.destinations().len() as u32).to_be_bytes());
    for rule in mir.rules() {
        out.push(RULE_KIND);
        out.push(rule.access.code());
        out.push(rule.target.root.code());
        out.push(rule.target.scope.code());
        out.push(rule.target.missing.code());
        out.extend_from_slice(&[0, 0, 0]);
        out.extend_from_slice(&(rule.target.path.len() as u32).to_be_bytes());
        out.extend_from_slice(rule.target.path.as_bytes());
    }
    for d in mir.destinations() {
        out.push(DESTINATION_KIND);
        out.push(PROTOCOL_TCP);
        out.extend_from_slice(&d.port.to_be_bytes());
        let mut flags = 0;
        if d.require_tls_sni {
            flags |= FLAG_REQUIRE_TLS_SNI;
        }
        if d.allow_private_addresses {
            flags |= FLAG_ALLOW_PRIVATE;
        }
        out.push(flags);
        out.push(0);
        out.extend_from_slice(&(d.host.len() as u16).to_be_bytes());
        out.extend_from_slice(d.host.as_bytes());
    }
    out
}
