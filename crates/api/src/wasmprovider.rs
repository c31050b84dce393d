//! `WasmProvider` (`runtime.capw.dev/v1alpha1`, cluster-scoped): one provider component, its
//! grants, limits and rollout settings, and what the runtime made of it.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A provider component the host loads from its plugin directory.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "runtime.capw.dev",
    version = "v1alpha1",
    kind = "WasmProvider",
    status = "WasmProviderStatus",
    shortname = "wp",
    category = "capw",
    printcolumn = r#"{"name":"Plugin","type":"string","jsonPath":".status.pluginName"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.activeVersion"}"#,
    printcolumn = r#"{"name":"Active","type":"string","jsonPath":".status.conditions[?(@.type==\"Active\")].status"}"#,
    printcolumn = r#"{"name":"Calls","type":"integer","jsonPath":".status.calls"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct WasmProviderSpec {
    /// The component file, relative to the host's plugin directory (`--plugins`).
    pub module: String,
    /// The sha256 of the file (hex). A file that hashes differently is not loaded.
    pub sha256: String,
    /// Host interfaces granted to the component: `log`, `container-runtime`, `sim-cloud`, `aws`.
    #[serde(default)]
    pub capabilities: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<WasmProviderLimits>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<WasmProviderRollout>,
    /// Kinds (`Kind.group`) this plugin takes over from the active plugin that serves them now.
    /// Without it a kind another plugin serves is refused (`KindTaken`); with it the other
    /// plugin stops serving the kind and this one starts. The admin's word, never the plugin's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub take_over_kinds: Vec<String>,
    /// What the `container-runtime` capability lets this plugin ask of the engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<ContainerRuntimeGrant>,
    /// What the `aws` capability lets this plugin call, and with whose credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsGrant>,
}

/// Options of the `aws` grant. The host signs every call; the plugin never sees a credential.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsGrant {
    /// The actions the plugin may call, per service (`ec2`, `elasticloadbalancing`), by their
    /// Query API names (`RunInstances`). A service not listed is refused whole. Default: the
    /// EC2 and Elastic Load Balancing actions Cluster API Provider AWS makes (status shows
    /// them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actions: Option<std::collections::BTreeMap<String, Vec<String>>>,
    /// The regions the plugin may call. Default: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regions: Option<Vec<String>>,
    /// Where the host gets the credentials it signs with. Default: its own environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<AwsCredentialSource>,
}

/// Where the host gets AWS credentials for a plugin.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsCredentialSource {
    /// A Secret with the keys `AccessKeyID`, `SecretAccessKey` and, for temporary credentials,
    /// `SessionToken`, as Cluster API Provider AWS's `AWSClusterStaticIdentity` names them.
    /// Without it, the host's environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
    /// `AWS_SESSION_TOKEN`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<AwsSecretRef>,
}

/// A Secret, by namespace and name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsSecretRef {
    pub namespace: String,
    pub name: String,
}

/// Options of the `container-runtime` grant. Everything not granted here is refused at
/// `create()` with an `invalid` error naming the option.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRuntimeGrant {
    /// Privileged containers (root on the Docker host). Default false.
    #[serde(default)]
    pub privileged: bool,
    /// The `host` and `container:<id>` network modes (the host's or another container's
    /// network namespace). Default false.
    #[serde(default)]
    pub host_namespaces: bool,
    /// Images the plugin may run, matched as parsed image references (registry, repository,
    /// tag, digest), never as text: an exact reference (`capw-node:0.1.0`,
    /// `registry.local:5000/team/node:1.2`), or `REPOSITORY:*` for any tag of that repository
    /// on that registry. `capw-node:*` admits `capw-node:0.1.0`, not
    /// `capw-node:5000/other:tag` (the repository `other` on the registry `capw-node:5000`).
    /// Default: the capw node image only (`capw-node:*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<String>>,
    /// Memory limit of each container, in MiB (default 2048).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u32>,
    /// CPU limit of each container, in thousandths of a CPU (default 2000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_millis: Option<u32>,
    /// Process limit of each container (default 4096).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WasmProviderLimits {
    /// Wall-clock deadline of reconcile and delete calls, in seconds (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u32>,
    /// Linear memory per call, in MiB (default 128, at most 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WasmProviderRollout {
    /// How long a new version is watched before it counts as good (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bake_seconds: Option<u32>,
    /// The failed-call ratio during the bake window that rolls the version back (default 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failure_rate: Option<f64>,
}

/// What the runtime made of the component.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WasmProviderStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_version: Option<String>,
    #[serde(default)]
    pub previous_digests: Vec<String>,
    /// The component's real import list.
    #[serde(default)]
    pub imports: Vec<String>,
    #[serde(default)]
    pub granted_capabilities: Vec<String>,
    /// The `container-runtime` grant in force, defaults filled in (only when it is granted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<ContainerRuntimeGrant>,
    /// The `aws` grant in force, defaults filled in (only when it is granted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsGrant>,
    /// Kinds the active version serves (`Kind.group`).
    #[serde(default)]
    pub kinds: Vec<String>,
    /// Validated, Active, Degraded, RolledBack.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub calls: u64,
    #[serde(default)]
    pub traps: u64,
    #[serde(default)]
    pub timeouts: u64,
    #[serde(default)]
    pub errors: u64,
    /// Log lines of the active version the host kept, and the bytes its log writer wrote for
    /// them (what the per-call cap and the rate are charged).
    #[serde(default)]
    pub log_lines: u64,
    #[serde(default)]
    pub log_bytes: u64,
    /// Bytes of log lines dropped over the per-call cap or the rate.
    #[serde(default)]
    pub log_dropped_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The one condition type, shared with Cluster and Machine (a `metav1.Condition`).
pub use super::common::Condition;
