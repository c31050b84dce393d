//! Kubeadm bootstrap data as Cluster API's kubeadm bootstrap provider (CABPK) renders it.
//!
//! A `KubeadmConfig` (or a `KubeadmControlPlane`'s `kubeadmConfigSpec`) becomes cloud-init user
//! data: the cluster's certificates, the user's files, the kubeadm configuration documents for
//! the Machine's Kubernetes version, then `preKubeadmCommands`, `kubeadm init` or
//! `kubeadm join`, `postKubeadmCommands`, and the success sentinel. The bytes are upstream's,
//! so a real kubeadm node image builds a real cluster from them, and capw's node image reads
//! the same files.
//!
//! Pure functions, no I/O: the bootstrap component builds this for wasm32-wasip2, and the
//! host's tests build it natively. Looking up Secrets, making tokens and hashing the CA belong
//! to the caller.

pub mod cloudinit;
pub mod documents;
pub mod goyaml;
pub mod pki;
pub mod schema;
pub mod spec;
pub mod version;

pub use cloudinit::Role;
pub use documents::ClusterData;
pub use pki::{Certificates, KeyPair};
pub use spec::KubeadmConfigSpec;
pub use version::{KubeadmApi, VersionError};

use serde_json::json;

/// The taint CABPK puts on every joining worker until Cluster API has synced its labels.
pub const UNINITIALIZED_TAINT: &str = "node.cluster.x-k8s.io/uninitialized";

/// Why user data cannot be rendered. Each says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The Machine's `spec.version` has no kubeadm API.
    #[error("Machine spec.version: {0}")]
    Version(#[from] VersionError),
    /// A worker's config asks for a control-plane join.
    #[error(
        "Machine is a worker, but spec.joinConfiguration.controlPlane is set in its KubeadmConfig; remove it, or label the Machine cluster.x-k8s.io/control-plane"
    )]
    WorkerWithControlPlane,
}

/// What the user data needs from the Cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterFacts {
    /// `metadata.name`.
    pub name: String,
    /// `spec.controlPlaneEndpoint`, when set.
    pub endpoint: Option<(String, u16)>,
    /// `spec.clusterNetwork.serviceDomain`.
    pub service_domain: String,
    /// `spec.clusterNetwork.services.cidrBlocks`.
    pub services: Vec<String>,
    /// `spec.clusterNetwork.pods.cidrBlocks`.
    pub pods: Vec<String>,
}

impl ClusterFacts {
    /// `host:port` as Go's `net.JoinHostPort` writes it (brackets around an IPv6 host).
    pub fn endpoint_address(&self) -> Option<String> {
        self.endpoint.as_ref().map(|(h, p)| {
            if h.contains(':') {
                format!("[{h}]:{p}")
            } else {
                format!("{h}:{p}")
            }
        })
    }
}

/// Which bootstrap a Machine gets, as CABPK decides it: the first control-plane Machine of an
/// uninitialized cluster runs `kubeadm init`, later control-plane Machines join as control
/// planes, and workers join once the control plane is initialized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bootstrap {
    /// `kubeadm init`.
    Init,
    /// `kubeadm join` with `controlPlane`.
    ControlPlaneJoin,
    /// `kubeadm join`.
    WorkerJoin,
}

/// The user data for one Machine. `version` is the Machine's `spec.version`, which picks the
/// kubeadm API (a join uses the joining Machine's version, as upstream). `files` are the
/// spec's files with `contentFrom` resolved; the discovery kubeconfig, when the join uses
/// one, is the caller's to add after them.
pub fn render(
    spec: &KubeadmConfigSpec,
    cluster: &ClusterFacts,
    version: &str,
    bootstrap: Bootstrap,
    certificates: &Certificates,
    files: &[spec::File],
) -> Result<String, RenderError> {
    let api = KubeadmApi::for_version(version)?;
    let cc = &spec.cluster_configuration;
    match bootstrap {
        Bootstrap::Init => {
            let (cluster_configuration, init_configuration) =
                init_documents(spec, cluster, version, api);
            let role = Role::Init {
                cluster_configuration,
                init_configuration,
            };
            Ok(cloudinit::user_data(
                &role,
                &certificates.files(cc),
                files,
                spec,
            ))
        }
        Bootstrap::ControlPlaneJoin => {
            let mut jc = spec.join_configuration.clone();
            jc.control_plane.get_or_insert_with(Default::default);
            let role = Role::ControlPlaneJoin {
                join_configuration: documents::join_configuration(&jc, api),
            };
            Ok(cloudinit::user_data(
                &role,
                &certificates.files(cc),
                files,
                spec,
            ))
        }
        Bootstrap::WorkerJoin => {
            if spec.join_configuration.control_plane.is_some() {
                return Err(RenderError::WorkerWithControlPlane);
            }
            // Added to what kubeadm reads, never to the stored spec: Cluster API removes the
            // taint once the Node's labels are synced.
            let mut jc = spec.join_configuration.clone();
            let taints = jc.node_registration.taints.get_or_insert_with(Vec::new);
            if !taints.iter().any(|t| {
                t.get("key").and_then(|k| k.as_str()) == Some(UNINITIALIZED_TAINT)
                    && t.get("effect").and_then(|e| e.as_str()) == Some("NoSchedule")
            }) {
                taints.push(json!({"key": UNINITIALIZED_TAINT, "effect": "NoSchedule"}));
            }
            let role = Role::WorkerJoin {
                join_configuration: documents::join_configuration(&jc, api),
            };
            Ok(cloudinit::user_data(&role, &[], files, spec))
        }
    }
}

/// The ClusterConfiguration and InitConfiguration documents of `kubeadm init`: the spec's,
/// with the endpoint, cluster name, networking and version filled from the Cluster and the
/// Machine as CABPK fills them.
fn init_documents(
    spec: &KubeadmConfigSpec,
    cluster: &ClusterFacts,
    version: &str,
    api: KubeadmApi,
) -> (String, String) {
    let mut cc = spec.cluster_configuration.clone();
    if cc.control_plane_endpoint.is_empty()
        && let Some(e) = cluster.endpoint_address()
    {
        cc.control_plane_endpoint = e;
    }
    let joined = |v: &[String]| (!v.is_empty()).then(|| v.join(","));
    let data = ClusterData {
        cluster_name: Some(cluster.name.clone()),
        dns_domain: (!cluster.service_domain.is_empty()).then(|| cluster.service_domain.clone()),
        service_subnet: joined(&cluster.services),
        pod_subnet: joined(&cluster.pods),
        kubernetes_version: (!version.is_empty()).then(|| version.to_string()),
        control_plane_component_health_check_seconds: spec
            .init_configuration
            .timeouts
            .control_plane_component_health_check_seconds,
    };
    (
        documents::cluster_configuration(&cc, api, &data),
        documents::init_configuration(&spec.init_configuration, api),
    )
}

/// The content of `/run/kubeadm/kubeadm.yaml` as the init user data writes it.
pub fn init_config_file(
    spec: &KubeadmConfigSpec,
    cluster: &ClusterFacts,
    version: &str,
) -> Result<String, RenderError> {
    let api = KubeadmApi::for_version(version)?;
    let (cc, ic) = init_documents(spec, cluster, version, api);
    // As cloud-init reads the literal block: one final newline (YAML's clip chomping).
    Ok(format!("---\n{cc}\n---\n{}\n", ic.trim_end_matches('\n')))
}

/// The ClusterConfiguration document of a kubeadm config file: what `kubeadm init` uploads to
/// the `kube-system/kubeadm-config` ConfigMap.
pub fn cluster_configuration_document(file: &str) -> Option<String> {
    file.split("\n---")
        .map(|d| d.trim_start_matches("---").trim_matches('\n'))
        .find(|d| d.lines().any(|l| l == "kind: ClusterConfiguration"))
        .map(|d| format!("{d}\n"))
}

/// The ClusterConfiguration document `cc` with `kubernetesVersion` set to `version`, as KCP's
/// `updateKubeadmConfigMap` edits `kube-system/kubeadm-config` before a rolling upgrade; the
/// rest of the document is kept byte for byte. `None` when it already names that version.
pub fn with_kubernetes_version(cc: &str, version: &str) -> Option<String> {
    let line = format!("kubernetesVersion: {version}");
    if cc.lines().any(|l| l == line) {
        return None;
    }
    let mut found = false;
    let mut out: Vec<&str> = cc
        .lines()
        .map(|l| {
            if l.starts_with("kubernetesVersion:") {
                found = true;
                line.as_str()
            } else {
                l
            }
        })
        .collect();
    if !found {
        out.push(&line);
    }
    Some(format!("{}\n", out.join("\n")))
}

/// CABPK's `reconcileDiscovery`, for a join: unless the user gave a discovery kubeconfig file,
/// fill what is empty of the bootstrap-token discovery: the CA hashes (`sha256:<hex>` over
/// each CA certificate's SubjectPublicKeyInfo), the endpoint and the token; with no hash at
/// all, CA verification is skipped, as upstream does. CABPK writes the result back into the
/// KubeadmConfig's spec.
pub fn fill_discovery(
    spec: &mut KubeadmConfigSpec,
    endpoint: &str,
    ca_cert_hashes: &[String],
    token: &str,
) {
    let d = &mut spec.join_configuration.discovery;
    if !d.file.kube_config_path.is_empty() {
        return;
    }
    let bt = &mut d.bootstrap_token;
    if bt.ca_cert_hashes.is_empty() {
        bt.ca_cert_hashes = ca_cert_hashes.to_vec();
    }
    if bt.api_server_endpoint.is_empty() {
        bt.api_server_endpoint = endpoint.to_string();
    }
    if bt.token.is_empty() {
        bt.token = token.to_string();
    }
    if bt.ca_cert_hashes.is_empty() && bt.unsafe_skip_ca_verification.is_none() {
        bt.unsafe_skip_ca_verification = Some(true);
    }
}

#[cfg(test)]
mod tests {
    use super::with_kubernetes_version;

    #[test]
    fn a_roll_names_the_new_version_and_keeps_the_rest() {
        let cc = "apiServer:\n  certSANs:\n  - localhost\napiVersion: kubeadm.k8s.io/v1beta3\nclusterName: c\nkind: ClusterConfiguration\nkubernetesVersion: v1.30.4\nnetworking:\n  dnsDomain: cluster.local\n";
        let rolled = with_kubernetes_version(cc, "v1.31.0").unwrap_or_default();
        assert_eq!(rolled, cc.replace("v1.30.4", "v1.31.0"));
        assert_eq!(with_kubernetes_version(&rolled, "v1.31.0"), None);
        let without = "kind: ClusterConfiguration\n";
        assert_eq!(
            with_kubernetes_version(without, "v1.31.0").as_deref(),
            Some("kind: ClusterConfiguration\nkubernetesVersion: v1.31.0\n")
        );
    }
}
