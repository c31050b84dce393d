//! A Cluster's topology variables against its class (upstream's
//! `internal/topology/variables`): defaults first, then every value is checked against the
//! schema its class defines, with the API server's own schema code (`capw_apiserver::values`),
//! so a variable is checked exactly as a custom resource field would be, with the same
//! messages. The field paths are upstream's: `spec.topology.variables[name].value`.

use capw_api::clusterclass::{ClusterClassStatusVariable, ClusterVariable};
use capw_apiserver::values;
use serde_json::Value;

/// One refusal, as the admission answer lists it: a field path and a kube-style message.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// The inline definition of each class variable.
fn schema_of(d: &ClusterClassStatusVariable) -> Option<&Value> {
    d.definitions
        .first()
        .map(|def| &def.schema.open_api_v3_schema)
}

fn required(d: &ClusterClassStatusVariable) -> bool {
    d.definitions
        .first()
        .and_then(|def| def.required)
        .unwrap_or(false)
}

/// Upstream's `DefaultClusterVariables`: a variable the Cluster does not set gets its schema's
/// top-level default, if it has one; one it sets gets its nested defaults.
pub fn default(values: &mut Vec<ClusterVariable>, definitions: &[ClusterClassStatusVariable]) {
    for d in definitions {
        let Some(schema) = schema_of(d) else { continue };
        match values.iter_mut().find(|v| v.name == d.name) {
            Some(v) => values::default(&mut v.value, schema),
            None => {
                if let Some(mut value) = schema.get("default").cloned() {
                    values::default(&mut value, schema);
                    values.push(ClusterVariable {
                        name: d.name.clone(),
                        value,
                    });
                }
            }
        }
    }
}

/// Upstream's `ValidateClusterVariables`: every value is defined by the class, set once, and
/// valid against its schema with no fields it does not declare; every required one is set.
pub fn validate(
    values: &[ClusterVariable],
    definitions: &[ClusterClassStatusVariable],
    path: &str,
) -> Vec<FieldError> {
    let mut errors = vec![];
    let err = |field: String, message: String| FieldError { field, message };
    let mut seen = std::collections::HashSet::new();
    for v in values {
        let at = format!("{path}[{}]", v.name);
        let raw = v.value.to_string();
        if !seen.insert(v.name.as_str()) {
            errors.push(err(
                at,
                format!(
                    "Duplicate value: \"{}\": variable names must be unique",
                    v.name
                ),
            ));
            continue;
        }
        let Some(d) = definitions.iter().find(|d| d.name == v.name) else {
            errors.push(err(
                at,
                format!(
                    "Invalid value: \"{}\": variable is not defined",
                    escape(&raw)
                ),
            ));
            continue;
        };
        let Some(schema) = schema_of(d) else { continue };
        let mut pruned = v.value.clone();
        let unknown = values::unknown_fields(&mut pruned, schema);
        if !unknown.is_empty() {
            errors.push(err(
                at.clone(),
                format!(
                    "Invalid value: \"{}\": failed validation: \"{}\" field(s) are not specified in the variable schema of variable \"{}\"",
                    escape(&raw),
                    unknown.join(","),
                    v.name
                ),
            ));
        }
        for c in values::validate(&v.value, schema, &format!("{at}.value")) {
            errors.push(err(c.field, c.message));
        }
    }
    for d in definitions.iter().filter(|d| required(d)) {
        if !values.iter().any(|v| v.name == d.name) {
            errors.push(err(
                path.to_string(),
                format!(
                    "Required value: required variable \"{}\" must be set",
                    d.name
                ),
            ));
        }
    }
    errors
}

fn escape(raw: &str) -> String {
    raw.replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn definitions() -> Vec<ClusterClassStatusVariable> {
        serde_json::from_value(json!([
            {"name": "imageRepository", "definitions": [{"from": "inline", "required": true,
                "schema": {"openAPIV3Schema": {"type": "string", "default": ""}}}]},
            {"name": "podSecurityStandard", "definitions": [{"from": "inline",
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "enabled": {"type": "boolean", "default": true},
                    "enforce": {"type": "string", "default": "baseline", "enum": ["privileged", "baseline", "restricted"]},
                }}}}]},
            {"name": "replicas", "definitions": [{"from": "inline",
                "schema": {"openAPIV3Schema": {"type": "integer", "minimum": 1}}}]},
        ]))
        .unwrap()
    }

    fn vars(v: Value) -> Vec<ClusterVariable> {
        serde_json::from_value(v).unwrap()
    }

    /// Upstream's defaulting rows: a top-level default is added, nested defaults fill in, a
    /// variable without a default stays unset.
    #[test]
    fn defaults_as_upstream() {
        let mut v =
            vars(json!([{"name": "podSecurityStandard", "value": {"enforce": "restricted"}}]));
        default(&mut v, &definitions());
        assert_eq!(
            serde_json::to_value(&v).unwrap(),
            json!([
                {"name": "podSecurityStandard", "value": {"enforce": "restricted", "enabled": true}},
                {"name": "imageRepository", "value": ""},
            ])
        );
    }

    /// Upstream's validation rows and messages, with their field paths.
    #[test]
    fn validates_as_upstream() {
        let d = definitions();
        let path = "spec.topology.variables";
        let check = |v: Value| {
            validate(&vars(v), &d, path)
                .into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
        };
        assert!(check(json!([{"name": "imageRepository", "value": "r"}])).is_empty());
        assert_eq!(
            check(json!([])),
            [
                "spec.topology.variables: Required value: required variable \"imageRepository\" must be set"
            ]
        );
        assert_eq!(
            check(json!([{"name": "imageRepository", "value": ""}, {"name": "nope", "value": 1}])),
            ["spec.topology.variables[nope]: Invalid value: \"1\": variable is not defined"]
        );
        let bad = check(json!([{"name": "imageRepository", "value": ""},
            {"name": "podSecurityStandard", "value": {"enforce": "lax", "extra": true}}]));
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(
            bad[0].contains("\\\"extra\\\"")
                || bad[0].contains("\"extra\" field(s) are not specified"),
            "{bad:?}"
        );
        assert!(bad[1].starts_with("spec.topology.variables[podSecurityStandard].value.enforce: Unsupported value: \"lax\""), "{bad:?}");
        let low = check(
            json!([{"name": "imageRepository", "value": ""}, {"name": "replicas", "value": 0}]),
        );
        assert_eq!(low.len(), 1, "{low:?}");
        // kube-apiserver's own wording, as upstream's validator (the same library) gives it.
        assert_eq!(
            low,
            [
                "spec.topology.variables[replicas].value: Invalid value: 0: spec.topology.variables[replicas].value in body should be greater than or equal to 1"
            ]
        );
        let twice = check(
            json!([{"name": "imageRepository", "value": ""}, {"name": "imageRepository", "value": "x"}]),
        );
        assert_eq!(
            twice,
            [
                "spec.topology.variables[imageRepository]: Duplicate value: \"imageRepository\": variable names must be unique"
            ]
        );
    }
}
