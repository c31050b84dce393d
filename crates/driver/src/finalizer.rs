//! The provider finalizer's first write. Upstream's providers wait for core's owner reference
//! before they touch an object, and add their finalizer in a request of its own before their
//! first real step. The driver does the same, but that request also carries the plugin
//! version annotation of the version about to be called, and the reconcile goes on to call
//! it: the finalizer, the annotation and the first call cost one write and one reconcile
//! where they cost two of each (kube's finalizer helper returns after its write). Clones the
//! host creates are born with both (`Resolver::mark`), so this write is left for the objects
//! users create.
//!
//! A paused object gets the finalizer alone (no call will happen) and goes on to its `Paused`
//! condition. Since the reconcile that adds the finalizer always goes on, the driver's watch
//! ignores that write (`relevance::metadata_for_driver`), but not the finalizer going missing
//! later; an object being deleted or one that already has it goes to the skeleton as it is.

use crate::context::{self, owner_name};
use crate::{DriverError, KindCtx};
use capw_api::common::names::PLUGIN_VERSION_ANNOTATION;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use std::sync::Arc;

/// What the reconcile does after [`first_write`].
pub(super) enum First {
    /// Reconcile this object (the one read, or the one the write returned).
    Reconcile(Arc<DynamicObject>),
    /// Core has not set the owner yet; its write brings the object back.
    AwaitOwner,
}

pub(super) async fn first_write(
    api: &Api<DynamicObject>,
    obj: Arc<DynamicObject>,
    kctx: &KindCtx,
) -> Result<First, DriverError> {
    let finalizer = kctx.skeleton.finalizer.as_str();
    if obj.meta().deletion_timestamp.is_some() || obj.finalizers().iter().any(|f| f == finalizer) {
        return Ok(First::Reconcile(obj));
    }
    let owner = if kctx.role.machine_scoped() {
        "Machine"
    } else {
        "Cluster"
    };
    if owner_name(&obj, owner).is_none() {
        return Ok(First::AwaitOwner);
    }
    let version = if context::is_paused(&obj, context::owners(&obj, kctx).1.as_deref()) {
        None
    } else {
        let Some(slot) = kctx.driver.registry.get(&kctx.plugin) else {
            return Err(DriverError::Unloaded(kctx.plugin.clone()));
        };
        Some(format!(
            "{}/{}",
            kctx.plugin,
            slot.current().metadata.version
        ))
    };
    let patch = patch(&obj, finalizer, version.as_deref())?;
    let written = api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await?;
    Ok(First::Reconcile(Arc::new(written)))
}

/// A JSON patch that adds the finalizer, as kube's helper does (its `test` fails the request
/// if the finalizers changed since the read), and sets the version annotation when given.
fn patch(
    obj: &DynamicObject,
    finalizer: &str,
    version: Option<&str>,
) -> Result<json_patch::Patch, DriverError> {
    let mut ops = match &obj.meta().finalizers {
        Some(list) if !list.is_empty() => vec![
            json!({"op": "test", "path": "/metadata/finalizers", "value": list}),
            json!({"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}),
        ],
        _ => vec![
            json!({"op": "test", "path": "/metadata/finalizers", "value": Value::Null}),
            json!({"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}),
        ],
    };
    if let Some(version) = version {
        ops.push(if obj.meta().annotations.is_some() {
            let key = PLUGIN_VERSION_ANNOTATION.replace('~', "~0").replace('/', "~1");
            json!({"op": "add", "path": format!("/metadata/annotations/{key}"), "value": version})
        } else {
            json!({"op": "add", "path": "/metadata/annotations", "value": {PLUGIN_VERSION_ANNOTATION: version}})
        });
    }
    serde_json::from_value(Value::Array(ops))
        .map_err(|e| DriverError::Invalid(format!("finalizer patch: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ApiResource;

    fn object(meta: Value) -> DynamicObject {
        let mut o = DynamicObject::new(
            "m1",
            &ApiResource {
                group: "infrastructure.cluster.x-k8s.io".into(),
                version: "v1beta2".into(),
                api_version: "infrastructure.cluster.x-k8s.io/v1beta2".into(),
                kind: "InMemoryMachine".into(),
                plural: "inmemorymachines".into(),
            },
        );
        o.metadata = serde_json::from_value(meta).expect("meta");
        o
    }

    /// `p` applied as the API server does: its `test` takes a missing member for null.
    fn applied(obj: &DynamicObject, p: &json_patch::Patch) -> Value {
        let mut doc = serde_json::to_value(obj).expect("json");
        if doc["metadata"].get("finalizers").is_none() {
            doc["metadata"]["finalizers"] = Value::Null;
        }
        json_patch::patch(&mut doc, p).expect("patch applies");
        doc["metadata"].clone()
    }

    #[test]
    fn adds_the_finalizer_and_the_version_to_a_bare_object() {
        let obj = object(json!({"name": "m1"}));
        let p = patch(&obj, "f", Some("inmemory/0.1.0")).expect("patch");
        let meta = applied(&obj, &p);
        assert_eq!(meta["finalizers"], json!(["f"]));
        assert_eq!(
            meta["annotations"][PLUGIN_VERSION_ANNOTATION],
            json!("inmemory/0.1.0")
        );
    }

    #[test]
    fn keeps_other_finalizers_and_annotations() {
        let obj = object(json!({"name": "m1", "finalizers": ["other"],
            "annotations": {"a": "b", PLUGIN_VERSION_ANNOTATION: "inmemory/0.0.9"}}));
        let p = patch(&obj, "f", Some("inmemory/0.1.0")).expect("patch");
        let meta = applied(&obj, &p);
        assert_eq!(meta["finalizers"], json!(["other", "f"]));
        assert_eq!(meta["annotations"]["a"], json!("b"));
        assert_eq!(
            meta["annotations"][PLUGIN_VERSION_ANNOTATION],
            json!("inmemory/0.1.0")
        );
    }

    #[test]
    fn a_paused_object_gets_the_finalizer_alone() {
        let obj = object(json!({"name": "m1", "annotations": {"a": "b"}}));
        let p = patch(&obj, "f", None).expect("patch");
        let meta = applied(&obj, &p);
        assert_eq!(meta["finalizers"], json!(["f"]));
        assert_eq!(meta["annotations"], json!({"a": "b"}));
    }

    #[test]
    fn fails_when_the_finalizers_changed_since_the_read() {
        let read = object(json!({"name": "m1"}));
        let p = patch(&read, "f", Some("v")).expect("patch");
        let now = object(json!({"name": "m1", "finalizers": ["someone-else"]}));
        let mut doc = serde_json::to_value(&now).expect("json");
        assert!(json_patch::patch(&mut doc, &p).is_err());
    }
}
