//! `MachineHealthCheck` (`cluster.x-k8s.io/v1beta2`), with upstream field names and printer
//! columns.

use super::common::{Condition, IntOrString, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "MachineHealthCheck",
    namespaced,
    status = "MachineHealthCheckStatus",
    shortname = "mhc",
    shortname = "mhcs",
    category = "cluster-api",
    label("cluster.x-k8s.io/provider", "cluster-api"),
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterName","description":"Cluster"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".status.expectedMachines","description":"Number of machines currently monitored"}"#,
    printcolumn = r#"{"name":"Healthy","type":"integer","jsonPath":".status.currentHealthy","description":"Current observed healthy machines"}"#,
    printcolumn = r#"{"name":"Paused","type":"string","jsonPath":".status.conditions[?(@.type==\"Paused\")].status","description":"Reconciliation paused","priority":10}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Time duration since creation of MachineHealthCheck"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "size(self.selector.matchLabels) > 0 || size(self.selector.matchExpressions) > 0", "fieldPath": ".selector", "message": "selector must not be empty"},
    {"rule": "!('cluster.x-k8s.io/cluster-name' in self.selector.matchLabels) || self.selector.matchLabels['cluster.x-k8s.io/cluster-name'] == self.clusterName", "fieldPath": ".selector", "message": "cannot specify a cluster selector other than the one specified by ClusterName"}
]))]
pub struct MachineHealthCheckSpec {
    #[schemars(length(min = 1, max = 63), extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "field is immutable"}]))]
    pub cluster_name: String,
    /// The Machines to check (with `cluster.x-k8s.io/cluster-name=<clusterName>` added).
    pub selector: LabelSelector,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<MachineHealthCheckChecks>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<MachineHealthCheckRemediation>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckChecks {
    /// How long a Machine may run without a Node before it is unhealthy. Default 600; 0
    /// disables the check, anything else must be at least 30.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == 0 || self >= 30", "message": "must be 0 (disabled) or at least 30"}]))]
    pub node_startup_timeout_seconds: Option<i32>,
    /// Node conditions that make a Machine unhealthy once held for their timeout (OR-ed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub unhealthy_node_conditions: Vec<UnhealthyNodeCondition>,
    /// Machine conditions that make a Machine unhealthy once held for their timeout (OR-ed;
    /// upstream v1.12+, which its quick-start classes set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub unhealthy_machine_conditions: Vec<UnhealthyMachineCondition>,
}

/// A Machine condition held for `timeoutSeconds`. Conditions the check itself sets and the
/// summaries over them cannot be checked: upstream refuses them the same way.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!(self.type in ['Ready','Available','HealthCheckSucceeded','OwnerRemediated','ExternallyRemediated'])", "message": "type must not be one of: Ready, Available, HealthCheckSucceeded, OwnerRemediated, ExternallyRemediated"}
]))]
pub struct UnhealthyMachineCondition {
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 316))]
    pub type_: String,
    /// True, False or Unknown.
    #[schemars(extend("enum" = ["True", "False", "Unknown"]))]
    pub status: String,
    #[schemars(range(min = 0))]
    pub timeout_seconds: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnhealthyNodeCondition {
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 316))]
    pub type_: String,
    /// True, False or Unknown.
    #[schemars(extend("enum" = ["True", "False", "Unknown"]))]
    pub status: String,
    #[schemars(range(min = 0))]
    pub timeout_seconds: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckRemediation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_if: Option<TriggerIf>,
    /// An external remediation template; without it the owner remediates by replacing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_ref: Option<RemediationTemplateReference>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TriggerIf {
    /// Remediate only while at most this many (or this percentage, rounded down) of the
    /// expected Machines are unhealthy. Default 100%.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_less_than_or_equal_to: Option<IntOrString>,
    /// Remediate only while the number of unhealthy Machines is within `[min-max]`; takes
    /// precedence over `unhealthyLessThanOrEqualTo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32), regex(pattern = r"^\[[0-9]+-[0-9]+\]$"))]
    pub unhealthy_in_range: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemediationTemplateReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_machines: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_healthy: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediations_allowed: Option<i32>,
    /// The names of the Machines checked, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
