//! `MachineDeployment` (`cluster.x-k8s.io/v1beta2`), with upstream field names, printer
//! columns and the scale subresource.

use super::common::{Condition, IntOrString, LabelSelector};
use super::machineset::{MachineNamingSpec, MachineSetDeletionSpec, MachineTemplateSpec};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "MachineDeployment",
    namespaced,
    status = "MachineDeploymentStatus",
    shortname = "md",
    category = "cluster-api",
    label("cluster.x-k8s.io/provider", "cluster-api"),
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterName","description":"Cluster"}"#,
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"Available\")].status","description":"Available"}"#,
    printcolumn = r#"{"name":"Desired","type":"integer","jsonPath":".spec.replicas","description":"The desired number of machines"}"#,
    printcolumn = r#"{"name":"Current","type":"integer","jsonPath":".status.replicas","description":"The number of machines"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas","description":"The number of machines with Ready condition true"}"#,
    printcolumn = r#"{"name":"Available","type":"integer","jsonPath":".status.availableReplicas","description":"The number of machines with Available condition true"}"#,
    printcolumn = r#"{"name":"Up-to-date","type":"integer","jsonPath":".status.upToDateReplicas","description":"The number of machines with UpToDate condition true"}"#,
    printcolumn = r#"{"name":"Paused","type":"string","jsonPath":".status.conditions[?(@.type==\"Paused\")].status","description":"Reconciliation paused","priority":10}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase","description":"MachineDeployment status such as ScalingUp/ScalingDown/Running/Failed/Unknown"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Time duration since creation of MachineDeployment"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.template.spec.version","description":"Kubernetes version associated with this MachineDeployment"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.clusterName == self.template.spec.clusterName", "fieldPath": ".template.spec.clusterName", "message": "must match spec.clusterName"},
    {"rule": "!has(self.selector.matchLabels) || self.selector.matchLabels.all(k, has(self.template.metadata) && has(self.template.metadata.labels) && k in self.template.metadata.labels && self.template.metadata.labels[k] == self.selector.matchLabels[k])", "fieldPath": ".template.metadata.labels", "message": "must match spec.selector"}
]))]
pub struct MachineDeploymentSpec {
    #[schemars(length(min = 1, max = 63), extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "field is immutable"}]))]
    pub cluster_name: String,
    /// Defaults to 1 (or the autoscaler's min size when its annotations are set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<MachineDeploymentRollout>,
    /// Defaulted to `cluster.x-k8s.io/deployment-name=<name>` when empty; the template's labels
    /// must match it.
    #[serde(default)]
    pub selector: LabelSelector,
    pub template: MachineTemplateSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_naming: Option<MachineNamingSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<MachineDeploymentRemediation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineSetDeletionSpec>,
    /// Stops rollouts (not scaling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentRollout {
    /// Machines created before this time roll once it has passed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<MachineDeploymentRolloutStrategy>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentRolloutStrategy {
    /// `RollingUpdate` (the default) or `OnDelete`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["RollingUpdate", "OnDelete"]))]
    pub type_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdate>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdate {
    /// How many Machines may be unavailable during the rollout: a count or a percentage of
    /// `replicas`, rounded down. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// How many Machines may exist above `replicas`: a count or a percentage, rounded up.
    /// Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentRemediation {
    /// How many Machines may be remediated at once: a count or a percentage of `replicas`,
    /// rounded up. Unset means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<IntOrString>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,
    /// ScalingUp, ScalingDown, Running or Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
