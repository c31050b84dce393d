//! `MachineSet` (`cluster.x-k8s.io/v1beta2`), with upstream field names, printer columns and
//! the scale subresource. The template types are shared with `MachineDeployment`.

use super::common::{Condition, LabelSelector, TemplateMeta};
use super::machine::MachineSpec;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "MachineSet",
    namespaced,
    status = "MachineSetStatus",
    shortname = "ms",
    category = "cluster-api",
    label("cluster.x-k8s.io/provider", "cluster-api"),
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterName","description":"Cluster"}"#,
    printcolumn = r#"{"name":"Desired","type":"integer","jsonPath":".spec.replicas","description":"The desired number of machines"}"#,
    printcolumn = r#"{"name":"Current","type":"integer","jsonPath":".status.replicas","description":"The number of machines"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas","description":"The number of machines with Ready condition true"}"#,
    printcolumn = r#"{"name":"Available","type":"integer","jsonPath":".status.availableReplicas","description":"The number of machines with Available condition true"}"#,
    printcolumn = r#"{"name":"Up-to-date","type":"integer","jsonPath":".status.upToDateReplicas","description":"The number of machines with UpToDate condition true"}"#,
    printcolumn = r#"{"name":"Paused","type":"string","jsonPath":".status.conditions[?(@.type==\"Paused\")].status","description":"Reconciliation paused","priority":10}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Time duration since creation of MachineSet"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.template.spec.version","description":"Kubernetes version associated with this MachineSet"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.clusterName == self.template.spec.clusterName", "fieldPath": ".template.spec.clusterName", "message": "must match spec.clusterName"},
    {"rule": "!has(self.selector.matchLabels) || self.selector.matchLabels.all(k, has(self.template.metadata) && has(self.template.metadata.labels) && k in self.template.metadata.labels && self.template.metadata.labels[k] == self.selector.matchLabels[k])", "fieldPath": ".template.metadata.labels", "message": "must match spec.selector"}
]))]
pub struct MachineSetSpec {
    #[schemars(length(min = 1, max = 63), extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "field is immutable"}]))]
    pub cluster_name: String,
    /// Defaults to 1 (or the autoscaler's min size when its annotations are set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Which Machines belong to the set. Defaulted to `cluster.x-k8s.io/set-name=<name>` when
    /// empty; the template's labels must match it.
    #[serde(default)]
    pub selector: LabelSelector,
    pub template: MachineTemplateSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_naming: Option<MachineNamingSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineSetDeletionSpec>,
}

/// The Machines a set or deployment makes: their labels, annotations and spec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineTemplateSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMeta>,
    pub spec: MachineSpec,
}

impl MachineTemplateSpec {
    pub fn labels(&self) -> std::collections::BTreeMap<String, String> {
        self.metadata.clone().unwrap_or_default().labels
    }

    pub fn annotations(&self) -> std::collections::BTreeMap<String, String> {
        self.metadata.clone().unwrap_or_default().annotations
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineNamingSpec {
    /// A template over `.cluster.name`, `.machineSet.name` and `.random` (required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub template: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetDeletionSpec {
    /// Which Machines go first on scale-down: `Random` (the default), `Newest` or `Oldest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Random", "Newest", "Oldest"]))]
    pub order: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// `spec.selector` as a string, for `/scale`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Every Machine of the set, deleting ones included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
