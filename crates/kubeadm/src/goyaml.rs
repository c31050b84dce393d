//! YAML text as Kubernetes' Go tooling writes it: `sigs.k8s.io/yaml`, which hands an object's
//! JSON to go-yaml v2. CABPK writes the kubeadm documents that way, so these match it byte for
//! byte.
//!
//! Hand-written because no YAML crate writes this dialect. The Rust emitters follow YAML 1.2:
//! they write `''` for an empty string, leave `yes` and `on` unquoted, and indent sequences
//! under their key. go-yaml v2 resolves plain scalars by YAML 1.1, double-quotes a string that
//! would read back as anything else, puts sequence items at their key's column, sorts keys
//! (they come from JSON objects) and folds long plain scalars at 80 columns. Only what JSON
//! holds is covered: objects, arrays, strings, numbers, booleans and null.

use serde_json::{Map, Value};

/// libyaml's default line width, which go-yaml v2 keeps.
const WIDTH: usize = 80;

/// The document for `value`, ending in a newline.
pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(m) if !m.is_empty() => map(&mut out, m, 0, false),
        Value::Array(a) if !a.is_empty() => seq(&mut out, a, 0, false),
        other => {
            scalar(&mut out, other, 0);
            out.push('\n');
        }
    }
    out
}

fn pad(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n(' ', n));
}

/// `m`'s entries at column `indent`, keys sorted. With `inline` the first key follows a
/// sequence dash already written on the line.
fn map(out: &mut String, m: &Map<String, Value>, indent: usize, inline: bool) {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    for (i, k) in keys.into_iter().enumerate() {
        if i > 0 || !inline {
            pad(out, indent);
        }
        string(out, k, indent);
        out.push(':');
        value(out, &m[k], indent, indent + 2);
    }
}

/// A mapping value or sequence item after its `:` or `-`: nested collections go on the next
/// lines (a sequence at the key's own column, as go-yaml v2 does), scalars on this one.
fn value(out: &mut String, v: &Value, key_indent: usize, child_indent: usize) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            map(out, m, child_indent, false);
        }
        Value::Array(a) if !a.is_empty() => {
            out.push('\n');
            seq(out, a, key_indent, false);
        }
        other => {
            out.push(' ');
            scalar(out, other, child_indent);
            out.push('\n');
        }
    }
}

fn seq(out: &mut String, a: &[Value], indent: usize, inline: bool) {
    for (i, item) in a.iter().enumerate() {
        if i > 0 || !inline {
            pad(out, indent);
        }
        out.push_str("- ");
        match item {
            Value::Object(m) if !m.is_empty() => map(out, m, indent + 2, true),
            Value::Array(inner) if !inner.is_empty() => seq(out, inner, indent + 2, true),
            other => {
                scalar(out, other, indent + 2);
                out.push('\n');
            }
        }
    }
}

fn scalar(out: &mut String, v: &Value, indent: usize) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => string(out, s, indent),
        Value::Object(_) => out.push_str("{}"),
        Value::Array(_) => out.push_str("[]"),
    }
}

/// go-yaml v2's `stringv`: a literal block for multi-line text, double quotes for text that
/// would resolve to another type, else the plainest style libyaml's analysis allows.
fn string(out: &mut String, s: &str, indent: usize) {
    if s.contains('\n') {
        literal(out, s, indent);
    } else if resolves_to_other_type(s) || base60_float(s) {
        double_quoted(out, s);
    } else if plain_allowed(s) {
        folded(out, s, indent);
    } else if s.chars().all(printable) {
        out.push('\'');
        folded(out, &s.replace('\'', "''"), indent);
        out.push('\'');
    } else {
        double_quoted(out, s);
    }
}

/// Text with spaces, broken at a space once past the line width as libyaml does, continuing
/// at `indent`.
fn folded(out: &mut String, s: &str, indent: usize) {
    let mut column = out.len() - out.rfind('\n').map_or(0, |i| i + 1);
    let chars: Vec<char> = s.chars().collect();
    let mut after_space = false;
    for (i, &c) in chars.iter().enumerate() {
        if c == ' ' {
            let next_is_space = chars.get(i + 1) == Some(&' ');
            if !after_space && column > WIDTH && !next_is_space && i + 1 < chars.len() {
                out.push('\n');
                pad(out, indent);
                column = indent;
            } else {
                out.push(' ');
                column += 1;
            }
            after_space = true;
        } else {
            out.push(c);
            column += 1;
            after_space = false;
        }
    }
}

fn literal(out: &mut String, s: &str, indent: usize) {
    out.push('|');
    if s.starts_with(' ') {
        out.push('2');
    }
    let trailing = s.len() - s.trim_end_matches('\n').len();
    match trailing {
        0 => out.push('-'),
        1 => {}
        _ => out.push('+'),
    }
    let body = s.strip_suffix('\n').unwrap_or(s);
    for line in body.split('\n') {
        out.push('\n');
        if !line.is_empty() {
            pad(out, indent);
            out.push_str(line);
        }
    }
}

fn double_quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{b}' => out.push_str("\\v"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            '\u{1b}' => out.push_str("\\e"),
            '\u{85}' => out.push_str("\\N"),
            '\u{a0}' => out.push_str("\\_"),
            '\u{2028}' => out.push_str("\\L"),
            '\u{2029}' => out.push_str("\\P"),
            c if printable(c) => out.push(c),
            c if (c as u32) <= 0xff => out.push_str(&format!("\\x{:02X}", c as u32)),
            c if (c as u32) <= 0xffff => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push_str(&format!("\\U{:08X}", c as u32)),
        }
    }
    out.push('"');
}

/// libyaml's `IS_PRINTABLE` with unicode output on (go-yaml v2 turns it on); a tab is not.
fn printable(c: char) -> bool {
    matches!(c as u32, 0x20..=0x7e | 0x85 | 0xa0..=0xd7ff | 0xe000..=0xfffd | 0x10000..)
        && c != '\u{feff}'
}

/// libyaml's scalar analysis, for a plain scalar in block context.
fn plain_allowed(s: &str) -> bool {
    if s.is_empty() || s.starts_with("---") || s.starts_with("...") {
        return false;
    }
    let chars: Vec<char> = s.chars().collect();
    let space = |c: Option<&char>| matches!(c, None | Some(' ' | '\t' | '\r' | '\n'));
    if chars.first() == Some(&' ') || chars.last() == Some(&' ') {
        return false;
    }
    for (i, &c) in chars.iter().enumerate() {
        if !printable(c) {
            return false;
        }
        let followed_by_space = space(chars.get(i + 1));
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => return false,
                '?' | ':' | '-' if followed_by_space => return false,
                _ => {}
            }
        } else {
            match c {
                ':' if followed_by_space => return false,
                '#' if matches!(chars[i - 1], ' ' | '\t') => return false,
                _ => {}
            }
        }
    }
    true
}

/// go-yaml v2's `resolve` for a plain scalar: YAML 1.1 nulls, booleans, numbers, infinities,
/// the merge key and timestamps all read back as something other than a string.
fn resolves_to_other_type(s: &str) -> bool {
    const WORDS: &[&str] = &[
        "~", "null", "Null", "NULL", "y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "true",
        "True", "TRUE", "n", "N", "no", "No", "NO", "off", "Off", "OFF", "false", "False", "FALSE",
        ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf",
        "-.Inf", "-.INF", "<<",
    ];
    if s.is_empty() || WORDS.contains(&s) {
        return true;
    }
    let Some(first) = s.chars().next() else {
        return true;
    };
    match first {
        '.' => yaml_float(s),
        '+' | '-' | '0'..='9' => {
            let plain = s.replace('_', "");
            timestamp(s) || go_int(&plain) || yaml_float(&plain)
        }
        _ => false,
    }
}

/// `strconv.ParseInt(s, 0, 64)` or `ParseUint` succeeding: a sign, then a `0x`, `0o`, `0b` or
/// leading-`0` octal body, or decimal digits.
fn go_int(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (digits, radix) = if let Some(h) = body.strip_prefix("0x").or(body.strip_prefix("0X")) {
        (h, 16)
    } else if let Some(b) = body.strip_prefix("0b").or(body.strip_prefix("0B")) {
        (b, 2)
    } else if let Some(o) = body.strip_prefix("0o").or(body.strip_prefix("0O")) {
        (o, 8)
    } else if body.len() > 1 && body.starts_with('0') {
        (&body[1..], 8)
    } else {
        (body, 10)
    };
    !digits.is_empty() && u64::from_str_radix(digits, radix).is_ok()
}

/// go-yaml v2's `yamlStyleFloat`: `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn yaml_float(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => digits(frac),
        Some((int, frac)) => digits(int) && (frac.is_empty() || digits(frac)),
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}

/// go-yaml v2's `parseTimestamp` gate: four digits and a dash, then a date, optionally a time.
fn timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 8 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return false;
    }
    let mut parts = s[5..].splitn(2, '-');
    let month = parts.next().unwrap_or("");
    let rest = parts.next().unwrap_or("");
    let day_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    let small = |t: &str| (1..=2).contains(&t.len()) && t.bytes().all(|c| c.is_ascii_digit());
    small(month)
        && small(&rest[..day_len])
        && (day_len == rest.len() || matches!(rest.as_bytes()[day_len], b'T' | b't' | b' '))
}

/// `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`, which go-yaml v2 also quotes.
fn base60_float(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (s, frac) = match s.split_once('.') {
        Some((a, f)) => (a, Some(f)),
        None => (s, None),
    };
    if frac.is_some_and(|f| !f.bytes().all(|b| b.is_ascii_digit() || b == b'_')) {
        return false;
    }
    let mut groups = s.split(':');
    let head = groups.next().unwrap_or("");
    let head_ok = head.as_bytes().first().is_some_and(u8::is_ascii_digit)
        && head.bytes().all(|b| b.is_ascii_digit() || b == b'_');
    let rest: Vec<&str> = groups.collect();
    head_ok
        && !rest.is_empty()
        && rest.iter().all(|g| {
            let b = g.as_bytes();
            match b.len() {
                1 => b[0].is_ascii_digit(),
                2 => (b'0'..=b'5').contains(&b[0]) && b[1].is_ascii_digit(),
                _ => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn collections_as_go_yaml_v2_writes_them() {
        let v = json!({
            "b": {"y": [], "x": {}},
            "a": ["one", {"k": "v", "j": ["p", "q"]}, [1, 2]],
            "c": null,
        });
        assert_eq!(
            to_string(&v),
            "a:\n- one\n- j:\n  - p\n  - q\n  k: v\n- - 1\n  - 2\nb:\n  x: {}\n  \"y\": []\nc: null\n",
            "keys resolve as values do: go-yaml v2 quotes the key y (a YAML 1.1 boolean)"
        );
    }

    #[test]
    fn strings_are_quoted_only_where_they_would_read_back_otherwise() {
        let cases = [
            ("", "\"\""),
            ("yes", "\"yes\""),
            ("On", "\"On\""),
            ("123", "\"123\""),
            ("0x1F", "\"0x1F\""),
            ("1.5e3", "\"1.5e3\""),
            (".5", "\".5\""),
            ("1:20", "\"1:20\""),
            ("2024-01-02", "\"2024-01-02\""),
            ("v1.30.0", "v1.30.0"),
            ("10.0.0.1:6443", "10.0.0.1:6443"),
            ("192.168.0.0/16", "192.168.0.0/16"),
            ("sha256:abc", "sha256:abc"),
            (
                "nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%",
                "nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%",
            ),
            ("*", "'*'"),
            ("a: b", "'a: b'"),
            ("it's", "it's"),
            ("'x'", "'''x'''"),
            (" lead", "' lead'"),
            ("tab\there", "\"tab\\there\""),
            ("a #b", "'a #b'"),
            ("a#b", "a#b"),
            ("- x", "'- x'"),
            ("-x", "-x"),
        ];
        for (input, want) in cases {
            assert_eq!(to_string(&json!(input)), format!("{want}\n"), "{input:?}");
        }
    }

    #[test]
    fn multi_line_text_is_a_literal_block() {
        assert_eq!(to_string(&json!({"k": "a\nb\n"})), "k: |\n  a\n  b\n");
        assert_eq!(to_string(&json!({"k": "a\nb"})), "k: |-\n  a\n  b\n");
    }

    #[test]
    fn long_plain_text_folds_at_eighty_columns() {
        let words = ["word"; 30].join(" ");
        let out = to_string(&json!({ "description": words }));
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() > 1, "{out}");
        assert!(lines[1].starts_with("  word"), "{out}");
        assert_eq!(out.replace("\n  ", " "), format!("description: {words}\n"));
    }
}
