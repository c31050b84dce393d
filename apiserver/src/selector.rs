//! Label and field selectors, parsed the way kube-apiserver parses them.

use std::collections::BTreeMap;

/// A selector string that does not parse.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("unable to parse requirement: {0}")]
pub struct SelectorError(pub String);

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

/// A parsed `labelSelector` (requirements are ANDed).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<(String, Op)>);

fn check_key(k: &str) -> Result<(), SelectorError> {
    let ok = !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        && k.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(SelectorError(format!("invalid label key {k:?}")))
    }
}

fn check_value(v: &str) -> Result<(), SelectorError> {
    let ok = v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(SelectorError(format!("invalid label value {v:?}")))
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut parts) = (0i32, 0, vec![]);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn set_values(rest: &str, whole: &str) -> Result<Vec<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| SelectorError(format!("{whole:?}: expected a parenthesised value list")))?;
    let vals: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    for v in &vals {
        check_value(v)?;
    }
    Ok(vals)
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut reqs = vec![];
        if s.trim().is_empty() {
            return Ok(LabelSelector(reqs));
        }
        for part in split_top(s) {
            let p = part.trim();
            if p.is_empty() {
                return Err(SelectorError(format!("{s:?}: empty requirement")));
            }
            if let Some(k) = p.strip_prefix('!') {
                check_key(k.trim())?;
                reqs.push((k.trim().to_string(), Op::NotExists));
                continue;
            }
            let (key, op) = if let Some((k, v)) = p.split_once("!=") {
                (k, Op::NotEq(v.trim().to_string()))
            } else if let Some((k, v)) = p.split_once("==") {
                (k, Op::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = p.split_once('=') {
                (k, Op::Eq(v.trim().to_string()))
            } else if let Some((k, rest)) = p.split_once(" notin ") {
                (k, Op::NotIn(set_values(rest, p)?))
            } else if let Some((k, rest)) = p.split_once(" in ") {
                (k, Op::In(set_values(rest, p)?))
            } else {
                if p.contains(' ') || p.contains('(') {
                    return Err(SelectorError(format!(
                        "{p:?}: expected an operator (=, ==, !=, in, notin)"
                    )));
                }
                (p, Op::Exists)
            };
            let key = key.trim();
            check_key(key)?;
            if let Op::Eq(v) | Op::NotEq(v) = &op {
                check_value(v)?;
            }
            reqs.push((key.to_string(), op));
        }
        Ok(LabelSelector(reqs))
    }

    /// A `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`), as webhook
    /// configurations carry them; an empty or absent one selects everything.
    pub fn from_object(sel: Option<&serde_json::Value>) -> Result<Self, SelectorError> {
        let mut reqs = vec![];
        let Some(sel) = sel else {
            return Ok(LabelSelector(reqs));
        };
        for (k, v) in sel
            .get("matchLabels")
            .and_then(serde_json::Value::as_object)
            .into_iter()
            .flatten()
        {
            reqs.push((
                k.clone(),
                Op::Eq(v.as_str().unwrap_or_default().to_string()),
            ));
        }
        for e in sel
            .get("matchExpressions")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = e
                .get("key")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default();
            let values: Vec<String> = e
                .get("values")
                .and_then(serde_json::Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            let op = match e.get("operator").and_then(serde_json::Value::as_str) {
                Some("In") => Op::In(values),
                Some("NotIn") => Op::NotIn(values),
                Some("Exists") => Op::Exists,
                Some("DoesNotExist") => Op::NotExists,
                other => {
                    return Err(SelectorError(format!(
                        "{other:?} is not a valid label selector operator"
                    )));
                }
            };
            reqs.push((key.to_string(), op));
        }
        Ok(LabelSelector(reqs))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|(k, op)| {
            let v = labels.get(k);
            match op {
                Op::Eq(want) => v == Some(want),
                Op::NotEq(want) => v != Some(want),
                Op::In(set) => v.is_some_and(|v| set.contains(v)),
                Op::NotIn(set) => !v.is_some_and(|v| set.contains(v)),
                Op::Exists => v.is_some(),
                Op::NotExists => v.is_none(),
            }
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A parsed `fieldSelector`: `(field, equal?, value)` requirements, ANDed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(pub Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut reqs = vec![];
        if s.trim().is_empty() {
            return Ok(FieldSelector(reqs));
        }
        for part in s.split(',') {
            let p = part.trim();
            let (f, eq, v) = if let Some((f, v)) = p.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = p.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = p.split_once('=') {
                (f, true, v)
            } else {
                return Err(SelectorError(format!(
                    "invalid field selector {p:?}: expected field=value"
                )));
            };
            reqs.push((f.trim().to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    /// `get` returns the string value of a field (absent fields compare as "").
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.0
            .iter()
            .all(|(f, eq, want)| (get(f).unwrap_or_default() == *want) == *eq)
    }

    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(f, _, _)| f.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_operators() {
        let l = labels(&[("a", "b"), ("env", "prod")]);
        for (sel, want) in [
            ("a=b", true),
            ("a==b", true),
            ("a!=b", false),
            ("env in (prod,dev)", true),
            ("env notin (prod)", false),
            ("a", true),
            ("!a", false),
            ("!zz", true),
            ("a=b,env=dev", false),
            ("a=b, env in (prod)", true),
            ("zz!=x", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&l),
                want,
                "{sel}"
            );
        }
    }

    #[test]
    fn bad_label_selectors() {
        for bad in ["a in x", "a=b=c=(", "a b", "=x", "a,,b"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn field_selectors() {
        let f = FieldSelector::parse("metadata.name=w1,spec.color!=red").unwrap();
        assert!(f.matches(|k| Some(if k == "metadata.name" { "w1" } else { "blue" }.to_string())));
        assert!(!f.matches(|k| Some(if k == "metadata.name" { "w1" } else { "red" }.to_string())));
        assert!(FieldSelector::parse("nope").is_err());
    }
}
