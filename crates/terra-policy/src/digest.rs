//! Decision and artifact digests: lowercase hex SHA-256, no prefix.

use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        out.push(char::from(b"0123456789abcdef"[usize::from(b & 0xf)]));
    }
    out
}

/// The artifact digest of arbitrary bytes (for example a source file).
pub fn artifact_digest(bytes: &[u8]) -> String {
    sha256_hex(bytes)
}
