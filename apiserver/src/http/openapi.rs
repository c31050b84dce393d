//! `/openapi/v2` (JSON) and `/openapi/v3`, built from the registry: CRD versions publish their
//! `openAPIV3Schema`, built-in kinds a typed-object stub (their schemas are compiled into the
//! clients). Each definition carries `x-kubernetes-group-version-kind`, which is how
//! `kubectl explain` finds a kind; each resource's PATCH operation lists `fieldValidation`,
//! which is how kubectl learns that the server validates fields itself.

use crate::registry::{Registry, ResourceType};
use serde_json::{Map, Value, json};

/// The reversed-domain definition name kube uses: `io.x-k8s.cluster.v1beta2.Cluster`.
fn definition_name(rt: &ResourceType) -> String {
    let group = if rt.group.is_empty() {
        "io.k8s.api.core".to_string()
    } else {
        rt.group.split('.').rev().collect::<Vec<_>>().join(".")
    };
    format!("{group}.{}.{}", rt.version, rt.kind)
}

fn gvk(rt: &ResourceType) -> Value {
    json!([{"group": rt.group, "version": rt.version, "kind": rt.kind}])
}

fn type_meta() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        "apiVersion".into(),
        json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}),
    );
    m.insert(
        "kind".into(),
        json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}),
    );
    m.insert(
        "metadata".into(),
        json!({"type": "object", "description": "Standard object's metadata.", "x-kubernetes-preserve-unknown-fields": true}),
    );
    m
}

/// The published schema of one kind: its CRD schema, or a stub for a built-in.
fn definition(rt: &ResourceType) -> Value {
    let mut def = match &rt.schema {
        Some(s) => s.clone(),
        None => {
            json!({"type": "object", "description": format!("{} (built-in; the client's compiled schema applies)", rt.kind), "x-kubernetes-preserve-unknown-fields": true})
        }
    };
    if let Some(obj) = def.as_object_mut() {
        let props = obj
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(props) = props.as_object_mut() {
            for (k, v) in type_meta() {
                props.entry(k).or_insert(v);
            }
        }
        obj.insert("x-kubernetes-group-version-kind".into(), gvk(rt));
    }
    def
}

fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The PATCH operation of one object path, with the query parameters kubectl looks for.
fn patch_operation(rt: &ResourceType) -> Value {
    let params: Vec<Value> = ["dryRun", "fieldManager", "fieldValidation", "force"]
        .iter()
        .map(|p| json!({"name": p, "in": "query", "schema": {"type": "string"}, "uniqueItems": true}))
        .collect();
    json!({
        "operationId": format!("patch{}", rt.kind),
        "parameters": params,
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
    })
}

fn object_path(rt: &ResourceType) -> String {
    let base = group_version_path(&rt.group, &rt.version);
    if rt.namespaced {
        format!("/{base}/namespaces/{{namespace}}/{}/{{name}}", rt.plural)
    } else {
        format!("/{base}/{}/{{name}}", rt.plural)
    }
}

fn writable(rt: &ResourceType) -> bool {
    rt.verbs().contains(&"patch")
}

/// `/openapi/v2` as JSON: every served kind's definition.
pub fn v2(reg: &Registry) -> Value {
    let mut definitions = Map::new();
    let mut paths = Map::new();
    for rt in reg.all() {
        definitions.insert(definition_name(&rt), definition(&rt));
        if writable(&rt) {
            paths.insert(object_path(&rt), json!({"patch": patch_operation(&rt)}));
        }
    }
    json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.33.0-capw"},
           "paths": paths, "definitions": definitions})
}

/// `/openapi/v3`: the index of group-version documents.
pub fn v3_index(reg: &Registry) -> Value {
    let mut paths = Map::new();
    paths.insert(
        "api/v1".into(),
        json!({"serverRelativeURL": format!("/openapi/v3/api/v1?hash={}", hash(&v3(reg, "", "v1")))}),
    );
    for (g, versions) in reg.groups() {
        for v in versions {
            let doc = v3(reg, &g, &v);
            paths.insert(
                group_version_path(&g, &v),
                json!({"serverRelativeURL": format!("/openapi/v3/{}?hash={}", group_version_path(&g, &v), hash(&doc))}),
            );
        }
    }
    json!({"paths": paths})
}

/// A stable content hash, so clients may cache a document until it changes.
fn hash(doc: &Value) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    doc.to_string().hash(&mut h);
    format!("{:016X}", h.finish())
}

/// One group-version's OpenAPI v3 document.
pub fn v3(reg: &Registry, group: &str, version: &str) -> Value {
    let mut schemas = Map::new();
    let mut paths = Map::new();
    let mut types = reg.in_group_version(group, version);
    types.sort_by(|a, b| a.plural.cmp(&b.plural));
    for rt in &types {
        schemas.insert(definition_name(rt), definition(rt));
        if writable(rt) {
            paths.insert(object_path(rt), json!({"patch": patch_operation(rt)}));
        }
    }
    json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.33.0-capw"},
           "paths": paths, "components": {"schemas": schemas}})
}

/// Whether `group/version` is served (for `/openapi/v3/...` lookups).
pub fn served(reg: &Registry, group: &str, version: &str) -> bool {
    !reg.in_group_version(group, version).is_empty()
}
