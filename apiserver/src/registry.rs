//! What the server serves: the built-in kinds and the kinds of every Established CRD, each with
//! the strategy kube-apiserver applies to it (generation tracking, status subresource, list
//! merge keys, printer columns, field selectors).

use crate::patch::apply::ListType;
use crate::patch::strategic::{self, ListStrategy};
use crate::schema;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

impl crate::patch::apply::ListTypes for ResourceType {
    fn list_type(&self, dotted: &str) -> ListType {
        ResourceType::list_type(self, dotted)
    }

    fn atomic_map(&self, dotted: &str) -> bool {
        ResourceType::atomic_map(self, dotted)
    }
}

/// The built-in kinds, each with its own write rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    Namespace,
    ConfigMap,
    Secret,
    /// core/v1 Event, the storage form of both Event views.
    Event,
    /// events.k8s.io/v1 Event, converted to and from the core form.
    EventV1,
    ServiceAccount,
    Node,
    /// Stored and validated; nothing on the management API schedules or runs one.
    Pod,
    /// apps/v1 Deployment: stored and validated, so `capw manifests` applies here as to a
    /// cluster; nothing runs its Pods.
    Deployment,
    /// v1 Service: stored and validated; nothing routes to it.
    Service,
    Lease,
    Crd,
    /// RBAC objects; enforced with `--authorization-mode RBAC` (`crate::auth::rbac`).
    Rbac,
    /// Answered, never stored: `kubectl auth can-i`, by the same checks requests get.
    SelfSubjectAccessReview,
    /// Answered, never stored: `kubectl auth whoami`, the requester's user and groups.
    SelfSubjectReview,
    /// certificates.k8s.io/v1; kubelet client certificates are approved and signed by
    /// `controllers::csrsigning`.
    CertificateSigningRequest,
    /// admissionregistration.k8s.io/v1 Mutating- and ValidatingWebhookConfiguration: every
    /// write they match is sent to their webhooks (`crate::admission`).
    WebhookConfiguration,
}

/// A printer column.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

impl Column {
    fn new(name: &str, type_: &str, json_path: &str) -> Self {
        Column {
            name: name.into(),
            type_: type_.into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: json_path.into(),
        }
    }
}

/// Where a CRD's `scale` subresource reads and writes (`subresources.scale`), as the CRD's
/// JSON paths (`.spec.replicas`).
#[derive(Debug, Clone, PartialEq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

/// One served group/version/resource.
#[derive(Debug, Clone)]
pub struct ResourceType {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub namespaced: bool,
    pub status_subresource: bool,
    /// `subresources.scale`: served as `autoscaling/v1` Scale.
    pub scale: Option<ScalePaths>,
    pub builtin: Option<Builtin>,
    /// The `openAPIV3Schema` of this version (custom resources only).
    pub schema: Option<Value>,
    pub columns: Vec<Column>,
    pub selectable_fields: Vec<String>,
    /// The schema's CEL rules (`x-kubernetes-validations`), compiled once when the CRD is
    /// installed rather than on every write.
    pub cel: Option<Arc<kube_cel::CompiledSchema>>,
    /// Where the schema declares `x-kubernetes-map-type: atomic` (see
    /// [`schema::atomic_map_paths`]).
    pub atomic_maps: Vec<String>,
    /// Whether the schema declares any `default:`, so reads apply defaults (see
    /// [`schema::has_defaults`]); worked out once, as LIST and watch ask on every request.
    pub schema_defaults: bool,
    /// Where objects live in the store (`group/plural`); the events.k8s.io view shares core's.
    pub storage: String,
    /// Whether clients may use this version. A CRD's storage version may be unserved; the
    /// internal controllers still write through it.
    pub served: bool,
    /// Whether this is the version objects are stored in. Internal writes (garbage collector,
    /// namespace and CRD controllers) go through it so no field of the stored form is pruned.
    pub storage_version: bool,
}

impl ResourceType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    pub fn is_custom(&self) -> bool {
        self.builtin.is_none()
    }

    /// Whether writes outside metadata (and status) bump `metadata.generation`.
    pub fn tracks_generation(&self) -> bool {
        match self.builtin {
            None => true,
            Some(Builtin::Crd | Builtin::Namespace | Builtin::Node) => true,
            Some(_) => false,
        }
    }

    /// Whether a DELETE that removes the object answers the object (kube's
    /// `ReturnDeletedObject`) rather than a `Status` with its details. Custom resources answer
    /// a Status; an object kept for its finalizers is answered as it now is, whatever the kind.
    pub fn returns_deleted_object(&self) -> bool {
        matches!(
            self.builtin,
            Some(Builtin::Crd | Builtin::Namespace | Builtin::ServiceAccount | Builtin::Pod)
        )
    }

    pub fn verbs(&self) -> Vec<&'static str> {
        if matches!(
            self.builtin,
            Some(Builtin::SelfSubjectAccessReview | Builtin::SelfSubjectReview)
        ) {
            return vec!["create"];
        }
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }

    /// Field selectors this resource supports besides `metadata.name` and `metadata.namespace`.
    pub fn supports_field(&self, field: &str) -> bool {
        if field == "metadata.name" || field == "metadata.namespace" {
            return true;
        }
        match self.builtin {
            Some(Builtin::Event) => {
                field.starts_with("involvedObject.")
                    || matches!(field, "reason" | "reportingComponent" | "source" | "type")
            }
            Some(Builtin::EventV1) => {
                field.starts_with("regarding.")
                    || matches!(field, "reason" | "reportingController" | "type")
            }
            Some(Builtin::Secret) => field == "type",
            Some(Builtin::Namespace) => field == "status.phase",
            Some(Builtin::Node) => field == "spec.unschedulable",
            Some(Builtin::Pod) => matches!(
                field,
                "spec.nodeName"
                    | "spec.restartPolicy"
                    | "spec.schedulerName"
                    | "spec.serviceAccountName"
                    | "spec.hostNetwork"
                    | "status.phase"
                    | "status.podIP"
                    | "status.nominatedNodeName"
            ),
            _ => self.selectable_fields.iter().any(|f| f == field),
        }
    }

    /// The apply list type of the field at `dotted` in objects of this type.
    pub fn list_type(&self, dotted: &str) -> ListType {
        if let Some(node) = self
            .schema
            .as_ref()
            .and_then(|s| schema::node_at(s, dotted))
        {
            return schema::list_type(node);
        }
        match strategic::list_strategy(dotted) {
            Some(ListStrategy::Keyed(k)) => ListType::Map(vec![k.to_string()]),
            Some(ListStrategy::PrimitiveSet) => ListType::Set,
            None => ListType::Atomic,
        }
    }

    /// Whether the map or struct at `dotted` is `x-kubernetes-map-type: atomic` (built-in
    /// kinds have no schema here, so all their maps are granular).
    pub fn atomic_map(&self, dotted: &str) -> bool {
        !self.atomic_maps.is_empty() && schema::matches_path(&self.atomic_maps, dotted)
    }

    pub fn media_types_for_patch(&self) -> Vec<&'static str> {
        let mut v = vec![
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ];
        if !self.is_custom() {
            v.push("application/strategic-merge-patch+json");
        }
        v
    }
}

#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    short: &[&str],
    namespaced: bool,
    status: bool,
    b: Builtin,
    columns: Vec<Column>,
) -> ResourceType {
    ResourceType {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: vec![],
        namespaced,
        status_subresource: status,
        scale: None,
        builtin: Some(b),
        schema: None,
        columns,
        selectable_fields: vec![],
        cel: None,
        atomic_maps: vec![],
        schema_defaults: false,
        storage: format!("{group}/{plural}"),
        served: true,
        storage_version: b != Builtin::EventV1,
    }
}

/// A column kubectl shows only with `-o wide`.
fn wide(mut c: Column) -> Column {
    c.priority = 1;
    c
}

fn builtins() -> Vec<ResourceType> {
    let c = Column::new;
    let mut event_v1 = builtin(
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        &["ev"],
        true,
        false,
        Builtin::EventV1,
        vec![],
    );
    event_v1.storage = "/events".into();
    // The one served kind kube puts in the `all` category, so `kubectl get all` works.
    let mut pod = builtin(
        "",
        "v1",
        "Pod",
        "pods",
        &["po"],
        true,
        true,
        Builtin::Pod,
        vec![
            c("Ready", "string", "#podReady"),
            c("Status", "string", "#podStatus"),
            c("Restarts", "integer", "#restarts"),
            c("Age", "date", ".metadata.creationTimestamp"),
            wide(c("IP", "string", ".status.podIP")),
            wide(c("Node", "string", ".spec.nodeName")),
            wide(c("Nominated Node", "string", ".status.nominatedNodeName")),
        ],
    );
    pod.categories = vec!["all".into()];
    let deployment = builtin(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        &["deploy"],
        true,
        true,
        Builtin::Deployment,
        vec![
            c("Up-to-date", "integer", ".status.updatedReplicas"),
            c("Available", "integer", ".status.availableReplicas"),
            c("Age", "date", ".metadata.creationTimestamp"),
        ],
    );
    let service = builtin(
        "",
        "v1",
        "Service",
        "services",
        &["svc"],
        true,
        true,
        Builtin::Service,
        vec![
            c("Type", "string", ".spec.type"),
            c("Cluster-IP", "string", ".spec.clusterIP"),
            c("Age", "date", ".metadata.creationTimestamp"),
        ],
    );
    let rbac = |kind: &str, plural: &str, namespaced| {
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            kind,
            plural,
            &[],
            namespaced,
            false,
            Builtin::Rbac,
            vec![],
        )
    };
    let webhooks = |kind: &str, plural: &str| {
        builtin(
            crate::admission::GROUP,
            "v1",
            kind,
            plural,
            &[],
            false,
            false,
            Builtin::WebhookConfiguration,
            vec![
                c("Webhooks", "integer", "#webhooks"),
                c("Age", "date", ".metadata.creationTimestamp"),
            ],
        )
    };
    vec![
        builtin(
            "",
            "v1",
            "Namespace",
            "namespaces",
            &["ns"],
            false,
            true,
            Builtin::Namespace,
            vec![c("Status", "string", ".status.phase")],
        ),
        builtin(
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            &["cm"],
            true,
            false,
            Builtin::ConfigMap,
            vec![c("Data", "integer", "#data")],
        ),
        builtin(
            "",
            "v1",
            "Secret",
            "secrets",
            &[],
            true,
            false,
            Builtin::Secret,
            vec![c("Type", "string", ".type"), c("Data", "integer", "#data")],
        ),
        builtin(
            "",
            "v1",
            "Event",
            "events",
            &["ev"],
            true,
            false,
            Builtin::Event,
            vec![
                c("Last Seen", "string", "#lastSeen"),
                c("Type", "string", ".type"),
                c("Reason", "string", ".reason"),
                c("Object", "string", "#involved"),
                wide(c("Subobject", "string", ".involvedObject.fieldPath")),
                wide(c("Source", "string", "#source")),
                c("Message", "string", ".message"),
                wide(c("First Seen", "string", "#firstSeen")),
                wide(c("Count", "string", "#count")),
                wide(c("Name", "string", ".metadata.name")),
            ],
        ),
        event_v1,
        builtin(
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            &["sa"],
            true,
            false,
            Builtin::ServiceAccount,
            vec![],
        ),
        builtin(
            "",
            "v1",
            "Node",
            "nodes",
            &["no"],
            false,
            true,
            Builtin::Node,
            vec![
                c("Status", "string", "#ready"),
                c("Version", "string", ".status.nodeInfo.kubeletVersion"),
            ],
        ),
        pod,
        deployment,
        service,
        builtin(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            &[],
            true,
            false,
            Builtin::Lease,
            vec![c("Holder", "string", ".spec.holderIdentity")],
        ),
        webhooks(
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
        ),
        webhooks(
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            &["crd", "crds"],
            false,
            true,
            Builtin::Crd,
            vec![c("Created At", "string", ".metadata.creationTimestamp")],
        ),
        rbac("Role", "roles", true),
        rbac("ClusterRole", "clusterroles", false),
        rbac("RoleBinding", "rolebindings", true),
        rbac("ClusterRoleBinding", "clusterrolebindings", false),
        builtin(
            "certificates.k8s.io",
            "v1",
            "CertificateSigningRequest",
            "certificatesigningrequests",
            &["csr"],
            false,
            true,
            Builtin::CertificateSigningRequest,
            vec![
                c("Age", "date", ".metadata.creationTimestamp"),
                c("SignerName", "string", ".spec.signerName"),
                c("Requestor", "string", ".spec.username"),
                c("RequestedDuration", "string", "#csrDuration"),
                c("Condition", "string", "#csrCondition"),
            ],
        ),
        builtin(
            "authorization.k8s.io",
            "v1",
            "SelfSubjectAccessReview",
            "selfsubjectaccessreviews",
            &[],
            false,
            false,
            Builtin::SelfSubjectAccessReview,
            vec![],
        ),
        builtin(
            "authentication.k8s.io",
            "v1",
            "SelfSubjectReview",
            "selfsubjectreviews",
            &[],
            false,
            false,
            Builtin::SelfSubjectReview,
            vec![],
        ),
    ]
}

/// The resource types a CRD declares: one per served version, and the storage version even when
/// it is not served.
pub fn types_from_crd(crd: &Value) -> Vec<ResourceType> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let group = s(&spec["group"]);
    let plural = s(&names["plural"]);
    let kind = s(&names["kind"]);
    let mut out = vec![];
    for v in spec["versions"].as_array().into_iter().flatten() {
        let served = v.get("served").and_then(Value::as_bool) == Some(true);
        let storage_version = v.get("storage").and_then(Value::as_bool) == Some(true);
        if !served && !storage_version {
            continue;
        }
        let columns = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .map(|cols| {
                cols.iter()
                    .map(|c| Column {
                        name: s(&c["name"]),
                        type_: s(&c["type"]),
                        format: s(&c["format"]),
                        description: s(&c["description"]),
                        priority: c["priority"].as_i64().unwrap_or(0),
                        json_path: s(&c["jsonPath"]),
                    })
                    .collect()
            })
            .unwrap_or_else(|| vec![Column::new("Age", "date", ".metadata.creationTimestamp")]);
        let selectable = v
            .get("selectableFields")
            .and_then(Value::as_array)
            .map(|f| {
                f.iter()
                    .filter_map(|x| x["jsonPath"].as_str())
                    .map(|p| p.trim_start_matches('.').to_string())
                    .collect()
            })
            .unwrap_or_default();
        out.push(ResourceType {
            group: group.clone(),
            version: s(&v["name"]),
            kind: kind.clone(),
            plural: plural.clone(),
            singular: names["singular"]
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| kind.to_lowercase()),
            short_names: crate::meta::strings(names.get("shortNames")),
            categories: crate::meta::strings(names.get("categories")),
            namespaced: spec["scope"].as_str() != Some("Cluster"),
            status_subresource: v.pointer("/subresources/status").is_some(),
            scale: v.pointer("/subresources/scale").map(|sc| ScalePaths {
                spec_replicas: s(&sc["specReplicasPath"]),
                status_replicas: s(&sc["statusReplicasPath"]),
                label_selector: sc["labelSelectorPath"].as_str().map(String::from),
            }),
            builtin: None,
            schema: v.pointer("/schema/openAPIV3Schema").cloned(),
            columns,
            selectable_fields: selectable,
            cel: v
                .pointer("/schema/openAPIV3Schema")
                .filter(|s| s.to_string().contains("x-kubernetes-validations"))
                .map(|s| Arc::new(kube_cel::compile_schema(s))),
            atomic_maps: v
                .pointer("/schema/openAPIV3Schema")
                .map(schema::atomic_map_paths)
                .unwrap_or_default(),
            schema_defaults: v
                .pointer("/schema/openAPIV3Schema")
                .is_some_and(schema::has_defaults),
            storage: format!("{group}/{plural}"),
            served,
            storage_version,
        });
    }
    out
}

/// `(group, version, plural)` → type.
type Table = BTreeMap<(String, String, String), Arc<ResourceType>>;

/// The live table of served resources. Reads are frequent; writes happen when CRDs change.
#[derive(Default)]
pub struct Registry {
    types: RwLock<Table>,
}

impl Registry {
    pub fn with_builtins() -> Self {
        // Built once per process: a host runs an API server per simulated workload cluster, and
        // each copy of the built-in types (columns, field lists) cost about 20 KB.
        static BUILTINS: std::sync::LazyLock<Vec<Arc<ResourceType>>> =
            std::sync::LazyLock::new(|| builtins().into_iter().map(Arc::new).collect());
        let r = Registry::default();
        {
            let mut t = r.table_mut();
            for rt in BUILTINS.iter() {
                t.insert(
                    (rt.group.clone(), rt.version.clone(), rt.plural.clone()),
                    rt.clone(),
                );
            }
        }
        r
    }

    fn table(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        self.types.read().unwrap_or_else(|p| p.into_inner())
    }

    fn table_mut(&self) -> std::sync::RwLockWriteGuard<'_, Table> {
        self.types.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The served type for a request path.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.table()
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .filter(|t| t.served)
            .cloned()
    }

    /// The storage version of the objects stored under `gr`, for internal writes. Any other
    /// version would prune, or default, fields by the wrong schema.
    pub fn by_storage(&self, gr: &str) -> Option<Arc<ResourceType>> {
        self.table()
            .values()
            .find(|t| t.storage == gr && t.storage_version)
            .cloned()
    }

    /// The type serving `apiVersion`/`kind` (used to resolve ownerReferences).
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        self.table()
            .values()
            .find(|t| t.served && t.api_version() == api_version && t.kind == kind)
            .cloned()
    }

    /// Every served type.
    pub fn all(&self) -> Vec<Arc<ResourceType>> {
        self.table()
            .values()
            .filter(|t| t.served)
            .cloned()
            .collect()
    }

    /// Replaces the types served for a CRD's group/plural with `types` (empty removes them).
    pub fn set_custom(&self, group: &str, plural: &str, types: Vec<ResourceType>) {
        let mut t = self.table_mut();
        t.retain(|(g, _, p), rt| !(g == group && p == plural && rt.is_custom()));
        for rt in types {
            t.insert(
                (rt.group.clone(), rt.version.clone(), rt.plural.clone()),
                Arc::new(rt),
            );
        }
    }

    /// Groups and their versions, in a stable order with built-in groups first.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = vec![];
        for ((g, v, _), rt) in self.table().iter() {
            if g.is_empty() || !rt.served {
                continue;
            }
            match out.iter_mut().find(|(gg, _)| gg == g) {
                Some((_, vs)) if !vs.contains(v) => vs.push(v.clone()),
                Some(_) => {}
                None => out.push((g.clone(), vec![v.clone()])),
            }
        }
        for (_, vs) in out.iter_mut() {
            vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        out
    }

    pub fn in_group_version(&self, group: &str, version: &str) -> Vec<Arc<ResourceType>> {
        self.table()
            .values()
            .filter(|t| t.served && t.group == group && t.version == version)
            .cloned()
            .collect()
    }
}

/// Kubernetes version ordering: GA > beta > alpha, then by number.
fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    let minor = |t: &str| t.parse().unwrap_or(0);
    match tail {
        "" => (3, major, 0),
        t if t.starts_with("beta") => (2, major, minor(&t[4..])),
        t if t.starts_with("alpha") => (1, major, minor(&t[5..])),
        _ => (0, major, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_like_kubernetes() {
        let mut v = vec!["v1alpha1", "v1", "v1beta2", "v2", "v1beta1"];
        v.sort_by_key(|x| std::cmp::Reverse(version_priority(x)));
        assert_eq!(v, vec!["v2", "v1", "v1beta2", "v1beta1", "v1alpha1"]);
    }

    #[test]
    fn crd_types_carry_columns_and_selectable_fields() {
        let crd: Value = serde_json::from_str(include_str!("../tests/fixtures/widget-crd.json"))
            .expect("fixture parses");
        let types = types_from_crd(&crd);
        assert_eq!(types.len(), 1);
        let t = &types[0];
        assert!(t.status_subresource);
        assert!(t.supports_field("spec.color"));
        assert!(!t.supports_field("spec.nope"));
        assert!(t.columns.iter().any(|c| c.name == "Color"));
    }
}
