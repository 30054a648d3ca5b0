//! The strict JSON source v3 parser (spec section 1).
//!
//! Hand-written on purpose: a general JSON library accepts duplicate keys, `null`,
//! any number form, a BOM and other whitespace, and decodes lone surrogates
//! leniently. This parser refuses every one of those, then walks the document
//! against the source schema and feeds the decision to [`MirBuilder`], which
//! normalizes, merges, sorts and checks the limits after de-duplication.
//!
//! Error classes: size and count limits (input length, nesting depth, path
//! length, rules and destinations after de-duplication) -> limit; syntax, keys,
//! types, values and paths -> format; an invalid host or a TLS-SNI demand on an
//! IPv4 literal -> argument. Syntax errors name the byte offset; schema errors
//! name the key path (for example `filesystem.rules[3].path.relative`) and the
//! byte offset of the offending value.
//!
//! The first refusal in document order is the one reported: the reader stops
//! at the first syntax error and leaves it as the last value of every open
//! container, and the schema walk visits members in the order written, judging
//! each where it stands (see [`compile_source`]).

use std::borrow::Cow;
use std::fmt;

use crate::builder::MirBuilder;
use crate::error::{PolicyError, Result};
use crate::model::{
    Access, Mir, Missing, NetworkMode, ProcessTree, RootKind, RootMode, Scope, MAX_DESTINATIONS,
    MAX_RULES,
};

/// Largest source document, in bytes.
pub const MAX_SOURCE_LEN: usize = 1 << 20;
/// Deepest nesting of objects and arrays (the top-level object is depth 1).
pub const MAX_DEPTH: usize = 32;
/// The only `$schema` value accepted.
pub const SCHEMA_URL: &str = "https://schemas.maelys.dev/mir-source/v3/schema.json";

/// Compiles a JSON source v3 document into a canonical [`Mir`].
///
/// The first refusal in document order is the one reported: the document is
/// read up to its first syntax error (a malformed value, a duplicate key,
/// invalid UTF-8, nesting too deep...) and the schema is walked over what was
/// read, so a schema refusal that stands before the syntax error wins over it.
///
/// Messages name byte offsets only; [`crate::compile_source`] adds their
/// line and column.
pub fn compile_source(bytes: &[u8]) -> Result<Mir> {
    let (root, failure) = parse_document(bytes)?;
    let mir = lower(&root)?;
    // The walk meets the unreadable part wherever it is; a document that was
    // read whole but has more than whitespace after it fails here.
    match failure {
        Some(e) => Err(e),
        None => Ok(mir),
    }
}

// ---------------------------------------------------------------------------
// Syntax: a strict JSON reader that keeps byte offsets. Strings without
// escapes borrow from the input.

/// A parsed JSON value with the byte offset where it starts.
#[derive(Debug)]
struct Node<'a> {
    offset: usize,
    value: Value<'a>,
}

#[derive(Debug)]
enum Value<'a> {
    /// Members in document order; keys are unique.
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
    Array(Vec<Node<'a>>),
    String(Cow<'a, str>),
    /// The number exactly as written; it matched the JSON number grammar.
    Number(&'a str),
    Bool(bool),
    /// Where reading stopped: the first syntax error. It is the last value of
    /// every container that was being read, so the schema walk meets it after
    /// everything that stands before it.
    Broken(PolicyError),
}

impl Value<'_> {
    fn type_name(&self) -> &'static str {
        match self {
            Value::Object(_) => "an object",
            Value::Array(_) => "an array",
            Value::String(_) => "a string",
            Value::Number(_) => "a number",
            Value::Bool(_) => "a boolean",
            Value::Broken(_) => "a malformed value",
        }
    }
}

/// One step of the key path, used to name where a syntax-level refusal is.
enum Segment<'a> {
    Key(Cow<'a, str>),
    Index(usize),
}

fn render_path(segments: &[Segment<'_>]) -> String {
    let mut out = String::new();
    for s in segments {
        match s {
            Segment::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Segment::Index(i) => {
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
        }
    }
    if out.is_empty() {
        out.push_str("the top-level object");
    }
    out
}

struct Parser<'a> {
    bytes: &'a [u8],
    /// The longest valid UTF-8 prefix of the input; strings are sliced from it.
    text: &'a str,
    /// Where the input stops being valid UTF-8, if it does.
    bad_utf8: Option<usize>,
    pos: usize,
    depth: usize,
    path: Vec<Segment<'a>>,
    /// The first syntax error; reading stops there.
    failure: Option<PolicyError>,
}

/// Reads the document up to its first syntax error, which is returned beside
/// the partial tree (and is its last value). Size and BOM refusals come first.
fn parse_document(bytes: &[u8]) -> Result<(Node<'_>, Option<PolicyError>)> {
    if bytes.is_empty() {
        return Err(PolicyError::Limit(
            "the source is empty; it must hold 1 byte to 1 MiB".into(),
        ));
    }
    if bytes.len() > MAX_SOURCE_LEN {
        return Err(PolicyError::Limit(format!(
            "the source is {} bytes; at most {MAX_SOURCE_LEN} (1 MiB) are allowed",
            bytes.len()
        )));
    }
    if bytes.starts_with(&[0xEF, 0xBB, 0xBF]) {
        return Err(PolicyError::Format(
            "syntax error at byte offset 0: a byte order mark is not allowed".into(),
        ));
    }
    // Validate the input once: outside strings only ASCII is valid JSON
    // anyway, and strings are sliced from the valid prefix without checking
    // each one again. Reading fails where the prefix ends (in document order).
    let (text, bad_utf8) = match std::str::from_utf8(bytes) {
        Ok(text) => (text, None),
        Err(e) => {
            let valid = e.valid_up_to();
            let text = std::str::from_utf8(&bytes[..valid]).unwrap_or_default();
            (text, Some(valid))
        }
    };
    let mut p = Parser {
        bytes,
        text,
        bad_utf8,
        pos: 0,
        depth: 0,
        path: Vec::new(),
        failure: None,
    };
    p.skip_ws();
    let root = if p.peek() == Some(b'{') {
        p.value()
    } else {
        let e = p.syntax("the document must be a JSON object");
        p.broken(e)
    };
    if p.failure.is_none() {
        p.skip_ws();
        if p.pos != bytes.len() {
            let e = p.syntax("only whitespace may follow the top-level object");
            p.failure = Some(e);
        } else if let Some(offset) = p.bad_utf8 {
            // Unreachable (an invalid byte always stops the reading), kept so
            // that invalid UTF-8 can never pass.
            p.failure = Some(p.syntax_at(offset, "invalid UTF-8"));
        }
    }
    Ok((root, p.failure))
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn syntax(&self, why: &str) -> PolicyError {
        self.syntax_at(self.pos, why)
    }

    fn syntax_at(&self, offset: usize, why: &str) -> PolicyError {
        if self.bad_utf8 == Some(offset) {
            return PolicyError::Format(format!(
                "invalid UTF-8 at byte offset {offset} (byte 0x{:02x}): the source, strings included, \
                 must be valid shortest-form UTF-8",
                self.bytes[offset]
            ));
        }
        let found = match self.bytes.get(offset) {
            None => "end of input".to_string(),
            Some(&b) if (0x21..0x7f).contains(&b) => format!("'{}'", char::from(b)),
            Some(&b) => format!("byte 0x{b:02x}"),
        };
        PolicyError::Format(format!(
            "syntax error at byte offset {offset} (found {found}, in {}): {why}",
            render_path(&self.path)
        ))
    }

    fn skip_ws(&mut self) {
        let rest = &self.bytes[self.pos..];
        self.pos += rest
            .iter()
            .position(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
            .unwrap_or(rest.len());
    }

    fn expect_literal(&mut self, literal: &[u8]) -> Result<()> {
        if self.bytes[self.pos..].starts_with(literal) {
            self.pos += literal.len();
            Ok(())
        } else {
            Err(self.syntax("expected a JSON value"))
        }
    }

    /// Records the first syntax error and makes the value that stands for it.
    fn broken(&mut self, e: PolicyError) -> Node<'a> {
        let offset = self.pos;
        self.failure.get_or_insert_with(|| e.clone());
        Node {
            offset,
            value: Value::Broken(e),
        }
    }

    /// One value; after a syntax error inside it, the partial value (its last
    /// value broken) with `failure` set.
    fn value(&mut self) -> Node<'a> {
        let offset = self.pos;
        match self.value_inner() {
            Ok(value) => Node { offset, value },
            Err(e) => self.broken(e),
        }
    }

    fn value_inner(&mut self) -> Result<Value<'a>> {
        let offset = self.pos;
        let value = match self.peek() {
            Some(b'{') => self.object()?,
            Some(b'[') => self.array()?,
            Some(b'"') => Value::String(self.string()?),
            Some(b't') => {
                self.expect_literal(b"true")?;
                Value::Bool(true)
            }
            Some(b'f') => {
                self.expect_literal(b"false")?;
                Value::Bool(false)
            }
            Some(b'n') if self.bytes[self.pos..].starts_with(b"null") => {
                return Err(PolicyError::Format(format!(
                    "{} at byte offset {offset}: null is not allowed anywhere",
                    render_path(&self.path)
                )))
            }
            Some(b'-' | b'0'..=b'9') => Value::Number(self.number()?),
            _ => return Err(self.syntax("expected a JSON value")),
        };
        Ok(value)
    }

    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(PolicyError::Limit(format!(
                "nesting deeper than {MAX_DEPTH} levels at byte offset {} (in {})",
                self.pos,
                render_path(&self.path)
            )));
        }
        Ok(())
    }

    /// An object; after a syntax error, the members read so far and a broken
    /// last member (under an empty key) that carries the error.
    fn object(&mut self) -> Result<Value<'a>> {
        self.enter()?;
        self.pos += 1; // '{'
        let mut members: Vec<(Cow<'a, str>, Node<'a>)> = Vec::new();
        match self.members(&mut members) {
            Ok(()) => self.depth -= 1,
            Err(e) => {
                let node = self.broken(e);
                members.push((Cow::Borrowed(""), node));
            }
        }
        Ok(Value::Object(members))
    }

    /// Reads members up to the closing brace. A syntax error inside a member's
    /// value leaves that (partial) value as the last member and stops.
    fn members(&mut self, members: &mut Vec<(Cow<'a, str>, Node<'a>)>) -> Result<()> {
        // Large objects switch from a linear scan to a set for duplicate keys.
        let mut seen: Option<std::collections::HashSet<Cow<'a, str>>> = None;
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.syntax("expected a string key"));
            }
            let key_offset = self.pos;
            let key = self.string()?;
            let duplicate = match &mut seen {
                Some(set) => !set.insert(key.clone()),
                None => members.iter().any(|(k, _)| *k == key),
            };
            if duplicate {
                return Err(PolicyError::Format(format!(
                    "duplicate key \"{}\" in {} at byte offset {key_offset}",
                    shown(&key),
                    render_path(&self.path)
                )));
            }
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.syntax("expected ':' after a key"));
            }
            self.pos += 1;
            self.skip_ws();
            self.path.push(Segment::Key(key));
            let node = self.value();
            let key = match self.path.pop() {
                Some(Segment::Key(key)) => key,
                _ => unreachable!("the key pushed above"),
            };
            members.push((key, node));
            if self.failure.is_some() {
                return Ok(());
            }
            if members.len() == 16 {
                seen = Some(members.iter().map(|(k, _)| k.clone()).collect());
            }
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.syntax("expected ',' or '}' in an object")),
            }
        }
    }

    /// An array; after a syntax error, the items read so far and a broken
    /// last item that carries the error.
    fn array(&mut self) -> Result<Value<'a>> {
        self.enter()?;
        self.pos += 1; // '['
        let mut items = Vec::new();
        match self.items(&mut items) {
            Ok(()) => self.depth -= 1,
            Err(e) => {
                let node = self.broken(e);
                items.push(node);
            }
        }
        Ok(Value::Array(items))
    }

    fn items(&mut self, items: &mut Vec<Node<'a>>) -> Result<()> {
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.skip_ws();
            self.path.push(Segment::Index(items.len()));
            let node = self.value();
            self.path.pop();
            items.push(node);
            if self.failure.is_some() {
                return Ok(());
            }
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.syntax("expected ',' or ']' in an array")),
            }
        }
    }

    /// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, kept as written.
    fn number(&mut self) -> Result<&'a str> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if let Some(b'0'..=b'9') = self.peek() {
                    return Err(self.syntax_at(start, "numbers must not have leading zeros"));
                }
            }
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.syntax_at(start, "malformed number: expected a digit")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.syntax_at(start, "malformed number: expected a digit after '.'"));
            }
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(
                    self.syntax_at(start, "malformed number: expected a digit in the exponent")
                );
            }
            self.digits();
        }
        // The grammar admits only ASCII here, so this cannot fail.
        std::str::from_utf8(&self.bytes[start..self.pos])
            .map_err(|_| self.syntax_at(start, "malformed number"))
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    /// A run of string bytes; it ends before an ASCII byte, so it is a whole
    /// number of characters of the already validated text.
    fn utf8(&self, start: usize, end: usize) -> Result<&'a str> {
        let text: &'a str = self.text;
        text.get(start..end).ok_or_else(|| match self.bad_utf8 {
            // The run reaches past the valid prefix: name the first bad byte.
            Some(bad) if bad < end => self.syntax_at(bad, "invalid UTF-8"),
            _ => self.syntax_at(start, "strings must be valid UTF-8"),
        })
    }

    /// A JSON string: raw bytes must be valid UTF-8 and not control characters;
    /// escapes are decoded; lone surrogates and U+0000 are refused. A string
    /// without escapes borrows from the input.
    fn string(&mut self) -> Result<Cow<'a, str>> {
        self.pos += 1; // '"'
        let mut out: Option<String> = None;
        loop {
            // The longest run of plain bytes.
            let run_start = self.pos;
            let rest = &self.bytes[run_start..];
            self.pos += rest
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .unwrap_or(rest.len());
            let run = self.utf8(run_start, self.pos)?;
            match self.peek() {
                None => return Err(self.syntax("unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(match out {
                        None => Cow::Borrowed(run),
                        Some(mut s) => {
                            s.push_str(run);
                            Cow::Owned(s)
                        }
                    });
                }
                Some(b'\\') => {
                    let s = out.get_or_insert_with(String::new);
                    s.push_str(run);
                    let escape_offset = self.pos;
                    self.pos += 1;
                    let c = match self.peek() {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            self.pos += 1;
                            let c = self.unicode_escape(escape_offset)?;
                            out.get_or_insert_with(String::new).push(c);
                            continue;
                        }
                        _ => return Err(self.syntax_at(escape_offset, "invalid escape sequence")),
                    };
                    self.pos += 1;
                    out.get_or_insert_with(String::new).push(c);
                }
                Some(_) => {
                    return Err(self.syntax("control characters must be escaped inside strings"));
                }
            }
        }
    }

    fn hex4(&mut self, escape_offset: usize) -> Result<u32> {
        let Some(h) = self.bytes.get(self.pos..self.pos + 4) else {
            return Err(self.syntax_at(escape_offset, "\\u needs four hex digits"));
        };
        let mut v = 0u32;
        for &b in h {
            let d = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                b'A'..=b'F' => b - b'A' + 10,
                _ => return Err(self.syntax_at(escape_offset, "\\u needs four hex digits")),
            };
            v = v * 16 + u32::from(d);
        }
        self.pos += 4;
        Ok(v)
    }

    /// After `\u`: one code point, combining a surrogate pair.
    fn unicode_escape(&mut self, escape_offset: usize) -> Result<char> {
        let first = self.hex4(escape_offset)?;
        let code = match first {
            0 => return Err(self.syntax_at(escape_offset, "\\u0000 is not allowed")),
            0xD800..=0xDBFF => {
                if !self.bytes[self.pos..].starts_with(b"\\u") {
                    return Err(
                        self.syntax_at(escape_offset, "a lone high surrogate is not allowed")
                    );
                }
                let low_offset = self.pos;
                self.pos += 2;
                let low = self.hex4(low_offset)?;
                if !(0xDC00..=0xDFFF).contains(&low) {
                    return Err(self.syntax_at(
                        escape_offset,
                        "a high surrogate must be followed by a low surrogate",
                    ));
                }
                0x10000 + ((first - 0xD800) << 10) + (low - 0xDC00)
            }
            0xDC00..=0xDFFF => {
                return Err(self.syntax_at(escape_offset, "a lone low surrogate is not allowed"))
            }
            c => c,
        };
        // Every value left is a Unicode scalar value.
        char::from_u32(code).ok_or_else(|| self.syntax_at(escape_offset, "invalid code point"))
    }
}

// ---------------------------------------------------------------------------
// Schema: walk the document and feed the builder. Key paths are rendered only
// when a refusal names them.

/// Where a value sits in the document, e.g. `filesystem.rules[3].path`.
#[derive(Clone, Copy)]
enum Place<'p> {
    Top,
    Key(&'p Place<'p>, &'static str),
    Index(&'p Place<'p>, &'static str, usize),
}

impl fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Top => f.write_str("the top-level object"),
            Place::Key(Place::Top, k) => f.write_str(k),
            Place::Key(parent, k) => write!(f, "{parent}.{k}"),
            Place::Index(Place::Top, k, i) => write!(f, "{k}[{i}]"),
            Place::Index(parent, k, i) => write!(f, "{parent}.{k}[{i}]"),
        }
    }
}

fn at(place: &Place<'_>, node: &Node<'_>, why: impl fmt::Display) -> PolicyError {
    PolicyError::Format(format!("{place} (byte offset {}): {why}", node.offset))
}

fn limit_at(place: &Place<'_>, node: &Node<'_>, why: impl fmt::Display) -> PolicyError {
    PolicyError::Limit(format!("{place} (byte offset {}): {why}", node.offset))
}

/// Re-labels a builder refusal with the key path, keeping its class.
fn in_context(place: &Place<'_>, node: &Node<'_>, e: PolicyError) -> PolicyError {
    let m = format!("{place} (byte offset {}): {}", node.offset, e.detail());
    match e {
        PolicyError::Format(_) => PolicyError::Format(m),
        PolicyError::Limit(_) => PolicyError::Limit(m),
        PolicyError::Argument(_) => PolicyError::Argument(m),
        PolicyError::NonCanonical(_) => PolicyError::NonCanonical(m),
        PolicyError::Io(_) => PolicyError::Io(m),
        PolicyError::Unsupported(_) => PolicyError::Unsupported(m),
        PolicyError::Missing(_) => PolicyError::Missing(m),
        PolicyError::Conflict(_) => PolicyError::Conflict(m),
    }
}

/// The members of an object, walked in document order. Every member is judged
/// where it stands, so the first refusal in document order is the one made:
/// an unknown key or a bad value at its own offset, a missing required key or
/// a rule that needs the whole object (a path with no form key) after the
/// object's last member.
struct Object<'p, 'a> {
    place: Place<'p>,
    node: &'p Node<'a>,
    members: &'p [(Cow<'a, str>, Node<'a>)],
}

/// Refuses the value where reading stopped with the syntax error found there.
fn readable(node: &Node<'_>) -> Result<()> {
    match &node.value {
        Value::Broken(e) => Err(e.clone()),
        _ => Ok(()),
    }
}

impl<'p, 'a> Object<'p, 'a> {
    fn new(place: Place<'p>, node: &'p Node<'a>) -> Result<Self> {
        readable(node)?;
        let Value::Object(members) = &node.value else {
            return Err(at(
                &place,
                node,
                format!("expected an object, found {}", node.value.type_name()),
            ));
        };
        Ok(Object {
            place,
            node,
            members,
        })
    }

    /// The refusal of a member whose key is not in `allowed`.
    fn unknown(&self, key: &str, value: &Node<'_>, allowed: &[&str]) -> PolicyError {
        PolicyError::Format(format!(
            "unknown key \"{}\" in {} (byte offset {}); allowed keys: {}",
            shown(key),
            self.place,
            value.offset,
            allowed.join(", ")
        ))
    }

    /// A member looked up ahead of the walk, for a rule that ties two members.
    fn get(&self, key: &str) -> Option<&'p Node<'a>> {
        self.members.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// A required member, after the walk: `found` is what the walk saw.
    fn required<T>(&self, key: &str, found: Option<T>) -> Result<T> {
        found.ok_or_else(|| {
            PolicyError::Format(format!(
                "{} (byte offset {}): the required key \"{key}\" is missing",
                self.place, self.node.offset
            ))
        })
    }

    fn child(&self, key: &'static str) -> Place<'_> {
        Place::Key(&self.place, key)
    }

    fn string(&self, key: &'static str, node: &'p Node<'a>) -> Result<&'p str> {
        match &node.value {
            Value::String(s) => Ok(s),
            other => Err(at(
                &self.child(key),
                node,
                format!("expected a string, found {}", other.type_name()),
            )),
        }
    }

    fn array(&self, key: &'static str, node: &'p Node<'a>) -> Result<&'p [Node<'a>]> {
        match &node.value {
            Value::Array(items) => Ok(items),
            other => Err(at(
                &self.child(key),
                node,
                format!("expected an array, found {}", other.type_name()),
            )),
        }
    }

    /// The limit on what an array made, counted after de-duplication (so known
    /// once the whole array is read, whatever the order of its items).
    fn at_most(
        &self,
        key: &'static str,
        node: &Node<'_>,
        (count, max): (usize, usize),
        what: &str,
    ) -> Result<()> {
        if count > max {
            return Err(limit_at(
                &self.child(key),
                node,
                format!("{count} {what} after de-duplication; at most {max} are allowed"),
            ));
        }
        Ok(())
    }

    fn boolean(&self, key: &'static str, node: &Node<'_>) -> Result<bool> {
        match &node.value {
            Value::Bool(b) => Ok(*b),
            other => Err(at(
                &self.child(key),
                node,
                format!("expected true or false, found {}", other.type_name()),
            )),
        }
    }

    /// A string naming one value of an enum.
    fn choice<T>(
        &self,
        key: &'static str,
        node: &'p Node<'a>,
        parse: fn(&str) -> Option<T>,
        names: &[&str],
    ) -> Result<T> {
        let s = self.string(key, node)?;
        parse(s).ok_or_else(|| {
            at(
                &self.child(key),
                node,
                format!("\"{}\" is not one of {}", shown(s), quoted(names)),
            )
        })
    }
}

/// An input string as shown in a message: escaped, and cut after 64 characters
/// so a hostile document cannot make a refusal message huge.
fn shown(s: &str) -> String {
    let mut out: String = s.chars().take(64).flat_map(char::escape_debug).collect();
    if s.chars().nth(64).is_some() {
        out.push_str("...");
    }
    out
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

fn lower(root: &Node<'_>) -> Result<Mir> {
    const KEYS: [&str; 6] = [
        "$schema",
        "formatVersion",
        "filesystem",
        "network",
        "process",
        "root",
    ];
    let top = Object::new(Place::Top, root)?;
    let mut builder = MirBuilder::new();
    let mut seen = [false; KEYS.len()];
    for (key, node) in top.members {
        readable(node)?;
        let Some(i) = KEYS.iter().position(|k| k == key) else {
            return Err(top.unknown(key, node, &KEYS));
        };
        seen[i] = true;
        match KEYS[i] {
            "$schema" => {
                if top.string("$schema", node)? != SCHEMA_URL {
                    return Err(at(
                        &top.child("$schema"),
                        node,
                        format!("must be exactly \"{SCHEMA_URL}\" when present"),
                    ));
                }
            }
            "formatVersion" => {
                let found = match &node.value {
                    Value::Number("3") => None,
                    Value::Number(n) => Some(n.to_string()),
                    other => Some(other.type_name().to_string()),
                };
                if let Some(found) = found {
                    return Err(at(
                        &top.child("formatVersion"),
                        node,
                        format!("must be the bare integer 3, found {found}"),
                    ));
                }
            }
            "filesystem" => filesystem(&mut builder, top.child("filesystem"), node)?,
            "network" => network(&mut builder, top.child("network"), node)?,
            "process" => {
                let process = Object::new(top.child("process"), node)?;
                let mut tree = None;
                for (key, n) in process.members {
                    readable(n)?;
                    match key.as_ref() {
                        "treeConfinement" => {
                            let names = ["required", "disabled"];
                            tree = Some(process.choice(
                                "treeConfinement",
                                n,
                                ProcessTree::from_name,
                                &names,
                            )?);
                        }
                        _ => return Err(process.unknown(key, n, &["treeConfinement"])),
                    }
                }
                builder.set_process_tree(process.required("treeConfinement", tree)?);
            }
            _ => {
                let root_mode = Object::new(top.child("root"), node)?;
                let mut mode = None;
                for (key, n) in root_mode.members {
                    readable(n)?;
                    match key.as_ref() {
                        "mode" => {
                            let names = ["read-only", "ephemeral-write"];
                            mode =
                                Some(root_mode.choice("mode", n, RootMode::from_name, &names)?);
                        }
                        _ => return Err(root_mode.unknown(key, n, &["mode"])),
                    }
                }
                builder.set_root_mode(root_mode.required("mode", mode)?);
            }
        }
    }
    for (i, key) in KEYS.iter().enumerate().skip(1) {
        top.required(key, seen[i].then_some(()))?;
    }
    builder.build()
}

fn filesystem(builder: &mut MirBuilder, place: Place<'_>, node: &Node<'_>) -> Result<()> {
    let fs = Object::new(place, node)?;
    let (mut default, mut rules) = (None, None);
    for (key, n) in fs.members {
        readable(n)?;
        match key.as_ref() {
            "default" => {
                if fs.string("default", n)? != "deny" {
                    return Err(at(&fs.child("default"), n, "must be \"deny\""));
                }
                default = Some(());
            }
            "rules" => {
                let items = fs.array("rules", n)?;
                for (i, item) in items.iter().enumerate() {
                    rule(builder, Place::Index(&fs.place, "rules", i), item)?;
                }
                let count = (builder.rule_count(), MAX_RULES);
                fs.at_most("rules", n, count, "filesystem rules")?;
                rules = Some(());
            }
            _ => return Err(fs.unknown(key, n, &["default", "rules"])),
        }
    }
    fs.required("default", default)?;
    fs.required("rules", rules)
}

fn rule(builder: &mut MirBuilder, place: Place<'_>, node: &Node<'_>) -> Result<()> {
    const KEYS: [&str; 4] = ["access", "path", "scope", "missing"];
    let r = Object::new(place, node)?;
    let (mut access, mut path) = (None, None);
    let (mut scope, mut missing) = (Scope::Tree, Missing::Error);
    for (key, n) in r.members {
        readable(n)?;
        match key.as_ref() {
            "access" => {
                let names = ["read", "write", "deny", "deny-write"];
                access = Some(r.choice("access", n, Access::from_name, &names)?);
            }
            "scope" => scope = r.choice("scope", n, Scope::from_name, &["exact", "tree"])?,
            "missing" => {
                missing = r.choice("missing", n, Missing::from_name, &["error", "skip"])?
            }
            "path" => path = Some(rule_path(r.child("path"), n)?),
            _ => return Err(r.unknown(key, n, &KEYS)),
        }
    }
    let access = r.required("access", access)?;
    let (root, text) = r.required("path", path)?;
    // The path was checked where it stands; the builder cannot refuse it now.
    builder.add_rule(access, root, &text, scope, missing)?;
    Ok(())
}

/// A rule's path object: its form comes from the key it holds (`special`,
/// else `absolute`, else `root`); any other key is unknown where it stands.
/// The text is normalized here, so a bad path is refused at its own offset.
fn rule_path(place: Place<'_>, node: &Node<'_>) -> Result<(RootKind, String)> {
    let po = Object::new(place, node)?;
    let allowed: &[&str] = if po.get("special").is_some() {
        &["special"]
    } else if po.get("absolute").is_some() {
        &["absolute"]
    } else if po.get("root").is_some() {
        &["root", "relative"]
    } else {
        &["special", "root", "relative", "absolute"]
    };
    let (mut root, mut text) = (None, "");
    let checked = |key: &'static str, n: &Node<'_>, root: RootKind, s: &str| {
        crate::model::normalize_path(root, s)
            .map(drop)
            .map_err(|e| in_context(&po.child(key), n, e))
    };
    for (key, n) in po.members {
        readable(n)?;
        if !allowed.contains(&key.as_ref()) {
            return Err(po.unknown(key, n, allowed));
        }
        match key.as_ref() {
            "special" => {
                if po.string("special", n)? != "minimal-runtime" {
                    return Err(at(&po.child("special"), n, "must be \"minimal-runtime\""));
                }
                root = Some(RootKind::MinimalRuntime);
            }
            "absolute" => {
                let s = po.string("absolute", n)?;
                if !s.starts_with('/') {
                    return Err(at(
                        &po.child("absolute"),
                        n,
                        "an absolute path must start with '/'",
                    ));
                }
                checked("absolute", n, RootKind::Host, s)?;
                (root, text) = (Some(RootKind::Host), s);
            }
            "root" => {
                root = Some(match po.string("root", n)? {
                    "workspace" => RootKind::Workspace,
                    "temp" => RootKind::Temp,
                    other => {
                        return Err(at(
                            &po.child("root"),
                            n,
                            format!("\"{}\" is not one of \"workspace\", \"temp\"", shown(other)),
                        ))
                    }
                });
            }
            _ => {
                let s = po.string("relative", n)?;
                if s.starts_with('/') {
                    return Err(at(
                        &po.child("relative"),
                        n,
                        "a relative path must not start with '/'",
                    ));
                }
                // Workspace and temp paths follow the same rules.
                checked("relative", n, RootKind::Workspace, s)?;
                text = s;
            }
        }
    }
    match root {
        Some(root) => Ok((root, text.to_string())),
        None => Err(at(
            &po.place,
            node,
            "a path is {\"special\": \"minimal-runtime\"}, \
             {\"root\": \"workspace\"|\"temp\", \"relative\"?: ...} or {\"absolute\": \"/...\"}",
        )),
    }
}

fn network(builder: &mut MirBuilder, place: Place<'_>, node: &Node<'_>) -> Result<()> {
    let net = Object::new(place, node)?;
    // `allow` is judged against the mode wherever the two stand; an invalid
    // mode is refused at its own offset.
    let names = ["none", "direct", "mediated"];
    let mode_ahead = net.get("mode").and_then(|n| match &n.value {
        Value::String(s) => NetworkMode::from_name(s),
        _ => None,
    });
    let (mut mode, mut allow) = (None, None);
    for (key, n) in net.members {
        readable(n)?;
        match key.as_ref() {
            "mode" => mode = Some(net.choice("mode", n, NetworkMode::from_name, &names)?),
            "allow" => {
                if let Some(m @ (NetworkMode::None | NetworkMode::Direct)) = mode_ahead {
                    return Err(at(
                        &net.child("allow"),
                        n,
                        format!("\"allow\" is only allowed when mode is \"mediated\", not \"{m}\""),
                    ));
                }
                let items = net.array("allow", n)?;
                if items.is_empty() {
                    return Err(at(
                        &net.child("allow"),
                        n,
                        "must hold at least one destination",
                    ));
                }
                for (i, item) in items.iter().enumerate() {
                    destination(builder, Place::Index(&net.place, "allow", i), item)?;
                }
                let count = (builder.destination_count(), MAX_DESTINATIONS);
                net.at_most("allow", n, count, "destinations")?;
                allow = Some(());
            }
            _ => return Err(net.unknown(key, n, &["mode", "allow"])),
        }
    }
    let mode = net.required("mode", mode)?;
    if mode == NetworkMode::Mediated && allow.is_none() {
        return Err(at(
            &net.place,
            node,
            "mode \"mediated\" requires \"allow\" with 1 to 1024 destinations",
        ));
    }
    builder.set_network(mode);
    Ok(())
}

fn destination(builder: &mut MirBuilder, place: Place<'_>, node: &Node<'_>) -> Result<()> {
    const KEYS: [&str; 5] = [
        "protocol",
        "host",
        "port",
        "requireTlsSni",
        "allowPrivateAddresses",
    ];
    let d = Object::new(place, node)?;
    let (mut protocol, mut host, mut port) = (None, None, None);
    let (mut sni, mut private) = (false, false);
    for (key, n) in d.members {
        readable(n)?;
        match key.as_ref() {
            "protocol" => {
                if d.string("protocol", n)? != "tcp" {
                    return Err(at(&d.child("protocol"), n, "must be \"tcp\""));
                }
                protocol = Some(());
            }
            "host" => {
                let s = d.string("host", n)?;
                // The grammar is the host's own.
                if s.len() > crate::host::MAX_HOST_LEN {
                    return Err(PolicyError::Argument(format!(
                        "{} (byte offset {}): invalid host of {} bytes: longer than 253 bytes",
                        d.child("host"),
                        n.offset,
                        s.len()
                    )));
                }
                crate::host::classify_host(&s.to_ascii_lowercase())
                    .map_err(|e| in_context(&d.child("host"), n, e))?;
                host = Some(s);
            }
            "port" => {
                port = Some(match &n.value {
                    Value::Number(text) => parse_port(text).ok_or_else(|| {
                        at(
                            &d.child("port"),
                            n,
                            format!(
                                "must be a bare integer 1..65535 (no sign, fraction, exponent or leading zero), \
                                 found {text}"
                            ),
                        )
                    })?,
                    other => {
                        return Err(at(
                            &d.child("port"),
                            n,
                            format!("must be an integer 1..65535, found {}", other.type_name()),
                        ))
                    }
                })
            }
            "requireTlsSni" => {
                sni = d.boolean("requireTlsSni", n)?;
                // An IPv4 literal is refused only because TLS SNI is demanded:
                // this key is the one named, wherever the host stands.
                let literal = d.get("host").is_some_and(|h| match &h.value {
                    Value::String(s) => matches!(
                        crate::host::classify_host(&s.to_ascii_lowercase()),
                        Ok(crate::host::HostKind::Ipv4Literal)
                    ),
                    _ => false,
                });
                if sni && literal {
                    return Err(PolicyError::Argument(format!(
                        "{} (byte offset {}): an IPv4 literal host cannot require TLS SNI",
                        d.child("requireTlsSni"),
                        n.offset
                    )));
                }
            }
            "allowPrivateAddresses" => private = d.boolean("allowPrivateAddresses", n)?,
            _ => return Err(d.unknown(key, n, &KEYS)),
        }
    }
    d.required("protocol", protocol)?;
    let host = d.required("host", host)?;
    let port = d.required("port", port)?;
    builder
        .add_destination(host, port, sni, private)
        .map_err(|e| in_context(&d.place, node, e))?;
    Ok(())
}

/// `[1-9][0-9]*` within 1..=65535.
fn parse_port(text: &str) -> Option<u16> {
    let b = text.as_bytes();
    if b.is_empty() || b.len() > 5 || b[0] == b'0' || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    text.parse::<u16>().ok().filter(|&p| p >= 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorClass;

    const MINIMAL: &str = r#"{"formatVersion":3,"filesystem":{"default":"deny","rules":[]},"network":{"mode":"none"},"process":{"treeConfinement":"required"},"root":{"mode":"read-only"}}"#;

    /// A full document with `rules` and `network` substituted.
    fn doc(rules: &str, network: &str) -> String {
        format!(
            r#"{{"formatVersion":3,"filesystem":{{"default":"deny","rules":[{rules}]}},"network":{network},"process":{{"treeConfinement":"required"}},"root":{{"mode":"read-only"}}}}"#
        )
    }

    fn rule_doc(rule: &str) -> String {
        doc(rule, r#"{"mode":"none"}"#)
    }

    fn dest_doc(dest: &str) -> String {
        doc("", &format!(r#"{{"mode":"mediated","allow":[{dest}]}}"#))
    }

    fn refused(src: &str, class: ErrorClass, needle: &str) {
        refused_bytes(src.as_bytes(), class, needle);
    }

    fn refused_bytes(src: &[u8], class: ErrorClass, needle: &str) {
        match compile_source(src) {
            Ok(m) => panic!("accepted {:?}: {m:?}", String::from_utf8_lossy(src)),
            Err(e) => {
                assert_eq!(
                    e.class(),
                    class,
                    "{e} for {:?}",
                    String::from_utf8_lossy(src)
                );
                assert!(
                    e.detail().contains(needle),
                    "{e:?} should mention {needle:?}"
                );
            }
        }
    }

    /// The syntax error the reader stops at, whatever the schema says.
    fn read_failure(src: &str) -> PolicyError {
        parse_document(src.as_bytes())
            .map(|(_, failure)| failure)
            .unwrap_or_else(Some)
            .unwrap_or_else(|| panic!("{src} reads as JSON"))
    }

    fn ok(src: &str) -> Mir {
        compile_source(src.as_bytes()).unwrap_or_else(|e| panic!("{src}: {e}"))
    }

    fn single_path(src: &str) -> (RootKind, String) {
        let m = ok(src);
        assert_eq!(m.rules().len(), 1);
        (m.rules()[0].target.root, m.rules()[0].target.path.clone())
    }

    #[test]
    fn minimal_document_is_accepted() {
        let m = ok(MINIMAL);
        assert!(m.rules().is_empty());
        assert_eq!(m.network(), NetworkMode::None);
        assert_eq!(m.process_tree(), ProcessTree::Required);
        assert_eq!(m.root_mode(), RootMode::ReadOnly);
    }

    #[test]
    fn all_whitespace_kinds_and_key_order_are_accepted() {
        let src = " \t\r\n{ \"root\" :\t{\"mode\":\"ephemeral-write\"},\r\n\"process\":{\"treeConfinement\":\"disabled\"},\
                   \"network\":{\"mode\":\"direct\"},\"filesystem\":{\"rules\":[],\"default\":\"deny\"},\
                   \"formatVersion\":3 } \n\t\r ";
        let m = ok(src);
        assert_eq!(m.network(), NetworkMode::Direct);
        assert_eq!(m.process_tree(), ProcessTree::Disabled);
        assert_eq!(m.root_mode(), RootMode::EphemeralWrite);
    }

    #[test]
    fn refuses_empty_input_as_limit() {
        refused_bytes(b"", ErrorClass::Limit, "empty");
    }

    #[test]
    fn refuses_input_over_one_mebibyte_as_limit() {
        let mut src = MINIMAL.as_bytes().to_vec();
        src.resize(MAX_SOURCE_LEN + 1, b' ');
        refused_bytes(&src, ErrorClass::Limit, "1048577 bytes");
        // Exactly 1 MiB is fine.
        src.truncate(MAX_SOURCE_LEN);
        assert!(compile_source(&src).is_ok());
    }

    #[test]
    fn refuses_bom() {
        let mut src = vec![0xEF, 0xBB, 0xBF];
        src.extend_from_slice(MINIMAL.as_bytes());
        refused_bytes(&src, ErrorClass::Format, "byte order mark");
    }

    #[test]
    fn refuses_other_whitespace() {
        for ws in ["\u{0b}", "\u{0c}", "\u{a0}", "\u{2028}", "\u{3000}"] {
            refused(
                &format!("{ws}{MINIMAL}"),
                ErrorClass::Format,
                "byte offset 0",
            );
            refused(
                &format!("{MINIMAL}{ws}"),
                ErrorClass::Format,
                "only whitespace may follow",
            );
            let inner = MINIMAL.replacen(':', &format!(":{ws}"), 1);
            refused(&inner, ErrorClass::Format, "syntax error at byte offset 17");
        }
    }

    #[test]
    fn refuses_content_after_the_object() {
        refused(
            &format!("{MINIMAL}{{}}"),
            ErrorClass::Format,
            "only whitespace may follow",
        );
        refused(
            &format!("{MINIMAL} x"),
            ErrorClass::Format,
            "only whitespace may follow",
        );
        refused(
            &format!("{MINIMAL}\0"),
            ErrorClass::Format,
            "only whitespace may follow",
        );
    }

    #[test]
    fn refuses_non_object_top_level() {
        for src in ["[]", "3", "\"x\"", "true", "null", " ", "\n"] {
            refused(src, ErrorClass::Format, "must be a JSON object");
        }
    }

    #[test]
    fn refuses_truncation_at_every_length() {
        for len in 1..MINIMAL.len() {
            let e = compile_source(&MINIMAL.as_bytes()[..len]).unwrap_err();
            assert_eq!(e.class(), ErrorClass::Format, "{len}: {e}");
        }
    }

    /// Two refusals in one document: the one that stands first is reported,
    /// whichever it is, and swapping them swaps the answer.
    fn first_of_two(src: &str, class: ErrorClass, place: &str, marker: &str) {
        let e = compile_source(src.as_bytes()).expect_err(src);
        let offset = src
            .find(marker)
            .unwrap_or_else(|| panic!("{marker} not in {src}"));
        assert_eq!(e.class(), class, "{e} for {src}");
        assert!(
            e.detail().contains(place) && e.detail().contains(&format!("offset {offset}")),
            "{e} should name {place} at byte offset {offset} in {src}"
        );
    }

    #[test]
    fn the_first_refusal_in_document_order_is_reported() {
        // Top level: a bad root mode before a bad format version, and after.
        let src = r#"{"root":{"mode":"rw"},"formatVersion":4,"filesystem":{"default":"deny","rules":[]},"network":{"mode":"none"},"process":{"treeConfinement":"required"}}"#;
        first_of_two(src, ErrorClass::Format, "root.mode", r#""rw""#);
        let src = r#"{"formatVersion":4,"root":{"mode":"rw"},"filesystem":{"default":"deny","rules":[]},"network":{"mode":"none"},"process":{"treeConfinement":"required"}}"#;
        first_of_two(src, ErrorClass::Format, "formatVersion", "4");
        // A type error early, an unknown key late; and the other way round.
        let rule_pair = |a: &str, b: &str| {
            rule_doc(&format!(
                r#"{{{a},{b},"path":{{"special":"minimal-runtime"}}}}"#
            ))
        };
        first_of_two(
            &rule_pair(r#""access":1"#, r#""bogus":1"#),
            ErrorClass::Format,
            "filesystem.rules[0].access",
            r#"1,"bogus""#,
        );
        let src = rule_pair(r#""bogus":1"#, r#""access":1"#);
        let e = compile_source(src.as_bytes()).unwrap_err();
        assert!(e.detail().contains("unknown key \"bogus\""), "{e}");
        // Two bad enum values in one rule.
        first_of_two(
            &rule_pair(r#""scope":"deep""#, r#""access":"all""#),
            ErrorClass::Format,
            "filesystem.rules[0].scope",
            r#""deep""#,
        );
        first_of_two(
            &rule_pair(r#""access":"all""#, r#""scope":"deep""#),
            ErrorClass::Format,
            "filesystem.rules[0].access",
            r#""all""#,
        );
        // A bad path before a bad scope: the path is judged where it stands.
        let src = rule_doc(
            r#"{"access":"read","path":{"root":"workspace","relative":"a/../b"},"missing":"never"}"#,
        );
        first_of_two(
            &src,
            ErrorClass::Format,
            "filesystem.rules[0].path.relative",
            r#""a/../b""#,
        );
        let src = rule_doc(
            r#"{"access":"read","missing":"never","path":{"root":"workspace","relative":"a/../b"}}"#,
        );
        first_of_two(
            &src,
            ErrorClass::Format,
            "filesystem.rules[0].missing",
            r#""never""#,
        );
        // A member's refusal comes before the object's missing key.
        let src = rule_doc(r#"{"path":{"root":"nowhere"}}"#);
        first_of_two(
            &src,
            ErrorClass::Format,
            "filesystem.rules[0].path.root",
            r#""nowhere""#,
        );
        // An earlier rule before a later one.
        let src = rule_doc(
            r#"{"access":"x","path":{"special":"minimal-runtime"}},{"access":"read","path":{"absolute":"rel"}}"#,
        );
        first_of_two(
            &src,
            ErrorClass::Format,
            "filesystem.rules[0].access",
            r#""x""#,
        );
        // Destinations: port before host, host before port.
        let src = dest_doc(r#"{"port":0,"host":"-bad-","protocol":"tcp"}"#);
        first_of_two(
            &src,
            ErrorClass::Format,
            "network.allow[0].port",
            r#"0,"host""#,
        );
        let src = dest_doc(r#"{"host":"-bad-","port":0,"protocol":"tcp"}"#);
        first_of_two(
            &src,
            ErrorClass::Argument,
            "network.allow[0].host",
            r#""-bad-""#,
        );
        // TLS SNI on an IPv4 literal is named at requireTlsSni, where it stands.
        let src =
            dest_doc(r#"{"requireTlsSni":true,"port":0,"host":"192.0.2.1","protocol":"tcp"}"#);
        first_of_two(
            &src,
            ErrorClass::Argument,
            "network.allow[0].requireTlsSni",
            "true",
        );
        let src =
            dest_doc(r#"{"port":0,"requireTlsSni":true,"host":"192.0.2.1","protocol":"tcp"}"#);
        first_of_two(
            &src,
            ErrorClass::Format,
            "network.allow[0].port",
            r#"0,"requireTlsSni""#,
        );
        // The filesystem before the network, and the other way round.
        let bad_fs = r#""filesystem":{"default":"allow","rules":[]}"#;
        let bad_net = r#""network":{"mode":"everything"}"#;
        let tail = r#""process":{"treeConfinement":"required"},"root":{"mode":"read-only"}"#;
        let src = format!(r#"{{"formatVersion":3,{bad_fs},{bad_net},{tail}}}"#);
        first_of_two(&src, ErrorClass::Format, "filesystem.default", r#""allow""#);
        let src = format!(r#"{{"formatVersion":3,{bad_net},{bad_fs},{tail}}}"#);
        first_of_two(&src, ErrorClass::Format, "network.mode", r#""everything""#);
    }

    #[test]
    fn a_schema_refusal_before_a_syntax_error_is_reported_first() {
        // Unreadable after a bad value: the value is refused.
        let src = MINIMAL.replace(r#""formatVersion":3"#, r#""formatVersion":4"#) + " trailing";
        first_of_two(&src, ErrorClass::Format, "formatVersion", "4");
        let src = r#"{"formatVersion":3,"filesystem":{"default":"allow","rules":[}"#;
        first_of_two(src, ErrorClass::Format, "filesystem.default", r#""allow""#);
        let src = r#"{"formatVersion":3,"filesystem":{"default":"deny","rules":[}"#;
        let e = compile_source(src.as_bytes()).unwrap_err();
        let at = src.find("[}").unwrap() + 1;
        assert!(
            e.detail()
                .contains(&format!("syntax error at byte offset {at}")),
            "{e}"
        );
        // A syntax error before a schema refusal: the syntax error.
        let src = r#"{"formatVersion" 3,"root":{"mode":"rw"}}"#;
        let e = compile_source(src.as_bytes()).unwrap_err();
        assert!(e.detail().contains("syntax error at byte offset 17"), "{e}");
        // A duplicate key after a bad value, and before one.
        let src = MINIMAL.replace(
            r#""formatVersion":3"#,
            r#""formatVersion":4,"formatVersion":3"#,
        );
        first_of_two(&src, ErrorClass::Format, "formatVersion", "4");
        let src = MINIMAL.replace(r#""mode":"read-only""#, r#""mode":"read-only","mode":"rw""#);
        let e = compile_source(src.as_bytes()).unwrap_err();
        assert!(e.detail().contains("duplicate key \"mode\" in root"), "{e}");
    }

    #[test]
    fn invalid_utf8_is_reported_where_it_stands() {
        // A syntax error early, invalid UTF-8 late: the syntax error.
        let mut src = br#"{"formatVersion" 3,"root":{"mode":""#.to_vec();
        src.extend_from_slice(&[0xff]);
        src.extend_from_slice(br#""}}"#);
        let e = compile_source(&src).unwrap_err();
        assert!(e.detail().contains("syntax error at byte offset 17"), "{e}");
        // A schema refusal early, invalid UTF-8 late: the refusal.
        let mut src = br#"{"formatVersion":4,"root":{"mode":""#.to_vec();
        src.extend_from_slice(&[0xff]);
        src.extend_from_slice(br#""}}"#);
        let e = compile_source(&src).unwrap_err();
        assert!(e.detail().contains("formatVersion (byte offset 17)"), "{e}");
        // Invalid UTF-8 first: named at its own offset.
        let mut src = br#"{"formatVersion":3,"root":{"mode":"a"#.to_vec();
        src.extend_from_slice(&[0xc3]);
        src.extend_from_slice(br#""},"x":1 2}"#);
        let e = compile_source(&src).unwrap_err();
        assert!(
            e.detail()
                .contains("invalid UTF-8 at byte offset 36 (byte 0xc3)"),
            "{e}"
        );
    }

    #[test]
    fn the_rule_limit_is_reported_where_the_rules_end() {
        let rules: Vec<String> = (0..4097)
            .map(|i| format!(r#"{{"access":"read","path":{{"absolute":"/r{i}"}}}}"#))
            .collect();
        let fs = format!(
            r#""filesystem":{{"default":"deny","rules":[{}]}}"#,
            rules.join(",")
        );
        let bad_net = r#""network":{"mode":"everything"}"#;
        let tail = r#""process":{"treeConfinement":"required"},"root":{"mode":"read-only"}"#;
        let src = format!(r#"{{"formatVersion":3,{fs},{bad_net},{tail}}}"#);
        first_of_two(&src, ErrorClass::Limit, "filesystem.rules", r#"[{"access""#);
        let src = format!(r#"{{"formatVersion":3,{bad_net},{fs},{tail}}}"#);
        first_of_two(&src, ErrorClass::Format, "network.mode", r#""everything""#);
        // A bad rule after the 4,097th is still inside the array: it comes first.
        let mut more = rules.clone();
        more.push(r#"{"access":"x","path":{"absolute":"/z"}}"#.into());
        let fs = format!(
            r#""filesystem":{{"default":"deny","rules":[{}]}}"#,
            more.join(",")
        );
        let src = format!(r#"{{"formatVersion":3,{fs},{tail},"network":{{"mode":"none"}}}}"#);
        first_of_two(
            &src,
            ErrorClass::Format,
            "filesystem.rules[4097].access",
            r#""x""#,
        );
    }

    #[test]
    fn refuses_nesting_deeper_than_32() {
        // The reader reads depth 32 and stops at depth 33 (a limit).
        let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let src = MINIMAL.replacen('{', &format!("{{\"x\":{},", nest(31)), 1);
        assert!(parse_document(src.as_bytes()).unwrap().1.is_none());
        refused(&src, ErrorClass::Format, "unknown key \"x\"");
        let src = MINIMAL.replacen('{', &format!("{{\"x\":{},", nest(32)), 1);
        let e = read_failure(&src);
        assert_eq!(e.class(), ErrorClass::Limit, "{e}");
        assert!(e.detail().contains("nesting deeper than 32"), "{e}");
        // No schema position holds a container that deep, so the misplaced
        // container is refused first, where it starts (document order).
        refused(&src, ErrorClass::Format, "unknown key \"x\"");
        let deep_rules = MINIMAL.replace(r#""rules":[]"#, &format!(r#""rules":[{}]"#, nest(40)));
        let at = deep_rules.find("[[").unwrap() + 1;
        refused(
            &deep_rules,
            ErrorClass::Format,
            &format!("filesystem.rules[0] (byte offset {at}): expected an object, found an array"),
        );
        let objects = format!("{}1{}", "{\"a\":".repeat(40), "}".repeat(40));
        assert_eq!(read_failure(&objects).class(), ErrorClass::Limit);
        refused(&objects, ErrorClass::Format, "unknown key \"a\"");
        // Nesting far deeper than the stack could take is read no further.
        let huge = MINIMAL.replace(
            r#""rules":[]"#,
            &format!(r#""rules":{}"#, "[".repeat(500_000)),
        );
        assert_eq!(read_failure(&huge).class(), ErrorClass::Limit);
        refused(
            &huge,
            ErrorClass::Format,
            "expected an object, found an array",
        );
    }

    #[test]
    fn refuses_invalid_utf8() {
        for bad in [
            &[0xff][..],
            &[0xc0, 0xaf],             // overlong '/'
            &[0xe0, 0x80, 0xaf],       // overlong
            &[0xed, 0xa0, 0x80],       // encoded surrogate
            &[0xf4, 0x90, 0x80, 0x80], // above U+10FFFF
            &[0xc3],                   // truncated sequence
            &[0x80],                   // lone continuation
        ] {
            let mut src = br#"{"formatVersion":3,"filesystem":{"default":"deny","rules":[{"access":"read","path":{"root":"workspace","relative":"a"#.to_vec();
            src.extend_from_slice(bad);
            src.extend_from_slice(br#""}}]},"network":{"mode":"none"},"process":{"treeConfinement":"required"},"root":{"mode":"read-only"}}"#);
            refused_bytes(&src, ErrorClass::Format, "UTF-8");
        }
        // Invalid UTF-8 outside strings is refused the same way.
        let mut src = MINIMAL.as_bytes().to_vec();
        src.insert(1, 0xc3);
        refused_bytes(
            &src,
            ErrorClass::Format,
            "invalid UTF-8 at byte offset 1 (byte 0xc3)",
        );
        let mut src = MINIMAL.as_bytes().to_vec();
        src.insert(1, 0xff);
        refused_bytes(
            &src,
            ErrorClass::Format,
            "invalid UTF-8 at byte offset 1 (byte 0xff)",
        );
    }

    #[test]
    fn accepts_multibyte_utf8_in_paths() {
        let src =
            rule_doc(r#"{"access":"read","path":{"root":"workspace","relative":"dé/文/😀"}}"#);
        assert_eq!(
            single_path(&src),
            (RootKind::Workspace, "dé/文/😀".to_string())
        );
    }

    #[test]
    fn decodes_escapes() {
        let src = rule_doc(
            r#"{"access":"read","path":{"root":"workspace","relative":"q\"b\\s\/n\nt\tr\rb\bf\fu\u00e9\u6587\ud83d\ude00\u0041\u00E9"}}"#,
        );
        assert_eq!(
            single_path(&src).1,
            "q\"b\\s/n\nt\tr\rb\u{8}f\u{c}u\u{e9}\u{6587}\u{1f600}A\u{e9}"
        );
    }

    #[test]
    fn escaped_slash_counts_as_a_separator() {
        let src = rule_doc(r#"{"access":"read","path":{"absolute":"\/usr\/\/lib\/"}}"#);
        assert_eq!(single_path(&src), (RootKind::Host, "/usr/lib".to_string()));
    }

    #[test]
    fn refuses_nul_escape() {
        let src =
            rule_doc(r#"{"access":"read","path":{"root":"workspace","relative":"a\u0000b"}}"#);
        refused(&src, ErrorClass::Format, "\\u0000 is not allowed");
    }

    #[test]
    fn refuses_lone_surrogates() {
        for (esc, why) in [
            (r"\ud800", "lone high surrogate"),
            (r"\ud800x", "lone high surrogate"),
            (r"\udbff\u0041", "followed by a low surrogate"),
            (r"\ud800\ud800", "followed by a low surrogate"),
            (r"\udc00", "lone low surrogate"),
            (r"\udfff\ud800", "lone low surrogate"),
        ] {
            let src = rule_doc(&format!(
                r#"{{"access":"read","path":{{"root":"workspace","relative":"{esc}"}}}}"#
            ));
            refused(&src, ErrorClass::Format, why);
        }
    }

    #[test]
    fn refuses_bad_escapes() {
        for esc in [r"\x41", r"\u12", r"\u12G4", r"\U0041", r"\'", r"\ ", r"\0"] {
            let src = rule_doc(&format!(
                r#"{{"access":"read","path":{{"root":"workspace","relative":"{esc}"}}}}"#
            ));
            let e = compile_source(src.as_bytes()).unwrap_err();
            assert_eq!(e.class(), ErrorClass::Format, "{esc}: {e}");
            assert!(
                e.detail().contains("escape") || e.detail().contains("hex digits"),
                "{esc}: {e}"
            );
        }
    }

    #[test]
    fn refuses_raw_control_characters_in_strings() {
        for c in ['\0', '\n', '\t', '\u{1f}'] {
            let src = rule_doc(&format!(
                r#"{{"access":"read","path":{{"root":"workspace","relative":"a{c}b"}}}}"#
            ));
            refused(&src, ErrorClass::Format, "control characters");
        }
    }

    #[test]
    fn refuses_unterminated_string() {
        refused(
            r#"{"formatVersion"#,
            ErrorClass::Format,
            "unterminated string",
        );
    }

    #[test]
    fn refuses_null_anywhere() {
        refused(
            &MINIMAL.replace(r#""formatVersion":3"#, r#""formatVersion":null"#),
            ErrorClass::Format,
            "formatVersion at byte offset 17: null",
        );
        refused(
            &rule_doc(r#"{"access":"read","path":{"special":"minimal-runtime"},"scope":null}"#),
            ErrorClass::Format,
            "filesystem.rules[0].scope at byte offset",
        );
        refused(
            &rule_doc("null"),
            ErrorClass::Format,
            "filesystem.rules[0] at byte offset",
        );
        // The reader names where a null is, under any key.
        let e = read_failure(&MINIMAL.replacen('{', r#"{"x":[1,null],"#, 1));
        assert!(e.detail().contains("x[1] at byte offset 8: null"), "{e}");
    }

    #[test]
    fn refuses_bad_literals() {
        for lit in ["tru", "True", "nul", "NaN", "Infinity", "'a'", "fals"] {
            let src = rule_doc(&format!(
                r#"{{"access":"read","path":{{"special":"minimal-runtime"}},"scope":{lit}}}"#
            ));
            refused(&src, ErrorClass::Format, "syntax error");
        }
    }

    #[test]
    fn refuses_structural_syntax_errors() {
        let r = r#"{"access":"read","path":{"special":"minimal-runtime"}}"#;
        for (src, why) in [
            (r#"{"formatVersion" 3}"#.to_string(), "expected ':'"),
            (
                r#"{"formatVersion":3,}"#.to_string(),
                "expected a string key",
            ),
            (
                r#"{"formatVersion":3 "x":1}"#.to_string(),
                "expected ',' or '}'",
            ),
            (r#"{formatVersion:3}"#.to_string(), "expected a string key"),
            (rule_doc(&format!("{r} {r}")), "expected ',' or ']'"),
            (rule_doc(&format!("{r},")), "expected a JSON value"),
            (r#"{"formatVersion":}"#.to_string(), "expected a JSON value"),
        ] {
            refused(&src, ErrorClass::Format, why);
        }
        // The reader finds them under any key.
        for (src, why) in [
            (r#"{"a":[1 2]}"#, "expected ',' or ']'"),
            (r#"{"a":[1,]}"#, "expected a JSON value"),
            (r#"{"a":}"#, "expected a JSON value"),
        ] {
            let e = read_failure(src);
            assert!(e.detail().contains(why), "{src}: {e}");
        }
    }

    #[test]
    fn refuses_unknown_keys_at_every_level() {
        refused(
            &MINIMAL.replacen('{', r#"{"extra":1,"#, 1),
            ErrorClass::Format,
            "unknown key \"extra\" in the top-level object",
        );
        refused(
            &MINIMAL.replace(r#""rules":[]"#, r#""rules":[],"extra":1"#),
            ErrorClass::Format,
            "unknown key \"extra\" in filesystem",
        );
        refused(
            &doc("", r#"{"mode":"none","extra":1}"#),
            ErrorClass::Format,
            "unknown key \"extra\" in network",
        );
        refused(
            &MINIMAL.replace(
                r#""treeConfinement":"required""#,
                r#""treeConfinement":"required","x":1"#,
            ),
            ErrorClass::Format,
            "unknown key \"x\" in process",
        );
        refused(
            &MINIMAL.replace(r#""mode":"read-only""#, r#""mode":"read-only","x":1"#),
            ErrorClass::Format,
            "unknown key \"x\" in root",
        );
        refused(
            &rule_doc(r#"{"access":"read","path":{"special":"minimal-runtime"},"x":1}"#),
            ErrorClass::Format,
            "unknown key \"x\" in filesystem.rules[0]",
        );
        refused(
            &rule_doc(r#"{"access":"read","path":{"special":"minimal-runtime","x":1}}"#),
            ErrorClass::Format,
            "unknown key \"x\" in filesystem.rules[0].path",
        );
        refused(
            &rule_doc(r#"{"access":"read","path":{"root":"temp","relative":"a","absolute":"/a"}}"#),
            ErrorClass::Format,
            "unknown key \"root\" in filesystem.rules[0].path",
        );
        refused(
            &rule_doc(r#"{"access":"read","path":{"root":"temp","special":"minimal-runtime"}}"#),
            ErrorClass::Format,
            "unknown key \"root\" in filesystem.rules[0].path",
        );
        refused(
            &dest_doc(r#"{"protocol":"tcp","host":"a.com","port":1,"x":true}"#),
            ErrorClass::Format,
            "unknown key \"x\" in network.allow[0]",
        );
        // Keys are case-sensitive.
        refused(
            &MINIMAL.replace("formatVersion", "FormatVersion"),
            ErrorClass::Format,
            "unknown key \"FormatVersion\"",
        );
    }

    #[test]
    fn refuses_duplicate_keys_at_every_level() {
        refused(
            &MINIMAL.replacen('{', r#"{"formatVersion":3,"#, 1),
            ErrorClass::Format,
            "duplicate key \"formatVersion\" in the top-level object",
        );
        refused(
            &MINIMAL.replace(r#""rules":[]"#, r#""rules":[],"rules":[]"#),
            ErrorClass::Format,
            "duplicate key \"rules\" in filesystem",
        );
        refused(
            &rule_doc(r#"{"access":"read","access":"read","path":{"special":"minimal-runtime"}}"#),
            ErrorClass::Format,
            "duplicate key \"access\" in filesystem.rules[0]",
        );
        refused(
            &rule_doc(r#"{"access":"read","path":{"root":"temp","root":"temp"}}"#),
            ErrorClass::Format,
            "duplicate key \"root\" in filesystem.rules[0].path",
        );
        refused(
            &dest_doc(r#"{"protocol":"tcp","host":"a.com","port":1,"port":1}"#),
            ErrorClass::Format,
            "duplicate key \"port\" in network.allow[0]",
        );
        // Escapes are decoded before comparing keys.
        refused(
            &MINIMAL.replacen('{', r#"{"formatVers\u0069on":3,"#, 1),
            ErrorClass::Format,
            "duplicate key \"formatVersion\"",
        );
        // The reader finds duplicates in unknown objects too, and in large
        // ones (the schema then refuses the unknown key first).
        let many: String = (0..40).map(|i| format!("\"k{i}\":1,")).collect();
        let src = MINIMAL.replacen('{', &format!("{{\"x\":{{{many}\"k39\":2}},"), 1);
        let e = read_failure(&src);
        assert!(e.detail().contains("duplicate key \"k39\" in x"), "{e}");
        refused(&src, ErrorClass::Format, "unknown key \"x\"");
    }

    #[test]
    fn refuses_missing_required_keys() {
        for key in ["formatVersion", "filesystem", "network", "process", "root"] {
            let v = MINIMAL.find(&format!("\"{key}\"")).unwrap();
            // Remove `"key":value,` or `,"key":value` by re-serializing without it.
            let src = remove_member(MINIMAL, v);
            refused(
                &src,
                ErrorClass::Format,
                &format!("the required key \"{key}\" is missing"),
            );
        }
        refused(
            &MINIMAL.replace(r#""default":"deny","#, ""),
            ErrorClass::Format,
            "filesystem (byte offset",
        );
        refused(
            &MINIMAL.replace(r#","rules":[]"#, ""),
            ErrorClass::Format,
            "\"rules\" is missing",
        );
        refused(&doc("", "{}"), ErrorClass::Format, "\"mode\" is missing");
        refused(
            &MINIMAL.replace(r#""treeConfinement":"required""#, ""),
            ErrorClass::Format,
            "\"treeConfinement\" is missing",
        );
        refused(
            &MINIMAL.replace(r#""mode":"read-only""#, ""),
            ErrorClass::Format,
            "\"mode\" is missing",
        );
        refused(
            &rule_doc(r#"{"path":{"special":"minimal-runtime"}}"#),
            ErrorClass::Format,
            "\"access\" is missing",
        );
        refused(
            &rule_doc(r#"{"access":"read"}"#),
            ErrorClass::Format,
            "\"path\" is missing",
        );
        refused(
            &rule_doc(r#"{"access":"read","path":{"relative":"a"}}"#),
            ErrorClass::Format,
            "a path is",
        );
        refused(
            &rule_doc(r#"{"access":"read","path":{}}"#),
            ErrorClass::Format,
            "a path is",
        );
        refused(
            &dest_doc(r#"{"host":"a.com","port":1}"#),
            ErrorClass::Format,
            "\"protocol\" is missing",
        );
        refused(
            &dest_doc(r#"{"protocol":"tcp","port":1}"#),
            ErrorClass::Format,
            "\"host\" is missing",
        );
        refused(
            &dest_doc(r#"{"protocol":"tcp","host":"a.com"}"#),
            ErrorClass::Format,
            "\"port\" is missing",
        );
    }

    /// Removes the top-level member whose key starts at `at` (test helper).
    fn remove_member(src: &str, at: usize) -> String {
        // Members of MINIMAL end at the next top-level ',' or the final '}'.
        let bytes = src.as_bytes();
        let mut depth = 0;
        let mut end = at;
        while end < bytes.len() {
            match bytes[end] {
                b'{' | b'[' => depth += 1,
                b'}' | b']' if depth == 0 => break,
                b'}' | b']' => depth -= 1,
                b',' if depth == 0 => {
                    end += 1;
                    break;
                }
                _ => {}
            }
            end += 1;
        }
        let mut out = format!("{}{}", &src[..at], &src[end..]);
        if out.ends_with(",}") {
            out.replace_range(out.len() - 2..out.len() - 1, "");
        }
        out
    }

    #[test]
    fn format_version_is_the_bare_integer_3() {
        for bad in [
            "3.0", "3e0", "3E0", "30e-1", "\"3\"", "2", "4", "-3", "true", "[3]", "{}", "0.3e1",
        ] {
            let src = MINIMAL.replace(r#""formatVersion":3"#, &format!(r#""formatVersion":{bad}"#));
            refused(
                &src,
                ErrorClass::Format,
                "formatVersion (byte offset 17): must be the bare integer 3",
            );
        }
        for bad in ["03", "-03", "+3", "3.", ".3", "3e", "-"] {
            let src = MINIMAL.replace(r#""formatVersion":3"#, &format!(r#""formatVersion":{bad}"#));
            refused(&src, ErrorClass::Format, "syntax error at byte offset 17");
        }
    }

    #[test]
    fn schema_must_be_exact_when_present() {
        let good = MINIMAL.replacen('{', &format!("{{\"$schema\":\"{SCHEMA_URL}\","), 1);
        ok(&good);
        for bad in [
            "\"https://schemas.maelys.dev/mir-source/v2/schema.json\"",
            "\"HTTPS://schemas.maelys.dev/mir-source/v3/schema.json\"",
            "\"https://schemas.maelys.dev/mir-source/v3/schema.json \"",
            "\"\"",
        ] {
            refused(
                &MINIMAL.replacen('{', &format!("{{\"$schema\":{bad},"), 1),
                ErrorClass::Format,
                "$schema (byte offset 11)",
            );
        }
        refused(
            &MINIMAL.replacen('{', "{\"$schema\":3,", 1),
            ErrorClass::Format,
            "expected a string",
        );
    }

    #[test]
    fn enums_must_be_known_strings() {
        refused(
            &rule_doc(r#"{"access":"Read","path":{"special":"minimal-runtime"}}"#),
            ErrorClass::Format,
            "filesystem.rules[0].access",
        );
        refused(
            &rule_doc(r#"{"access":1,"path":{"special":"minimal-runtime"}}"#),
            ErrorClass::Format,
            "expected a string",
        );
        refused(
            &rule_doc(
                r#"{"access":"read","path":{"special":"minimal-runtime"},"scope":"subtree"}"#,
            ),
            ErrorClass::Format,
            "filesystem.rules[0].scope",
        );
        refused(
            &rule_doc(
                r#"{"access":"read","path":{"special":"minimal-runtime"},"missing":"ignore"}"#,
            ),
            ErrorClass::Format,
            "filesystem.rules[0].missing",
        );
        refused(
            &rule_doc(r#"{"access":"read","path":{"special":"runtime"}}"#),
            ErrorClass::Format,
            "filesystem.rules[0].path.special",
        );
        refused(
            &rule_doc(r#"{"access":"read","path":{"root":"host"}}"#),
            ErrorClass::Format,
            "filesystem.rules[0].path.root",
        );
        refused(
            &rule_doc(r#"{"access":"read","path":{"root":"minimal-runtime"}}"#),
            ErrorClass::Format,
            "filesystem.rules[0].path.root",
        );
        refused(
            &doc("", r#"{"mode":"proxy"}"#),
            ErrorClass::Format,
            "network.mode",
        );
        refused(
            &MINIMAL.replace(r#""default":"deny""#, r#""default":"allow""#),
            ErrorClass::Format,
            "filesystem.default",
        );
        refused(
            &MINIMAL.replace(r#""required""#, r#""yes""#),
            ErrorClass::Format,
            "process.treeConfinement",
        );
        refused(
            &MINIMAL.replace(r#""read-only""#, r#""readonly""#),
            ErrorClass::Format,
            "root.mode",
        );
        refused(
            &dest_doc(r#"{"protocol":"udp","host":"a.com","port":1}"#),
            ErrorClass::Format,
            "network.allow[0].protocol",
        );
    }

    #[test]
    fn types_are_checked() {
        refused(
            &MINIMAL.replace(r#""rules":[]"#, r#""rules":{}"#),
            ErrorClass::Format,
            "filesystem.rules (byte offset",
        );
        refused(
            &MINIMAL.replace(
                r#""filesystem":{"default":"deny","rules":[]}"#,
                r#""filesystem":[]"#,
            ),
            ErrorClass::Format,
            "filesystem (byte offset",
        );
        refused(
            &rule_doc("[]"),
            ErrorClass::Format,
            "filesystem.rules[0] (byte offset",
        );
        refused(
            &rule_doc(r#"{"access":"read","path":"/usr"}"#),
            ErrorClass::Format,
            "filesystem.rules[0].path (byte offset",
        );
        refused(
            &rule_doc(r#"{"access":"read","path":{"absolute":1}}"#),
            ErrorClass::Format,
            "filesystem.rules[0].path.absolute",
        );
        refused(
            &rule_doc(r#"{"access":"read","path":{"root":"temp","relative":false}}"#),
            ErrorClass::Format,
            "filesystem.rules[0].path.relative",
        );
        refused(
            &doc("", r#"{"mode":"mediated","allow":{}}"#),
            ErrorClass::Format,
            "network.allow (byte offset",
        );
        refused(
            &dest_doc(r#"{"protocol":"tcp","host":1,"port":1}"#),
            ErrorClass::Format,
            "network.allow[0].host",
        );
        refused(
            &dest_doc(r#"{"protocol":"tcp","host":"a.com","port":"443"}"#),
            ErrorClass::Format,
            "network.allow[0].port",
        );
        refused(
            &dest_doc(r#"{"protocol":"tcp","host":"a.com","port":1,"requireTlsSni":"true"}"#),
            ErrorClass::Format,
            "network.allow[0].requireTlsSni",
        );
        refused(
            &dest_doc(r#"{"protocol":"tcp","host":"a.com","port":1,"allowPrivateAddresses":1}"#),
            ErrorClass::Format,
            "network.allow[0].allowPrivateAddresses",
        );
    }

    #[test]
    fn every_object_valued_key_must_be_an_object() {
        for (from, to, place) in [
            (
                r#""network":{"mode":"none"}"#,
                r#""network":"none""#,
                "network (byte offset",
            ),
            (
                r#""process":{"treeConfinement":"required"}"#,
                r#""process":true"#,
                "process (byte offset",
            ),
            (
                r#""root":{"mode":"read-only"}"#,
                r#""root":["read-only"]"#,
                "root (byte offset",
            ),
        ] {
            refused(&MINIMAL.replace(from, to), ErrorClass::Format, place);
        }
        refused(
            &dest_doc("443"),
            ErrorClass::Format,
            "network.allow[0] (byte offset",
        );
        refused(
            &MINIMAL.replace(r#""default":"deny""#, r#""default":false"#),
            ErrorClass::Format,
            "filesystem.default (byte offset",
        );
    }

    #[test]
    fn port_is_a_bare_integer_in_range() {
        for good in ["1", "443", "65535"] {
            let m = ok(&dest_doc(&format!(
                r#"{{"protocol":"tcp","host":"a.com","port":{good}}}"#
            )));
            assert_eq!(m.destinations()[0].port.to_string(), good);
        }
        for bad in [
            "0",
            "65536",
            "99999",
            "100000",
            "443.0",
            "443e0",
            "4.43e2",
            "-443",
            "-0",
            "1e5",
            "18446744073709551617",
        ] {
            let src = dest_doc(&format!(
                r#"{{"protocol":"tcp","host":"a.com","port":{bad}}}"#
            ));
            refused(&src, ErrorClass::Format, "network.allow[0].port");
        }
        for bad in ["0443", "+443", "443.", ".5"] {
            let src = dest_doc(&format!(
                r#"{{"protocol":"tcp","host":"a.com","port":{bad}}}"#
            ));
            refused(&src, ErrorClass::Format, "syntax error");
        }
    }

    #[test]
    fn allow_exactly_when_mediated() {
        refused(
            &doc("", r#"{"mode":"mediated"}"#),
            ErrorClass::Format,
            "requires \"allow\"",
        );
        refused(
            &doc("", r#"{"mode":"mediated","allow":[]}"#),
            ErrorClass::Format,
            "at least one destination",
        );
        for mode in ["none", "direct"] {
            refused(
                &doc("", &format!(r#"{{"mode":"{mode}","allow":[]}}"#)),
                ErrorClass::Format,
                "only allowed when mode is \"mediated\"",
            );
            refused(
                &doc(
                    "",
                    &format!(
                        r#"{{"mode":"{mode}","allow":[{{"protocol":"tcp","host":"a.com","port":1}}]}}"#
                    ),
                ),
                ErrorClass::Format,
                "network.allow",
            );
        }
    }

    #[test]
    fn relative_and_absolute_path_rules() {
        refused(
            &rule_doc(r#"{"access":"read","path":{"root":"workspace","relative":"/etc"}}"#),
            ErrorClass::Format,
            "filesystem.rules[0].path.relative",
        );
        refused(
            &rule_doc(r#"{"access":"read","path":{"absolute":"etc"}}"#),
            ErrorClass::Format,
            "filesystem.rules[0].path.absolute",
        );
        refused(
            &rule_doc(r#"{"access":"read","path":{"absolute":""}}"#),
            ErrorClass::Format,
            "must start with '/'",
        );
        assert_eq!(
            single_path(&rule_doc(r#"{"access":"read","path":{"root":"temp"}}"#)),
            (RootKind::Temp, String::new())
        );
        assert_eq!(
            single_path(&rule_doc(
                r#"{"access":"read","path":{"root":"temp","relative":"./a//b/."}}"#
            )),
            (RootKind::Temp, "a/b".to_string())
        );
        assert_eq!(
            single_path(&rule_doc(r#"{"access":"read","path":{"absolute":"/"}}"#)),
            (RootKind::Host, "/".to_string())
        );
        assert_eq!(
            single_path(&rule_doc(
                r#"{"access":"read","path":{"absolute":"//a/./b/"}}"#
            )),
            (RootKind::Host, "/a/b".to_string())
        );
    }

    #[test]
    fn refuses_dotdot_segments() {
        for p in ["..", "a/..", "../a", "a/../b", "a/./../b"] {
            let src = rule_doc(&format!(
                r#"{{"access":"read","path":{{"root":"workspace","relative":"{p}"}}}}"#
            ));
            refused(
                &src,
                ErrorClass::Format,
                "filesystem.rules[0].path.relative (byte offset",
            );
            let src = rule_doc(&format!(
                r#"{{"access":"read","path":{{"absolute":"/{p}"}}}}"#
            ));
            refused(&src, ErrorClass::Format, "'..' segment");
        }
        // `...` and `..a` are ordinary names.
        assert_eq!(
            single_path(&rule_doc(
                r#"{"access":"read","path":{"root":"temp","relative":".../..a"}}"#
            ))
            .1,
            ".../..a"
        );
    }

    #[test]
    fn refuses_paths_longer_than_4096_bytes_as_limit() {
        let p = "a".repeat(4096);
        ok(&rule_doc(&format!(
            r#"{{"access":"read","path":{{"root":"workspace","relative":"{p}"}}}}"#
        )));
        let p = "a".repeat(4097);
        refused(
            &rule_doc(&format!(
                r#"{{"access":"read","path":{{"root":"workspace","relative":"{p}"}}}}"#
            )),
            ErrorClass::Limit,
            "filesystem.rules[0].path.relative",
        );
        let p = format!("/{}", "b".repeat(4096));
        refused(
            &rule_doc(&format!(
                r#"{{"access":"read","path":{{"absolute":"{p}"}}}}"#
            )),
            ErrorClass::Limit,
            "4097 bytes",
        );
    }

    #[test]
    fn defaults_for_scope_and_missing() {
        let m = ok(&rule_doc(
            r#"{"access":"write","path":{"root":"workspace"}}"#,
        ));
        assert_eq!(m.rules()[0].target.scope, Scope::Tree);
        assert_eq!(m.rules()[0].target.missing, Missing::Error);
        let m = ok(&rule_doc(
            r#"{"access":"write","path":{"root":"workspace"},"scope":"exact","missing":"skip"}"#,
        ));
        assert_eq!(m.rules()[0].target.scope, Scope::Exact);
        assert_eq!(m.rules()[0].target.missing, Missing::Skip);
    }

    #[test]
    fn refuses_invalid_hosts_as_argument() {
        for host in [
            "",
            "a..b",
            "-a.com",
            "*.example.com",
            "127.1",
            "0X7F.1",
            "999.1.1.1",
            "a_b.com",
            "[::1]",
            "ex ample.com",
            "é.com",
        ] {
            let src = dest_doc(&format!(
                r#"{{"protocol":"tcp","host":"{host}","port":443}}"#
            ));
            refused(&src, ErrorClass::Argument, "network.allow[0].host");
        }
        let a = "a".repeat(63);
        let long = format!("{a}.{a}.{a}.{a}");
        refused(
            &dest_doc(&format!(
                r#"{{"protocol":"tcp","host":"{long}","port":443}}"#
            )),
            ErrorClass::Argument,
            "253",
        );
    }

    #[test]
    fn messages_do_not_echo_huge_values() {
        let big = "x".repeat(100_000);
        for src in [
            rule_doc(&format!(
                r#"{{"access":"{big}","path":{{"special":"minimal-runtime"}}}}"#
            )),
            MINIMAL.replacen('{', &format!("{{\"{big}\":1,"), 1),
            dest_doc(&format!(r#"{{"protocol":"tcp","host":"{big}","port":1}}"#)),
            rule_doc(&format!(r#"{{"access":"read","path":{{"root":"{big}"}}}}"#)),
        ] {
            let e = compile_source(src.as_bytes()).unwrap_err();
            assert!(
                e.detail().len() < 400,
                "{} bytes: {}",
                e.detail().len(),
                &e.detail()[..400]
            );
        }
    }

    #[test]
    fn refuses_tls_sni_on_ipv4_literal_as_argument() {
        refused(
            &dest_doc(
                r#"{"protocol":"tcp","host":"93.184.216.34","port":443,"requireTlsSni":true}"#,
            ),
            ErrorClass::Argument,
            "network.allow[0].requireTlsSni",
        );
        let m = ok(&dest_doc(
            r#"{"protocol":"tcp","host":"93.184.216.34","port":443,"requireTlsSni":false}"#,
        ));
        assert_eq!(m.destinations()[0].host, "93.184.216.34");
    }

    #[test]
    fn hosts_are_lowercased_and_merged() {
        let m = ok(&dest_doc(
            r#"{"protocol":"tcp","host":"A.COM","port":1,"allowPrivateAddresses":true},{"protocol":"tcp","host":"a.com","port":1,"requireTlsSni":true}"#,
        ));
        assert_eq!(m.destinations().len(), 1);
        let d = &m.destinations()[0];
        assert_eq!(
            (
                d.host.as_str(),
                d.require_tls_sni,
                d.allow_private_addresses
            ),
            ("a.com", true, false)
        );
    }

    #[test]
    fn refuses_more_than_4096_rules_after_dedup_as_limit() {
        let rule = |i: usize| {
            format!(r#"{{"access":"read","path":{{"root":"workspace","relative":"r{i}"}}}}"#)
        };
        let mut rules: Vec<String> = (0..4096).map(rule).collect();
        // Duplicates do not count.
        rules.push(rule(0));
        rules.push(rule(1));
        let m = ok(&rule_doc(&rules.join(",")));
        assert_eq!(m.rules().len(), 4096);
        rules.push(rule(4096));
        refused(
            &rule_doc(&rules.join(",")),
            ErrorClass::Limit,
            "4097 filesystem rules",
        );
    }

    #[test]
    fn refuses_more_than_1024_destinations_after_dedup_as_limit() {
        let dest = |i: usize| format!(r#"{{"protocol":"tcp","host":"h{i}.example","port":443}}"#);
        let mut ds: Vec<String> = (0..1024).map(dest).collect();
        ds.push(dest(7));
        let m = ok(&dest_doc(&ds.join(",")));
        assert_eq!(m.destinations().len(), 1024);
        ds.push(dest(1024));
        refused(
            &dest_doc(&ds.join(",")),
            ErrorClass::Limit,
            "1025 destinations",
        );
    }

    #[test]
    fn offsets_and_paths_name_the_place() {
        let src = rule_doc(
            r#"{"access":"read","path":{"special":"minimal-runtime"}},{"access":"read","path":{"root":"temp","relative":"/x"}}"#,
        );
        let e = compile_source(src.as_bytes()).unwrap_err();
        let offset = src.find(r#""/x""#).unwrap();
        assert_eq!(
            e.detail(),
            format!("filesystem.rules[1].path.relative (byte offset {offset}): a relative path must not start with '/'")
        );
    }
}
