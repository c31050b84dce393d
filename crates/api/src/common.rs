//! Types shared by the Cluster API kinds, with upstream v1beta2 field names.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A v1beta2 reference to a provider object (`ContractVersionedObjectReference`): the version
/// comes from the CRD's contract label and the namespace is the referrer's.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContractVersionedObjectReference {
    pub api_group: String,
    pub kind: String,
    pub name: String,
}

impl ContractVersionedObjectReference {
    pub fn is_set(&self) -> bool {
        !self.kind.is_empty() && !self.name.is_empty()
    }
}

/// A `metav1.Condition`, as v1beta2 objects keep them in `status.conditions`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub last_transition_time: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

/// `spec.controlPlaneEndpoint`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub port: i32,
}

impl ApiEndpoint {
    /// Upstream's `IsValid`: a host and a non-zero port.
    pub fn is_valid(&self) -> bool {
        !self.host.is_empty() && self.port != 0
    }
}

/// One entry of `status.failureDomains` (a list keyed by name in v1beta2).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomain {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<bool>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
}

/// A Machine address.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineAddress {
    #[serde(rename = "type")]
    pub type_: String,
    pub address: String,
}

/// The v1beta1 failure fields core still copies, without lifecycle effect.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct V1Beta1Deprecated {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Deprecated {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v1beta1: Option<V1Beta1Deprecated>,
}

/// The well-known labels, annotations and finalizers.
pub mod names {
    pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
    pub const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";
    pub const CONTROL_PLANE_NAME_LABEL: &str = "cluster.x-k8s.io/control-plane-name";
    pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
    pub const CLUSTER_FINALIZER: &str = "cluster.cluster.x-k8s.io";
    pub const MACHINE_FINALIZER: &str = "machine.cluster.x-k8s.io";
    pub const GROUP: &str = "cluster.x-k8s.io";
    pub const API_VERSION: &str = "cluster.x-k8s.io/v1beta2";
    pub const API_GROUP: &str = "cluster.x-k8s.io";
    /// The annotation naming the plugin version that last reconciled a provider object.
    pub const PLUGIN_VERSION_ANNOTATION: &str = "runtime.capw.dev/plugin-version";
    pub const MACHINESET_FINALIZER: &str = "cluster.x-k8s.io/machineset";
    pub const MACHINEDEPLOYMENT_FINALIZER: &str = "cluster.x-k8s.io/machinedeployment";
    pub const DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";
    pub const SET_NAME_LABEL: &str = "cluster.x-k8s.io/set-name";
    /// A unique id of a MachineSet's template; never used for matching (`capi-lifecycle.md` §3.3).
    pub const TEMPLATE_HASH_LABEL: &str = "machine-template-hash";
    pub const REVISION_ANNOTATION: &str = "machinedeployment.clusters.x-k8s.io/revision";
    pub const DESIRED_REPLICAS_ANNOTATION: &str =
        "machinedeployment.clusters.x-k8s.io/desired-replicas";
    pub const MAX_REPLICAS_ANNOTATION: &str = "machinedeployment.clusters.x-k8s.io/max-replicas";
    pub const DELETE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/delete-machine";
    pub const DISABLE_MACHINE_CREATE_ANNOTATION: &str = "cluster.x-k8s.io/disable-machine-create";
    pub const CLONED_FROM_NAME_ANNOTATION: &str = "cluster.x-k8s.io/cloned-from-name";
    pub const CLONED_FROM_GROUPKIND_ANNOTATION: &str = "cluster.x-k8s.io/cloned-from-groupkind";
    pub const SKIP_REMEDIATION_ANNOTATION: &str = "cluster.x-k8s.io/skip-remediation";
    pub const REMEDIATE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/remediate-machine";
    pub const SKIP_PREFLIGHT_ANNOTATION: &str = "machineset.cluster.x-k8s.io/skip-preflight-checks";
    pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";
    /// On every object a managed topology generated (value `""`).
    pub const TOPOLOGY_OWNED_LABEL: &str = "topology.cluster.x-k8s.io/owned";
    /// The MachineDeployment topology name, on its MachineDeployment and templates.
    pub const TOPOLOGY_DEPLOYMENT_NAME_LABEL: &str = "topology.cluster.x-k8s.io/deployment-name";
}

/// `metav1.LabelSelector`. `matchLabels: null` (upstream's e2e manifests write it) reads as
/// empty.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub match_labels: BTreeMap<String, String>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One `matchExpressions` entry: `In`, `NotIn`, `Exists` or `DoesNotExist`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    pub key: String,
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Whether `labels` satisfy the selector. An empty selector matches nothing, as upstream's
    /// MachineSet and MachineDeployment treat it (a selector is defaulted before it is used).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        if self.match_labels.is_empty() && self.match_expressions.is_empty() {
            return false;
        }
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let has = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => has.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => has.is_none_or(|v| !r.values.contains(v)),
                    "Exists" => has.is_some(),
                    "DoesNotExist" => has.is_none(),
                    _ => false,
                }
            })
    }

    /// The string form (`a=b,c in (d,e)`), as `status.selector` carries it for `/scale`.
    pub fn to_selector_string(&self) -> String {
        let mut parts: Vec<String> = self
            .match_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        for r in &self.match_expressions {
            parts.push(match r.operator.as_str() {
                "In" => format!("{} in ({})", r.key, r.values.join(",")),
                "NotIn" => format!("{} notin ({})", r.key, r.values.join(",")),
                "Exists" => r.key.clone(),
                _ => format!("!{}", r.key),
            });
        }
        parts.join(",")
    }
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The labels and annotations of an object template (`ObjectMeta` in upstream's templates).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMeta {
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub labels: BTreeMap<String, String>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub annotations: BTreeMap<String, String>,
}

/// `intstr.IntOrString`: a count or a percentage (`"25%"`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(untagged)]
pub enum IntOrString {
    Int(i32),
    String(String),
}

impl JsonSchema for IntOrString {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "IntOrString".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"x-kubernetes-int-or-string": true})
    }

    fn inline_schema() -> bool {
        true
    }
}

/// Why an int-or-percent value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value {0:?}: must be an integer or a percentage such as \"25%\"")]
pub struct IntOrPercentError(pub String);

impl IntOrString {
    /// The value against `total`: a percentage rounds up or down as asked (upstream's
    /// `GetScaledValueFromIntOrPercent`); a string without `%` is an error.
    pub fn scaled(&self, total: i32, round_up: bool) -> Result<i32, IntOrPercentError> {
        match self {
            IntOrString::Int(n) => Ok(*n),
            IntOrString::String(s) => {
                let pct: i64 = s
                    .strip_suffix('%')
                    .and_then(|p| p.parse().ok())
                    .ok_or_else(|| IntOrPercentError(s.clone()))?;
                let v = i64::from(total) * pct;
                let r = if round_up {
                    (v + 99).div_euclid(100)
                } else {
                    v.div_euclid(100)
                };
                i32::try_from(r).map_err(|_| IntOrPercentError(s.clone()))
            }
        }
    }
}

impl std::fmt::Display for IntOrString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IntOrString::Int(n) => write!(f, "{n}"),
            IntOrString::String(s) => f.write_str(s),
        }
    }
}
