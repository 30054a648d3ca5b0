//! The worker's command line.
//!
//! Windows hands a process one string; the program splits it again (most
//! with the Microsoft C runtime's rules, which `CommandLineToArgvW`
//! follows). [`command_line`] quotes each argument so those rules give back
//! exactly the argv terra was asked to run. Batch files are refused: for a
//! `.bat` or `.cmd` program Windows runs cmd.exe, whose own parsing no
//! quoting makes safe (`%`, `^`, `&` stay live inside quotes).

use crate::error::{Error, Result};

/// One argument quoted for the C runtime's splitting rules.
pub fn quote(arg: &str) -> Result<String> {
    if arg.contains('\0') {
        return Err(Error::Unsupported(format!(
            "argument {arg:?} holds a NUL character"
        )));
    }
    if !arg.is_empty() && !arg.contains([' ', '\t', '\n', '\u{b}', '"']) {
        return Ok(arg.to_string());
    }
    let mut out = String::with_capacity(arg.len() + 2);
    out.push('"');
    let mut backslashes = 0usize;
    for c in arg.chars() {
        match c {
            '\\' => backslashes += 1,
            '"' => {
                // Each backslash before a quote is doubled, then the quote escaped.
                out.extend(std::iter::repeat_n('\\', backslashes * 2 + 1));
                out.push('"');
                backslashes = 0;
            }
            _ => {
                out.extend(std::iter::repeat_n('\\', backslashes));
                backslashes = 0;
                out.push(c);
            }
        }
    }
    // Backslashes before the closing quote are doubled.
    out.extend(std::iter::repeat_n('\\', backslashes * 2));
    out.push('"');
    Ok(out)
}

/// The command line for `program` (the path CreateProcessW runs) and
/// `argv` (argv[0] first). Refuses batch files and NUL characters.
pub fn command_line(program: &str, argv: &[String]) -> Result<String> {
    let lower = program.to_ascii_lowercase();
    if lower.ends_with(".bat") || lower.ends_with(".cmd") {
        return Err(Error::Unsupported(format!(
            "{program} is a batch file: Windows would run it through cmd.exe, whose parsing no quoting makes safe; \
             run cmd.exe yourself if you mean to"
        )));
    }
    if argv.is_empty() {
        return Err(Error::Unsupported("an empty argv".into()));
    }
    let mut parts = vec![quote_program(&argv[0])?];
    for a in &argv[1..] {
        parts.push(quote(a)?);
    }
    Ok(parts.join(" "))
}

/// argv[0]: the C runtime takes it up to the first space outside quotes,
/// with no backslash escapes, so it is quoted whole and may not hold `"`.
fn quote_program(arg: &str) -> Result<String> {
    if arg.contains(['"', '\0']) {
        return Err(Error::Unsupported(format!(
            "argv[0] {arg:?} holds a quote or NUL, which a Windows command line cannot carry"
        )));
    }
    if !arg.is_empty() && !arg.contains([' ', '\t', '\n', '\u{b}']) {
        return Ok(arg.to_string());
    }
    Ok(format!("\"{arg}\""))
}

/// Splits a command line the way the C runtime does (for the tests and the
/// fuzz target: `quote` must round-trip through it).
pub fn split(line: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut chars = line.chars().peekable();
    // argv[0]: quoted whole, or up to the first space or tab; no escapes.
    let mut first = String::new();
    if chars.peek() == Some(&'"') {
        chars.next();
        for c in chars.by_ref() {
            if c == '"' {
                break;
            }
            first.push(c);
        }
    } else {
        while let Some(&c) = chars.peek() {
            if c == ' ' || c == '\t' {
                break;
            }
            first.push(c);
            chars.next();
        }
    }
    args.push(first);
    loop {
        while matches!(chars.peek(), Some(' ' | '\t')) {
            chars.next();
        }
        if chars.peek().is_none() {
            return args;
        }
        let mut arg = String::new();
        let mut quoted = false;
        loop {
            let mut backslashes = 0;
            while chars.peek() == Some(&'\\') {
                chars.next();
                backslashes += 1;
            }
            match chars.peek() {
                Some('"') => {
                    arg.extend(std::iter::repeat_n('\\', backslashes / 2));
                    chars.next();
                    if backslashes % 2 == 1 {
                        arg.push('"');
                    } else if quoted && chars.peek() == Some(&'"') {
                        // `""` inside quotes is a literal quote.
                        chars.next();
                        arg.push('"');
                    } else {
                        quoted = !quoted;
                    }
                }
                None => {
                    arg.extend(std::iter::repeat_n('\\', backslashes));
                    args.push(arg);
                    return args;
                }
                Some(&c) => {
                    arg.extend(std::iter::repeat_n('\\', backslashes));
                    if !quoted && (c == ' ' || c == '\t') {
                        break;
                    }
                    chars.next();
                    arg.push(c);
                }
            }
        }
        args.push(arg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appcontainer_command_line_quotes_only_what_needs_it() {
        let argv: Vec<String> = [
            r"C:\my dir\",
            "a b",
            "",
            r"C:\dir\",
            r#"say "hi""#,
            r"a\\b",
            r#"end\"#,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let line = command_line(r"C:\bin\prog.exe", &argv).unwrap();
        assert_eq!(
            line,
            r#""C:\my dir\" "a b" "" C:\dir\ "say \"hi\"" a\\b end\"#
        );
        assert_eq!(split(&line), argv);
        assert_eq!(quote(r"C:\has space\").unwrap(), r#""C:\has space\\""#);
    }

    #[test]
    fn appcontainer_command_line_refuses_batch_files_and_nul() {
        for p in [r"C:\x\build.bat", r"C:\x\RUN.CMD"] {
            let e = command_line(p, &["x".into()]).unwrap_err();
            assert!(e.to_string().contains("batch file"), "{e}");
        }
        assert!(command_line(r"C:\x.exe", &["a\0b".into()]).is_err());
        assert!(command_line(r"C:\x.exe", &[]).is_err());
        assert!(command_line(r"C:\x.exe", &["a\"b".into()]).is_err());
    }
}
