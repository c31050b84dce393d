//! Dynamic admission, as kube-apiserver does it: every create, update and delete a
//! `MutatingWebhookConfiguration` or `ValidatingWebhookConfiguration` matches is sent to its
//! webhooks as an `AdmissionReview` (`admission.k8s.io/v1`) before anything is stored.
//!
//! - Mutating webhooks run first, one after another (configurations by name, webhooks in order),
//!   each seeing the object as the previous one patched it; then the validating ones.
//! - `failurePolicy` decides what a webhook that cannot be reached does (`Fail` refuses the
//!   write, `Ignore` skips the webhook); `timeoutSeconds` bounds each call.
//! - `rules` (operations, groups, versions, resources with subresources, scope),
//!   `namespaceSelector` and `objectSelector` choose the writes.
//! - A denial is kube's: `admission webhook "<name>" denied the request: <message>`, with the
//!   webhook's code, reason and causes; its warnings reach the client as `Warning` headers.
//!
//! Not done: `matchConditions` (a webhook that has them is called for every write its rules
//! match, which only costs a call), `reinvocationPolicy: IfNeeded`, and `matchPolicy`
//! conversion (every kind is served in one version). `service` client configs are dialled at
//! `<name>.<namespace>.svc`, which only a cluster's DNS resolves.

mod call;
mod rules;

use crate::core::Core;
use crate::registry::ResourceType;
use crate::status::{ApiError, Cause};
use serde_json::{Value, json};
use std::time::Duration;

pub use rules::Operation;

/// The API group of the webhook configurations.
pub const GROUP: &str = "admissionregistration.k8s.io";
const MUTATING: &str = "admissionregistration.k8s.io/mutatingwebhookconfigurations";
const VALIDATING: &str = "admissionregistration.k8s.io/validatingwebhookconfigurations";

/// One write, as the webhooks are told about it.
pub struct Attributes<'a> {
    pub operation: Operation,
    pub rt: &'a ResourceType,
    pub subresource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub user: &'a str,
    pub groups: &'a [String],
    pub dry_run: bool,
}

/// What the webhooks made of a write: the object to store (mutated) and their warnings.
pub struct Admitted {
    pub object: Option<Value>,
    pub warnings: Vec<String>,
}

/// kube's defaults for a webhook configuration, and the checks a typed decode cannot make.
pub(crate) fn on_write(obj: &mut Value) -> Vec<Cause> {
    let mutating = obj.get("kind").and_then(Value::as_str) == Some("MutatingWebhookConfiguration");
    let mut errs = vec![];
    let mut names = std::collections::HashSet::new();
    let Some(hooks) = obj.get_mut("webhooks").and_then(Value::as_array_mut) else {
        return errs;
    };
    for (i, w) in hooks.iter_mut().enumerate() {
        let Some(m) = w.as_object_mut() else { continue };
        let name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if !names.insert(name.clone()) {
            errs.push(Cause::new(
                "FieldValueDuplicate",
                format!("webhooks[{i}].name"),
                format!("Duplicate value: \"{name}\""),
            ));
        }
        m.entry("failurePolicy").or_insert_with(|| json!("Fail"));
        m.entry("matchPolicy")
            .or_insert_with(|| json!("Equivalent"));
        m.entry("namespaceSelector").or_insert_with(|| json!({}));
        m.entry("objectSelector").or_insert_with(|| json!({}));
        m.entry("timeoutSeconds").or_insert_with(|| json!(10));
        if mutating {
            m.entry("reinvocationPolicy")
                .or_insert_with(|| json!("Never"));
        }
        for r in m
            .get_mut("rules")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(r) = r.as_object_mut() {
                r.entry("scope").or_insert_with(|| json!("*"));
            }
        }
        let timeout = m
            .get("timeoutSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(10);
        if !(1..=30).contains(&timeout) {
            errs.push(Cause::new(
                "FieldValueInvalid",
                format!("webhooks[{i}].timeoutSeconds"),
                format!(
                    "Invalid value: {timeout}: the timeout value must be between 1 and 30 seconds"
                ),
            ));
        }
        let versions: Vec<&str> = m
            .get("admissionReviewVersions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !versions.contains(&"v1") {
            errs.push(Cause::new(
                "FieldValueInvalid",
                format!("webhooks[{i}].admissionReviewVersions"),
                format!("Invalid value: {versions:?}: must include at least one of v1 (the only version this server sends)"),
            ));
        }
        let cc = m.get("clientConfig");
        let url = cc.and_then(|c| c.get("url")).is_some();
        let service = cc.and_then(|c| c.get("service")).is_some();
        if url == service {
            errs.push(Cause::new(
                "FieldValueRequired",
                format!("webhooks[{i}].clientConfig"),
                "Required value: exactly one of url or service is required",
            ));
        }
    }
    errs
}

/// The webhooks of one kind of configuration, in the order kube calls them.
fn webhooks(core: &Core, storage: &str) -> Vec<(String, Value)> {
    let (mut configs, _) = core.store.list(storage, None);
    configs
        .sort_by(|a, b| crate::meta::str_field(a, "name").cmp(crate::meta::str_field(b, "name")));
    configs
        .iter()
        .flat_map(|c| {
            c.get("webhooks")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .map(|w| {
            (
                w.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                w,
            )
        })
        .collect()
}

impl Core {
    /// Whether any webhook's rules name this kind (and subresource) for one of `operations`:
    /// only such writes take the admission path, so a server whose webhooks are about
    /// Clusters writes everything else as if it had none.
    pub(crate) fn may_admit(
        &self,
        rt: &ResourceType,
        subresource: &str,
        operations: &[Operation],
    ) -> bool {
        [MUTATING, VALIDATING].iter().any(|storage| {
            self.store.list(storage, None).0.iter().any(|config| {
                let hooks = config.get("webhooks").and_then(Value::as_array);
                hooks.into_iter().flatten().any(|hook| {
                    operations
                        .iter()
                        .any(|op| rules::named(hook, rt, subresource, *op))
                })
            })
        })
    }

    /// Sends a write through the matching webhooks: `object` is the proposed object (none on
    /// delete) and `old` the stored one (none on create), both as the client sees them.
    pub(crate) async fn admit(
        &self,
        at: &Attributes<'_>,
        object: Option<Value>,
        old: Option<&Value>,
    ) -> Result<Admitted, ApiError> {
        let mut out = Admitted {
            object,
            warnings: vec![],
        };
        let ns_labels = self.namespace_labels(at);
        for (name, hook) in webhooks(self, MUTATING) {
            if !rules::matches(&hook, at, out.object.as_ref(), old, ns_labels.as_ref())? {
                continue;
            }
            let Some(answer) = self
                .call(&name, &hook, at, out.object.as_ref(), old)
                .await?
            else {
                continue;
            };
            out.warnings.extend(answer.warnings);
            if let (Some(patch), Some(obj)) = (answer.patch, out.object.as_mut()) {
                let ops: json_patch::Patch = serde_json::from_slice(&patch).map_err(|e| {
                    ApiError::internal(format!(
                        "received invalid webhook response from \"{name}\": the patch is not a JSON patch: {e}"
                    ))
                })?;
                json_patch::patch(obj, &ops).map_err(|e| {
                    ApiError::internal(format!(
                        "admission webhook \"{name}\" returned a patch that does not apply: {e}"
                    ))
                })?;
            }
        }
        let validating: Vec<(String, Value)> = webhooks(self, VALIDATING)
            .into_iter()
            .map(|(n, h)| {
                rules::matches(&h, at, out.object.as_ref(), old, ns_labels.as_ref())
                    .map(|m| m.then_some((n, h)))
            })
            .filter_map(Result::transpose)
            .collect::<Result<_, _>>()?;
        // kube calls the validating webhooks in parallel; the first refusal is the answer.
        let calls = validating
            .iter()
            .map(|(name, hook)| self.call(name, hook, at, out.object.as_ref(), old));
        for answer in futures::future::join_all(calls).await {
            if let Some(a) = answer? {
                out.warnings.extend(a.warnings);
            }
        }
        Ok(out)
    }

    /// Where a `service` client config is dialled: the stored Service's `spec.clusterIP` at
    /// the numeric `targetPort` of the port the config names, standing in for the cluster's
    /// service routing (there is no kube-proxy here). `None` (dial `<name>.<ns>.svc`) when
    /// the Service is missing or has no cluster IP.
    fn service_address(&self, service: &Value) -> Option<(String, u16)> {
        let s = |k: &str| service.get(k).and_then(Value::as_str).unwrap_or_default();
        let port = service.get("port").and_then(Value::as_u64).unwrap_or(443);
        let stored = self.store.get(&crate::store::ObjKey::new(
            "/services",
            s("namespace"),
            s("name"),
        ))?;
        let ip = stored
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .filter(|ip| !ip.is_empty() && *ip != "None")?
            .to_string();
        let entry = stored
            .pointer("/spec/ports")
            .and_then(Value::as_array)?
            .iter()
            .find(|p| p.get("port").and_then(Value::as_u64) == Some(port))?;
        let target = entry
            .get("targetPort")
            .and_then(Value::as_u64)
            .unwrap_or(port);
        Some((ip, u16::try_from(target).ok()?))
    }

    fn namespace_labels(&self, at: &Attributes<'_>) -> Option<Value> {
        if !at.rt.namespaced {
            return None;
        }
        let key = crate::store::ObjKey::new("/namespaces", "", at.namespace);
        self.store
            .get(&key)
            .map(|ns| ns.pointer("/metadata/labels").cloned().unwrap_or(json!({})))
    }

    /// One webhook call. `None` when the webhook failed and its failurePolicy is Ignore; a
    /// refusal is an error.
    async fn call(
        &self,
        name: &str,
        hook: &Value,
        at: &Attributes<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<Option<call::Answer>, ApiError> {
        let ignore = hook.get("failurePolicy").and_then(Value::as_str) == Some("Ignore");
        let timeout = hook
            .get("timeoutSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(10);
        let review = review(at, object, old);
        let client = hook.get("clientConfig").cloned().unwrap_or_default();
        let dial = client.get("service").and_then(|s| self.service_address(s));
        match call::post(&client, &review, Duration::from_secs(timeout), dial).await {
            Ok(answer) if answer.allowed => Ok(Some(answer)),
            Ok(answer) => Err(denied(name, answer.status)),
            Err(_) if ignore => {
                tracing::warn!(
                    webhook = name,
                    "admission webhook failed; its failurePolicy is Ignore"
                );
                Ok(None)
            }
            Err(e) => Err(ApiError::internal(format!(
                "failed calling webhook \"{name}\": {e}"
            ))),
        }
    }
}

/// The `AdmissionReview` request for one write.
fn review(at: &Attributes<'_>, object: Option<&Value>, old: Option<&Value>) -> Value {
    let rt = at.rt;
    let gvk = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    let gvr = json!({"group": rt.group, "version": rt.version, "resource": rt.plural});
    let mut request = json!({
        "uid": uuid::Uuid::new_v4().to_string(),
        "kind": gvk, "resource": gvr,
        "requestKind": gvk, "requestResource": gvr,
        "name": at.name,
        "operation": at.operation.as_str(),
        "userInfo": {"username": at.user, "groups": at.groups},
        "object": object,
        "oldObject": old,
        "dryRun": at.dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": at.operation.options_kind()},
    });
    if rt.namespaced {
        request["namespace"] = json!(at.namespace);
    }
    if !at.subresource.is_empty() {
        request["subResource"] = json!(at.subresource);
        request["requestSubResource"] = json!(at.subresource);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// kube's `webhookerrors.ToStatusErr`: the webhook's status (code, reason and details, so
/// kubectl words an `Invalid` one by its object and causes), its message prefixed with who
/// denied the request, and 400 when it gave no error code.
fn denied(name: &str, status: Value) -> ApiError {
    let message = status
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let reason = status
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let by = format!("admission webhook \"{name}\" denied the request");
    let message = match (message.is_empty(), reason.is_empty()) {
        (false, _) => format!("{by}: {message}"),
        (true, false) => format!("{by}: {reason}"),
        (true, true) => format!("{by} without explanation"),
    };
    let code = status
        .get("code")
        .and_then(Value::as_u64)
        .filter(|c| *c >= 400)
        .and_then(|c| u16::try_from(c).ok())
        .unwrap_or(400);
    let causes = status
        .pointer("/details/causes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let s = |k: &str| {
                c.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            Cause {
                reason: s("reason"),
                message: s("message"),
                field: s("field"),
            }
        })
        .collect();
    let mut e = ApiError::from_webhook(code, reason, message).with_causes(causes);
    if let Some(d) = status.get("details") {
        let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or_default();
        if !s("name").is_empty() || !s("kind").is_empty() {
            e = e.with_subject(s("group"), s("kind"), s("name"));
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube's `ToStatusErr`: who denied it before the message, the webhook's code, reason and
    /// details kept; an error code below 400 becomes 400.
    #[test]
    fn a_denial_names_the_webhook_and_keeps_its_status() {
        let status = json!({"code": 422, "reason": "Invalid", "message": "Cluster.cluster.x-k8s.io \"c\" is invalid: spec.x: Required value",
            "details": {"group": "cluster.x-k8s.io", "kind": "Cluster", "name": "c",
                        "causes": [{"reason": "FieldValueRequired", "field": "spec.x", "message": "Required value"}]}});
        let e = denied("default.cluster.cluster.x-k8s.io", status);
        assert_eq!(e.code, 422);
        assert_eq!(e.reason, "Invalid");
        assert_eq!(
            e.message,
            "admission webhook \"default.cluster.cluster.x-k8s.io\" denied the request: Cluster.cluster.x-k8s.io \"c\" is invalid: spec.x: Required value"
        );
        let s = e.to_status();
        assert_eq!(s["details"]["kind"], "Cluster");
        assert_eq!(s["details"]["causes"][0]["field"], "spec.x");
        let bare = denied("w", json!({"code": 200}));
        assert_eq!(
            (bare.code, bare.message.as_str()),
            (
                400,
                "admission webhook \"w\" denied the request without explanation"
            )
        );
    }
}
