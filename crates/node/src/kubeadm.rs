//! What `capw kubeadm init|join` reads from the kubeadm configuration files CABPK's user data
//! writes (`/run/kubeadm/kubeadm.yaml`, `/run/kubeadm/kubeadm-join-config.yaml`), in either
//! kubeadm API (v1beta3 or v1beta4), and the Node it registers from them.
//!
//! Only what a capw node acts on is read: the certificates directory, the endpoint, the
//! serving certificate's SANs, the version, the Node's name, labels and taints, the API
//! server's port, and a join's discovery. Everything else in the files (extra args, volumes,
//! etcd settings) configures components a capw node does not run.

use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Why a kubeadm configuration file cannot be used. Each names the field and what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeadmConfigError {
    #[error("{file}: not kubeadm configuration YAML: {reason}")]
    Yaml { file: String, reason: String },
    #[error("{file}: holds no {kind} document (apiVersion kubeadm.k8s.io/v1beta3 or v1beta4)")]
    Missing { file: String, kind: &'static str },
    #[error(
        "{file}: {kind} has apiVersion {found}; capw's kubeadm reads kubeadm.k8s.io/v1beta3 and v1beta4"
    )]
    ApiVersion {
        file: String,
        kind: &'static str,
        found: String,
    },
    #[error("{file}: {field} {problem}")]
    Field {
        file: String,
        field: String,
        problem: String,
    },
}

/// kubeadm's default `certificatesDir`.
pub const DEFAULT_CERTIFICATES_DIR: &str = capw_kubeadm::pki::DEFAULT_DIR;
/// kubeadm's default API server port (`localAPIEndpoint.bindPort`).
pub const DEFAULT_BIND_PORT: u16 = 6443;

/// A Node registration as kubeadm passes it to the kubelet: the name, the taints (`None`:
/// kubeadm's default for the role) and the `node-labels` of `kubeletExtraArgs`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeRegistration {
    pub name: Option<String>,
    pub taints: Option<Vec<Value>>,
    pub labels: BTreeMap<String, String>,
    /// The kubelet's `provider-id` from `kubeletExtraArgs`, as providers that know it before
    /// boot set it.
    pub provider_id: Option<String>,
}

/// `kubeadm init`'s configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitConfig {
    pub cluster_name: String,
    pub kubernetes_version: String,
    pub certificates_dir: String,
    /// `controlPlaneEndpoint`, `host:port`; empty when unset.
    pub control_plane_endpoint: String,
    pub cert_sans: Vec<String>,
    pub bind_port: u16,
    pub node: NodeRegistration,
    /// The ClusterConfiguration document, as `kubeadm init` uploads it to `kubeadm-config`.
    pub cluster_configuration: String,
}

/// A join's bootstrap-token discovery.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovery {
    pub token: String,
    pub api_server_endpoint: String,
    pub ca_cert_hashes: Vec<String>,
    pub unsafe_skip_ca_verification: bool,
}

/// `kubeadm join`'s configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinConfig {
    pub discovery: Discovery,
    pub node: NodeRegistration,
    /// `controlPlane.localAPIEndpoint.bindPort` of a control-plane join.
    pub control_plane: Option<u16>,
    /// Where a control-plane join finds the cluster's certificates (kubeadm's default: the
    /// JoinConfiguration has no ClusterConfiguration to say otherwise).
    pub certificates_dir: String,
}

/// The documents of a multi-document YAML file, by kind.
fn documents(file: &str, text: &str) -> Result<BTreeMap<String, Value>, KubeadmConfigError> {
    use serde::Deserialize as _;
    let mut out = BTreeMap::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let v = Value::deserialize(doc).map_err(|e| KubeadmConfigError::Yaml {
            file: file.into(),
            reason: e.to_string(),
        })?;
        if let Some(kind) = v.get("kind").and_then(Value::as_str) {
            out.insert(kind.to_string(), v);
        }
    }
    Ok(out)
}

fn document(
    file: &str,
    docs: &BTreeMap<String, Value>,
    kind: &'static str,
) -> Result<Value, KubeadmConfigError> {
    let doc = docs.get(kind).ok_or_else(|| KubeadmConfigError::Missing {
        file: file.into(),
        kind,
    })?;
    let api = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if api != "kubeadm.k8s.io/v1beta3" && api != "kubeadm.k8s.io/v1beta4" {
        return Err(KubeadmConfigError::ApiVersion {
            file: file.into(),
            kind,
            found: api.into(),
        });
    }
    Ok(doc.clone())
}

fn text(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn strings(v: &Value, pointer: &str) -> Vec<String> {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

fn field(file: &str, field: &str, problem: impl Into<String>) -> KubeadmConfigError {
    KubeadmConfigError::Field {
        file: file.into(),
        field: field.into(),
        problem: problem.into(),
    }
}

fn port(file: &str, doc: &Value, pointer: &str, name: &str) -> Result<u16, KubeadmConfigError> {
    match doc.pointer(pointer) {
        None | Some(Value::Null) => Ok(DEFAULT_BIND_PORT),
        Some(Value::Number(n)) => match n.as_u64().and_then(|p| u16::try_from(p).ok()) {
            Some(0) => Ok(DEFAULT_BIND_PORT),
            Some(p) => Ok(p),
            None => Err(field(file, name, "must be a port, 1 to 65535")),
        },
        Some(_) => Err(field(file, name, "must be a port, 1 to 65535")),
    }
}

/// `nodeRegistration` of an Init- or JoinConfiguration. `kubeletExtraArgs` is a map in v1beta3
/// and a name/value list in v1beta4.
fn node_registration(
    file: &str,
    doc: &Value,
    at: &str,
) -> Result<NodeRegistration, KubeadmConfigError> {
    let nr = doc.get("nodeRegistration").cloned().unwrap_or(json!({}));
    let mut args: Vec<(String, String)> = vec![];
    match nr.get("kubeletExtraArgs") {
        Some(Value::Object(m)) => args.extend(
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())),
        ),
        Some(Value::Array(a)) => {
            args.extend(a.iter().map(|e| (text(e, "/name"), text(e, "/value"))))
        }
        _ => {}
    }
    let mut labels = BTreeMap::new();
    for (_, value) in args.iter().filter(|(k, _)| k == "node-labels") {
        for pair in value.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                field(
                    file,
                    &format!("{at}.nodeRegistration.kubeletExtraArgs node-labels"),
                    format!("has {pair:?}; write key=value pairs separated by commas"),
                )
            })?;
            labels.insert(k.to_string(), v.to_string());
        }
    }
    let taints = match nr.get("taints") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(a.clone()),
        Some(_) => {
            return Err(field(
                file,
                &format!("{at}.nodeRegistration.taints"),
                "must be a list of taints",
            ));
        }
    };
    let name = text(&nr, "/name");
    let provider_id = args
        .iter()
        .rev()
        .find(|(k, v)| k == "provider-id" && !v.is_empty())
        .map(|(_, v)| v.clone());
    Ok(NodeRegistration {
        name: (!name.is_empty()).then_some(name),
        taints,
        labels,
        provider_id,
    })
}

/// Reads `kubeadm init --config FILE`.
pub fn init_config(file: &str, text_: &str) -> Result<InitConfig, KubeadmConfigError> {
    let docs = documents(file, text_)?;
    let cc = document(file, &docs, "ClusterConfiguration")?;
    let ic = document(file, &docs, "InitConfiguration")?;
    let kubernetes_version = text(&cc, "/kubernetesVersion");
    if capw_apiserver::KubernetesVersion::parse(&kubernetes_version).is_err() {
        return Err(field(
            file,
            "ClusterConfiguration.kubernetesVersion",
            format!("is {kubernetes_version:?}; set a Kubernetes version such as v1.30.4"),
        ));
    }
    let dir = text(&cc, "/certificatesDir");
    let cluster_configuration =
        capw_kubeadm::cluster_configuration_document(text_).unwrap_or_default();
    Ok(InitConfig {
        cluster_name: text(&cc, "/clusterName"),
        kubernetes_version,
        certificates_dir: if dir.is_empty() {
            DEFAULT_CERTIFICATES_DIR.into()
        } else {
            dir
        },
        control_plane_endpoint: text(&cc, "/controlPlaneEndpoint"),
        cert_sans: strings(&cc, "/apiServer/certSANs"),
        bind_port: port(
            file,
            &ic,
            "/localAPIEndpoint/bindPort",
            "InitConfiguration.localAPIEndpoint.bindPort",
        )?,
        node: node_registration(file, &ic, "InitConfiguration")?,
        cluster_configuration,
    })
}

/// `apiServer.certSANs` of a ClusterConfiguration document, as a control-plane join reads it
/// from `kube-system/kubeadm-config`.
pub fn cert_sans(cluster_configuration: &str) -> Vec<String> {
    serde_yaml::from_str::<Value>(cluster_configuration)
        .map(|cc| strings(&cc, "/apiServer/certSANs"))
        .unwrap_or_default()
}

/// Reads `kubeadm join --config FILE`. Only bootstrap-token discovery is supported.
pub fn join_config(file: &str, text_: &str) -> Result<JoinConfig, KubeadmConfigError> {
    let docs = documents(file, text_)?;
    let jc = document(file, &docs, "JoinConfiguration")?;
    if !text(&jc, "/discovery/file/kubeConfigPath").is_empty() {
        return Err(field(
            file,
            "JoinConfiguration.discovery.file",
            "is not supported by capw's kubeadm; use discovery.bootstrapToken",
        ));
    }
    let bt = |name: &str| format!("/discovery/bootstrapToken/{name}");
    let discovery = Discovery {
        token: text(&jc, &bt("token")),
        api_server_endpoint: text(&jc, &bt("apiServerEndpoint")),
        ca_cert_hashes: strings(&jc, &bt("caCertHashes")),
        unsafe_skip_ca_verification: jc
            .pointer(&bt("unsafeSkipCAVerification"))
            .and_then(Value::as_bool)
            == Some(true),
    };
    if capw_apiserver::bootstrap_token::parse(&discovery.token).is_none() {
        return Err(field(
            file,
            "JoinConfiguration.discovery.bootstrapToken.token",
            "must be a bootstrap token, [a-z0-9]{6}.[a-z0-9]{16}",
        ));
    }
    if discovery.api_server_endpoint.is_empty() {
        return Err(field(
            file,
            "JoinConfiguration.discovery.bootstrapToken.apiServerEndpoint",
            "is empty; set the control plane's host:port",
        ));
    }
    if discovery.ca_cert_hashes.is_empty() && !discovery.unsafe_skip_ca_verification {
        return Err(field(
            file,
            "JoinConfiguration.discovery.bootstrapToken.caCertHashes",
            "is empty and unsafeSkipCAVerification is not true: the CA could not be checked",
        ));
    }
    let control_plane = match jc.get("controlPlane") {
        None | Some(Value::Null) => None,
        Some(_) => Some(port(
            file,
            &jc,
            "/controlPlane/localAPIEndpoint/bindPort",
            "JoinConfiguration.controlPlane.localAPIEndpoint.bindPort",
        )?),
    };
    Ok(JoinConfig {
        discovery,
        node: node_registration(file, &jc, "JoinConfiguration")?,
        control_plane,
        certificates_dir: DEFAULT_CERTIFICATES_DIR.into(),
    })
}

/// The taints a Node registers with: the configuration's, or kubeadm's default, the
/// control-plane taint on control-plane Nodes and none on workers.
pub fn taints(node: &NodeRegistration, control_plane: bool) -> Vec<Value> {
    match &node.taints {
        Some(t) => t.clone(),
        None if control_plane => {
            vec![json!({"key": super::agent::CONTROL_PLANE_ROLE, "effect": "NoSchedule"})]
        }
        None => vec![],
    }
}

/// Taints as the kubelet's `--register-with-taints` writes them: `key[=value]:Effect`,
/// separated by commas.
pub fn taints_flag(taints: &[Value]) -> String {
    taints
        .iter()
        .map(|t| {
            let key = text(t, "/key");
            let value = text(t, "/value");
            let effect = text(t, "/effect");
            if value.is_empty() {
                format!("{key}:{effect}")
            } else {
                format!("{key}={value}:{effect}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses `--register-with-taints`.
pub fn parse_taints(flag: &str) -> Result<Vec<Value>, String> {
    flag.split(',')
        .filter(|t| !t.is_empty())
        .map(|t| {
            let (kv, effect) = t
                .rsplit_once(':')
                .ok_or_else(|| format!("taint {t:?} has no effect; write key[=value]:Effect"))?;
            if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
                return Err(format!(
                    "taint {t:?}: the effect must be NoSchedule, PreferNoSchedule or NoExecute"
                ));
            }
            Ok(match kv.split_once('=') {
                Some((k, v)) => json!({"key": k, "value": v, "effect": effect}),
                None => json!({"key": kv, "effect": effect}),
            })
        })
        .collect()
}

/// Labels as the kubelet's `--node-labels` writes them.
pub fn labels_flag(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses `--node-labels`.
pub fn parse_labels(flag: &str) -> Result<BTreeMap<String, String>, String> {
    flag.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("node label {p:?} is not key=value"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../kubeadm/tests/golden");

    fn golden(name: &str) -> String {
        std::fs::read_to_string(format!("{GOLDEN}/{name}")).expect("golden file")
    }

    #[test]
    fn init_reads_both_kubeadm_apis() {
        for (file, version) in [
            ("init-v1.30.kubeadm.yaml", "v1.30"),
            ("init-v1.33.kubeadm.yaml", "v1.33"),
        ] {
            let c = init_config(file, &golden(file)).expect(file);
            assert!(c.kubernetes_version.starts_with(version), "{c:?}");
            assert_eq!(c.cluster_name, "capi-quickstart");
            assert_eq!(c.certificates_dir, "/etc/kubernetes/pki");
            assert_eq!(c.control_plane_endpoint, "172.18.0.3:6443");
            assert!(c.cert_sans.contains(&"host.docker.internal".to_string()));
            assert_eq!(c.bind_port, 6443);
            assert_eq!(c.node.taints, None, "taints: null is kubeadm's default");
            assert!(
                c.cluster_configuration
                    .contains("kind: ClusterConfiguration")
            );
            assert!(!c.cluster_configuration.contains("InitConfiguration"));
            assert_eq!(cert_sans(&c.cluster_configuration), c.cert_sans);
        }
    }

    #[test]
    fn join_reads_discovery_labels_and_taints() {
        let w = join_config("w", &golden("worker-join-v1.30.kubeadm.yaml")).expect("worker");
        assert_eq!(w.control_plane, None);
        assert_eq!(w.discovery.token, "abcdef.0123456789abcdef");
        assert_eq!(w.discovery.api_server_endpoint, "172.18.0.3:6443");
        assert_eq!(w.discovery.ca_cert_hashes.len(), 1);
        assert_eq!(
            taints_flag(&taints(&w.node, false)),
            "node.cluster.x-k8s.io/uninitialized:NoSchedule"
        );
        let cp = join_config("cp", &golden("control-plane-join-v1.33.kubeadm.yaml")).expect("cp");
        assert_eq!(cp.control_plane, Some(6443));
        assert_eq!(
            taints_flag(&taints(&cp.node, true)),
            "node-role.kubernetes.io/control-plane:NoSchedule"
        );
        let labelled = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    token: abcdef.0123456789abcdef\n    apiServerEndpoint: 10.0.0.1:6443\n    unsafeSkipCAVerification: true\nnodeRegistration:\n  name: n1\n  kubeletExtraArgs:\n  - name: node-labels\n    value: tier=web,zone=a\n  - name: provider-id\n    value: aws:///us-east-1a/i-1\n  taints: []\n";
        let j = join_config("j", labelled).expect("labelled");
        assert_eq!(j.node.name.as_deref(), Some("n1"));
        assert_eq!(j.node.provider_id.as_deref(), Some("aws:///us-east-1a/i-1"));
        assert_eq!(labels_flag(&j.node.labels), "tier=web,zone=a");
        assert_eq!(parse_labels("tier=web,zone=a"), Ok(j.node.labels.clone()));
        assert!(taints(&j.node, false).is_empty(), "taints: [] means none");
    }

    #[test]
    fn bad_files_name_the_field() {
        let no_token = "apiVersion: kubeadm.k8s.io/v1beta3\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    token: nope\n";
        let e =
            join_config("/run/kubeadm/kubeadm-join-config.yaml", no_token).expect_err("bad token");
        assert!(
            e.to_string().contains("discovery.bootstrapToken.token"),
            "{e}"
        );
        let old = "apiVersion: kubeadm.k8s.io/v1beta2\nkind: JoinConfiguration\n";
        assert!(matches!(
            join_config("f", old),
            Err(KubeadmConfigError::ApiVersion { .. })
        ));
        let no_version = "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\n---\napiVersion: kubeadm.k8s.io/v1beta3\nkind: InitConfiguration\n";
        let e = init_config("f", no_version).expect_err("no version");
        assert!(e.to_string().contains("kubernetesVersion"), "{e}");
        assert!(parse_taints("a=b:Sometimes").is_err());
        assert_eq!(
            parse_taints("a=b:NoSchedule,c:NoExecute").map(|t| taints_flag(&t)),
            Ok("a=b:NoSchedule,c:NoExecute".to_string())
        );
    }
}
