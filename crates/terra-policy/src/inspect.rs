//! Inspection JSON (spec section 2, "Inspection JSON"): a readable projection
//! of a canonical MIR, rendered by hand so the bytes are exactly the published
//! ones (2-space indentation, `"key": value`, fixed field order, trailing newline).

use std::fmt::Write as _;

use crate::model::{Mir, NetworkMode};

/// Renders the inspection JSON of `mir`.
pub fn inspection_json(mir: &Mir) -> String {
    let mut o =
        String::with_capacity(512 + mir.rules().len() * 160 + mir.destinations().len() * 120);
    o.push_str("{\n");
    o.push_str("  \"inspectionVersion\": 1,\n");
    o.push_str("  \"mirFormatVersion\": 3,\n");
    o.push_str("  \"identity\": {\n");
    o.push_str("    \"algorithm\": \"sha256\",\n");
    o.push_str("    \"basis\": \"canonical-mir-v3-bytes\",\n");
    o.push_str("    \"decisionDigest\": \"");
    o.push_str(&mir.decision_digest());
    o.push_str("\"\n  },\n");
    o.push_str("  \"filesystem\": {\n");
    o.push_str("    \"default\": \"deny\",\n");
    push_objects(&mut o, "rules", mir.rules(), |o, r| {
        let _ = writeln!(o, "        \"access\": \"{}\",", r.access.name());
        let _ = writeln!(o, "        \"root\": \"{}\",", r.target.root.name());
        o.push_str("        \"path\": ");
        push_json_string(o, &r.target.path);
        o.push_str(",\n");
        let _ = writeln!(o, "        \"scope\": \"{}\",", r.target.scope.name());
        let _ = writeln!(o, "        \"missing\": \"{}\"", r.target.missing.name());
    });
    o.push_str("  },\n");
    o.push_str("  \"network\": {\n");
    let _ = write!(o, "    \"mode\": \"{}\"", mir.network().name());
    if mir.network() == NetworkMode::Mediated {
        // A mediated MIR always holds at least one destination; render `[]`
        // anyway should that ever change, so the output stays valid JSON.
        o.push_str(",\n");
        push_objects(&mut o, "allow", mir.destinations(), |o, d| {
            o.push_str("        \"protocol\": \"tcp\",\n");
            o.push_str("        \"host\": ");
            push_json_string(o, &d.host);
            o.push_str(",\n");
            let _ = write!(o, "        \"port\": {}", d.port);
            if d.require_tls_sni {
                o.push_str(",\n        \"requireTlsSni\": true");
            }
            if d.allow_private_addresses {
                o.push_str(",\n        \"allowPrivateAddresses\": true");
            }
            o.push('\n');
        });
    } else {
        o.push('\n');
    }
    o.push_str("  },\n");
    o.push_str("  \"root\": {\n");
    let _ = writeln!(o, "    \"mode\": \"{}\"", mir.root_mode().name());
    o.push_str("  },\n");
    o.push_str("  \"process\": {\n");
    let _ = writeln!(
        o,
        "    \"treeConfinement\": \"{}\"",
        mir.process_tree().name()
    );
    o.push_str("  }\n");
    o.push_str("}\n");
    o
}

/// Appends `"key": [...]` at the second level of indentation: one object per
/// item, its members written by `members` (each line ending in a newline),
/// `[]` when there is none.
fn push_objects<T>(o: &mut String, key: &str, items: &[T], members: impl Fn(&mut String, &T)) {
    let _ = write!(o, "    \"{key}\": [");
    if items.is_empty() {
        o.push_str("]\n");
        return;
    }
    o.push('\n');
    for (i, item) in items.iter().enumerate() {
        o.push_str("      {\n");
        members(o, item);
        o.push_str(if i + 1 == items.len() {
            "      }\n"
        } else {
            "      },\n"
        });
    }
    o.push_str("    ]\n");
}

/// Appends `s` as a JSON string exactly as the reference renders it: `"` and
/// `\` as `\"` and `\\`, every byte below 0x20 and DEL (0x7F) as `\u00xx`
/// with lowercase hex (no short escapes such as `\n` or `\t`), every other
/// byte (all other UTF-8) verbatim.
pub(crate) fn push_json_string(o: &mut String, s: &str) {
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                let _ = write!(o, "\\u{:04x}", u32::from(c));
            }
            c => o.push(c),
        }
    }
    o.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::MirBuilder;
    use crate::model::{Access, Missing};
    use crate::testing::ws_tree;

    fn rendered(s: &str) -> String {
        let mut o = String::new();
        push_json_string(&mut o, s);
        o
    }

    #[test]
    fn string_escaping() {
        assert_eq!(rendered(""), "\"\"");
        assert_eq!(rendered("a/b"), "\"a/b\"");
        assert_eq!(rendered("q\"b\\"), "\"q\\\"b\\\\\"");
        assert_eq!(
            rendered("\n\r\t\u{8}\u{c}\u{1}\u{1f}\u{7f}"),
            "\"\\u000a\\u000d\\u0009\\u0008\\u000c\\u0001\\u001f\\u007f\""
        );
        // DEL, TAB and LF together: never raw, never a short escape.
        assert_eq!(rendered("a\u{7f}b\tc\nd"), "\"a\\u007fb\\u0009c\\u000ad\"");
        // Every byte below 0x20, and DEL, as \u00xx in lowercase hex.
        for b in (0u8..0x20).chain([0x7f]) {
            let s = char::from(b).to_string();
            assert_eq!(rendered(&s), format!("\"\\u{:04x}\"", b), "{b:#x}");
        }
        // Printable ASCII other than '"' and '\\' is verbatim.
        for b in 0x20u8..0x7f {
            if b != b'"' && b != b'\\' {
                let s = char::from(b).to_string();
                assert_eq!(rendered(&s), format!("\"{s}\""), "{b:#x}");
            }
        }
        assert_eq!(rendered("dé/文/😀\u{2028}"), "\"dé/文/😀\u{2028}\"");
    }

    #[test]
    fn any_utf8_path_renders_as_json_that_reads_back() {
        let path = "a\"b\\c\u{1}d\u{7f}é\u{2028}😀\te";
        let mut b = MirBuilder::new();
        ws_tree(&mut b, Access::Read, path, Missing::Error);
        let json = inspection_json(&b.build().unwrap());
        // The path line holds the escaped form, every other character verbatim.
        let line = json
            .lines()
            .find(|l| l.trim_start().starts_with("\"path\""))
            .unwrap();
        let value = line
            .trim_start()
            .strip_prefix("\"path\": ")
            .unwrap()
            .strip_suffix(',')
            .unwrap();
        assert_eq!(value, "\"a\\\"b\\\\c\\u0001d\\u007fé\u{2028}😀\\u0009e\"");
    }
}
