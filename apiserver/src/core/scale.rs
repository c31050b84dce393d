//! The `scale` subresource of custom resources: an `autoscaling/v1` Scale view of the replica
//! fields a CRD names in `subresources.scale`. Writes go through the normal write path as the
//! `scale` subresource, so validation, generation and managed fields behave as for any update.

use super::*;
use crate::registry::ScalePaths;

fn segments(path: &str) -> impl Iterator<Item = &str> {
    path.split('.').filter(|s| !s.is_empty())
}

fn set_path(obj: &mut Value, path: &str, value: Value) {
    let mut cur = obj;
    for k in segments(path) {
        if !cur.is_object() {
            *cur = json!({});
        }
        let Some(m) = cur.as_object_mut() else {
            return;
        };
        cur = m.entry(k.to_string()).or_insert(Value::Null);
    }
    *cur = value;
}

/// The Scale kube-apiserver renders for a custom resource: missing replica fields read as 0,
/// and the selector appears only when the object has one.
pub fn scale_of(paths: &ScalePaths, obj: &Value) -> Value {
    let mut metadata = serde_json::Map::new();
    if let Some(m) = meta::meta(obj) {
        for k in [
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "creationTimestamp",
        ] {
            if let Some(v) = m.get(k) {
                metadata.insert(k.into(), v.clone());
            }
        }
    }
    let replicas = |p: &str| {
        schema::value_at(obj, p)
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let mut status = json!({"replicas": replicas(&paths.status_replicas)});
    if let Some(sel) = paths
        .label_selector
        .as_deref()
        .and_then(|p| schema::value_at(obj, p))
        .and_then(Value::as_str)
    {
        status["selector"] = json!(sel);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": replicas(&paths.spec_replicas)},
        "status": status,
    })
}

/// A write to `…/scale`: a whole Scale (PUT) or a patch of the Scale view (PATCH).
pub enum ScaleOp {
    /// PUT of a whole `autoscaling/v1` Scale.
    Replace(Value),
    /// PATCH of the Scale view.
    Patch(PatchBody),
}

fn wanted_scale(current: Value, op: ScaleOp) -> Result<Value, ApiError> {
    Ok(match op {
        ScaleOp::Replace(body) => body,
        ScaleOp::Patch(PatchBody::Json(ops)) => {
            patch::json::apply(&current, &ops).map_err(patch_error)?
        }
        ScaleOp::Patch(PatchBody::Strategic(p) | PatchBody::Merge(p) | PatchBody::Apply(p)) => {
            let mut s = current;
            patch::merge::merge(&mut s, &p);
            s
        }
    })
}

impl Core {
    /// The object's `autoscaling/v1` Scale, read from the CRD's `subresources.scale` paths.
    pub fn get_scale(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<Value, ApiError> {
        let paths = rt.scale.as_ref().ok_or_else(ApiError::route_not_found)?;
        Ok(scale_of(paths, &self.get(rt, ns, name)?))
    }

    /// Sets the replicas a Scale asks for; answers the Scale of the object as written.
    pub async fn write_scale(
        &self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        op: ScaleOp,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let paths = rt.scale.clone().ok_or_else(ApiError::route_not_found)?;
        let (group, plural, obj_name) = (rt.group.clone(), rt.plural.clone(), name.to_string());
        let p = paths.clone();
        let set = move |mut obj: Value| -> Result<Value, ApiError> {
            let current = scale_of(&p, &obj);
            let current_rv = meta::str_field(&current, "resourceVersion").to_string();
            let wanted = wanted_scale(current, op)?;
            let rv = meta::str_field(&wanted, "resourceVersion");
            if !rv.is_empty() && rv != current_rv {
                return Err(ApiError::conflict(&group, &plural, &obj_name));
            }
            let replicas = wanted
                .pointer("/spec/replicas")
                .cloned()
                .unwrap_or(json!(0));
            match replicas.as_i64() {
                Some(n) if n >= 0 => {}
                _ => {
                    return Err(ApiError::invalid(
                        "autoscaling",
                        "Scale",
                        &obj_name,
                        vec![Cause::new(
                            "FieldValueInvalid",
                            "spec.replicas",
                            format!(
                                "Invalid value: {replicas}: must be greater than or equal to 0"
                            ),
                        )],
                    ));
                }
            }
            set_path(&mut obj, &p.spec_replicas, replicas);
            Ok(obj)
        };
        let w = self
            .write(rt, ns, name, "scale", Op::Mutate(Box::new(set)), opts)
            .await?;
        Ok(scale_of(&paths, &w.view))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> ScalePaths {
        ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: Some(".status.selector".into()),
        }
    }

    #[test]
    fn scale_reads_missing_replicas_as_zero_and_omits_a_missing_selector() {
        let s = scale_of(&paths(), &json!({"metadata": {"name": "a"}}));
        assert_eq!(s["spec"]["replicas"], 0);
        assert_eq!(s["status"]["replicas"], 0);
        assert!(s["status"].get("selector").is_none());
    }

    #[test]
    fn set_path_creates_missing_parents() {
        let mut o = json!({"metadata": {}});
        set_path(&mut o, ".spec.template.replicas", json!(3));
        assert_eq!(o["spec"]["template"]["replicas"], 3);
    }
}
