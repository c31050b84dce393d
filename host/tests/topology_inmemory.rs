//! A managed topology on the in-memory provider (`examples/clusterclass-inmemory.yaml`, applied
//! with kubectl as a user would): three MachineDeployment topologies upgrade at most two at a
//! time, a `hold-upgrade-sequence` annotation holds the later ones until it is removed, and
//! scaling, adding and removing a MachineDeployment topology converge. Deleting the Cluster
//! leaves nothing.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use capw_api::cluster::Cluster;
use capw_api::machine::Machine;
use capw_api::machinedeployment::MachineDeployment;
use capw_api::machinehealthcheck::MachineHealthCheck;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use support::host::Env;

const EXAMPLE: &str = "examples/clusterclass-inmemory.yaml";
const CLUSTER: &str = "in-memory";
const V1: &str = "v1.28.13";
const V2: &str = "v1.29.10";
const V3: &str = "v1.30.4";
const HOLD: &str = "topology.cluster.x-k8s.io/hold-upgrade-sequence";
const TOPOLOGY_NAME: &str = "topology.cluster.x-k8s.io/deployment-name";

fn selector() -> ListParams {
    ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={CLUSTER}"))
}

/// Each MachineDeployment topology: (MachineDeployment version, its Machines' (version,
/// phase)).
type Workers = BTreeMap<String, (String, Vec<(String, String)>)>;

async fn workers(client: &kube::Client) -> Workers {
    let mds: Api<MachineDeployment> = Api::default_namespaced(client.clone());
    let machines: Api<Machine> = Api::default_namespaced(client.clone());
    // MachineDeployments first: the topology controller moves the next one only after the
    // last one's old Machines are gone, so a Machine list read after it cannot show a finished
    // rollout's old Machine next to the rollout it let start.
    let mds = mds.list(&selector()).await.unwrap().items;
    let machines = machines.list(&selector()).await.unwrap().items;
    let mut out = Workers::new();
    for md in mds {
        let name = md.metadata.name.clone().unwrap();
        let topology = md.metadata.labels.as_ref().unwrap()[TOPOLOGY_NAME].clone();
        let of: Vec<(String, String)> = machines
            .iter()
            .filter(|m| {
                m.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("cluster.x-k8s.io/deployment-name"))
                    == Some(&name)
            })
            .map(|m| {
                (
                    m.spec.version.clone().unwrap_or_default(),
                    m.status
                        .as_ref()
                        .and_then(|s| s.phase.clone())
                        .unwrap_or_default(),
                )
            })
            .collect();
        out.insert(
            topology,
            (
                md.spec.template.spec.version.clone().unwrap_or_default(),
                of,
            ),
        );
    }
    out
}

/// Whether the topology's MachineDeployment is at `version` with `replicas` Running Machines
/// at it, and nothing else.
fn settled(w: &Workers, topology: &str, version: &str, replicas: usize) -> bool {
    w.get(topology).is_some_and(|(v, ms)| {
        v == version
            && ms.len() == replicas
            && ms
                .iter()
                .all(|(mv, phase)| mv == version && phase == "Running")
    })
}

/// MachineDeployments rolling now: their version is not yet on every Machine.
fn rolling(w: &Workers) -> usize {
    w.values()
        .filter(|(v, ms)| ms.iter().any(|(mv, _)| mv != v))
        .count()
}

/// Samples, until stopped, the most MachineDeployments rolling at once.
fn sampler(client: kube::Client) -> (Arc<AtomicBool>, Arc<AtomicUsize>) {
    let stop = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicUsize::new(0));
    let (s, m) = (stop.clone(), most.clone());
    tokio::spawn(async move {
        while !s.load(Ordering::SeqCst) {
            let w = workers(&client).await;
            m.fetch_max(rolling(&w), Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    });
    (stop, most)
}

async fn control_plane_at(env: &Env, version: &str) -> bool {
    let kcps = env
        .dynamic(
            "controlplane.cluster.x-k8s.io",
            "KubeadmControlPlane",
            "kubeadmcontrolplanes",
        )
        .list(&selector())
        .await
        .unwrap()
        .items;
    kcps.len() == 1 && kcps[0].data["status"]["version"] == version
}

async fn topology_reconciled(clusters: &Api<Cluster>) -> Option<(String, String, String)> {
    let c = clusters.get(CLUSTER).await.ok()?;
    c.status?
        .conditions
        .iter()
        .find(|c| c.type_ == "TopologyReconciled")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// `kubectl patch cluster --type json`, as a user changes a topology.
async fn json_patch(env: &Env, ops: Value) {
    env.kubectl(
        &[
            "patch",
            "cluster",
            CLUSTER,
            "--type",
            "json",
            "-p",
            &ops.to_string(),
        ],
        None,
    );
}

/// Every topology at `version` with its replicas, the control plane too.
async fn all_at(env: &Env, version: &str, replicas: &[(&str, usize)], secs: u64) {
    env.eventually(
        &format!("every MachineDeployment topology at {version}"),
        secs,
        || async {
            let w = workers(&env.client).await;
            let ok = w.len() == replicas.len()
                && replicas.iter().all(|(t, n)| settled(&w, t, version, *n))
                && control_plane_at(env, version).await;
            ok.then_some(())
        },
    )
    .await;
}

async fn templates(env: &Env, topology: &str) -> usize {
    let lp = selector().labels(&format!("{TOPOLOGY_NAME}={topology}"));
    let mut n = 0;
    for (group, kind, plural) in [
        (
            "infrastructure.cluster.x-k8s.io",
            "InMemoryMachineTemplate",
            "inmemorymachinetemplates",
        ),
        (
            "bootstrap.cluster.x-k8s.io",
            "KubeadmConfigTemplate",
            "kubeadmconfigtemplates",
        ),
    ] {
        n += env
            .dynamic(group, kind, plural)
            .list(&lp)
            .await
            .unwrap()
            .items
            .len();
    }
    n
}

#[tokio::test]
async fn three_deployment_topologies_upgrade_two_at_a_time_hold_scale_add_and_remove() {
    let mut env = support::host::start(
        &[
            ("bootstrap", "bootstrap.wasm"),
            ("control-plane", "control-plane.wasm"),
            ("inmemory", "inmemory.wasm"),
        ],
        &[("inmemory", "capabilities: [sim-cloud]\n")],
    )
    .await;
    env.dump = "clusters,machinedeployments";
    env.serving("the three bundled plugins to serve", 4).await;
    let path = support::repo_root().join(EXAMPLE);
    let path = path.to_str().unwrap().to_string();
    env.eventually("the example to apply", 60, || async {
        let (ok, _) = support::kubectl(&env.kubeconfig, &env.home, &["apply", "-f", &path], None);
        ok.then_some(())
    })
    .await;
    let clusters: Api<Cluster> = Api::default_namespaced(env.client.clone());
    let three = [("md-0", 1), ("md-1", 1), ("md-2", 1)];
    all_at(&env, V1, &three, 300).await;
    env.eventually("TopologyReconciled=True", 60, || async {
        topology_reconciled(&clusters)
            .await
            .filter(|c| c.0 == "True")
    })
    .await;
    // The topology applies a MachineDeployment when it changes, not at every reconcile: with
    // the MachineDeployment controller's own writes (finalizer, revision), 4 each were
    // measured; an apply at every status change of its Machines made it 10 or more.
    let text = env
        .client
        .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .unwrap();
    let patches: u64 = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "capw_apiserver_resource_requests_total{verb=\"patch\",resource=\"cluster.x-k8s.io/machinedeployments\"} ",
            )
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_default();
    assert!(
        (3..=15).contains(&patches),
        "{patches} PATCHes of the three MachineDeployments"
    );
    let mhcs: Api<MachineHealthCheck> = Api::default_namespaced(env.client.clone());
    assert_eq!(
        mhcs.list(&selector()).await.unwrap().items.len(),
        4,
        "one MachineHealthCheck for the control plane and one per MachineDeployment"
    );

    // One patch upgrades everything; at most two MachineDeployments roll at once.
    let (stop, most) = sampler(env.client.clone());
    json_patch(
        &env,
        json!([{"op": "replace", "path": "/spec/topology/version", "value": V2}]),
    )
    .await;
    all_at(&env, V2, &three, 600).await;
    stop.store(true, Ordering::SeqCst);
    let most = most.load(Ordering::SeqCst);
    assert_eq!(
        most, 2,
        "upgrade-concurrency 2: two MachineDeployments roll together, never three"
    );

    // hold-upgrade-sequence on md-1 holds it and md-2 until it is removed.
    json_patch(
        &env,
        json!([
            {"op": "add", "path": "/spec/topology/workers/machineDeployments/1/metadata",
             "value": {"annotations": {HOLD: ""}}},
            {"op": "replace", "path": "/spec/topology/version", "value": V3},
        ]),
    )
    .await;
    env.eventually(
        "md-0 at the new version while md-1 and md-2 hold",
        600,
        || async {
            let w = workers(&env.client).await;
            let ok = settled(&w, "md-0", V3, 1)
                && settled(&w, "md-1", V2, 1)
                && settled(&w, "md-2", V2, 1);
            ok.then_some(())
        },
    )
    .await;
    // As upstream: a deferred MachineDeployment is also pending, and pending is said first;
    // once md-0 is done, nothing else is said to be upgrading.
    let (status, _, message) = env
        .eventually("the hold to show on TopologyReconciled", 60, || async {
            topology_reconciled(&clusters)
                .await
                .filter(|c| c.1 == "MachineDeploymentsUpgradePending" && c.2.ends_with("on hold."))
        })
        .await;
    assert_eq!(status, "False");
    assert!(
        message.starts_with(&format!("MachineDeployment(s) {CLUSTER}-md-1-"))
            && message.contains(&format!(", {CLUSTER}-md-2-"))
            && message.ends_with(&format!("rollout and upgrade to version {V3} on hold.")),
        "{message}"
    );
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let w = workers(&env.client).await;
    assert!(
        settled(&w, "md-1", V2, 1) && settled(&w, "md-2", V2, 1),
        "held: {w:?}"
    );
    json_patch(
        &env,
        json!([{"op": "remove", "path": "/spec/topology/workers/machineDeployments/1/metadata"}]),
    )
    .await;
    all_at(&env, V3, &three, 600).await;

    // Scale one, add one, remove it again.
    json_patch(
        &env,
        json!([
            {"op": "replace", "path": "/spec/topology/workers/machineDeployments/0/replicas", "value": 2},
            {"op": "add", "path": "/spec/topology/workers/machineDeployments/-",
             "value": {"class": "default-worker", "name": "md-3", "replicas": 1}},
        ]),
    )
    .await;
    all_at(
        &env,
        V3,
        &[("md-0", 2), ("md-1", 1), ("md-2", 1), ("md-3", 1)],
        600,
    )
    .await;
    assert_eq!(templates(&env, "md-3").await, 2);
    json_patch(
        &env,
        json!([{"op": "remove", "path": "/spec/topology/workers/machineDeployments/3"}]),
    )
    .await;
    env.eventually(
        "md-3's MachineDeployment, health check and templates to go",
        300,
        || async {
            let w = workers(&env.client).await;
            let checks = mhcs.list(&selector()).await.unwrap().items.len();
            let ok = !w.contains_key("md-3") && checks == 4 && templates(&env, "md-3").await == 0;
            ok.then_some(())
        },
    )
    .await;

    // What the topology wrote is in the Cluster's Events, with upstream's reasons and notes.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::default_namespaced(env.client.clone());
    let notes: Vec<(String, String)> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(CLUSTER))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect();
    let has = |reason: &str, start: &str, end: &str| {
        notes
            .iter()
            .any(|(r, n)| r == reason && n.starts_with(start) && n.ends_with(end))
    };
    let md3 = format!("Created \"MachineDeployment default/{CLUSTER}-md-3-");
    let upgraded = format!(" with version change from {V1} to {V2}");
    for (reason, start, end) in [
        ("TopologyCreate", md3.as_str(), "\""),
        (
            "TopologyUpdate",
            "Updated \"KubeadmControlPlane default/",
            &upgraded,
        ),
        (
            "TopologyUpdate",
            "Updated \"MachineDeployment default/",
            &upgraded,
        ),
        ("TopologyDelete", &md3.replace("Created", "Deleted"), "\""),
    ] {
        assert!(
            has(reason, start, end),
            "no {reason} Event `{start}…{end}`: {notes:#?}"
        );
    }

    // Deleting the Cluster leaves nothing of it.
    clusters
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    env.eventually("the Cluster and everything it had to go", 300, || async {
        let mut left = vec![];
        for (group, kind, plural) in [
            ("cluster.x-k8s.io", "Machine", "machines"),
            (
                "cluster.x-k8s.io",
                "MachineDeployment",
                "machinedeployments",
            ),
            ("cluster.x-k8s.io", "MachineSet", "machinesets"),
            (
                "cluster.x-k8s.io",
                "MachineHealthCheck",
                "machinehealthchecks",
            ),
            (
                "controlplane.cluster.x-k8s.io",
                "KubeadmControlPlane",
                "kubeadmcontrolplanes",
            ),
            (
                "infrastructure.cluster.x-k8s.io",
                "InMemoryCluster",
                "inmemoryclusters",
            ),
            (
                "infrastructure.cluster.x-k8s.io",
                "InMemoryMachineTemplate",
                "inmemorymachinetemplates",
            ),
            (
                "bootstrap.cluster.x-k8s.io",
                "KubeadmConfigTemplate",
                "kubeadmconfigtemplates",
            ),
        ] {
            let n = env
                .dynamic(group, kind, plural)
                .list(&selector())
                .await
                .unwrap()
                .items
                .len();
            if n > 0 {
                left.push(format!("{n} {kind}"));
            }
        }
        let secrets: Api<Secret> = Api::default_namespaced(env.client.clone());
        let n = secrets.list(&selector()).await.unwrap().items.len();
        if n > 0 {
            left.push(format!("{n} Secret"));
        }
        let gone = clusters.get_opt(CLUSTER).await.unwrap().is_none();
        (gone && left.is_empty()).then_some(())
    })
    .await;
}
