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

    /// The strings of the list at a JSON pointer (none when it is absent); other items are
    /// skipped.
    pub fn strings(&self, pointer: &str) -> Vec<String> {
        self.0
            .pointer(pointer)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
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
    /// The owning Cluster, or a transient error that waits (5 s) until core sets the owner
    /// reference on `obj`, the provider object, as upstream's providers wait.
    fn owning_cluster(&self, obj: &View) -> Result<View, ProviderError> {
        self.cluster_view()?.ok_or_else(|| {
            wait(
                format!(
                    "waiting for the Cluster controller to set an owner reference on {}",
                    obj.name()
                ),
                5,
            )
        })
    }
    /// The name of `obj`'s Cluster at deletion, when the owner may already be gone: the
    /// owner's, else the `cluster.x-k8s.io/cluster-name` label's.
    fn cluster_name(&self, obj: &View) -> Result<String, ProviderError> {
        Ok(match self.cluster_view()? {
            Some(c) => c.name().to_string(),
            None => obj
                .str("/metadata/labels/cluster.x-k8s.io~1cluster-name")
                .to_string(),
        })
    }
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

impl Metadata {
    /// A provider of `provider_type` named `name` at `version`, on the v1beta2 contract, that
    /// serves no kind yet: add its `kinds` and `crds`.
    pub fn new(name: &str, version: &str, provider_type: ProviderType) -> Metadata {
        Metadata {
            name: name.into(),
            version: version.into(),
            provider_type,
            contract_version: "v1beta2".into(),
            kinds: vec![],
            crds: vec![],
        }
    }
}

impl MachineStatus {
    /// A machine not provisioned (yet), with no provider ID, addresses or failure domain:
    /// only `common`'s conditions and status patch.
    pub fn pending(common: Common) -> MachineStatus {
        MachineStatus {
            provisioned: false,
            provider_id: None,
            addresses: vec![],
            failure_domain: None,
            interruptible: false,
            common,
        }
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
/// (`(name, type, jsonPath)`, then Age). The schema keeps `spec` and `status` open; the plugin
/// validates the fields it reads and names them in `invalid-spec` errors.
pub fn crd(group: &str, kind: &str, plural: &str, columns: &[(&str, &str, &str)]) -> String {
    let mut cols: Vec<Value> = columns.iter().map(|(n, t, p)| column(n, t, p, 0)).collect();
    cols.push(column("Age", "date", ".metadata.creationTimestamp", 0));
    CrdDef {
        columns: cols,
        ..CrdDef::new(group, kind, plural)
    }
    .render()
}

/// A printer column; `priority` 0 shows in `kubectl get`, higher only with `-o wide`.
pub fn column(name: &str, type_: &str, json_path: &str, priority: u32) -> Value {
    let mut c = json!({"name": name, "type": type_, "jsonPath": json_path});
    if priority > 0 {
        c["priority"] = json!(priority);
    }
    c
}

/// A CustomResourceDefinition with everything [`crd`] fixes open to the plugin: short names,
/// the columns in their exact order, the `spec` schema (structural: the API server defaults
/// and validates with it), the status subresource and the scale subresource.
pub struct CrdDef {
    /// API group.
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name.
    pub plural: String,
    /// `spec.names.shortNames`.
    pub short_names: Vec<String>,
    /// Printer columns, in order (see [`column`]); Age is not added.
    pub columns: Vec<Value>,
    /// The OpenAPI v3 schema of `spec`.
    pub spec: Value,
    /// Whether the kind has a `status` (and so a status subresource).
    pub status: bool,
    /// The scale subresource as `(specReplicasPath, statusReplicasPath, labelSelectorPath)`.
    pub scale: Option<(String, String, String)>,
}

impl CrdDef {
    /// Open `spec` and `status`, a status subresource, no columns.
    pub fn new(group: &str, kind: &str, plural: &str) -> Self {
        CrdDef {
            group: group.into(),
            kind: kind.into(),
            plural: plural.into(),
            short_names: vec![],
            columns: vec![],
            spec: json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            status: true,
            scale: None,
        }
    }

    /// The CRD as JSON text.
    pub fn render(&self) -> String {
        let mut properties = json!({"spec": self.spec});
        let mut subresources = json!({});
        if self.status {
            properties["status"] =
                json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
            subresources["status"] = json!({});
        }
        if let Some((spec, status, selector)) = &self.scale {
            subresources["scale"] = json!({"specReplicasPath": spec,
                "statusReplicasPath": status, "labelSelectorPath": selector});
        }
        let mut names = json!({"kind": self.kind, "listKind": format!("{}List", self.kind),
            "plural": self.plural, "singular": self.kind.to_lowercase(), "categories": ["cluster-api"]});
        if !self.short_names.is_empty() {
            names["shortNames"] = json!(self.short_names);
        }
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{}.{}", self.plural, self.group), "labels": {"cluster.x-k8s.io/v1beta2": "v1beta2"}},
            "spec": {
                "group": self.group,
                "scope": "Namespaced",
                "names": names,
                "versions": [{
                    "name": "v1beta2", "served": true, "storage": true,
                    "subresources": subresources,
                    "additionalPrinterColumns": self.columns,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": properties}}
                }]
            }
        })
        .to_string()
    }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn a_view_reads_names_lists_and_failure_domains() {
        let v = View::parse(
            r#"{"kind":"DockerCluster","metadata":{"name":"c1","namespace":"ns"},
                "spec":{"tags":["a",1,"b"],"failureDomains":[{"name":"fd1"},{"name":"fd2","controlPlane":false},{"nope":true}]}}"#,
        )
        .unwrap();
        assert_eq!(
            (v.kind(), v.name(), v.namespace()),
            ("DockerCluster", "c1", "ns")
        );
        assert_eq!(
            v.strings("/spec/tags"),
            ["a", "b"],
            "items that are not strings are skipped"
        );
        assert!(v.strings("/spec/absent").is_empty());
        assert_eq!(v.str("/spec/absent"), "");
        let fds: Vec<_> = v
            .failure_domains()
            .into_iter()
            .map(|f| (f.name, f.control_plane))
            .collect();
        assert_eq!(fds, [("fd1".to_string(), true), ("fd2".to_string(), false)]);
    }

    #[test]
    fn a_context_object_that_is_not_json_is_an_invalid_spec() {
        assert!(
            matches!(View::parse("{"), Err(ProviderError::InvalidSpec(m)) if m.contains("not JSON"))
        );
    }

    #[test]
    fn a_crd_carries_the_contract_label_its_columns_and_subresources() {
        let text = CrdDef {
            short_names: vec!["dc".into()],
            columns: vec![
                column("Ready", "string", ".status.ready", 0),
                column("Wide", "string", ".x", 1),
            ],
            scale: Some((
                ".spec.replicas".into(),
                ".status.replicas".into(),
                ".status.selector".into(),
            )),
            ..CrdDef::new(
                "infrastructure.cluster.x-k8s.io",
                "DockerCluster",
                "dockerclusters",
            )
        }
        .render();
        let crd: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            crd["metadata"]["name"],
            "dockerclusters.infrastructure.cluster.x-k8s.io"
        );
        assert_eq!(
            crd["metadata"]["labels"]["cluster.x-k8s.io/v1beta2"],
            "v1beta2"
        );
        assert_eq!(crd["spec"]["names"]["shortNames"], json!(["dc"]));
        assert_eq!(crd["spec"]["names"]["categories"], json!(["cluster-api"]));
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["additionalPrinterColumns"][1]["priority"], 1);
        assert!(
            version["additionalPrinterColumns"][0]
                .get("priority")
                .is_none()
        );
        assert_eq!(
            version["subresources"]["scale"]["specReplicasPath"],
            ".spec.replicas"
        );
        assert_eq!(version["subresources"]["status"], json!({}));

        let plain: Value = serde_json::from_str(&crd_text_without_status()).unwrap();
        assert!(
            plain["spec"]["versions"][0]["subresources"]
                .get("status")
                .is_none()
        );
    }

    fn crd_text_without_status() -> String {
        CrdDef {
            status: false,
            ..CrdDef::new("g.example", "K", "ks")
        }
        .render()
    }

    #[test]
    fn the_simple_crd_ends_its_columns_with_age() {
        let crd: Value = serde_json::from_str(&crd(
            "g.example",
            "K",
            "ks",
            &[("Ready", "string", ".status.ready")],
        ))
        .unwrap();
        let cols = crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap();
        let names: Vec<_> = cols.iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["Ready", "Age"]);
    }
}
