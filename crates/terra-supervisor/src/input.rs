//! Reading the inputs terra reads for its caller (policy files): at most the
//! limit plus one byte, whatever the file is. Plain `std`, so it serves every
//! host; the outputs, which need descriptor-relative calls, are in `files`.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// Why an input was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// It could not be opened or read (the message names the path).
    Io(String),
    /// It holds more than the limit (the message names the path and the limit).
    TooLarge(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(m) | ReadError::TooLarge(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ReadError {}

/// Reads `path` when it holds at most `limit` bytes. A regular file's length
/// is checked first; every read stops after `limit + 1` bytes, so an endless
/// source (`/dev/zero`, a FIFO that is fed forever) costs at most that much
/// memory before it is refused. A directory is refused.
pub fn read_capped(path: &Path, limit: usize) -> Result<Vec<u8>, ReadError> {
    let io_err =
        |what: &str, e: io::Error| ReadError::Io(format!("cannot {what} {}: {e}", path.display()));
    let too_large = |len: String| {
        ReadError::TooLarge(format!(
            "{} is {len} bytes; at most {limit} are read",
            path.display()
        ))
    };
    let file = File::open(path).map_err(|e| io_err("open", e))?;
    let meta = file.metadata().map_err(|e| io_err("stat", e))?;
    if meta.is_dir() {
        return Err(ReadError::Io(format!("{} is a directory", path.display())));
    }
    if meta.is_file() && meta.len() > limit as u64 {
        return Err(too_large(meta.len().to_string()));
    }
    let start = if meta.is_file() {
        meta.len() as usize
    } else {
        0
    };
    let mut bytes = Vec::with_capacity(start.min(limit) + 1);
    file.take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_err("read", e))?;
    if bytes.len() > limit {
        return Err(too_large(format!("more than {limit}")));
    }
    Ok(bytes)
}
