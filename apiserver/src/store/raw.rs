//! An object as the store keeps it: its canonical JSON bytes, shared by the object map, the
//! watch window, LIST and watch responses, instead of a decoded tree.
//!
//! A `serde_json::Value` of a small ConfigMap costs about 2 KB in B-tree nodes and strings for
//! under 700 bytes of JSON (measured by `cargo bench -p capw-apiserver --bench heap`), and every
//! reader re-encoded it. Readers that need the tree decode it; responses whose view is the
//! stored form send the bytes as they are.

use bytes::Bytes;
use serde_json::Value;
use std::hash::{DefaultHasher, Hash, Hasher};

/// One object's canonical JSON and the `apiVersion`/`kind` it was stored with.
#[derive(Debug, Clone)]
pub struct Raw {
    json: Bytes,
    /// A hash of the stored `apiVersion` and `kind`: a reader compares it with its own view's
    /// instead of decoding the object to learn whether the bytes already are that view.
    form: u64,
}

/// What deletion reads of an object's metadata ([`Raw::lifecycle`]).
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    /// `metadata.uid`, empty when absent.
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    deletion_timestamp: Option<serde::de::IgnoredAny>,
    /// `metadata.finalizers`.
    #[serde(default)]
    pub finalizers: Vec<String>,
}

impl Lifecycle {
    /// Whether `metadata.deletionTimestamp` is set (not absent, not null).
    pub fn is_deleting(&self) -> bool {
        self.deletion_timestamp.is_some()
    }
}

/// A hash of an `apiVersion` and a `kind`, as [`Raw::is_form`] compares them.
pub fn form(api_version: &str, kind: &str) -> u64 {
    // SipHash with fixed keys: the same within a process, which is as long as a Raw lives.
    let mut h = DefaultHasher::new();
    (api_version, kind).hash(&mut h);
    h.finish()
}

fn str_at<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or_default()
}

impl Raw {
    /// Serializes `object`, the canonical form every later reader gets.
    pub(super) fn encode(object: &Value) -> Result<Self, serde_json::Error> {
        // Exactly sized: `Bytes::from(Vec)` keeps the spare capacity of the growing buffer
        // (up to half of it) and adds a header allocation.
        let json = serde_json::to_vec(object)?.into_boxed_slice();
        Ok(Raw {
            json: Bytes::from(json),
            form: form(str_at(object, "apiVersion"), str_at(object, "kind")),
        })
    }

    /// Wraps bytes already known to be `object`'s serialization (a row read back from disk).
    pub(super) fn from_parts(json: Bytes, object: &Value) -> Self {
        Raw {
            json,
            form: form(str_at(object, "apiVersion"), str_at(object, "kind")),
        }
    }

    /// The JSON bytes.
    pub fn json(&self) -> &Bytes {
        &self.json
    }

    /// The decoded object.
    pub fn value(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_slice(&self.json)
    }

    /// `{"metadata": …}` alone: the rest of the object is parsed past, not built, for readers
    /// that look only at metadata (the garbage collector, label selectors).
    pub fn metadata(&self) -> Result<Value, serde_json::Error> {
        #[derive(serde::Deserialize)]
        struct MetadataOnly {
            #[serde(default)]
            metadata: Value,
        }
        let m: MetadataOnly = serde_json::from_slice(&self.json)?;
        let mut out = serde_json::Map::new();
        out.insert("metadata".into(), m.metadata);
        Ok(Value::Object(out))
    }

    /// Its uid, deletion and finalizers, with the rest of the object parsed past, not decoded
    /// (managedFields alone are most of an object's metadata): the garbage collector reads them
    /// of every write and of every owner at each resync, and every namespaced create asks its
    /// namespace whether it is being deleted (decoding the namespace whole took about 7 % of
    /// the API server's CPU for a create).
    pub fn lifecycle(&self) -> Option<Lifecycle> {
        #[derive(serde::Deserialize)]
        struct Object {
            #[serde(default)]
            metadata: Lifecycle,
        }
        serde_json::from_slice::<Object>(&self.json)
            .ok()
            .map(|o| o.metadata)
    }

    /// Whether the object was stored with this `form(apiVersion, kind)`.
    pub fn is_form(&self, form: u64) -> bool {
        self.form == form
    }

    /// Whether two handles share one serialization (the same write), not merely equal bytes.
    pub(super) fn same_write(&self, other: &Raw) -> bool {
        self.json.as_ptr() == other.json.as_ptr() && self.json.len() == other.json.len()
    }
}

/// What the uid and owner indexes hold for one stored object, kept beside its bytes so that
/// replacing or removing it needs no decoding.
#[derive(Debug, Clone, Default)]
pub(super) struct IndexKeys {
    pub(super) uid: Option<Box<str>>,
    pub(super) owners: Box<[Box<str>]>,
}

impl IndexKeys {
    pub(super) fn of(v: &Value) -> Self {
        let uid = v
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(Box::from);
        let owners = v
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .map(|refs| {
                refs.iter()
                    .filter_map(|r| r.get("uid").and_then(Value::as_str))
                    .map(Box::from)
                    .collect()
            })
            .unwrap_or_default();
        IndexKeys { uid, owners }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_bytes_decode_to_the_object_and_carry_its_form() {
        let o = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        let raw = Raw::encode(&o).unwrap();
        assert_eq!(raw.value().unwrap(), o);
        assert_eq!(raw.metadata().unwrap(), json!({"metadata": {"name": "a"}}));
        assert!(raw.is_form(form("v1", "ConfigMap")));
        assert!(!raw.is_form(form("v1", "Secret")));
        assert!(!raw.is_form(form("events.k8s.io/v1", "ConfigMap")));
        assert!(raw.same_write(&raw.clone()));
        assert!(!raw.same_write(&Raw::encode(&o).unwrap()));
        let deleting = |o: &Value| Raw::encode(o).unwrap().lifecycle().unwrap().is_deleting();
        assert!(!raw.lifecycle().unwrap().is_deleting());
        let null = json!({"metadata": {"name": "a", "deletionTimestamp": null}});
        assert!(!deleting(&null));
        let gone = json!({"spec": {"deletionTimestamp": "x"}, "metadata": {"name": "a",
            "uid": "u1", "deletionTimestamp": "2026-12-06T00:00:00Z", "finalizers": ["kubernetes"]}});
        assert!(deleting(&gone));
        let l = Raw::encode(&gone).unwrap().lifecycle().unwrap();
        assert_eq!(
            (l.uid.as_str(), l.finalizers),
            ("u1", vec!["kubernetes".to_string()])
        );
        assert!(!deleting(&json!({"spec": {}})));
    }

    #[test]
    fn index_keys_are_the_uid_and_the_owner_uids() {
        let o =
            json!({"metadata": {"uid": "u1", "ownerReferences": [{"uid": "o1"}, {"uid": "o2"}]}});
        let k = IndexKeys::of(&o);
        assert_eq!(k.uid.as_deref(), Some("u1"));
        assert_eq!(
            k.owners.iter().map(|o| &**o).collect::<Vec<_>>(),
            ["o1", "o2"]
        );
    }
}
