//! The console relay's filter.
//!
//! A worker is never attached to a console: its standard input is NUL and
//! its output goes through pipes the launcher reads and writes to its own
//! standard output and error. On the way every control character
//! (Unicode's Cc: C0, DEL and C1) is replaced, so output cannot drive the
//! user's terminal: no escape sequence (colours, cursor moves, title and
//! clipboard sequences, the answer-back and report requests that make a
//! terminal type into the shell) survives.
//!
//! - TAB and LF pass; CR passes only as part of CR LF (a lone CR could
//!   overwrite a line to hide what was printed).
//! - Other C0 characters and DEL become caret notation: ESC is `^[`,
//!   BEL `^G`, a lone CR `^M`, DEL `^?`.
//! - C1 characters (U+0080 to U+009F, which some terminals read as ESC
//!   sequences, CSI being U+009B) become U+FFFD.
//! - Bytes that are not UTF-8 become U+FFFD (one per maximal invalid
//!   sequence, as `String::from_utf8_lossy` does); valid UTF-8 passes
//!   unchanged, also when a character is split across two reads.
//!
//! The output is always valid UTF-8. The filter holds at most four bytes
//! between reads (an incomplete character and a CR that may precede LF).

const REPLACEMENT: &str = "\u{FFFD}";

/// A streaming filter for one output stream.
#[derive(Debug, Default)]
pub struct Relay {
    pending: Vec<u8>,
}

impl Relay {
    pub fn new() -> Relay {
        Relay::default()
    }

    /// Filters the next bytes read; may hold back up to four bytes.
    pub fn push(&mut self, input: &[u8]) -> Vec<u8> {
        self.run(input, false)
    }

    /// Flushes what was held back at the end of the stream.
    pub fn finish(mut self) -> Vec<u8> {
        self.run(&[], true)
    }

    fn run(&mut self, input: &[u8], last: bool) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.pending);
        buf.extend_from_slice(input);
        let hold_cr = !last && buf.last() == Some(&b'\r');
        if hold_cr {
            buf.pop();
        }
        let mut out = String::with_capacity(buf.len());
        let mut rest = &buf[..];
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    text(s, &mut out);
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    // valid_up_to marks a valid prefix: this cannot fail.
                    text(std::str::from_utf8(good).unwrap_or_default(), &mut out);
                    match e.error_len() {
                        Some(n) => {
                            out.push_str(REPLACEMENT);
                            rest = &bad[n..];
                        }
                        None if last => {
                            out.push_str(REPLACEMENT);
                            break;
                        }
                        None => {
                            self.pending.extend_from_slice(bad);
                            break;
                        }
                    }
                }
            }
        }
        if hold_cr {
            self.pending.push(b'\r');
        }
        out.into_bytes()
    }
}

/// Filters a whole stream at once.
pub fn filter(input: &[u8]) -> Vec<u8> {
    let mut r = Relay::new();
    let mut out = r.push(input);
    out.extend(r.finish());
    out
}

fn text(s: &str, out: &mut String) {
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\t' | '\n' => out.push(c),
            '\r' if chars.peek() == Some(&'\n') => {
                chars.next();
                out.push_str("\r\n");
            }
            '\u{0}'..='\u{1f}' => {
                out.push('^');
                out.push(char::from(c as u8 + 0x40));
            }
            '\u{7f}' => out.push_str("^?"),
            '\u{80}'..='\u{9f}' => out.push_str(REPLACEMENT),
            _ => out.push(c),
        }
    }
}
