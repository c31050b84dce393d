//! `Cluster` (`cluster.x-k8s.io/v1beta2`), with upstream field names and printer columns.

use super::common::{
    ApiEndpoint, Condition, ContractVersionedObjectReference, Deprecated, FailureDomain,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "Cluster",
    namespaced,
    status = "ClusterStatus",
    shortname = "cl",
    category = "cluster-api",
    label("cluster.x-k8s.io/provider", "cluster-api"),
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"Available\")].status","description":"Cluster pass all availability checks"}"#,
    printcolumn = r#"{"name":"CP Desired","type":"integer","jsonPath":".status.controlPlane.desiredReplicas"}"#,
    printcolumn = r#"{"name":"CP Current","type":"integer","jsonPath":".status.controlPlane.replicas","priority":10}"#,
    printcolumn = r#"{"name":"CP Available","type":"integer","jsonPath":".status.controlPlane.availableReplicas"}"#,
    printcolumn = r#"{"name":"W Desired","type":"integer","jsonPath":".status.workers.desiredReplicas"}"#,
    printcolumn = r#"{"name":"W Current","type":"integer","jsonPath":".status.workers.replicas","priority":10}"#,
    printcolumn = r#"{"name":"W Available","type":"integer","jsonPath":".status.workers.availableReplicas"}"#,
    printcolumn = r#"{"name":"Paused","type":"string","jsonPath":".status.conditions[?(@.type==\"Paused\")].status","priority":10}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Stops every controller, core and providers, from reconciling the Cluster and its objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_network: Option<ClusterNetwork>,
    /// Where the workload API is reached; copied from the infrastructure cluster or control
    /// plane once they report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_ref: Option<ContractVersionedObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_ref: Option<ContractVersionedObjectReference>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub availability_gates: Vec<AvailabilityGate>,
    /// A managed topology: the Cluster's objects are generated from a ClusterClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<crate::clusterclass::Topology>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetwork {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server_port: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<NetworkRanges>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<NetworkRanges>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_domain: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkRanges {
    #[serde(default)]
    pub cidr_blocks: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AvailabilityGate {
    pub condition_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub polarity: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<ClusterInitialization>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ReplicaSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<ReplicaSummary>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_domains: Vec<FailureDomain>,
    /// Pending, Provisioning, Provisioned, Deleting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<Deprecated>,
}

/// The sticky initialization flags.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInitialization {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_provisioned: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_initialized: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSummary {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
}

/// Whether the Cluster is paused, by `spec.paused` or the `cluster.x-k8s.io/paused` annotation:
/// every controller of its objects then leaves them alone.
pub fn is_paused(c: &Cluster) -> bool {
    use kube::ResourceExt;
    c.spec.paused == Some(true)
        || c.annotations()
            .contains_key(crate::common::names::PAUSED_ANNOTATION)
}
