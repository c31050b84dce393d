//! Strategic merge patch for the built-in kinds: the subset kubectl 1.20 and the Python typed
//! client send (map merge, `null` deletes, keyed list merge, and the `$patch`,
//! `$deleteFromPrimitiveList`, `$setElementOrder` and `$retainKeys` directives).

use super::PatchError;
use serde_json::{Map, Value};

/// How a list at a given path merges; lists not named here are replaced, as upstream does for
/// lists without `patchStrategy: merge`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ListStrategy {
    /// Elements are objects matched by this key.
    Keyed(&'static str),
    /// Elements are scalars merged as a set.
    PrimitiveSet,
}

/// The merge strategies of the lists of the built-in kinds this server serves, by dotted path.
pub fn list_strategy(path: &str) -> Option<ListStrategy> {
    Some(match path {
        "metadata.ownerReferences" => ListStrategy::Keyed("uid"),
        "metadata.finalizers" => ListStrategy::PrimitiveSet,
        "status.conditions" => ListStrategy::Keyed("type"),
        "status.addresses" => ListStrategy::Keyed("type"),
        "spec.taints" => ListStrategy::Keyed("key"),
        "secrets" | "imagePullSecrets" => ListStrategy::Keyed("name"),
        // Mutating- and ValidatingWebhookConfigurations.
        "webhooks" => ListStrategy::Keyed("name"),
        // Pods.
        "spec.containers"
        | "spec.initContainers"
        | "spec.ephemeralContainers"
        | "spec.volumes"
        | "spec.imagePullSecrets" => ListStrategy::Keyed("name"),
        "spec.containers.ports" | "spec.initContainers.ports" => {
            ListStrategy::Keyed("containerPort")
        }
        "spec.containers.env" | "spec.initContainers.env" => ListStrategy::Keyed("name"),
        "spec.containers.volumeMounts" | "spec.initContainers.volumeMounts" => {
            ListStrategy::Keyed("mountPath")
        }
        // Deployments' Pod templates.
        "spec.template.spec.containers"
        | "spec.template.spec.initContainers"
        | "spec.template.spec.volumes" => ListStrategy::Keyed("name"),
        "spec.template.spec.containers.ports" => ListStrategy::Keyed("containerPort"),
        "spec.template.spec.containers.env" => ListStrategy::Keyed("name"),
        "spec.template.spec.containers.volumeMounts" => ListStrategy::Keyed("mountPath"),
        // Services.
        "spec.ports" => ListStrategy::Keyed("port"),
        _ => return None,
    })
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Applies a strategic merge patch to `target`.
pub fn apply(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let Value::Object(p) = patch else {
        return Err(PatchError::Malformed(
            "a strategic merge patch must be a JSON object".into(),
        ));
    };
    let mut out = target.clone();
    merge_map(&mut out, p, "")?;
    Ok(out)
}

fn merge_map(target: &mut Value, patch: &Map<String, Value>, path: &str) -> Result<(), PatchError> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut clean = patch.clone();
            clean.remove("$patch");
            *target = Value::Object(clean);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Null;
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => {
            return Err(PatchError::Malformed(format!(
                "unknown patch directive $patch: {other}"
            )));
        }
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(map) = target else {
        return Ok(());
    };
    if let Some(keep) = patch.get("$retainKeys") {
        let Value::Array(keep) = keep else {
            return Err(PatchError::Malformed(
                "$retainKeys must be a list of field names".into(),
            ));
        };
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        map.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, v) in patch {
        if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let Value::Array(gone) = v else {
                return Err(PatchError::Malformed(format!("{k} must be a list")));
            };
            if let Some(Value::Array(list)) = map.get_mut(field) {
                list.retain(|x| !gone.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            return Err(PatchError::Malformed(format!(
                "unknown patch directive {k}"
            )));
        }
        let child = join(path, k);
        match v {
            Value::Null => {
                map.remove(k);
            }
            Value::Object(pm) => {
                let slot = map.entry(k.clone()).or_insert(Value::Null);
                merge_map(slot, pm, &child)?;
                if slot.is_null() {
                    map.remove(k);
                }
            }
            Value::Array(items) => match (list_strategy(&child), map.get_mut(k)) {
                (Some(strategy), Some(Value::Array(existing))) => {
                    merge_list(existing, items, strategy, &child)?
                }
                _ => {
                    let clean: Vec<Value> = items
                        .iter()
                        .filter(|i| i.get("$patch").and_then(Value::as_str) != Some("delete"))
                        .cloned()
                        .collect();
                    map.insert(k.clone(), Value::Array(clean));
                }
            },
            scalar => {
                map.insert(k.clone(), scalar.clone());
            }
        }
    }
    Ok(())
}

fn merge_list(
    existing: &mut Vec<Value>,
    items: &[Value],
    strategy: ListStrategy,
    path: &str,
) -> Result<(), PatchError> {
    match strategy {
        ListStrategy::PrimitiveSet => {
            for item in items {
                if !existing.contains(item) {
                    existing.push(item.clone());
                }
            }
        }
        ListStrategy::Keyed(key) => {
            for item in items {
                let Value::Object(im) = item else {
                    return Err(PatchError::Malformed(format!(
                        "{path}: list elements must be objects keyed by {key:?}"
                    )));
                };
                let Some(id) = im.get(key) else {
                    return Err(PatchError::Malformed(format!(
                        "{path}: element is missing its merge key {key:?}"
                    )));
                };
                let pos = existing.iter().position(|e| e.get(key) == Some(id));
                let delete = im.get("$patch").and_then(Value::as_str) == Some("delete");
                match (pos, delete) {
                    (Some(i), true) => {
                        existing.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => merge_map(&mut existing[i], im, path)?,
                    (None, false) => {
                        let mut fresh = Value::Null;
                        merge_map(&mut fresh, im, path)?;
                        existing.push(fresh);
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn maps_merge_and_null_deletes() {
        let cm = json!({"data":{"a":"1","b":"2"},"metadata":{"name":"c"}});
        let out = apply(&cm, &json!({"data":{"a":"2","b":null}})).unwrap();
        assert_eq!(out["data"], json!({"a":"2"}));
        let out = apply(&cm, &json!({"data":{"$patch":"replace","z":"9"}})).unwrap();
        assert_eq!(out["data"], json!({"z":"9"}));
    }

    #[test]
    fn finalizers_and_owner_references() {
        let obj =
            json!({"metadata":{"finalizers":["x","y"],"ownerReferences":[{"uid":"1","name":"a"}]}});
        let out = apply(
            &obj,
            &json!({"metadata":{"$deleteFromPrimitiveList/finalizers":["x"]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["y"]));
        let out = apply(&obj, &json!({"metadata":{"finalizers":["z"],"ownerReferences":[{"uid":"2","name":"b"},{"uid":"1","name":"a2"}]}})).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["x", "y", "z"]));
        assert_eq!(
            out["metadata"]["ownerReferences"],
            json!([{"uid":"1","name":"a2"},{"uid":"2","name":"b"}])
        );
        let out = apply(
            &obj,
            &json!({"metadata":{"ownerReferences":[{"uid":"1","$patch":"delete"}]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["ownerReferences"], json!([]));
    }

    #[test]
    fn unknown_lists_are_replaced() {
        let obj = json!({"spec":{"xs":[1,2]}});
        assert_eq!(
            apply(&obj, &json!({"spec":{"xs":[3]}})).unwrap()["spec"]["xs"],
            json!([3])
        );
        assert!(apply(&obj, &json!([1])).is_err());
    }

    #[test]
    fn pod_containers_merge_by_name_and_their_env_by_name() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "image": "x:1", "env": [{"name": "K", "value": "1"}], "resources": {}},
            {"name": "b", "image": "y:1"}]}});
        let out = apply(
            &pod,
            &json!({"spec": {"containers": [
            {"name": "a", "image": "x:2", "env": [{"name": "L", "value": "2"}]}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "a", "image": "x:2", "resources": {},
                    "env": [{"name": "K", "value": "1"}, {"name": "L", "value": "2"}]},
                   {"name": "b", "image": "y:1"}])
        );
    }
}
