//! What a node agent does for its machine: register the Node with the machine's provider ID
//! (and the uninitialized taint core removes after its first sync), then keep it Ready. It
//! keeps Node conditions it did not set (`capi-lifecycle.md` §4: MachineHealthChecks read them).
//!
//! On a control-plane machine it also does what kubeadm and the kubelet do there: the Node
//! gets the control-plane role label and taint, and the API server the machine runs gets its
//! mirror Pod, `kube-system/kube-apiserver-<node>`, Ready only while that server answers. It is
//! the only one: no controller manager, scheduler or etcd runs on a capw node, so none is shown.
//! `capw kubeadm init` uploads the ClusterConfiguration as `kube-system/kubeadm-config` with
//! these functions, as `kubeadm init` does: Cluster API's KubeadmControlPlane reads that
//! ConfigMap.

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::BTreeMap;

/// The version a Node reports when its bootstrap data names none (a Machine without
/// `spec.version`): the one the capw node image presents.
pub const DEFAULT_KUBELET_VERSION: &str = "v1.33.0";

/// A Node registration.
pub struct Registration<'a> {
    pub name: &'a str,
    pub provider_id: &'a str,
    pub addresses: &'a [String],
    pub kubelet_version: &'a str,
    /// A control-plane machine: it runs the workload API server.
    pub control_plane: bool,
    /// Labels beyond the well-known ones (the kubelet's `--node-labels`).
    pub labels: &'a BTreeMap<String, String>,
    /// The taints to register with (the kubelet's `--register-with-taints`, which kubeadm fills
    /// from `nodeRegistration.taints`); `None` keeps the node agent's default, the
    /// uninitialized taint on a worker and the control-plane taint on a control plane.
    pub taints: Option<&'a [serde_json::Value]>,
}

/// The label and taint kubeadm puts on a control-plane Node.
pub const CONTROL_PLANE_ROLE: &str = "node-role.kubernetes.io/control-plane";

/// The Node as it is first created: the provider ID and the uninitialized taint.
pub fn object(r: &Registration<'_>) -> serde_json::Value {
    let mut node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": r.name, "labels": {
            "kubernetes.io/hostname": r.name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": std::env::consts::ARCH}},
        "spec": {"providerID": r.provider_id,
            "taints": [{"key": "node.cluster.x-k8s.io/uninitialized", "effect": "NoSchedule"}]},
    });
    if r.control_plane {
        node["metadata"]["labels"][CONTROL_PLANE_ROLE] = json!("");
        node["spec"]["taints"] = json!([{"key": CONTROL_PLANE_ROLE, "effect": "NoSchedule"}]);
    }
    for (k, v) in r.labels {
        node["metadata"]["labels"][k] = json!(v);
    }
    if let Some(t) = r.taints {
        node["spec"]["taints"] = json!(t);
    }
    node
}

/// The API server's mirror Pod as the kubelet creates it for a static Pod.
pub fn api_server_pod(r: &Registration<'_>) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("kube-apiserver-{}", r.name), "namespace": "kube-system",
            "labels": {"component": "kube-apiserver", "tier": "control-plane"},
            "annotations": {"kubernetes.io/config.mirror": "capw", "kubernetes.io/config.source": "file"},
        },
        "spec": {
            "nodeName": r.name, "hostNetwork": true, "priorityClassName": "system-node-critical",
            "containers": [{"name": "kube-apiserver", "image": super::image::DEFAULT_TAG,
                "command": ["capw", "apiserver"]}],
        },
    })
}

/// The mirror Pod's status: Running, and Ready as the server's `/readyz` answered.
pub fn api_server_pod_status(ready: bool) -> serde_json::Value {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let flag = if ready { "True" } else { "False" };
    json!({"status": {
        "phase": "Running",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": flag, "lastTransitionTime": now},
            {"type": "Ready", "status": flag, "lastTransitionTime": now},
        ],
        "containerStatuses": [{"name": "kube-apiserver", "ready": ready, "started": true,
            "restartCount": 0, "image": super::image::DEFAULT_TAG, "imageID": "",
            "state": {"running": {"startedAt": now}}}],
    }})
}

/// Creates the API server's mirror Pod if it is missing, then reports `ready`.
pub async fn report_api_server(
    pods: &Api<Pod>,
    r: &Registration<'_>,
    ready: bool,
) -> Result<(), kube::Error> {
    let status = api_server_pod_status(ready);
    // The server gives a new Pod its own `Pending` status, so the report is always a patch.
    ensure_with_status(pods, api_server_pod(r), &Patch::Merge(&status), false).await
}

/// Creates `object` unless it exists, then patches its status: what the kubelet does for its
/// Node and for each mirror Pod, on every heartbeat. With `born_with_status` the object is
/// created carrying the status, and a create that succeeds needs no patch.
async fn ensure_with_status<K>(
    api: &Api<K>,
    mut object: serde_json::Value,
    status: &Patch<&serde_json::Value>,
    born_with_status: bool,
) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if born_with_status && let Patch::Strategic(body) | Patch::Merge(body) = status {
        object["status"] = body["status"].clone();
    }
    let typed: K = serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
    match api.create(&PostParams::default(), &typed).await {
        Ok(_) if born_with_status => return Ok(()),
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e),
    }
    api.patch_status(&name, &PatchParams::default(), status)
        .await?;
    Ok(())
}

/// The status patch that reports the Node Ready (the heartbeat).
pub fn ready_status(r: &Registration<'_>) -> serde_json::Value {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let mut addresses: Vec<serde_json::Value> = r
        .addresses
        .iter()
        .map(|a| json!({"type": "InternalIP", "address": a}))
        .collect();
    addresses.push(json!({"type": "Hostname", "address": r.name}));
    json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "capw node-agent is posting ready status",
            "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "addresses": addresses,
        "nodeInfo": {"architecture": std::env::consts::ARCH, "operatingSystem": "linux",
            "osImage": "capw node", "kubeletVersion": r.kubelet_version,
            "kubeProxyVersion": r.kubelet_version, "containerRuntimeVersion": "capw://1",
            "kernelVersion": "", "machineID": r.name, "systemUUID": r.name, "bootID": r.name},
    }})
}

/// Creates the Node if it is missing, then reports it Ready.
pub async fn register(nodes: &Api<Node>, r: &Registration<'_>) -> Result<(), kube::Error> {
    let status = ready_status(r);
    // Strategic: conditions merge by type, so conditions the agent did not set stay, as a
    // kubelet leaves them. The Node is born with its status, as a kubelet registers it, so
    // `kubectl get nodes` never lists it without its version.
    ensure_with_status(nodes, object(r), &Patch::Strategic(&status), true).await
}

/// The ConfigMap `kubeadm init` uploads: the ClusterConfiguration document, as kubeadm reads
/// it back on join and upgrade.
pub fn kubeadm_config_map(cluster_configuration: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
        "data": {"ClusterConfiguration": cluster_configuration},
    })
}

/// kubeadm's `kube-public/cluster-info`: a kubeconfig naming the cluster's endpoint and CA and
/// no user. Anyone may read it; a joining node checks its CA against the pinned hash.
pub fn cluster_info_config_map(server: &str, ca_pem: &str) -> serde_json::Value {
    use base64::Engine as _;
    use kube::config::{Cluster, Kubeconfig, NamedCluster};
    let kubeconfig = Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        clusters: vec![NamedCluster {
            name: String::new(),
            cluster: Some(Cluster {
                server: Some(server.into()),
                certificate_authority_data: Some(
                    base64::engine::general_purpose::STANDARD.encode(ca_pem),
                ),
                ..Cluster::default()
            }),
            ..NamedCluster::default()
        }],
        current_context: Some(String::new()),
        ..Kubeconfig::default()
    };
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cluster-info", "namespace": "kube-public"},
        "data": {"kubeconfig": serde_yaml::to_string(&kubeconfig).unwrap_or_default()},
    })
}

/// Creates the ConfigMap `object`, or replaces its data: the control-plane machine that starts
/// last presents its version in `kube-system/kubeadm-config`, as kubeadm upgrade leaves it.
/// The node agent writes these to its machine's own API server.
pub async fn put_config_map(
    config_maps: &Api<ConfigMap>,
    object: serde_json::Value,
) -> Result<(), kube::Error> {
    let typed: ConfigMap =
        serde_json::from_value(object.clone()).map_err(kube::Error::SerdeError)?;
    match config_maps.create(&PostParams::default(), &typed).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let patch = json!({"data": object["data"]});
            config_maps
                .patch(
                    &typed.metadata.name.unwrap_or_default(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
            Ok(())
        }
        Err(e) => Err(e),
    }
}
