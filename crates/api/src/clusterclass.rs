//! `ClusterClass` (`cluster.x-k8s.io/v1beta2`), with upstream field names and printer columns,
//! and the shapes a Cluster's `spec.topology` shares with it.
//!
//! A variable's `openAPIV3Schema`, a patch's `value` and a topology variable's `value` are
//! arbitrary JSON here, as they are to kube-apiserver's structural schema for upstream's CRD
//! at that depth: what they must hold is checked by the ClusterClass and Cluster admission
//! (upstream's webhooks), against the schema the class declares.

use super::common::{Condition, Deprecated, IntOrString, TemplateMeta};
use super::machine::{MachineDeletionSpec, ReadinessGate};
use super::machinedeployment::MachineDeploymentRolloutStrategy;
use super::machinehealthcheck::RemediationTemplateReference;
use super::machinehealthcheck::{MachineHealthCheckChecks, TriggerIf};
use crate::cluster::AvailabilityGate;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cluster.x-k8s.io",
    version = "v1beta2",
    kind = "ClusterClass",
    namespaced,
    status = "ClusterClassStatus",
    shortname = "cc",
    category = "cluster-api",
    label("cluster.x-k8s.io/provider", "cluster-api"),
    printcolumn = r#"{"name":"Paused","type":"string","jsonPath":".status.conditions[?(@.type==\"Paused\")].status","description":"Reconciliation paused","priority":10}"#,
    printcolumn = r#"{"name":"Variables Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"VariablesReady\")].status","description":"Variables ready"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Time duration since creation of ClusterClass"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterClassSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub availability_gates: Vec<AvailabilityGate>,
    /// The infrastructure cluster template each Cluster's infrastructure cluster is cloned from.
    pub infrastructure: InfrastructureClass,
    pub control_plane: ControlPlaneClass,
    #[serde(default, skip_serializing_if = "WorkersClass::is_empty")]
    pub workers: WorkersClass,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub variables: Vec<ClusterClassVariable>,
    /// Applied in order, each to the previous one's output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub patches: Vec<ClusterClassPatch>,
    /// v1.12+: an external upgrade plan. capw has no Runtime SDK; it is kept, not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub upgrade: Option<Value>,
    /// v1.12+: the versions a topology may take, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub kubernetes_versions: Vec<String>,
}

/// A reference to a template in the ClusterClass's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateReference {
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[schemars(length(min = 1, max = 317))]
    pub api_version: String,
}

impl TemplateReference {
    /// The API group of `apiVersion` (`""` for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }
}

/// A field that holds only a template reference (`machineInfrastructure`, `bootstrap`, ...).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateHolder {
    pub template_ref: TemplateReference,
}

/// `naming.template`: a Go template for generated names.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Naming {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub template: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfrastructureClass {
    pub template_ref: TemplateReference,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub naming: Option<Naming>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneClass {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMeta>,
    pub template_ref: TemplateReference,
    /// Set for a control plane made of Machines: the template of their infrastructure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_infrastructure: Option<TemplateHolder>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<ClassHealthCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub naming: Option<Naming>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineDeletionSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "any_objects")]
    pub taints: Vec<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub readiness_gates: Vec<ReadinessGate>,
}

/// A class's or a topology's MachineHealthCheck: the checks and how to remediate.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassHealthCheck {
    /// A topology's only: `false` turns the class's check off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<MachineHealthCheckChecks>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<ClassRemediation>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassRemediation {
    /// Worker classes only: how many Machines may be remediated at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_if: Option<TriggerIf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_ref: Option<RemediationTemplateReference>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkersClass {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub machine_deployments: Vec<MachineDeploymentClass>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub machine_pools: Vec<MachinePoolClass>,
}

impl WorkersClass {
    fn is_empty(&self) -> bool {
        self.machine_deployments.is_empty() && self.machine_pools.is_empty()
    }
}

/// `deletion` of a worker class or topology: the timeouts and the MachineSet deletion order.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerDeletion {
    /// `Random`, `Newest` or `Oldest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Random", "Newest", "Oldest"]))]
    pub order: Option<String>,
    #[serde(flatten)]
    pub timeouts: MachineDeletionSpec,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentClass {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMeta>,
    /// The name topologies refer to; unique in the class.
    #[schemars(length(min = 1, max = 256))]
    pub class: String,
    pub bootstrap: TemplateHolder,
    pub infrastructure: TemplateHolder,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<ClassHealthCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_domain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub naming: Option<Naming>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<WorkerDeletion>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "any_objects")]
    pub taints: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_ready_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub readiness_gates: Vec<ReadinessGate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<ClassRollout>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassRollout {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<MachineDeploymentRolloutStrategy>,
}

/// A MachinePool class. capw has no MachinePools; the class is accepted and its templates are
/// owned, because upstream's classes declare one and every class template is fetched.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolClass {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMeta>,
    #[schemars(length(min = 1, max = 256))]
    pub class: String,
    pub bootstrap: TemplateHolder,
    pub infrastructure: TemplateHolder,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_domains: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub naming: Option<Naming>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineDeletionSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "any_objects")]
    pub taints: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_ready_seconds: Option<i32>,
}

/// A variable a Cluster's topology may set, with its schema.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterClassVariable {
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated_v1_beta1_metadata: Option<TemplateMeta>,
    pub schema: VariableSchema,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VariableSchema {
    /// A CRD-style OpenAPI v3 schema (with `default` and `x-kubernetes-validations`).
    #[serde(rename = "openAPIV3Schema")]
    #[schemars(schema_with = "any_object")]
    pub open_api_v3_schema: Value,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterClassPatch {
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub description: Option<String>,
    /// A Go template; the patch applies where it renders `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub enabled_if: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub definitions: Vec<PatchDefinition>,
    /// A Runtime SDK patch. capw has no Runtime SDK: a class that uses one gets
    /// `VariablesReady=False`, not a silent skip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub external: Option<Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PatchDefinition {
    pub selector: PatchSelector,
    #[schemars(length(max = 100))]
    pub json_patches: Vec<JsonPatch>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PatchSelector {
    #[schemars(length(min = 1, max = 512))]
    pub api_version: String,
    #[schemars(length(min = 1, max = 256))]
    pub kind: String,
    pub match_resources: PatchSelectorMatch,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PatchSelectorMatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_cluster: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_deployment_class: Option<ClassNames>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_pool_class: Option<ClassNames>,
}

/// Class names a patch selects: exact, `*`, `prefix*` or `*suffix`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassNames {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub names: Vec<String>,
}

/// One RFC 6902 operation; its value is literal or comes from a variable or a template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JsonPatch {
    #[schemars(extend("enum" = ["add", "replace", "remove"]))]
    pub op: String,
    #[schemars(length(min = 1, max = 512))]
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub value: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<JsonPatchValue>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JsonPatchValue {
    /// A variable, or a path into one (`a.b[0].c`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub variable: Option<String>,
    /// A Go template whose output is parsed as YAML.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 10240))]
    pub template: Option<String>,
}

/// A variable's value in a Cluster's topology (or a MachineDeployment's overrides).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterVariable {
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    #[schemars(schema_with = "any_value")]
    pub value: Value,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterClassStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Every variable the class defines, with where each definition comes from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variables: Vec<ClusterClassStatusVariable>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<Deprecated>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterClassStatusVariable {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definitions_conflict: Option<bool>,
    pub definitions: Vec<ClusterClassStatusVariableDefinition>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterClassStatusVariableDefinition {
    /// `inline`, or the name of the external patch that defined it.
    pub from: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated_v1_beta1_metadata: Option<TemplateMeta>,
    pub schema: VariableSchema,
}

/// `Cluster.spec.topology`: the class, the version, and how the Cluster uses the class.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Topology {
    pub class_ref: ClusterClassRef,
    /// The Kubernetes version of the whole cluster; the topology rolls the control plane to
    /// it first, then the workers.
    #[schemars(length(min = 1, max = 256))]
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlaneTopology>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkersTopology>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub variables: Vec<ClusterVariable>,
}

/// The ClusterClass a topology uses; `namespace` defaults to the Cluster's.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterClassRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
}

/// A topology's variable overrides for its control plane or one MachineDeployment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VariableOverrides {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub overrides: Vec<ClusterVariable>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneTopology {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMeta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub rollout: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<ClassHealthCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<MachineDeletionSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "any_objects")]
    pub taints: Vec<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub readiness_gates: Vec<ReadinessGate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables: Option<VariableOverrides>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkersTopology {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2000))]
    pub machine_deployments: Vec<MachineDeploymentTopology>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "any_objects")]
    pub machine_pools: Vec<Value>,
}

/// One MachineDeployment of a topology, of a class of the ClusterClass.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentTopology {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMeta>,
    #[schemars(length(min = 1, max = 256))]
    pub class: String,
    /// Unique in the topology; the MachineDeployment's own name is generated.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_domain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<ClassHealthCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<WorkerDeletion>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "any_objects")]
    pub taints: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub readiness_gates: Vec<ReadinessGate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<ClassRollout>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables: Option<VariableOverrides>,
}

/// Any JSON object, kept as sent.
fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// A list of JSON objects, kept as sent.
fn any_objects(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    })
}

/// Any JSON value.
fn any_value(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"x-kubernetes-preserve-unknown-fields": true})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream's quick-start ClusterClass (v1.13.5), unchanged.
    const QUICK_START: &str =
        include_str!("../../../host/tests/data/clusterclass-quick-start.yaml");

    #[test]
    fn upstreams_quick_start_class_reads_without_loss() {
        let docs: Vec<Value> = serde_yaml::Deserializer::from_str(QUICK_START)
            .map(|d| Value::deserialize(d).unwrap())
            .collect();
        let class = docs
            .iter()
            .find(|d| d["kind"] == "ClusterClass")
            .expect("the example holds a ClusterClass");
        let typed: ClusterClass = serde_json::from_value(class.clone()).unwrap();
        assert_eq!(
            typed.spec.workers.machine_deployments[0].class,
            "default-worker"
        );
        assert_eq!(typed.spec.variables.len(), 4);
        assert_eq!(typed.spec.patches.len(), 5);
        // Nothing the class says is dropped by the typed round trip.
        let back = serde_json::to_value(&typed.spec).unwrap();
        assert_eq!(back, class["spec"]);
    }

    #[test]
    fn a_template_reference_names_its_group() {
        let r = TemplateReference {
            kind: "DockerClusterTemplate".into(),
            name: "t".into(),
            api_version: "infrastructure.cluster.x-k8s.io/v1beta2".into(),
        };
        assert_eq!(r.group(), "infrastructure.cluster.x-k8s.io");
    }
}
