//! Reading one table file: seccompiler's JSON filter format with two
//! additions terra strips before compiling — `about` (a filter's purpose,
//! for `--dry-run`) and a rule's `arch` (the architectures it exists on,
//! e.g. `open` only on x86_64). A table that breaks a house rule is refused
//! here, before any program is built.

use serde_json::{Map, Value};

/// Why a table was refused (the lib names the table).
pub type Error = String;

/// The architectures a table may name.
pub const ARCHES: [&str; 2] = ["x86_64", "aarch64"];

/// One filter of a table, as written.
#[derive(Debug, Clone)]
pub struct Filter {
    pub name: String,
    pub about: String,
    pub kind: Kind,
    /// The JSON action of the calls the filter refuses (an errno or a kill).
    pub refusal: Value,
    pub rules: Vec<Rule>,
    mismatch: Value,
    matched: Value,
}

/// A filter is a deny list (default allow, listed calls refused), an
/// allowlist (listed calls allowed, any other call kills the process), or a
/// notify list (default allow, listed calls go to a supervising process
/// through seccomp user notification; terra's `"user_notif"` action, which
/// seccompiler lacks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Deny,
    Allow,
    Notify,
}

/// The action a notify list's matched calls get in seccompiler's JSON, a
/// placeholder the compiler then replaces by SECCOMP_RET_USER_NOTIF (no other
/// filter of such a table may use it).
pub const NOTIFY_PLACEHOLDER: &str = "trap";

#[derive(Debug, Clone)]
pub struct Rule {
    pub syscall: String,
    pub comment: Option<String>,
    pub arches: Option<Vec<String>>,
    pub conditional: bool,
    args: Option<Value>,
}

impl Rule {
    pub fn exists_on(&self, arch: &str) -> bool {
        self.arches
            .as_ref()
            .is_none_or(|a| a.iter().any(|x| x == arch))
    }
}

impl Rule {
    /// A rule for `syscall` without conditions, on every architecture.
    pub fn plain(syscall: &str) -> Rule {
        Rule {
            syscall: syscall.into(),
            comment: None,
            arches: None,
            conditional: false,
            args: None,
        }
    }

    /// The rule in seccompiler's JSON shape (`syscall` and, when
    /// conditional, `args`).
    pub fn seccompiler_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("syscall".into(), Value::String(self.syscall.clone()));
        if let Some(a) = &self.args {
            m.insert("args".into(), a.clone());
        }
        Value::Object(m)
    }
}

impl Filter {
    /// The JSON actions of a match and of a mismatch, as written (a notify
    /// list's match is the `trap` placeholder).
    pub fn actions(&self) -> (&Value, &Value) {
        (&self.matched, &self.mismatch)
    }

    /// The filter in seccompiler's JSON shape, with only the rules of `arch`.
    pub fn seccompiler_json(&self, arch: &str) -> Value {
        let rules: Vec<Value> = self
            .rules
            .iter()
            .filter(|r| r.exists_on(arch))
            .map(Rule::seccompiler_json)
            .collect();
        let mut f = Map::new();
        f.insert("mismatch_action".into(), self.mismatch.clone());
        f.insert("match_action".into(), self.matched.clone());
        f.insert("filter".into(), Value::Array(rules));
        let mut top = Map::new();
        top.insert(self.name.clone(), Value::Object(f));
        Value::Object(top)
    }
}

fn bad(table: &str, message: String) -> Error {
    format!("seccomp table {table}: {message}")
}

/// Parses and checks `source`, the text of table `table`.
pub fn parse(table: &str, source: &str) -> Result<Vec<Filter>, Error> {
    let top: Value =
        serde_json::from_str(source).map_err(|e| bad(table, format!("not JSON: {e}")))?;
    let Value::Object(filters) = top else {
        return Err(bad(
            table,
            "the top level is not an object of filters".into(),
        ));
    };
    if filters.is_empty() {
        return Err(bad(table, "no filter".into()));
    }
    filters
        .into_iter()
        .map(|(name, f)| parse_filter(table, name, f))
        .collect()
}

fn parse_filter(table: &str, name: String, f: Value) -> Result<Filter, Error> {
    let at = |m: &str| bad(table, format!("filter {name}: {m}"));
    let Value::Object(mut f) = f else {
        return Err(at("not an object"));
    };
    let about = match f.remove("about") {
        Some(Value::String(s)) if !s.is_empty() => s,
        _ => return Err(at("no `about` sentence")),
    };
    let mismatch = f
        .remove("mismatch_action")
        .ok_or_else(|| at("no mismatch_action"))?;
    let matched = f
        .remove("match_action")
        .ok_or_else(|| at("no match_action"))?;
    let allow = Value::String("allow".into());
    let kill = Value::String("kill_process".into());
    let notify = Value::String("user_notif".into());
    let (kind, refusal, matched) = if mismatch == allow && matched == notify {
        // x32 numbers are refused as everywhere else (EPERM).
        let eperm = serde_json::json!({"errno": 1});
        (
            Kind::Notify,
            eperm,
            Value::String(NOTIFY_PLACEHOLDER.into()),
        )
    } else if matched == Value::String(NOTIFY_PLACEHOLDER.into()) {
        return Err(at(
            "`trap` is reserved (it stands for user_notif while compiling)",
        ));
    } else if mismatch == allow && matched != allow {
        (Kind::Deny, matched.clone(), matched)
    } else if matched == allow && mismatch == kill {
        (Kind::Allow, mismatch.clone(), matched)
    } else {
        return Err(at(
            "neither a deny list (mismatch allow), an allowlist (match allow, mismatch kill_process) \
             nor a notify list (mismatch allow, match user_notif)",
        ));
    };
    let Some(Value::Array(rules)) = f.remove("filter") else {
        return Err(at("no `filter` array"));
    };
    if let Some(k) = f.keys().next() {
        return Err(at(&format!("unknown key {k:?}")));
    }
    let rules = rules
        .into_iter()
        .map(|r| parse_rule(&at, r))
        .collect::<Result<Vec<_>, _>>()?;
    for arch in ARCHES {
        // seccompiler would quietly make such a call conditional.
        let on: Vec<&Rule> = rules.iter().filter(|r| r.exists_on(arch)).collect();
        for r in &on {
            let mixed = on
                .iter()
                .any(|o| o.syscall == r.syscall && o.conditional != r.conditional);
            if mixed {
                return Err(at(&format!(
                    "{} is listed both with and without conditions",
                    r.syscall
                )));
            }
            if !r.conditional && on.iter().filter(|o| o.syscall == r.syscall).count() > 1 {
                return Err(at(&format!("{} is listed twice", r.syscall)));
            }
        }
    }
    Ok(Filter {
        name,
        about,
        kind,
        refusal,
        rules,
        mismatch,
        matched,
    })
}

fn parse_rule(at: &impl Fn(&str) -> Error, r: Value) -> Result<Rule, Error> {
    let Value::Object(mut r) = r else {
        return Err(at("a rule is not an object"));
    };
    let syscall = match r.remove("syscall") {
        Some(Value::String(s)) => s,
        _ => return Err(at("a rule without `syscall`")),
    };
    let comment = match r.remove("comment") {
        None => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => return Err(at(&format!("{syscall}: `comment` is not a string"))),
    };
    let arches = match r.remove("arch") {
        None => None,
        Some(Value::Array(a)) => {
            let names = a
                .into_iter()
                .map(|v| match v {
                    Value::String(s) if ARCHES.contains(&s.as_str()) => Ok(s),
                    other => Err(at(&format!("{syscall}: unknown architecture {other}"))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Some(names)
        }
        Some(_) => return Err(at(&format!("{syscall}: `arch` is not a list"))),
    };
    let args = r.remove("args");
    if let Some(k) = r.keys().next() {
        return Err(at(&format!("{syscall}: unknown key {k:?}")));
    }
    let conditional = match &args {
        None => false,
        Some(Value::Array(a)) if !a.is_empty() => {
            if comment.is_none() {
                return Err(at(&format!(
                    "{syscall}: a rule with conditions needs a `comment` saying what it matches"
                )));
            }
            for c in a {
                check_condition(at, &syscall, c)?;
            }
            true
        }
        Some(_) => return Err(at(&format!("{syscall}: `args` is not a non-empty list"))),
    };
    Ok(Rule {
        syscall,
        comment,
        arches,
        conditional,
        args,
    })
}

/// Every ioctl request is compared the same way: on its low 32 bits (the
/// kernel's `cmd` is an unsigned int; the upper half of the register is
/// whatever the caller left there).
fn check_condition(at: &impl Fn(&str) -> Error, syscall: &str, c: &Value) -> Result<(), Error> {
    let index = c.get("index").and_then(Value::as_u64);
    let width = c.get("type").and_then(Value::as_str);
    if syscall == "ioctl" && index == Some(1) && width != Some("dword") {
        return Err(at(
            "ioctl requests are compared on their low 32 bits: use \"type\": \"dword\"",
        ));
    }
    Ok(())
}
