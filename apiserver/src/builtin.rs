//! Rules of the built-in kinds: typed decoding through k8s-openapi, Secret `stringData` and
//! type rules, immutable ConfigMaps and Secrets, Namespace defaults, the two Event views, and
//! CustomResourceDefinition validation; Pods in `pod`.

mod pod;

use crate::registry::Builtin;
use crate::schema;
use crate::status::{ApiError, Cause};
use base64::Engine;
pub use pod::{ready_column, restarts_column, status_column};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

fn decode<T: DeserializeOwned>(obj: &Value) -> Result<(), ApiError> {
    serde_json::from_value::<T>(obj.clone())
        .map(|_| ())
        .map_err(|e| ApiError::bad_request(format!("the object does not decode as its kind: {e}")))
}

/// Checks that `obj` decodes as its typed Kubernetes kind (types, enums and required fields).
pub fn typed_check(b: Builtin, obj: &Value) -> Result<(), ApiError> {
    use k8s_openapi::api::{
        coordination::v1 as coord, core::v1 as core, events::v1 as ev, rbac::v1 as rbac,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
    match b {
        Builtin::Namespace => decode::<core::Namespace>(obj),
        Builtin::ConfigMap => decode::<core::ConfigMap>(obj),
        Builtin::Secret => decode::<core::Secret>(obj),
        Builtin::Event => decode::<core::Event>(obj),
        Builtin::EventV1 => decode::<ev::Event>(obj),
        Builtin::ServiceAccount => decode::<core::ServiceAccount>(obj),
        Builtin::Node => decode::<core::Node>(obj),
        Builtin::Pod => decode::<core::Pod>(obj),
        Builtin::Deployment => decode::<k8s_openapi::api::apps::v1::Deployment>(obj),
        Builtin::Service => decode::<core::Service>(obj),
        Builtin::Lease => decode::<coord::Lease>(obj),
        Builtin::Crd => decode::<ext::CustomResourceDefinition>(obj),
        Builtin::CertificateSigningRequest => {
            decode::<k8s_openapi::api::certificates::v1::CertificateSigningRequest>(obj)
        }
        Builtin::WebhookConfiguration => {
            use k8s_openapi::api::admissionregistration::v1 as adm;
            match obj.get("kind").and_then(Value::as_str) {
                Some("MutatingWebhookConfiguration") => {
                    decode::<adm::MutatingWebhookConfiguration>(obj)
                }
                _ => decode::<adm::ValidatingWebhookConfiguration>(obj),
            }
        }
        Builtin::SelfSubjectAccessReview => {
            decode::<k8s_openapi::api::authorization::v1::SelfSubjectAccessReview>(obj)
        }
        Builtin::SelfSubjectReview => {
            decode::<k8s_openapi::api::authentication::v1::SelfSubjectReview>(obj)
        }
        Builtin::Rbac => match obj.get("kind").and_then(Value::as_str) {
            Some("Role") => decode::<rbac::Role>(obj),
            Some("ClusterRole") => decode::<rbac::ClusterRole>(obj),
            Some("RoleBinding") => decode::<rbac::RoleBinding>(obj),
            _ => decode::<rbac::ClusterRoleBinding>(obj),
        },
    }
}

/// Write-time rules of a built-in kind. `old` is the stored object on update.
pub fn on_write(b: Builtin, obj: &mut Value, old: Option<&Value>) -> Vec<Cause> {
    let mut errs = vec![];
    match b {
        Builtin::Secret => {
            if let Some(Value::Object(sd)) =
                obj.as_object_mut().and_then(|m| m.remove("stringData"))
            {
                let data = obj
                    .as_object_mut()
                    .map(|m| m.entry("data").or_insert_with(|| json!({})));
                if let Some(Value::Object(data)) = data {
                    for (k, v) in sd {
                        let s = v.as_str().unwrap_or_default();
                        data.insert(
                            k,
                            Value::String(base64::engine::general_purpose::STANDARD.encode(s)),
                        );
                    }
                }
            }
            if let Some(Value::Object(data)) = obj.get("data") {
                for (k, v) in data {
                    let ok = v.as_str().is_some_and(|s| {
                        base64::engine::general_purpose::STANDARD.decode(s).is_ok()
                    });
                    if !ok {
                        errs.push(Cause::new(
                            "FieldValueInvalid",
                            format!("data[{k}]"),
                            "Invalid value: \"<secret contents redacted>\": must be base64 encoded",
                        ));
                    }
                }
            }
            if obj.get("type").is_none_or(Value::is_null) {
                obj["type"] = json!("Opaque");
            }
            if let Some(old) = old
                && old.get("type") != obj.get("type")
            {
                errs.push(Cause::new(
                    "FieldValueInvalid",
                    "type",
                    format!("Invalid value: {}: field is immutable", obj["type"]),
                ));
            }
            immutable_data(obj, old, &mut errs);
            data_size(obj, "data", true, &mut errs);
        }
        Builtin::ConfigMap => {
            immutable_data(obj, old, &mut errs);
            // kube names no field for a ConfigMap: the limit is on the whole object's data.
            data_size(obj, "[]", false, &mut errs);
        }
        Builtin::Namespace if old.is_none() => {
            let spec = obj
                .as_object_mut()
                .map(|m| m.entry("spec").or_insert_with(|| json!({})));
            if let Some(Value::Object(spec)) = spec {
                spec.entry("finalizers")
                    .or_insert_with(|| json!(["kubernetes"]));
            }
            obj["status"] = json!({"phase": "Active"});
        }
        Builtin::Pod => errs.extend(pod::on_write(obj, old)),
        Builtin::WebhookConfiguration => errs.extend(crate::admission::on_write(obj)),
        Builtin::Crd => {
            default_crd(obj);
            errs.extend(validate_crd(obj, old));
        }
        _ => {}
    }
    errs
}

/// kube-apiserver's `MaxSecretSize`, which also bounds ConfigMaps.
pub const MAX_DATA_BYTES: usize = 1024 * 1024;

/// The data of a ConfigMap (`data` and `binaryData`) or Secret (`data`, decoded), counted as
/// kube counts it: every key and every value.
fn data_size(obj: &Value, field: &str, secret: bool, errs: &mut Vec<Cause>) {
    let b64 = |v: &Value| {
        v.as_str()
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
            .map_or(0, |d| d.len())
    };
    let mut total = 0;
    for (part, decode) in [("data", secret), ("binaryData", true)] {
        for (k, v) in obj
            .get(part)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            total += k.len()
                + if decode {
                    b64(v)
                } else {
                    v.as_str().map_or(0, str::len)
                };
        }
    }
    if total > MAX_DATA_BYTES {
        errs.push(Cause::new(
            "FieldValueTooLong",
            field,
            format!("Too long: must have at most {MAX_DATA_BYTES} bytes"),
        ));
    }
}

/// The defaults kube-apiserver gives a CRD: `names.singular` and `names.listKind` from the
/// kind, and `conversion.strategy: None`.
fn default_crd(crd: &mut Value) {
    let kind = crd
        .pointer("/spec/names/kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if !kind.is_empty()
        && let Some(names) = crd
            .pointer_mut("/spec/names")
            .and_then(Value::as_object_mut)
    {
        names
            .entry("listKind")
            .or_insert_with(|| json!(format!("{kind}List")));
        names
            .entry("singular")
            .or_insert_with(|| json!(kind.to_lowercase()));
    }
    if let Some(spec) = crd.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("conversion")
            .or_insert_with(|| json!({"strategy": "None"}));
    }
}

fn immutable_data(obj: &Value, old: Option<&Value>, errs: &mut Vec<Cause>) {
    let Some(old) = old else { return };
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return;
    }
    for f in ["data", "binaryData", "immutable"] {
        if old.get(f) != obj.get(f) {
            errs.push(Cause::new(
                "FieldValueForbidden",
                f,
                "Forbidden: field is immutable when `immutable` is set",
            ));
        }
    }
}

fn validate_crd(crd: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut errs = vec![];
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let plural = spec["names"]["plural"].as_str().unwrap_or_default();
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if group.is_empty() || !group.contains('.') {
        errs.push(Cause::new(
            "FieldValueInvalid",
            "spec.group",
            format!("Invalid value: {group:?}: should be a domain with at least one dot"),
        ));
    }
    if spec["names"]["kind"].as_str().is_none_or(str::is_empty) {
        errs.push(Cause::new(
            "FieldValueRequired",
            "spec.names.kind",
            "Required value",
        ));
    }
    if plural.is_empty() {
        errs.push(Cause::new(
            "FieldValueRequired",
            "spec.names.plural",
            "Required value",
        ));
    }
    if name != format!("{plural}.{group}") {
        errs.push(Cause::new(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    match spec["scope"].as_str() {
        Some("Namespaced" | "Cluster") => {}
        other => errs.push(Cause::new(
            "FieldValueNotSupported",
            "spec.scope",
            format!("Unsupported value: {other:?}: supported values: \"Cluster\", \"Namespaced\""),
        )),
    }
    if spec.pointer("/conversion/strategy").and_then(Value::as_str) == Some("Webhook") {
        errs.push(Cause::new(
            "FieldValueNotSupported",
            "spec.conversion.strategy",
            "Unsupported value: \"Webhook\": this server has no conversion webhooks; use strategy None",
        ));
    }
    if let Some(old) = old
        && (old["spec"]["group"] != spec["group"]
            || old["spec"]["names"]["plural"] != spec["names"]["plural"])
    {
        errs.push(Cause::new(
            "FieldValueInvalid",
            "spec.group",
            "Invalid value: group and names.plural are immutable",
        ));
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        errs.push(Cause::new(
            "FieldValueRequired",
            "spec.versions",
            "Required value: must have at least one version",
        ));
    }
    let storage = versions
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .count();
    if storage != 1 {
        errs.push(Cause::new("FieldValueInvalid", "spec.versions", format!("Invalid value: must have exactly one version marked as storage version, found {storage}")));
    }
    for (i, v) in versions.iter().enumerate() {
        match v.pointer("/schema/openAPIV3Schema") {
            Some(s) => errs.extend(schema::check_structural(
                s,
                &format!("spec.versions[{i}].schema.openAPIV3Schema"),
            )),
            None => errs.push(Cause::new(
                "FieldValueRequired",
                format!("spec.versions[{i}].schema.openAPIV3Schema"),
                "Required value: schemas are required",
            )),
        }
    }
    errs
}

fn take(m: &Map<String, Value>, k: &str) -> Option<Value> {
    m.get(k).filter(|v| !v.is_null()).cloned()
}

fn put(out: &mut Map<String, Value>, k: &str, v: Option<Value>) {
    if let Some(v) = v {
        out.insert(k.to_string(), v);
    }
}

/// events.k8s.io/v1 → core/v1 (the storage form).
pub fn event_to_core(v1: &Value) -> Value {
    let Some(m) = v1.as_object() else {
        return v1.clone();
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("v1"));
    out.insert("kind".into(), json!("Event"));
    put(&mut out, "metadata", take(m, "metadata"));
    put(&mut out, "involvedObject", take(m, "regarding"));
    put(&mut out, "related", take(m, "related"));
    put(&mut out, "message", take(m, "note"));
    for k in [
        "reason",
        "type",
        "action",
        "eventTime",
        "reportingInstance",
        "series",
    ] {
        put(&mut out, k, take(m, k));
    }
    put(
        &mut out,
        "reportingComponent",
        take(m, "reportingController"),
    );
    let source = take(m, "deprecatedSource").or_else(|| {
        let mut s = Map::new();
        put(&mut s, "component", take(m, "reportingController"));
        put(&mut s, "host", take(m, "reportingInstance"));
        (!s.is_empty()).then_some(Value::Object(s))
    });
    put(&mut out, "source", source);
    put(
        &mut out,
        "count",
        m.get("series")
            .and_then(|s| s.get("count"))
            .cloned()
            .or_else(|| take(m, "deprecatedCount")),
    );
    put(
        &mut out,
        "firstTimestamp",
        take(m, "deprecatedFirstTimestamp"),
    );
    put(
        &mut out,
        "lastTimestamp",
        take(m, "deprecatedLastTimestamp"),
    );
    if !out.contains_key("involvedObject") {
        out.insert("involvedObject".into(), json!({}));
    }
    Value::Object(out)
}

/// core/v1 → events.k8s.io/v1.
pub fn event_to_v1(core: &Value) -> Value {
    let Some(m) = core.as_object() else {
        return core.clone();
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("events.k8s.io/v1"));
    out.insert("kind".into(), json!("Event"));
    put(&mut out, "metadata", take(m, "metadata"));
    put(&mut out, "regarding", take(m, "involvedObject"));
    put(&mut out, "related", take(m, "related"));
    put(&mut out, "note", take(m, "message"));
    for k in ["reason", "type", "action", "eventTime", "series"] {
        put(&mut out, k, take(m, k));
    }
    let source = m.get("source").and_then(Value::as_object);
    put(
        &mut out,
        "reportingController",
        take(m, "reportingComponent").or_else(|| source.and_then(|s| take(s, "component"))),
    );
    put(
        &mut out,
        "reportingInstance",
        take(m, "reportingInstance").or_else(|| source.and_then(|s| take(s, "host"))),
    );
    put(&mut out, "deprecatedSource", take(m, "source"));
    put(&mut out, "deprecatedCount", take(m, "count"));
    put(
        &mut out,
        "deprecatedFirstTimestamp",
        take(m, "firstTimestamp"),
    );
    put(
        &mut out,
        "deprecatedLastTimestamp",
        take(m, "lastTimestamp"),
    );
    Value::Object(out)
}

/// Reads a field of an object for field selectors (`source` means `source.component`).
pub fn field_value(obj: &Value, field: &str) -> Option<String> {
    let path = if field == "source" {
        "source.component"
    } else {
        field
    };
    let mut cur = obj;
    for step in path.split('.') {
        cur = cur.get(step)?;
    }
    Some(match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_string_data_and_types() {
        let mut s = json!({"stringData":{"a":"hi"},"data":{"b":"eA=="}});
        assert!(on_write(Builtin::Secret, &mut s, None).is_empty());
        assert_eq!(s["data"], json!({"a":"aGk=","b":"eA=="}));
        assert_eq!(s["type"], "Opaque");
        assert!(s.get("stringData").is_none());
        let mut bad = json!({"data":{"x":"!!"}});
        assert_eq!(
            on_write(Builtin::Secret, &mut bad, None)[0].field,
            "data[x]"
        );
        let mut changed = json!({"type":"kubernetes.io/tls","data":{}});
        assert_eq!(
            on_write(Builtin::Secret, &mut changed, Some(&s))[0].field,
            "type"
        );
    }

    #[test]
    fn event_views_roundtrip() {
        let v1 = json!({"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"e"},
            "regarding":{"kind":"Widget","name":"w1"},"note":"n","reason":"R","type":"Normal","action":"A",
            "reportingController":"c","reportingInstance":"i","series":{"count":2,"lastObservedTime":"2026-01-01T00:00:00.000000Z"}});
        let core = event_to_core(&v1);
        assert_eq!(core["involvedObject"]["name"], "w1");
        assert_eq!(core["message"], "n");
        assert_eq!(core["count"], 2);
        assert_eq!(core["source"]["component"], "c");
        let back = event_to_v1(&core);
        for k in [
            "regarding",
            "note",
            "reason",
            "series",
            "reportingController",
            "reportingInstance",
        ] {
            assert_eq!(back[k], v1[k], "{k}");
        }
        assert_eq!(
            field_value(&core, "involvedObject.kind").as_deref(),
            Some("Widget")
        );
        assert_eq!(field_value(&core, "source").as_deref(), Some("c"));
    }
}
