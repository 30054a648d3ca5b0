//! MIR v3 canonical bytes: decoding that accepts only canonical input (the
//! encoder is `encode.rs`, below the builder this decoder uses).

use crate::builder::MirBuilder;
use crate::error::{PolicyError, Result};
use crate::model::{
    Access, Mir, Missing, NetworkMode, ProcessTree, RootKind, RootMode, Scope, MAX_DESTINATIONS,
    MAX_PATH_LEN, MAX_RULES,
};

use crate::encode::{
    DESTINATION_KIND, FLAG_ALLOW_PRIVATE, FLAG_REQUIRE_TLS_SNI, PROTOCOL_TCP, RULE_KIND,
};
pub use crate::encode::{HEADER_LEN, MAGIC, MAX_MIR_LEN, VERSION};

/// A bounds-checked reader that names the byte offset of every failure.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: impl std::fmt::Display) -> Result<&'a [u8]> {
        if self.bytes.len() - self.pos < n {
            return Err(PolicyError::Format(format!(
                "truncated at byte offset {}: {what} needs {n} bytes, {} remain",
                self.pos,
                self.bytes.len() - self.pos
            )));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self, what: impl std::fmt::Display) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: impl std::fmt::Display) -> Result<u16> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: impl std::fmt::Display) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// Names a record field in an error; formatted only when an error is made.
struct RecordField(&'static str, usize, &'static str);

impl std::fmt::Display for RecordField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} record {} {}", self.0, self.1, self.2)
    }
}

fn coded<T>(value: Option<T>, what: impl std::fmt::Display, byte: u8, offset: usize) -> Result<T> {
    value.ok_or_else(|| {
        PolicyError::Format(format!(
            "{what} has invalid value {byte} at byte offset {offset}"
        ))
    })
}

/// Decodes MIR v3 bytes that crossed a trust boundary. The model is rebuilt
/// through the builder and re-encoded; only byte-identical input is accepted.
/// Structural damage (size, header, record values, truncation, trailing bytes)
/// is a format error; a readable document that re-encodes differently is
/// non-canonical (spec section 2).
pub fn decode(bytes: &[u8]) -> Result<Mir> {
    if bytes.len() > MAX_MIR_LEN {
        return Err(PolicyError::Format(format!(
            "MIR of {} bytes; at most {MAX_MIR_LEN} are allowed",
            bytes.len()
        )));
    }
    let mut r = Reader { bytes, pos: 0 };
    if r.take(4, "magic")? != MAGIC {
        return Err(PolicyError::Format(
            "bad magic at byte offset 0: expected \"MMIR\"".into(),
        ));
    }
    let version = r.u16("version")?;
    if version != VERSION {
        return Err(PolicyError::Format(format!(
            "unsupported version {version} at byte offset 4: expected 3"
        )));
    }
    let flags = r.u16("flags")?;
    if flags != 0 {
        return Err(PolicyError::Format(format!(
            "header flags {flags:#06x} at byte offset 6 must be 0"
        )));
    }
    let rule_count = r.u32("filesystem record count")? as usize;
    if rule_count > MAX_RULES {
        return Err(PolicyError::Format(format!(
            "filesystem record count {rule_count} at byte offset 8 exceeds {MAX_RULES}"
        )));
    }
    let b = r.u8("network mode")?;
    let network = coded(NetworkMode::from_code(b), "network mode", b, 12)?;
    let b = r.u8("process tree")?;
    let process_tree = coded(ProcessTree::from_code(b), "process tree", b, 13)?;
    let b = r.u8("root mode")?;
    let root_mode = coded(RootMode::from_code(b), "root mode", b, 14)?;
    if r.u8("reserved")? != 0 {
        return Err(PolicyError::Format(
            "reserved header byte at offset 15 must be 0".into(),
        ));
    }
    let destination_count = r.u32("destination count")? as usize;
    if destination_count > MAX_DESTINATIONS {
        return Err(PolicyError::Format(format!(
            "destination count {destination_count} at byte offset 16 exceeds {MAX_DESTINATIONS}"
        )));
    }
    if (network == NetworkMode::Mediated) != (destination_count > 0) {
        return Err(PolicyError::Format(format!(
            "destination count {destination_count} at byte offset 16 does not fit network mode {network}: \
             mediated needs at least one, other modes none"
        )));
    }

    let mut builder = MirBuilder::new();
    builder
        .set_network(network)
        .set_process_tree(process_tree)
        .set_root_mode(root_mode);
    for index in 0..rule_count {
        let start = r.pos;
        let what = |field: &'static str| RecordField("filesystem", index, field);
        let kind = r.u8(what("kind"))?;
        if kind != RULE_KIND {
            return Err(PolicyError::Format(format!(
                "filesystem record {index} at byte offset {start} has kind {kind}, expected 1"
            )));
        }
        let b = r.u8(what("access"))?;
        let access = coded(Access::from_code(b), what("access"), b, start + 1)?;
        let b = r.u8(what("root"))?;
        let root = coded(RootKind::from_code(b), what("root"), b, start + 2)?;
        let b = r.u8(what("scope"))?;
        let scope = coded(Scope::from_code(b), what("scope"), b, start + 3)?;
        let b = r.u8(what("missing"))?;
        let missing = coded(Missing::from_code(b), what("missing"), b, start + 4)?;
        if r.take(3, what("padding"))? != [0, 0, 0] {
            return Err(PolicyError::Format(format!(
                "filesystem record {index} padding at byte offset {} must be zero",
                start + 5
            )));
        }
        let len = r.u32(what("path length"))? as usize;
        if len > MAX_PATH_LEN {
            return Err(PolicyError::Format(format!(
                "filesystem record {index} path length {len} at byte offset {} exceeds {MAX_PATH_LEN}",
                start + 8
            )));
        }
        let path = r.take(len, what("path"))?;
        let path = std::str::from_utf8(path).map_err(|_| {
            PolicyError::Format(format!(
                "filesystem record {index} path at byte offset {} is not UTF-8",
                start + 12
            ))
        })?;
        builder
            .add_rule(access, root, path, scope, missing)
            .map_err(|e| {
                PolicyError::Format(format!(
                    "filesystem record {index} at byte offset {start}: {}",
                    e.detail()
                ))
            })?;
    }
    for index in 0..destination_count {
        let start = r.pos;
        let what = |field: &'static str| RecordField("destination", index, field);
        let kind = r.u8(what("kind"))?;
        if kind != DESTINATION_KIND {
            return Err(PolicyError::Format(format!(
                "destination record {index} at byte offset {start} has kind {kind}, expected 2"
            )));
        }
        let protocol = r.u8(what("protocol"))?;
        if protocol != PROTOCOL_TCP {
            return Err(PolicyError::Format(format!(
                "destination record {index} protocol {protocol} at byte offset {} must be 1 (tcp)",
                start + 1
            )));
        }
        let port = r.u16(what("port"))?;
        if port == 0 {
            return Err(PolicyError::Format(format!(
                "destination record {index} port at byte offset {} must be at least 1",
                start + 2
            )));
        }
        let flags = r.u8(what("flags"))?;
        if flags & !(FLAG_REQUIRE_TLS_SNI | FLAG_ALLOW_PRIVATE) != 0 {
            return Err(PolicyError::Format(format!(
                "destination record {index} flags {flags:#04x} at byte offset {} set unknown bits",
                start + 4
            )));
        }
        if r.u8(what("padding"))? != 0 {
            return Err(PolicyError::Format(format!(
                "destination record {index} padding at byte offset {} must be zero",
                start + 5
            )));
        }
        let len = usize::from(r.u16(what("host length"))?);
        if !(1..=253).contains(&len) {
            return Err(PolicyError::Format(format!(
                "destination record {index} host length {len} at byte offset {} must be 1..253",
                start + 6
            )));
        }
        let host = r.take(len, what("host"))?;
        let host = std::str::from_utf8(host).map_err(|_| {
            PolicyError::Format(format!(
                "destination record {index} host at byte offset {} is not UTF-8",
                start + 8
            ))
        })?;
        builder
            .add_destination(
                host,
                port,
                flags & FLAG_REQUIRE_TLS_SNI != 0,
                flags & FLAG_ALLOW_PRIVATE != 0,
            )
            .map_err(|e| {
                PolicyError::Format(format!(
                    "destination record {index} at byte offset {start}: {}",
                    e.detail()
                ))
            })?;
    }
    if r.pos != bytes.len() {
        return Err(PolicyError::Format(format!(
            "{} trailing bytes after the last record at byte offset {}",
            bytes.len() - r.pos,
            r.pos
        )));
    }
    let mir = builder.build()?;
    if mir.bytes() != bytes {
        let offset = mir
            .bytes()
            .iter()
            .zip(bytes)
            .position(|(a, b)| a != b)
            .unwrap_or(mir.bytes().len().min(bytes.len()));
        return Err(PolicyError::NonCanonical(format!(
            "the document re-encodes differently from byte offset {offset} \
             (records must be normalized, de-duplicated, merged and sorted; hosts lowercase)"
        )));
    }
    Ok(mir)
}

impl Mir {
    /// See [`decode`].
    pub fn decode(bytes: &[u8]) -> Result<Mir> {
        decode(bytes)
    }
}
