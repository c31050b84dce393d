//! The API server's schema code for values that are not whole objects: a ClusterClass
//! variable's `openAPIV3Schema` is a CRD-style schema, and upstream checks and defaults a
//! Cluster's variables with kube-apiserver's own code. Core uses this instead of a second
//! validator: the same structural rules, defaults, formats, bounds and CEL rules, and the same
//! messages.

use crate::schema;
pub use crate::status::Cause;
use serde_json::Value;

/// Whether `schema` is structural, as a CRD field's schema must be (any type at its root), and
/// its CEL rules compile; the causes' fields start at `path`.
pub fn structural(schema: &Value, path: &str) -> Vec<Cause> {
    schema::check_value_schema(schema, path)
}

/// Fills `value`'s absent properties from the schema's defaults.
pub fn default(value: &mut Value, schema: &Value) {
    schema::default(value, schema);
}

/// The fields of `value` the schema does not declare (and does not keep as unknown), which
/// are removed from it.
pub fn unknown_fields(value: &mut Value, schema: &Value) -> Vec<String> {
    schema::prune(value, schema).0
}

/// Validates `value` against `schema` (types, formats, bounds, then the CEL rules unless an
/// earlier error keeps them from running, as kube does); the causes' fields start at `path`.
pub fn validate(value: &Value, schema: &Value, path: &str) -> Vec<Cause> {
    let mut causes = schema::validate(value, schema, path);
    if causes.iter().any(schema::blocks_cel) {
        return causes;
    }
    let mut body = value.clone();
    let compiled = kube_cel::compile_schema(schema);
    // The rules see the value with its schema defaults, as kube's do.
    schema::default(&mut body, schema);
    causes.extend(
        schema::validate_cel(&body, schema, &compiled, None)
            .into_iter()
            .map(|mut c| {
                c.field = join(path, &c.field);
                c
            }),
    );
    causes
}

fn join(path: &str, field: &str) -> String {
    match (path, field.trim_start_matches('.')) {
        (p, "") | (p, "<nil>") => p.to_string(),
        ("", f) => f.to_string(),
        (p, f) if f.starts_with('[') => format!("{p}{f}"),
        (p, f) => format!("{p}.{f}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_variable_is_defaulted_and_checked_as_a_custom_resource_is() {
        let s = json!({
            "type": "object",
            "properties": {
                "enabled": {"type": "boolean", "default": true},
                "enforce": {"type": "string", "enum": ["privileged", "baseline", "restricted"]},
                "replicas": {"type": "integer", "x-kubernetes-validations": [{"rule": "self >= 1", "message": "must be at least 1"}]},
            },
        });
        assert!(structural(&s, "schema").is_empty());
        let mut v = json!({"enforce": "baseline"});
        default(&mut v, &s);
        assert_eq!(v, json!({"enforce": "baseline", "enabled": true}));
        assert!(validate(&v, &s, "value").is_empty());
        let bad = validate(&json!({"enforce": "lax"}), &s, "value");
        assert_eq!(bad[0].field, "value.enforce", "{bad:?}");
        assert!(
            bad[0].message.contains("Unsupported value: \"lax\""),
            "{bad:?}"
        );
        let cel = validate(&json!({"replicas": 0}), &s, "value");
        assert_eq!(cel.len(), 1, "{cel:?}");
        assert_eq!(cel[0].field, "value.replicas");
        assert!(cel[0].message.contains("must be at least 1"), "{cel:?}");
        let mut extra = json!({"enforce": "baseline", "nope": 1});
        assert_eq!(unknown_fields(&mut extra, &s), ["nope"]);
    }
}
