//! Reading the context, building results, and the [`Provider`] trait.

use crate::*;

/// A parsed object from the context, with accessors for the fields every provider reads.
pub struct View(pub Value);

impl View {
    /// Parses one JSON object of the context; malformed JSON is an `invalid-spec` error.
    pub fn parse(json: &str) -> Result<View, ProviderError> {
        serde_json::from_str(json).map(View).map_err(|e| {
            ProviderError::InvalidSpec(format!("the host sent an object that is not JSON: {e}"))
        })
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.str("/metadata/name")
    }

    /// `metadata.namespace`, or "" for a cluster-scoped object.
    pub fn namespace(&self) -> &str {
        self.str("/metadata/namespace")
    }

    /// `kind`.
    pub fn kind(&self) -> &str {
        self.str("/kind")
    }

    /// The string at a JSON pointer, or "".
    pub fn str(&self, pointer: &str) -> &str {
        self.0
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// The value at a JSON pointer.
    pub fn get(&self, pointer: &str) -> Option<&Value> {
        self.0.pointer(pointer)
    }

    /// An infrastructure cluster's `spec.failureDomains` (v1beta2: a list of `{name,
    /// controlPlane}`; `controlPlane` defaults to true), for its status.
    pub fn failure_domains(&self) -> Vec<FailureDomain> {
        let Some(list) = self.get("/spec/failureDomains").and_then(Value::as_array) else {
            return vec![];
        };
        list.iter()
            .filter_map(|fd| {
                Some(FailureDomain {
                    name: fd.get("name")?.as_str()?.into(),
                    control_plane: fd
                        .get("controlPlane")
                        .and_then(Value::as_bool)
                        .unwrap_or(true),
                    attributes: vec![],
                })
            })
            .collect()
    }
}

/// Reading the JSON of a call's context.
pub trait ContextExt {
    /// The provider object of this call.
    fn view(&self) -> Result<View, ProviderError>;
    /// The owning Cluster, when the host sent one.
    fn cluster_view(&self) -> Result<Option<View>, ProviderError>;
    /// The owning Machine, when the host sent one.
    fn machine_view(&self) -> Result<Option<View>, ProviderError>;
    /// The infrastructure cluster of the owning Cluster, when the host sent one.
    fn infrastructure_cluster_view(&self) -> Result<Option<View>, ProviderError>;
    /// A secret the host handed over (`ca.crt`, `ca.key`, `token`).
    fn secret(&self, key: &str) -> Option<&str>;
}

impl ContextExt for Context {
    fn view(&self) -> Result<View, ProviderError> {
        View::parse(&self.object)
    }

    fn cluster_view(&self) -> Result<Option<View>, ProviderError> {
        self.cluster.as_deref().map(View::parse).transpose()
    }

    fn machine_view(&self) -> Result<Option<View>, ProviderError> {
        self.machine.as_deref().map(View::parse).transpose()
    }

    fn infrastructure_cluster_view(&self) -> Result<Option<View>, ProviderError> {
        self.infrastructure_cluster
            .as_deref()
            .map(View::parse)
            .transpose()
    }

    fn secret(&self, key: &str) -> Option<&str> {
        self.secrets
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A transient error asking to be called again after `seconds`.
pub fn wait(message: impl Into<String>, seconds: u32) -> ProviderError {
    ProviderError::Transient(Retry {
        message: message.into(),
        retry_after_seconds: Some(seconds),
    })
}

impl ConditionStatus {
    /// As a v1beta2 condition spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

/// A v1beta2 condition.
pub fn condition(type_: &str, ok: bool, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: if ok {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        },
        reason: reason.into(),
        message: message.into(),
    }
}

/// The common part of a result.
pub fn common(conditions: Vec<Condition>, status_patch: Option<Value>) -> Common {
    Common {
        conditions,
        status_patch: status_patch.map(|v| v.to_string()),
        requeue_after_seconds: None,
    }
}

/// Deletion finished.
pub fn deleted() -> DeleteStatus {
    DeleteStatus {
        done: true,
        common: common(vec![], None),
    }
}

fn not_served(what: &str) -> ProviderError {
    ProviderError::Terminal(format!("this provider does not serve {what}"))
}

/// A provider of any type. Every method has a default, so a provider overrides what its type
/// serves (and test providers only what they exercise).
pub trait Provider {
    /// Who the provider is: name, version, type, contract and the kinds it serves.
    fn metadata() -> Metadata;

    /// Reconciles an infrastructure cluster.
    fn reconcile_cluster(ctx: Context) -> Result<ClusterStatus, ProviderError> {
        let _ = ctx;
        Err(not_served("infrastructure clusters"))
    }

    /// Deletes an infrastructure cluster's resources; `done` once they are gone.
    fn delete_cluster(ctx: Context) -> Result<DeleteStatus, ProviderError> {
        let _ = ctx;
        Ok(deleted())
    }

    /// Reconciles an infrastructure machine.
    fn reconcile_machine(ctx: Context) -> Result<MachineStatus, ProviderError> {
        let _ = ctx;
        Err(not_served("infrastructure machines"))
    }

    /// Deletes an infrastructure machine's resources; `done` once they are gone.
    fn delete_machine(ctx: Context) -> Result<DeleteStatus, ProviderError> {
        let _ = ctx;
        Ok(deleted())
    }

    /// Reconciles a bootstrap config: renders its bootstrap data.
    fn reconcile_bootstrap(ctx: Context) -> Result<BootstrapStatus, ProviderError> {
        let _ = ctx;
        Err(not_served("bootstrap configs"))
    }

    /// Deletes a bootstrap config's resources; `done` once they are gone.
    fn delete_bootstrap(ctx: Context) -> Result<DeleteStatus, ProviderError> {
        let _ = ctx;
        Ok(deleted())
    }

    /// Reconciles a control plane: its endpoint, replicas and the Machines it asks for.
    fn reconcile_control_plane(ctx: Context) -> Result<ControlPlaneStatus, ProviderError> {
        let _ = ctx;
        Err(not_served("control planes"))
    }

    /// Deletes a control plane's resources; `done` once they are gone.
    fn delete_control_plane(ctx: Context) -> Result<DeleteStatus, ProviderError> {
        let _ = ctx;
        Ok(deleted())
    }
}

/// A CustomResourceDefinition for a provider kind in `group`/v1beta2, with the contract label,
/// a status subresource, the `cluster-api` category and the given printer columns
/// (`(name, type, jsonPath)`). The schema keeps `spec` and `status` open; the plugin validates
/// the fields it reads and names them in `invalid-spec` errors.
pub fn crd(group: &str, kind: &str, plural: &str, columns: &[(&str, &str, &str)]) -> String {
    let mut cols: Vec<Value> = columns
        .iter()
        .map(|(n, t, p)| json!({"name": n, "type": t, "jsonPath": p}))
        .collect();
    cols.push(json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}));
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}"), "labels": {"cluster.x-k8s.io/v1beta2": "v1beta2"}},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": plural, "singular": kind.to_lowercase(), "categories": ["cluster-api"]},
            "versions": [{
                "name": "v1beta2", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": cols,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    })
    .to_string()
}

/// A served kind in `group`/v1beta2, with the contract role the host drives it by.
pub fn kind(group: &str, kind: &str, role: KindRole) -> ServedKind {
    ServedKind {
        group: group.into(),
        version: "v1beta2".into(),
        kind: kind.into(),
        role,
    }
}
