//! `KubeadmConfigSpec` as Cluster API v1beta2 shapes it (`bootstrap.cluster.x-k8s.io`), the
//! input the documents and the user data are rendered from. Field names are upstream's; what
//! kubeadm itself defines but this renderer only passes on (environment variables, taints)
//! stays JSON.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// `spec` of a KubeadmConfig, `kubeadmConfigSpec` of a KubeadmControlPlane.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeadmConfigSpec {
    pub cluster_configuration: ClusterConfiguration,
    pub init_configuration: InitConfiguration,
    pub join_configuration: JoinConfiguration,
    pub files: Vec<File>,
    pub disk_setup: DiskSetup,
    pub mounts: Vec<Vec<String>>,
    pub boot_commands: Vec<String>,
    pub pre_kubeadm_commands: Vec<String>,
    pub post_kubeadm_commands: Vec<String>,
    pub users: Vec<User>,
    pub ntp: Ntp,
    pub format: String,
    pub verbosity: Option<i32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterConfiguration {
    pub etcd: Etcd,
    pub control_plane_endpoint: String,
    pub api_server: ApiServer,
    pub controller_manager: ControlPlaneComponent,
    pub scheduler: ControlPlaneComponent,
    pub dns: ImageMeta,
    pub certificates_dir: String,
    pub image_repository: String,
    pub feature_gates: BTreeMap<String, bool>,
    pub certificate_validity_period_days: i32,
    pub ca_certificate_validity_period_days: i32,
    pub encryption_algorithm: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ControlPlaneComponent {
    pub extra_args: Vec<Arg>,
    pub extra_volumes: Vec<HostPathMount>,
    /// `*[]EnvVar` upstream: unset and empty differ.
    pub extra_envs: Option<Vec<Value>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ApiServer {
    #[serde(flatten)]
    pub component: ControlPlaneComponent,
    #[serde(rename = "certSANs")]
    pub cert_sans: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ImageMeta {
    pub image_repository: String,
    pub image_tag: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Etcd {
    pub local: Option<LocalEtcd>,
    pub external: Option<ExternalEtcd>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LocalEtcd {
    pub image_repository: String,
    pub image_tag: String,
    pub data_dir: String,
    pub extra_args: Vec<Arg>,
    pub extra_envs: Option<Vec<Value>>,
    #[serde(rename = "serverCertSANs")]
    pub server_cert_sans: Vec<String>,
    #[serde(rename = "peerCertSANs")]
    pub peer_cert_sans: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ExternalEtcd {
    pub endpoints: Vec<String>,
    pub ca_file: String,
    pub cert_file: String,
    pub key_file: String,
}

/// One `extraArgs` or `kubeletExtraArgs` entry: v1beta2 made these `{name, value}` lists.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Arg {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HostPathMount {
    pub name: String,
    pub host_path: String,
    pub mount_path: String,
    pub read_only: Option<bool>,
    pub path_type: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeRegistration {
    pub name: String,
    pub cri_socket: String,
    /// `*[]Taint`: unset gives a control plane kubeadm's default taint, `[]` gives none.
    pub taints: Option<Vec<Value>>,
    pub kubelet_extra_args: Vec<Arg>,
    pub ignore_preflight_errors: Vec<String>,
    pub image_pull_policy: String,
    pub image_pull_serial: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ApiEndpoint {
    pub advertise_address: String,
    pub bind_port: i32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BootstrapToken {
    pub token: String,
    pub description: String,
    pub ttl_seconds: Option<i32>,
    pub expires: Option<String>,
    pub usages: Vec<String>,
    pub groups: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Patches {
    pub directory: String,
}

/// `{init,join}Configuration.timeouts`, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Timeouts {
    pub control_plane_component_health_check_seconds: Option<i32>,
    pub kubelet_health_check_seconds: Option<i32>,
    #[serde(rename = "kubernetesAPICallSeconds")]
    pub kubernetes_api_call_seconds: Option<i32>,
    #[serde(rename = "etcdAPICallSeconds")]
    pub etcd_api_call_seconds: Option<i32>,
    #[serde(rename = "tlsBootstrapSeconds")]
    pub tls_bootstrap_seconds: Option<i32>,
    pub discovery_seconds: Option<i32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct InitConfiguration {
    pub bootstrap_tokens: Vec<BootstrapToken>,
    pub node_registration: NodeRegistration,
    #[serde(rename = "localAPIEndpoint")]
    pub local_api_endpoint: ApiEndpoint,
    pub skip_phases: Vec<String>,
    pub patches: Patches,
    pub timeouts: Timeouts,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct JoinConfiguration {
    pub node_registration: NodeRegistration,
    pub ca_cert_path: String,
    pub discovery: Discovery,
    /// Its presence marks a control-plane join.
    pub control_plane: Option<JoinControlPlane>,
    pub skip_phases: Vec<String>,
    pub patches: Patches,
    pub timeouts: Timeouts,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct JoinControlPlane {
    #[serde(rename = "localAPIEndpoint")]
    pub local_api_endpoint: ApiEndpoint,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Discovery {
    pub bootstrap_token: BootstrapTokenDiscovery,
    pub file: FileDiscovery,
    pub tls_bootstrap_token: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BootstrapTokenDiscovery {
    pub token: String,
    #[serde(rename = "apiServerEndpoint")]
    pub api_server_endpoint: String,
    pub ca_cert_hashes: Vec<String>,
    #[serde(rename = "unsafeSkipCAVerification")]
    pub unsafe_skip_ca_verification: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FileDiscovery {
    pub kube_config_path: String,
    /// Written to `kubeConfigPath` by the user data; kept as given.
    pub kube_config: Value,
}

/// A `spec.files` entry, with any `contentFrom` already resolved into `content`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct File {
    pub path: String,
    pub owner: String,
    pub permissions: String,
    pub encoding: String,
    pub append: Option<bool>,
    pub content: String,
}

impl File {
    /// A file as the certificates are written: `root:root` and a mode.
    pub fn root(path: impl Into<String>, permissions: &str, content: impl Into<String>) -> File {
        File {
            path: path.into(),
            owner: "root:root".into(),
            permissions: permissions.into(),
            content: content.into(),
            ..File::default()
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct User {
    pub name: String,
    pub gecos: String,
    pub groups: String,
    pub home_dir: String,
    pub inactive: Option<bool>,
    pub shell: String,
    /// With any `passwdFrom` already resolved into it.
    pub passwd: String,
    pub primary_group: String,
    pub lock_password: Option<bool>,
    pub sudo: String,
    pub ssh_authorized_keys: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Ntp {
    pub servers: Vec<String>,
    pub enabled: Option<bool>,
}

impl Ntp {
    /// Upstream's `IsDefined`: the section is written only then.
    pub fn is_defined(&self) -> bool {
        !self.servers.is_empty() || self.enabled.is_some()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DiskSetup {
    pub partitions: Vec<Partition>,
    pub filesystems: Vec<Filesystem>,
}

impl DiskSetup {
    /// Upstream's `IsDefined`.
    pub fn is_defined(&self) -> bool {
        !self.partitions.is_empty() || !self.filesystems.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Partition {
    pub device: String,
    pub layout: Option<bool>,
    pub overwrite: Option<bool>,
    pub table_type: String,
    pub disk_layout: Vec<PartitionSpec>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PartitionSpec {
    pub percentage: i32,
    pub partition_type: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Filesystem {
    pub device: String,
    pub filesystem: String,
    pub label: String,
    pub partition: String,
    pub overwrite: Option<bool>,
    #[serde(rename = "replaceFS")]
    pub replace_fs: String,
    pub extra_opts: Vec<String>,
}
