//! `status.variables`: every variable the class defines, sorted by name, each with the one
//! definition it has inline. Variables from external patches (`DiscoverVariables`) need the
//! Runtime SDK, which capw does not have: a class that uses one is not ready, with a message
//! that says so, rather than missing variables nobody sees.

use capw_api::clusterclass::{
    ClusterClassSpec, ClusterClassStatusVariable, ClusterClassStatusVariableDefinition,
};

/// Where an inline variable is defined, as upstream writes it.
pub const FROM_INLINE: &str = "inline";

/// The status variables of `spec`, or why there are none.
pub(super) fn of(spec: &ClusterClassSpec) -> Result<Vec<ClusterClassStatusVariable>, String> {
    let external: Vec<&str> = spec
        .patches
        .iter()
        .filter(|p| p.external.is_some())
        .map(|p| p.name.as_str())
        .collect();
    if !external.is_empty() {
        return Err(format!(
            "VariableDiscovery failed: patches {} are external (Runtime SDK), which capw does not run; define their variables and patches inline",
            external.join(", ")
        ));
    }
    let mut list: Vec<ClusterClassStatusVariable> = spec
        .variables
        .iter()
        .map(|v| ClusterClassStatusVariable {
            name: v.name.clone(),
            definitions_conflict: Some(false),
            definitions: vec![ClusterClassStatusVariableDefinition {
                from: FROM_INLINE.into(),
                required: v.required,
                deprecated_v1_beta1_metadata: v.deprecated_v1_beta1_metadata.clone(),
                schema: v.schema.clone(),
            }],
        })
        .collect();
    list.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(mut v: serde_json::Value) -> ClusterClassSpec {
        let t = json!({"templateRef": {"apiVersion": "g/v1beta2", "kind": "K", "name": "n"}});
        v["infrastructure"] = t.clone();
        v["controlPlane"] = t;
        serde_json::from_value(v).unwrap()
    }

    /// Upstream's `TestReconcileVariables` inline rows: sorted, `from: inline`, no conflict.
    #[test]
    fn inline_variables_are_listed_sorted() {
        let s = spec(json!({"variables": [
            {"name": "zeta", "required": true, "schema": {"openAPIV3Schema": {"type": "string"}}},
            {"name": "alpha", "schema": {"openAPIV3Schema": {"type": "boolean", "default": true}}},
        ]}));
        let list = of(&s).unwrap();
        assert_eq!(
            serde_json::to_value(&list).unwrap(),
            json!([
                {"name": "alpha", "definitionsConflict": false, "definitions": [
                    {"from": "inline", "schema": {"openAPIV3Schema": {"type": "boolean", "default": true}}}]},
                {"name": "zeta", "definitionsConflict": false, "definitions": [
                    {"from": "inline", "required": true, "schema": {"openAPIV3Schema": {"type": "string"}}}]},
            ])
        );
    }

    #[test]
    fn an_external_patch_is_named_in_the_error() {
        let s = spec(json!({"patches": [
            {"name": "inline-one", "definitions": []},
            {"name": "lb", "external": {"generatePatchesExtension": "x"}},
        ]}));
        let e = of(&s).unwrap_err();
        assert!(e.contains("patches lb are external"), "{e}");
    }
}
