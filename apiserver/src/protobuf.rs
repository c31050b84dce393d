//! Decoding of the protobuf request bodies recent kubectl sends for `kubectl create namespace`,
//! `create configmap`, `create secret`, `create serviceaccount` and `create token`. Only these kinds are decoded
//! (into the same JSON every other path uses); responses are always JSON, which those clients
//! accept as their second choice.

use base64::Engine;
use serde_json::{Map, Value, json};

/// Why a protobuf body could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ProtobufError {
    #[error("the protobuf body is truncated or malformed")]
    Malformed,
    #[error("the protobuf body lacks the Kubernetes envelope (k8s\\0 prefix)")]
    NoEnvelope,
    #[error(
        "protobuf bodies are accepted for Namespace, ConfigMap, Secret, ServiceAccount, SelfSubjectAccessReview, SelfSubjectReview and TokenRequest only, not {0}; send JSON"
    )]
    UnsupportedKind(String),
}

enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut out = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.buf.split_first().ok_or(ProtobufError::Malformed)?;
            self.buf = rest;
            out |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err(ProtobufError::Malformed)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtobufError> {
        if self.buf.len() < n {
            return Err(ProtobufError::Malformed);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn next(&mut self) -> Result<Option<(u64, Wire<'a>)>, ProtobufError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Wire::Fixed
            }
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| ProtobufError::Malformed)?;
                Wire::Bytes(self.take(n)?)
            }
            5 => {
                self.take(4)?;
                Wire::Fixed
            }
            _ => return Err(ProtobufError::Malformed),
        };
        Ok(Some((key >> 3, wire)))
    }
}

/// Calls `f` for every field of a message.
fn fields<'a>(
    buf: &'a [u8],
    mut f: impl FnMut(u64, Wire<'a>) -> Result<(), ProtobufError>,
) -> Result<(), ProtobufError> {
    let mut r = Reader { buf };
    while let Some((n, w)) = r.next()? {
        f(n, w)?;
    }
    Ok(())
}

fn string(w: &Wire) -> Result<String, ProtobufError> {
    match w {
        Wire::Bytes(b) => String::from_utf8(b.to_vec()).map_err(|_| ProtobufError::Malformed),
        _ => Err(ProtobufError::Malformed),
    }
}

fn bytes<'a>(w: &Wire<'a>) -> Result<&'a [u8], ProtobufError> {
    match w {
        Wire::Bytes(b) => Ok(b),
        _ => Err(ProtobufError::Malformed),
    }
}

fn varint(w: &Wire) -> Result<u64, ProtobufError> {
    match w {
        Wire::Varint(v) => Ok(*v),
        _ => Err(ProtobufError::Malformed),
    }
}

/// A `map<string, string>` (or bytes, base64-encoded as JSON does) entry.
fn map_entry(buf: &[u8], binary: bool) -> Result<(String, Value), ProtobufError> {
    let (mut k, mut v) = (String::new(), Value::String(String::new()));
    fields(buf, |n, w| {
        match n {
            1 => k = string(&w)?,
            2 if binary => v = json!(base64::engine::general_purpose::STANDARD.encode(bytes(&w)?)),
            2 => v = json!(string(&w)?),
            _ => {}
        }
        Ok(())
    })?;
    Ok((k, v))
}

fn insert_entry(
    obj: &mut Map<String, Value>,
    field: &str,
    w: &Wire,
    binary: bool,
) -> Result<(), ProtobufError> {
    let (k, v) = map_entry(bytes(w)?, binary)?;
    if let Value::Object(m) = obj.entry(field).or_insert_with(|| json!({})) {
        m.insert(k, v);
    }
    Ok(())
}

fn push(obj: &mut Map<String, Value>, field: &str, v: Value) {
    if let Value::Array(a) = obj.entry(field).or_insert_with(|| json!([])) {
        a.push(v);
    }
}

fn owner_reference(buf: &[u8]) -> Result<Value, ProtobufError> {
    let mut o = Map::new();
    fields(buf, |n, w| {
        match n {
            1 => o.insert("kind".into(), json!(string(&w)?)),
            3 => o.insert("name".into(), json!(string(&w)?)),
            4 => o.insert("uid".into(), json!(string(&w)?)),
            5 => o.insert("apiVersion".into(), json!(string(&w)?)),
            6 => o.insert("controller".into(), json!(varint(&w)? != 0)),
            7 => o.insert("blockOwnerDeletion".into(), json!(varint(&w)? != 0)),
            _ => None,
        };
        Ok(())
    })?;
    Ok(Value::Object(o))
}

fn object_meta(buf: &[u8]) -> Result<Value, ProtobufError> {
    let mut m = Map::new();
    fields(buf, |n, w| {
        let s = |k: &str, m: &mut Map<String, Value>| -> Result<(), ProtobufError> {
            m.insert(k.into(), json!(string(&w)?));
            Ok(())
        };
        match n {
            1 => s("name", &mut m)?,
            2 => s("generateName", &mut m)?,
            3 => s("namespace", &mut m)?,
            5 => s("uid", &mut m)?,
            6 => s("resourceVersion", &mut m)?,
            11 => insert_entry(&mut m, "labels", &w, false)?,
            12 => insert_entry(&mut m, "annotations", &w, false)?,
            13 => push(&mut m, "ownerReferences", owner_reference(bytes(&w)?)?),
            14 => push(&mut m, "finalizers", json!(string(&w)?)),
            // Server-owned timestamps, generation and managedFields are ignored on create.
            _ => {}
        }
        Ok(())
    })?;
    Ok(Value::Object(m))
}

/// `SelfSubjectAccessReviewSpec`: resource or non-resource attributes.
fn access_review_spec(buf: &[u8]) -> Result<Value, ProtobufError> {
    const RESOURCE: &[&str] = &[
        "namespace",
        "verb",
        "group",
        "version",
        "resource",
        "subresource",
        "name",
    ];
    const NON_RESOURCE: &[&str] = &["path", "verb"];
    let mut spec = Map::new();
    fields(buf, |n, w| {
        let (key, names) = match n {
            1 => ("resourceAttributes", RESOURCE),
            2 => ("nonResourceAttributes", NON_RESOURCE),
            _ => return Ok(()),
        };
        let mut attrs = Map::new();
        fields(bytes(&w)?, |an, aw| {
            let name = usize::try_from(an)
                .ok()
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| names.get(i));
            if let Some(name) = name {
                attrs.insert((*name).into(), json!(string(&aw)?));
            }
            Ok(())
        })?;
        spec.insert(key.into(), Value::Object(attrs));
        Ok(())
    })?;
    Ok(Value::Object(spec))
}

/// Decodes a `k8s\0`-enveloped protobuf object into its JSON form.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let inner = body
        .strip_prefix(b"k8s\x00")
        .ok_or(ProtobufError::NoEnvelope)?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    fields(inner, |n, w| {
        match n {
            1 => fields(bytes(&w)?, |tn, tw| {
                match tn {
                    1 => api_version = string(&tw)?,
                    2 => kind = string(&tw)?,
                    _ => {}
                }
                Ok(())
            })?,
            2 => raw = bytes(&w)?,
            _ => {}
        }
        Ok(())
    })?;
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    let k = kind.as_str();
    let core =
        matches!(k, "Namespace" | "ConfigMap" | "Secret" | "ServiceAccount") && api_version == "v1";
    let review = (k == "SelfSubjectAccessReview" && api_version == "authorization.k8s.io/v1")
        || (matches!(k, "TokenRequest" | "SelfSubjectReview")
            && api_version == "authentication.k8s.io/v1");
    if !core && !review {
        return Err(ProtobufError::UnsupportedKind(format!(
            "{api_version}/{kind}"
        )));
    }
    fields(raw, |n, w| {
        match (k, n) {
            (_, 1) => {
                obj.insert("metadata".into(), object_meta(bytes(&w)?)?);
            }
            ("Namespace", 2) => {
                let mut spec = Map::new();
                fields(bytes(&w)?, |sn, sw| {
                    if sn == 1 {
                        push(&mut spec, "finalizers", json!(string(&sw)?));
                    }
                    Ok(())
                })?;
                obj.insert("spec".into(), Value::Object(spec));
            }
            ("ConfigMap", 2) | ("Secret", 4) => {
                let field = if k == "Secret" { "stringData" } else { "data" };
                insert_entry(&mut obj, field, &w, false)?;
            }
            ("ConfigMap", 3) => insert_entry(&mut obj, "binaryData", &w, true)?,
            ("Secret", 2) => insert_entry(&mut obj, "data", &w, true)?,
            ("Secret", 3) => {
                obj.insert("type".into(), json!(string(&w)?));
            }
            ("ConfigMap", 4) | ("Secret", 5) => {
                obj.insert("immutable".into(), json!(varint(&w)? != 0));
            }
            ("ServiceAccount", 2) => {
                let mut r = Map::new();
                fields(bytes(&w)?, |rn, rw| {
                    let key = match rn {
                        1 => "kind",
                        2 => "namespace",
                        3 => "name",
                        4 => "uid",
                        5 => "apiVersion",
                        _ => return Ok(()),
                    };
                    r.insert(key.into(), json!(string(&rw)?));
                    Ok(())
                })?;
                push(&mut obj, "secrets", Value::Object(r));
            }
            ("ServiceAccount", 3) => {
                let mut name = String::new();
                fields(bytes(&w)?, |rn, rw| {
                    if rn == 1 {
                        name = string(&rw)?;
                    }
                    Ok(())
                })?;
                push(&mut obj, "imagePullSecrets", json!({"name": name}));
            }
            ("SelfSubjectAccessReview", 2) => {
                obj.insert("spec".into(), access_review_spec(bytes(&w)?)?);
            }
            // TokenRequestSpec: audiences (1) and expirationSeconds (4); a bound object (3)
            // is not kept.
            ("TokenRequest", 2) => {
                let mut spec = Map::new();
                fields(bytes(&w)?, |sn, sw| {
                    match sn {
                        1 => push(&mut spec, "audiences", json!(string(&sw)?)),
                        4 => {
                            spec.insert("expirationSeconds".into(), json!(varint(&sw)?));
                        }
                        _ => {}
                    }
                    Ok(())
                })?;
                obj.insert("spec".into(), Value::Object(spec));
            }
            ("ServiceAccount", 4) => {
                obj.insert(
                    "automountServiceAccountToken".into(),
                    json!(varint(&w)? != 0),
                );
            }
            _ => {}
        }
        Ok(())
    })?;
    Ok(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn len_field(n: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![((n << 3) | 2) as u8, payload.len() as u8];
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn decodes_a_configmap_envelope() {
        let type_meta = [len_field(1, b"v1"), len_field(2, b"ConfigMap")].concat();
        let label = [len_field(1, b"app"), len_field(2, b"x")].concat();
        let meta = [len_field(1, b"c1"), len_field(11, &label)].concat();
        let data = [len_field(1, b"a"), len_field(2, b"b")].concat();
        let raw = [
            len_field(1, &meta),
            len_field(2, &data),
            vec![(4 << 3) as u8, 1],
        ]
        .concat();
        let body = [
            b"k8s\x00".to_vec(),
            len_field(1, &type_meta),
            len_field(2, &raw),
        ]
        .concat();
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1","labels":{"app":"x"}},"data":{"a":"b"},"immutable":true})
        );
    }

    #[test]
    fn decodes_a_token_request() {
        let type_meta = [
            len_field(1, b"authentication.k8s.io/v1"),
            len_field(2, b"TokenRequest"),
        ]
        .concat();
        let spec = [len_field(1, b"api"), vec![(4 << 3) as u8, 0x84, 0x07]].concat();
        let raw = [len_field(1, &len_field(1, b"robot")), len_field(2, &spec)].concat();
        let body = [
            b"k8s\x00".to_vec(),
            len_field(1, &type_meta),
            len_field(2, &raw),
        ]
        .concat();
        assert_eq!(
            decode(&body).unwrap(),
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "metadata": {"name": "robot"},
                "spec": {"audiences": ["api"], "expirationSeconds": 900}})
        );
    }

    #[test]
    fn rejects_garbage_and_other_kinds() {
        assert_eq!(decode(b"nope"), Err(ProtobufError::NoEnvelope));
        assert_eq!(decode(b"k8s\x00\x0a\xff"), Err(ProtobufError::Malformed));
        let type_meta = [len_field(1, b"apps/v1"), len_field(2, b"Deployment")].concat();
        let body = [b"k8s\x00".to_vec(), len_field(1, &type_meta)].concat();
        assert!(matches!(
            decode(&body),
            Err(ProtobufError::UnsupportedKind(_))
        ));
    }
}
