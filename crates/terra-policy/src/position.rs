//! Line and column for the byte offsets a source error names: every
//! `byte offset N` in a message about a JSON source becomes `byte offset N,
//! line L, column C` (1-based; the column counts characters, as editors do).

use crate::error::PolicyError;

const MARK: &str = "byte offset ";

/// The 1-based line and character column of byte `offset` in `bytes`
/// (None past the end; an offset inside a multi-byte character counts as
/// that character).
pub fn line_column(bytes: &[u8], offset: usize) -> Option<(usize, usize)> {
    if offset > bytes.len() {
        return None;
    }
    let before = &bytes[..offset];
    let line_start = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    // Characters: every byte that does not continue a UTF-8 sequence.
    let column = before[line_start..]
        .iter()
        .filter(|b| (**b & 0xC0) != 0x80)
        .count()
        + 1;
    Some((line, column))
}

/// `e` with line and column after every byte offset it names in `source`.
pub fn annotate(e: PolicyError, source: &[u8]) -> PolicyError {
    e.map_detail(|m| annotate_text(m, source))
}

fn annotate_text(message: &str, source: &[u8]) -> String {
    let mut out = String::with_capacity(message.len() + 24);
    let mut rest = message;
    while let Some(i) = rest.find(MARK) {
        let (head, tail) = rest.split_at(i + MARK.len());
        out.push_str(head);
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        let (num, after) = tail.split_at(digits);
        out.push_str(num);
        if let Some((line, column)) = num.parse().ok().and_then(|n| line_column(source, n)) {
            out.push_str(&format!(", line {line}, column {column}"));
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The first `line L, column C` a message names.
pub fn first_line_column(message: &str) -> Option<(u64, u64)> {
    let i = message.find(", line ")?;
    let rest = &message[i + ", line ".len()..];
    let (line, rest) = rest.split_once(", column ")?;
    let col: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((line.parse().ok()?, col.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns() {
        let src = "{\n  \"a\": 1,\n  \"é\": x\n}".as_bytes();
        assert_eq!(line_column(src, 0), Some((1, 1)));
        assert_eq!(line_column(src, 2), Some((2, 1)));
        assert_eq!(line_column(src, 4), Some((2, 3)));
        // After the two-byte é, the column counts one character.
        let x = src.iter().position(|b| *b == b'x').unwrap();
        assert_eq!(line_column(src, x), Some((3, 8)));
        assert_eq!(line_column(src, src.len() + 1), None);
    }

    #[test]
    fn messages_gain_line_and_column() {
        let src = b"{\n  \"formatVersion\": 2\n}";
        let e = PolicyError::Format("formatVersion (byte offset 20): expected 3".into());
        let e = annotate(e, src);
        assert_eq!(
            e.detail(),
            "formatVersion (byte offset 20, line 2, column 19): expected 3"
        );
        assert_eq!(first_line_column(e.detail()), Some((2, 19)));
        // Two offsets, one past the end (left as it is).
        let e = annotate(
            PolicyError::Format("at byte offset 0 and byte offset 999".into()),
            src,
        );
        assert_eq!(
            e.detail(),
            "at byte offset 0, line 1, column 1 and byte offset 999"
        );
        assert_eq!(first_line_column("no position"), None);
    }
}
