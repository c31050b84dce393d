//! A managed topology on real Docker: upstream's quick-start ClusterClass and the development
//! Cluster `clusterctl generate` renders from it (v1.13.5, unchanged), applied with kubectl to a
//! real `capw apiserver`, with the host's controllers and the real bootstrap, control-plane and
//! Docker components. It reaches one control-plane Machine and two workers with Nodes; the
//! class's patches show on what it generated; a version patch rolls the control plane first
//! and only then the workers; deleting the Cluster leaves nothing behind.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use capw_api::cluster::Cluster;
use capw_api::machine::Machine;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use std::process::Command;
use support::host::Env;

const QUICK_START: &str = "host/tests/data/clusterclass-quick-start.yaml";
const DEVELOPMENT: &str = "host/tests/data/cluster-template-development.yaml";
const EXAMPLE: &str = "examples/clusterclass-docker.yaml";
const CLUSTER: &str = "capi-quickstart";
const FROM: &str = "v1.28.13";
const TO: &str = "v1.29.10";

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("docker runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Containers and networks the Docker provider made for the cluster.
fn engine_leftovers() -> Vec<String> {
    let mut left: Vec<String> = docker(&[
        "ps",
        "-a",
        "--filter",
        &format!("label=capw.dev/cluster=default.{CLUSTER}"),
        "--format",
        "{{.Names}}",
    ])
    .lines()
    .map(String::from)
    .collect();
    left.extend(
        docker(&["network", "ls", "--format", "{{.Name}}"])
            .lines()
            .filter(|n| n.contains(CLUSTER))
            .map(String::from),
    );
    left
}

fn clean_engine() {
    for c in engine_leftovers() {
        docker(&["rm", "-f", &c]);
        docker(&["network", "rm", &c]);
    }
}

async fn apply(env: &Env, file: &str) {
    let path = support::repo_root().join(file);
    let path = path.to_str().unwrap().to_string();
    env.eventually(&format!("{file} to apply"), 60, || async {
        let (ok, _) = support::kubectl(&env.kubeconfig, &env.home, &["apply", "-f", &path], None);
        ok.then_some(())
    })
    .await;
}

fn topology_reconciled(c: &Cluster) -> Option<(String, String, String)> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "TopologyReconciled")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn selector() -> ListParams {
    ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={CLUSTER}"))
}

/// The cluster's Machines: (name, control plane, spec.version, phase, has a Node).
async fn machines(env: &Env) -> Vec<(String, bool, String, String, bool)> {
    let api: Api<Machine> = Api::default_namespaced(env.client.clone());
    api.list(&selector())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|m| {
            let status = m.status.clone().unwrap_or_default();
            (
                m.metadata.name.clone().unwrap_or_default(),
                m.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key("cluster.x-k8s.io/control-plane")),
                m.spec.version.clone().unwrap_or_default(),
                status.phase.clone().unwrap_or_default(),
                status.node_ref.is_some(),
            )
        })
        .collect()
}

/// Waits until the cluster has one control-plane and two worker Machines Running at `version`
/// with Nodes, and nothing else.
async fn running_at(env: &Env, version: &str, secs: u64) {
    env.eventually(
        &format!("1 control-plane and 2 worker Machines Running at {version}"),
        secs,
        || async {
            let ms = machines(env).await;
            let ok = ms.len() == 3
                && ms.iter().filter(|m| m.1).count() == 1
                && ms.iter().all(|m| m.2 == version && m.3 == "Running" && m.4);
            ok.then_some(())
        },
    )
    .await;
}

async fn list(env: &Env, group: &str, kind: &str, plural: &str) -> Vec<Value> {
    env.dynamic(group, kind, plural)
        .list(&selector())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| serde_json::to_value(o).unwrap())
        .collect()
}

/// `kubectl get nodes` on the workload cluster: each Node's kubelet version.
async fn node_versions(env: &Env) -> Vec<String> {
    let secrets: Api<Secret> = Api::default_namespaced(env.client.clone());
    let s = secrets.get(&format!("{CLUSTER}-kubeconfig")).await.unwrap();
    let bytes = s.data.unwrap().get("value").unwrap().0.clone();
    let path = env.dir.path().join("workload.kubeconfig");
    std::fs::write(&path, bytes).unwrap();
    let (ok, out) = support::kubectl(&path, &env.home, &["get", "nodes", "-o", "json"], None);
    assert!(ok, "kubectl get nodes on the workload cluster: {out}");
    let nodes: Value = serde_json::from_str(&out).unwrap();
    nodes["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            n["status"]["nodeInfo"]["kubeletVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

fn documents(file: &str) -> Vec<serde_yaml::Value> {
    let text = std::fs::read_to_string(support::repo_root().join(file)).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &serde_yaml::Value| !v.is_null())
        .collect()
}

/// The example a user applies is upstream's two files, object for object.
#[test]
fn the_docker_example_is_upstreams_class_and_development_cluster_unchanged() {
    let mut upstream = documents(QUICK_START);
    upstream.extend(documents(DEVELOPMENT));
    assert_eq!(documents(EXAMPLE), upstream);
}

#[tokio::test]
async fn upstreams_development_topology_runs_on_docker_and_upgrades_control_plane_first() {
    support::node_image();
    clean_engine();
    let mut env = support::host::start(
        &[
            ("bootstrap", "bootstrap.wasm"),
            ("control-plane", "control-plane.wasm"),
            ("docker", "docker.wasm"),
        ],
        &[("docker", "capabilities: [container-runtime]\n")],
    )
    .await;
    env.dump = "clusters,machines,machinedeployments,kubeadmcontrolplanes";
    env.serving(
        "the bootstrap, control-plane and Docker plugins to serve",
        4,
    )
    .await;
    apply(&env, EXAMPLE).await;
    let clusters: Api<Cluster> = Api::default_namespaced(env.client.clone());

    running_at(&env, FROM, 600).await;
    let reconciled = env
        .eventually("TopologyReconciled=True", 120, || async {
            let c = clusters.get(CLUSTER).await.ok()?;
            topology_reconciled(&c).filter(|t| t.0 == "True")
        })
        .await;
    assert_eq!(reconciled.1, "ReconcileSucceeded");
    let mut versions = node_versions(&env).await;
    versions.sort();
    assert_eq!(versions, [FROM, FROM, FROM]);

    // The class's patches, rendered from the variables, on what the topology generated.
    let kcps = list(
        &env,
        "controlplane.cluster.x-k8s.io",
        "KubeadmControlPlane",
        "kubeadmcontrolplanes",
    )
    .await;
    assert_eq!(kcps.len(), 1);
    let kcp = &kcps[0]["spec"]["kubeadmConfigSpec"];
    let api_server = &kcp["clusterConfiguration"]["apiServer"];
    assert_eq!(
        api_server["extraArgs"],
        json!([{"name": "admission-control-config-file", "value": "/etc/kubernetes/kube-apiserver-admission-pss.yaml"}]),
        "{kcp}"
    );
    assert_eq!(api_server["extraVolumes"][0]["name"], "admission-pss");
    let pss = kcp["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "/etc/kubernetes/kube-apiserver-admission-pss.yaml")
        .unwrap_or_else(|| panic!("no admission file in {kcp}"));
    let content = pss["content"].as_str().unwrap();
    assert!(content.contains("enforce: \"baseline\""), "{content}");
    assert!(content.contains("audit: \"restricted\""), "{content}");
    assert!(
        content.contains("pod-security.admission.config.k8s.io/v1\n"),
        "{content}"
    );
    let templates = list(
        &env,
        "infrastructure.cluster.x-k8s.io",
        "DockerMachineTemplate",
        "dockermachinetemplates",
    )
    .await;
    assert_eq!(templates.len(), 2, "{templates:?}");
    for t in &templates {
        assert_eq!(
            t["spec"]["template"]["spec"]["customImage"],
            format!("kindest/node:{FROM}")
        );
    }
    let old_templates: Vec<String> = templates
        .iter()
        .map(|t| t["metadata"]["name"].as_str().unwrap().to_string())
        .collect();

    // One field upgrades the whole cluster: the control plane first.
    clusters
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"topology": {"version": TO}}})),
        )
        .await
        .unwrap();
    let kcp_api = env.dynamic(
        "controlplane.cluster.x-k8s.io",
        "KubeadmControlPlane",
        "kubeadmcontrolplanes",
    );
    let kcp_name = kcps[0]["metadata"]["name"].as_str().unwrap().to_string();
    env.eventually("the workers to take the new version", 900, || async {
        // Workers first, then the control plane: a worker at the new version read before the
        // control plane's status must find that status at the new version too.
        let workers: Vec<_> = machines(&env).await.into_iter().filter(|m| !m.1).collect();
        let kcp = kcp_api.get(&kcp_name).await.unwrap();
        let cp_status = kcp.data["status"]["version"].as_str().unwrap_or_default().to_string();
        for w in &workers {
            assert!(
                w.2 != TO || cp_status == TO,
                "worker Machine {} has {TO} while the control plane's status.version is {cp_status:?}",
                w.0
            );
        }
        (workers.iter().any(|w| w.2 == TO)).then_some(())
    })
    .await;
    running_at(&env, TO, 900).await;
    env.eventually("every workload Node at the new version", 300, || async {
        let versions = node_versions(&env).await;
        (versions.len() == 3 && versions.iter().all(|v| v == TO)).then_some(())
    })
    .await;

    // Rotated templates are gone; the new ones carry the new image.
    env.eventually("the old machine templates to go", 300, || async {
        let now = list(
            &env,
            "infrastructure.cluster.x-k8s.io",
            "DockerMachineTemplate",
            "dockermachinetemplates",
        )
        .await;
        let names: Vec<String> = now
            .iter()
            .map(|t| t["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        let ok = now.len() == 2
            && names.iter().all(|n| !old_templates.contains(n))
            && now.iter().all(|t| {
                t["spec"]["template"]["spec"]["customImage"] == format!("kindest/node:{TO}")
            });
        ok.then_some(())
    })
    .await;
    let bootstrap = list(
        &env,
        "bootstrap.cluster.x-k8s.io",
        "KubeadmConfigTemplate",
        "kubeadmconfigtemplates",
    )
    .await;
    assert_eq!(bootstrap.len(), 1, "{bootstrap:?}");
    env.eventually("TopologyReconciled=True after the upgrade", 120, || async {
        let c = clusters.get(CLUSTER).await.ok()?;
        topology_reconciled(&c).filter(|t| t.0 == "True")
    })
    .await;

    // Deleting the Cluster leaves nothing: objects, templates, containers, networks.
    clusters
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    env.eventually("the Cluster and everything it had to go", 300, || async {
        let gone = clusters.get_opt(CLUSTER).await.unwrap().is_none()
            && machines(&env).await.is_empty()
            && list(
                &env,
                "infrastructure.cluster.x-k8s.io",
                "DockerMachineTemplate",
                "dockermachinetemplates",
            )
            .await
            .is_empty()
            && list(
                &env,
                "bootstrap.cluster.x-k8s.io",
                "KubeadmConfigTemplate",
                "kubeadmconfigtemplates",
            )
            .await
            .is_empty()
            && list(
                &env,
                "controlplane.cluster.x-k8s.io",
                "KubeadmControlPlane",
                "kubeadmcontrolplanes",
            )
            .await
            .is_empty()
            && engine_leftovers().is_empty();
        gone.then_some(())
    })
    .await;
    let secrets: Api<Secret> = Api::default_namespaced(env.client.clone());
    assert!(
        secrets.list(&selector()).await.unwrap().items.is_empty(),
        "no Secret of the cluster is left"
    );
}
