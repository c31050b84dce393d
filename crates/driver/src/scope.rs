//! The writes of one reconcile to its provider object, deferred to its end as core's `Scope`
//! and upstream's patch helper do: the phases change the scope, and [`Scope::close`] writes
//! what differs from the object as it was read, and nothing when nothing changed.
//!
//! Kubernetes takes a custom resource's metadata and spec on the object and its status on the
//! `status` subresource (which ignores everything else), so a reconcile that changes both
//! writes each once: the plugin version annotation and the contract's spec fields share the
//! first write, conditions and status fields the second.

use super::DriverError;
use capw_api::contract::conditions;
use capw_reconcile::skeleton::write_status;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value, json};

/// What one reconcile wants its provider object to hold.
pub(super) struct Scope {
    name: String,
    /// The object as the reconcile read it.
    generation: Option<i64>,
    annotations: std::collections::BTreeMap<String, String>,
    spec: Value,
    status_before: Option<Value>,
    /// Annotations to set.
    set_annotations: Map<String, Value>,
    /// The reconcile's spec changes, as one merge patch.
    spec_patch: Value,
    /// The status the reconcile builds; written when it differs from `status_before`.
    pub(super) status: Value,
    /// The status change is only progress, held back (see [`Scope::hold_status`]).
    status_held: bool,
}

/// The requests [`Scope::close`] sends.
#[cfg(test)]
#[derive(Debug, PartialEq)]
pub(super) struct Writes {
    /// One merge patch of metadata and spec.
    pub(super) object: Option<Value>,
    /// The status as a whole, through the status subresource.
    pub(super) status: Option<Value>,
}

impl Scope {
    pub(super) fn new(obj: &DynamicObject) -> Scope {
        let spec = obj.data.get("spec").cloned().unwrap_or(Value::Null);
        let status_before = obj.data.get("status").cloned();
        Scope {
            name: obj.name_any(),
            generation: obj.metadata.generation,
            annotations: obj.annotations().clone(),
            spec,
            spec_patch: json!({}),
            status: status_before
                .clone()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({})),
            status_before,
            set_annotations: Map::new(),
            status_held: false,
        }
    }

    /// How long `pace` holds back this reconcile's status change, which is then not written:
    /// `None` to write it. A reconcile that writes the object writes its status too, since a
    /// spec write moves the generation the status observes.
    pub(super) fn hold_status(
        &mut self,
        pace: &capw_reconcile::pace::Pace,
        uid: Option<&str>,
    ) -> Option<std::time::Duration> {
        if self.object_patch().is_some() {
            return None;
        }
        let wait = pace.hold(uid, self.status_before.as_ref(), &self.status, &[]);
        self.status_held = wait.is_some();
        wait
    }

    pub(super) fn annotate(&mut self, key: &str, value: String) {
        if self.annotations.get(key) != Some(&value) {
            self.set_annotations.insert(key.into(), json!(value));
        }
    }

    /// Merges `patch` (RFC 7386) into the spec. The driver only sets fields, so folding the
    /// patches into one is their composition.
    pub(super) fn merge_spec(&mut self, patch: &Value) {
        json_patch::merge(&mut self.spec_patch, patch);
    }

    /// What [`Scope::close`] would send, before the object write's answer.
    #[cfg(test)]
    pub(super) fn writes(&self) -> Writes {
        Writes {
            object: self.object_patch(),
            status: (!self.status_held && self.status_changed()).then(|| self.status.clone()),
        }
    }

    /// The merge patch of metadata and spec, if anything in them changes.
    fn object_patch(&self) -> Option<Value> {
        let mut object = Map::new();
        if !self.set_annotations.is_empty() {
            object.insert(
                "metadata".into(),
                json!({"annotations": self.set_annotations}),
            );
        }
        let mut after = self.spec.clone();
        json_patch::merge(&mut after, &self.spec_patch);
        if after != self.spec {
            object.insert("spec".into(), self.spec_patch.clone());
        }
        (!object.is_empty()).then_some(Value::Object(object))
    }

    /// Whether [`Scope::close`] writes the spec, which moves the generation by one.
    pub(super) fn writes_spec(&self) -> bool {
        self.object_patch().is_some_and(|p| p.get("spec").is_some())
    }

    /// Records that the object write moved the generation from `from` to `to` with nothing
    /// else changing the spec: the status this reconcile built observed the new one.
    fn advance(&mut self, from: i64, to: i64) {
        let Some(status) = self.status.as_object_mut() else {
            return;
        };
        if status.get("observedGeneration") == Some(&json!(from)) {
            status.insert("observedGeneration".into(), json!(to));
        }
        let conditions = status
            .get_mut("conditions")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten();
        for c in conditions {
            if c.get("observedGeneration") == Some(&json!(from)) {
                c["observedGeneration"] = json!(to);
            }
        }
    }

    /// Whether the status differs from what the object had. An object without a status has an
    /// empty one: writing `{}` to every new object (before it is even adopted) woke its Machine
    /// or Cluster for nothing and cost a request per provider object.
    fn status_changed(&self) -> bool {
        match &self.status_before {
            Some(before) => *before != self.status,
            None => self.status.as_object().is_none_or(|s| !s.is_empty()),
        }
    }

    /// Writes what changed, the object first, then its status. A spec write moves the
    /// generation; the status written after it records that, rather than a second status
    /// write in the next reconcile (see [`conditions::advanced_by_own_write`]).
    pub(super) async fn close(mut self, api: &Api<DynamicObject>) -> Result<(), DriverError> {
        if let Some(patch) = self.object_patch() {
            let written = api
                .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            if let Some((from, to)) =
                conditions::advanced_by_own_write(self.generation, written.metadata.generation)
            {
                self.advance(from, to);
            }
        }
        if !self.status_held && self.status_changed() {
            write_status(api, &self.name, None::<&Value>, &self.status).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(data: Value) -> DynamicObject {
        let mut o = DynamicObject::new(
            "m1",
            &kube::api::ApiResource {
                group: "infrastructure.cluster.x-k8s.io".into(),
                version: "v1beta2".into(),
                api_version: "infrastructure.cluster.x-k8s.io/v1beta2".into(),
                kind: "DockerMachine".into(),
                plural: "dockermachines".into(),
            },
        );
        o.metadata.annotations =
            Some([("capw.dev/plugin-version".to_string(), "p/1".to_string())].into());
        o.data = data;
        o
    }

    #[test]
    fn a_steady_reconcile_writes_nothing() {
        let obj = object(json!({"spec": {"providerID": "x"}, "status": {"ready": true}}));
        let mut s = Scope::new(&obj);
        s.annotate("capw.dev/plugin-version", "p/1".into());
        s.merge_spec(&json!({"providerID": "x"}));
        s.status["ready"] = json!(true);
        assert_eq!(
            s.writes(),
            Writes {
                object: None,
                status: None
            }
        );
    }

    #[test]
    fn annotation_and_spec_share_one_write() {
        let obj = object(json!({"spec": {"image": "i"}}));
        let mut s = Scope::new(&obj);
        s.annotate("capw.dev/plugin-version", "p/2".into());
        s.merge_spec(&json!({"providerID": "docker:///m1"}));
        s.status["ready"] = json!(true);
        let w = s.writes();
        assert_eq!(
            w.object,
            Some(json!({
                "metadata": {"annotations": {"capw.dev/plugin-version": "p/2"}},
                "spec": {"providerID": "docker:///m1"},
            }))
        );
        assert_eq!(w.status, Some(json!({"ready": true})));
    }

    /// A new waiting reason is held back unless the object is written too; a change of
    /// state is not.
    #[test]
    fn a_waiting_reason_is_held_unless_the_object_is_written() {
        let pace = capw_reconcile::pace::Pace::new(std::time::Duration::from_secs(60));
        let waiting = |reason: &str| json!({"conditions": [{"type": "Ready", "status": "False", "reason": reason}]});
        let obj = object(json!({"spec": {}, "status": waiting("WaitingForBootstrapData")}));
        let mut s = Scope::new(&obj);
        s.status = waiting("VMBooting");
        assert!(s.hold_status(&pace, Some("uid-1")).is_some());
        assert_eq!(s.writes().status, None);

        let mut s = Scope::new(&obj);
        s.status = waiting("VMBooting");
        s.merge_spec(&json!({"providerID": "docker:///m1"}));
        assert_eq!(s.hold_status(&pace, Some("uid-1")), None);
        assert_eq!(s.writes().status, Some(waiting("VMBooting")));

        let mut s = Scope::new(&obj);
        s.status =
            json!({"conditions": [{"type": "Ready", "status": "True", "reason": "Provisioned"}]});
        assert_eq!(s.hold_status(&pace, Some("uid-1")), None);
        assert!(s.writes().status.is_some());
    }

    #[test]
    fn a_new_object_the_reconcile_set_nothing_on_gets_no_status() {
        let obj = object(json!({"spec": {}}));
        let s = Scope::new(&obj);
        assert_eq!(s.writes().status, None);
        let mut s = Scope::new(&obj);
        s.status["ready"] = json!(false);
        assert_eq!(s.writes().status, Some(json!({"ready": false})));
    }

    /// A status that is not an object (a plugin's CRD may type it any way) is rebuilt as one.
    #[test]
    fn a_status_that_is_not_an_object_starts_empty() {
        let obj = object(json!({"spec": {}, "status": "garbage"}));
        let s = Scope::new(&obj);
        assert_eq!(s.writes().status, Some(json!({})));
    }

    /// The status written after the reconcile's own spec write observed that spec; conditions
    /// of another generation are left alone.
    #[test]
    fn a_status_after_its_own_spec_write_observes_the_new_generation() {
        let obj = object(json!({"spec": {}, "status": {"observedGeneration": 1}}));
        let mut s = Scope::new(&obj);
        s.status = json!({
            "observedGeneration": 1,
            "conditions": [
                {"type": "Ready", "observedGeneration": 1},
                {"type": "Old", "observedGeneration": 0},
            ],
        });
        s.advance(1, 2);
        assert_eq!(
            s.status,
            json!({
                "observedGeneration": 2,
                "conditions": [
                    {"type": "Ready", "observedGeneration": 2},
                    {"type": "Old", "observedGeneration": 0},
                ],
            })
        );
    }
}
