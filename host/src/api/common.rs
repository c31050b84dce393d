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
    /// The annotation naming the plugin version that last reconciled a provider object.
    pub const PLUGIN_VERSION_ANNOTATION: &str = "runtime.capw.dev/plugin-version";
}
