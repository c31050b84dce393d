//! ObjectMeta rules: names, labels, annotations, owner references, finalizers, and the
//! server-owned fields a client may not change.

use crate::status::Cause;
use serde_json::{Map, Value};

/// The Go alphabet kube-apiserver draws `generateName` suffixes from.
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

pub fn generate_suffix() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..5)
        .map(|_| NAME_ALPHABET[rng.random_range(0..NAME_ALPHABET.len())] as char)
        .collect()
}

/// RFC 3339 with second precision, as `metadata.creationTimestamp` is written.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

pub fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = Value::Object(Map::new());
    }
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        // Unreachable: the line above made it an object.
        _ => unreachable!("metadata was just made an object"),
    }
}

pub fn str_field<'a>(obj: &'a Value, field: &str) -> &'a str {
    meta(obj)
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    strings(meta(obj).and_then(|m| m.get("finalizers")))
}

/// The strings of a JSON array (none when it is absent or not an array).
pub(crate) fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

pub fn is_deleting(obj: &Value) -> bool {
    meta(obj).is_some_and(|m| m.get("deletionTimestamp").is_some_and(|t| !t.is_null()))
}

pub fn labels(obj: &Value) -> std::collections::BTreeMap<String, String> {
    meta(obj)
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

fn is_qualified_name(s: &str) -> bool {
    let name = match s.split_once('/') {
        Some((prefix, name)) => {
            if !is_dns_subdomain(prefix) {
                return false;
            }
            name
        }
        None => s,
    };
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && name
            .as_bytes()
            .first()
            .is_some_and(u8::is_ascii_alphanumeric)
        && name
            .as_bytes()
            .last()
            .is_some_and(u8::is_ascii_alphanumeric)
}

fn is_label_value(s: &str) -> bool {
    s.is_empty()
        || (s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && s.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
            && s.as_bytes().last().is_some_and(u8::is_ascii_alphanumeric))
}

/// Validates name, labels, annotations, owner references and finalizers.
/// `dns_label_name` is set for kinds whose names must be DNS labels (Namespace).
pub fn validate(obj: &Value, dns_label_name: bool) -> Vec<Cause> {
    let mut out = vec![];
    let Some(m) = meta(obj) else {
        out.push(Cause::new(
            "FieldValueRequired",
            "metadata",
            "Required value: metadata is required",
        ));
        return out;
    };
    let name = m.get("name").and_then(Value::as_str).unwrap_or_default();
    if name.is_empty() {
        out.push(Cause::new(
            "FieldValueRequired",
            "metadata.name",
            "Required value: name or generateName is required",
        ));
    } else {
        let ok = if dns_label_name {
            is_dns_label(name)
        } else {
            is_dns_subdomain(name)
        };
        if !ok {
            let what = if dns_label_name {
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
            } else {
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            };
            out.push(Cause::new(
                "FieldValueInvalid",
                "metadata.name",
                format!("Invalid value: {name:?}: {what}"),
            ));
        }
    }
    match m.get("labels") {
        None | Some(Value::Null) => {}
        Some(Value::Object(labels)) => {
            for (k, v) in labels {
                if !is_qualified_name(k) {
                    out.push(Cause::new("FieldValueInvalid", "metadata.labels", format!("Invalid value: {k:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")));
                }
                match v.as_str() {
                    Some(s) if is_label_value(s) => {}
                    _ => out.push(Cause::new("FieldValueInvalid", format!("metadata.labels.{k}"), format!("Invalid value: {v}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (at most 63 characters)"))),
                }
            }
        }
        Some(_) => out.push(Cause::new(
            "FieldValueInvalid",
            "metadata.labels",
            "Invalid value: must be a map of strings",
        )),
    }
    match m.get("annotations") {
        None | Some(Value::Null) => {}
        Some(Value::Object(ann)) => {
            let mut total = 0;
            for (k, v) in ann {
                total += k.len() + v.as_str().map_or(0, str::len);
                if !is_qualified_name(k) {
                    out.push(Cause::new(
                        "FieldValueInvalid",
                        "metadata.annotations",
                        format!("Invalid value: {k:?}: must be a qualified name"),
                    ));
                }
                if !v.is_string() {
                    out.push(Cause::new(
                        "FieldValueInvalid",
                        format!("metadata.annotations.{k}"),
                        "Invalid value: annotation values must be strings",
                    ));
                }
            }
            if total > 256 * 1024 {
                out.push(Cause::new(
                    "FieldValueTooLong",
                    "metadata.annotations",
                    "Too long: must have at most 262144 bytes",
                ));
            }
        }
        Some(_) => out.push(Cause::new(
            "FieldValueInvalid",
            "metadata.annotations",
            "Invalid value: must be a map of strings",
        )),
    }
    if let Some(refs) = m.get("ownerReferences").filter(|r| !r.is_null()) {
        match refs.as_array() {
            None => out.push(Cause::new(
                "FieldValueInvalid",
                "metadata.ownerReferences",
                "Invalid value: must be a list",
            )),
            Some(refs) => {
                let mut controllers = 0;
                for (i, r) in refs.iter().enumerate() {
                    for f in ["apiVersion", "kind", "name", "uid"] {
                        if r.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                            out.push(Cause::new(
                                "FieldValueRequired",
                                format!("metadata.ownerReferences[{i}].{f}"),
                                "Required value",
                            ));
                        }
                    }
                    if r.get("controller").and_then(Value::as_bool) == Some(true) {
                        controllers += 1;
                    }
                }
                if controllers > 1 {
                    out.push(Cause::new(
                        "FieldValueInvalid",
                        "metadata.ownerReferences",
                        "Invalid value: Only one reference can have Controller set to true",
                    ));
                }
            }
        }
    }
    if let Some(f) = m.get("finalizers").filter(|f| !f.is_null()) {
        match f.as_array() {
            Some(list)
                if list
                    .iter()
                    .all(|x| x.as_str().is_some_and(is_qualified_name)) => {}
            _ => out.push(Cause::new(
                "FieldValueInvalid",
                "metadata.finalizers",
                "Invalid value: finalizers must be a list of qualified names",
            )),
        }
    }
    out
}

/// ObjectMeta fields only the server sets.
const SERVER_OWNED: &[&str] = &[
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
];

/// Copies the fields clients may not change from the stored object (`None`: a new object,
/// so whatever the client sent for them is dropped).
pub fn keep_server_fields(new: &mut Value, old: Option<&Value>) {
    let old_meta = old.and_then(meta).cloned().unwrap_or_default();
    let m = meta_mut(new);
    for f in SERVER_OWNED {
        match old_meta.get(*f) {
            Some(v) => m.insert(f.to_string(), v.clone()),
            None => m.remove(*f),
        };
    }
}
