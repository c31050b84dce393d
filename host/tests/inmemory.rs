//! The in-memory provider end to end: a real `capw apiserver` over HTTPS, the host's core
//! controllers and provider driver in this process, the real `.wasm` plugins from
//! `scripts/build-plugins`, and kubectl applying `host/tests/data/inmemory-standalone.yaml` (the
//! in-memory example with stand-alone workers; `lifecycle.rs` runs the example itself).

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use capw_api::cluster::Cluster;
use capw_api::machine::Machine;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use std::collections::BTreeMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::host::Env;

/// An API server, and a host whose plugin directory holds the bundled providers (with
/// `inmemory` taken from `inmemory_file`).
async fn env(inmemory_file: &str, inmemory_manifest: &str) -> Env {
    let env = support::host::start(
        &[
            ("bootstrap", "bootstrap.wasm"),
            ("control-plane", "control-plane.wasm"),
            ("inmemory", inmemory_file),
        ],
        &[("inmemory", inmemory_manifest)],
    )
    .await;
    env.serving("the three bundled plugins to serve", 4).await;
    env
}

const MANIFEST: &str = "capabilities: [sim-cloud]\n";

impl Env {
    /// `spec.paused` of the Cluster `name`, set with kubectl.
    fn set_paused(&self, name: &str, paused: bool) {
        let patch = json!({"spec": {"paused": paused}}).to_string();
        self.kubectl(
            &["patch", "cluster", name, "--type=merge", "-p", &patch],
            None,
        );
    }

    /// Every Cluster API object kind of the example.
    fn all_kinds(&self) -> Vec<(&'static str, Api<DynamicObject>)> {
        vec![
            (
                "Cluster",
                self.dynamic("cluster.x-k8s.io", "Cluster", "clusters"),
            ),
            (
                "Machine",
                self.dynamic("cluster.x-k8s.io", "Machine", "machines"),
            ),
            (
                "InMemoryCluster",
                self.dynamic(
                    "infrastructure.cluster.x-k8s.io",
                    "InMemoryCluster",
                    "inmemoryclusters",
                ),
            ),
            (
                "InMemoryMachine",
                self.dynamic(
                    "infrastructure.cluster.x-k8s.io",
                    "InMemoryMachine",
                    "inmemorymachines",
                ),
            ),
            (
                "KubeadmConfig",
                self.dynamic(
                    "bootstrap.cluster.x-k8s.io",
                    "KubeadmConfig",
                    "kubeadmconfigs",
                ),
            ),
            (
                "KubeadmControlPlane",
                self.dynamic(
                    "controlplane.cluster.x-k8s.io",
                    "KubeadmControlPlane",
                    "kubeadmcontrolplanes",
                ),
            ),
        ]
    }

    /// Waits until the cluster is Provisioned with ControlPlaneInitialized and `machines`
    /// Machines are Running with a nodeRef whose Node carries the Machine's providerID.
    async fn converged(&self, cluster: &str, machines: usize) {
        let clusters: Api<Cluster> = Api::namespaced(self.client.clone(), "default");
        self.eventually(
            &format!("Cluster {cluster} to be Provisioned and initialized"),
            90,
            || async {
                let c = clusters.get_opt(cluster).await.ok()??;
                let s = c.status?;
                (s.phase.as_deref() == Some("Provisioned")
                    && s.conditions
                        .iter()
                        .any(|c| c.type_ == "ControlPlaneInitialized" && c.status == "True"))
                .then_some(())
            },
        )
        .await;
        let api: Api<Machine> = Api::namespaced(self.client.clone(), "default");
        let running = self
            .eventually(
                &format!("{machines} Machines of {cluster} Running"),
                90,
                || async {
                    let list = api.list(&ListParams::default()).await.ok()?;
                    let mine: Vec<Machine> = list
                        .items
                        .into_iter()
                        .filter(|m| m.spec.cluster_name == cluster)
                        .collect();
                    let running = mine.iter().filter(|m| {
                        m.status.as_ref().is_some_and(|s| {
                            s.phase.as_deref() == Some("Running") && s.node_ref.is_some()
                        })
                    });
                    (mine.len() == machines && running.count() == machines).then_some(mine)
                },
            )
            .await;
        let workload = self.workload(cluster).await;
        let nodes: Api<Node> = Api::all(workload);
        let by_pid: BTreeMap<String, String> = nodes
            .list(&ListParams::default())
            .await
            .expect("workload nodes")
            .items
            .into_iter()
            .filter_map(|n| Some((n.spec.clone()?.provider_id?, n.name_any())))
            .collect();
        for m in running {
            let pid = m
                .spec
                .provider_id
                .clone()
                .expect("providerID on a Running Machine");
            let node = m.status.clone().and_then(|s| s.node_ref).map(|r| r.name);
            assert_eq!(
                by_pid.get(&pid),
                node.as_ref(),
                "Machine {} has a nodeRef that is not the Node with providerID {pid}",
                m.name_any()
            );
        }
    }

    /// A client for the workload cluster, from `<cluster>-kubeconfig`.
    async fn workload(&self, cluster: &str) -> Client {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), "default");
        let s = secrets
            .get(&format!("{cluster}-kubeconfig"))
            .await
            .expect("kubeconfig secret");
        let value = s.data.expect("data")["value"].0.clone();
        let kc = kube::config::Kubeconfig::from_yaml(&String::from_utf8(value).expect("utf8"))
            .expect("a kubeconfig");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("config");
        Client::try_from(cfg).expect("workload client")
    }

    fn calls(&self) -> u64 {
        self.host
            .registry
            .names()
            .iter()
            .filter_map(|n| self.host.registry.get(n))
            .map(|s| {
                s.current()
                    .counters
                    .calls
                    .load(std::sync::atomic::Ordering::Relaxed)
            })
            .sum()
    }

    /// name → resourceVersion of every object of the example's kinds.
    async fn versions(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (kind, api) in self.all_kinds() {
            for o in api.list(&ListParams::default()).await.expect("list").items {
                out.insert(
                    format!("{kind}/{}", o.name_any()),
                    o.resource_version().unwrap_or_default(),
                );
            }
        }
        out
    }
}

fn example() -> String {
    std::fs::read_to_string(support::repo_root().join("host/tests/data/inmemory-standalone.yaml"))
        .expect("example")
}

/// The example with every name prefixed (a second, independent cluster) and tweaks applied.
fn variant(prefix: &str, paused: bool) -> String {
    let mut y = example().replace("demo", prefix);
    if paused {
        y = y.replacen(
            "spec:\n  clusterNetwork:",
            "spec:\n  paused: true\n  clusterNetwork:",
            1,
        );
    }
    y
}

/// A deletion seen by a watch: (resourceVersion, kind, name, label keys).
type Deletion = (u64, String, String, Vec<String>);

fn rv(o: &DynamicObject) -> u64 {
    o.resource_version()
        .and_then(|r| r.parse().ok())
        .expect("numeric resourceVersion")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_example_runs_and_is_deleted_in_contract_order() {
    let env = env("inmemory.wasm", MANIFEST).await;
    let out = env.kubectl(&["apply", "-f", "-"], Some(&example()));
    assert!(
        out.contains("cluster.cluster.x-k8s.io/demo created"),
        "{out}"
    );
    env.converged("demo", 6).await;

    // kubectl reads like Cluster API.
    let table = env.kubectl(&["get", "clusters,machines"], None);
    for want in [
        "PHASE",
        "Provisioned",
        "CP DESIRED",
        "NODE NAME",
        "Running",
        "demo-worker-0",
    ] {
        assert!(table.contains(want), "kubectl get lacks {want}:\n{table}");
    }
    let cp = env.kubectl(&["get", "kubeadmcontrolplanes"], None);
    assert!(cp.contains("true") && cp.contains("demo"), "{cp}");

    // The plugins loaded at once on a fresh data directory, and none of them was refused.
    let warnings = env.kubectl(
        &[
            "get",
            "events",
            "--field-selector",
            "type=Warning,involvedObject.kind=WasmProvider",
        ],
        None,
    );
    assert!(
        !warnings.contains("WasmProvider") && !warnings.contains("wasmprovider/"),
        "{warnings}"
    );

    // Each control-plane Machine created has its own Event, naming it: the same reason with
    // another Machine is not a repeat of the first.
    let described = env.kubectl(
        &["describe", "kubeadmcontrolplane", "demo-control-plane"],
        None,
    );
    let cp_machines = env.kubectl(
        &[
            "get",
            "machines",
            "-l",
            "cluster.x-k8s.io/control-plane",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
        None,
    );
    let cp_machines: Vec<&str> = cp_machines.split_whitespace().collect();
    assert_eq!(cp_machines.len(), 3, "{cp_machines:?}");
    for m in &cp_machines {
        assert!(
            described.contains(&format!("Created control-plane Machine {m}")),
            "no Event names the creation of {m}:\n{described}"
        );
    }
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(env.client.clone(), "default");
    let created: Vec<_> = events
        .list(&Default::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("SuccessfulCreate"))
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("KubeadmControlPlane")
        })
        .collect();
    let mut related: Vec<_> = created
        .iter()
        .filter_map(|e| e.related.as_ref()?.name.as_deref())
        .collect();
    related.sort();
    let mut want = cp_machines.clone();
    want.sort();
    assert_eq!(
        related, want,
        "each creation's Event names its Machine as related"
    );
    assert!(
        created.iter().all(|e| e.series.is_none()),
        "no creation counts as a repeat of another: {created:?}"
    );
    let im = env.kubectl(&["get", "inmemorymachines"], None);
    assert!(
        im.contains("demo-worker-0") && im.contains(" demo "),
        "the Cluster column is empty:\n{im}"
    );

    // capw describe draws the tree, with the plugin versions.
    let out = Command::new(env!("CARGO_BIN_EXE_capw"))
        .args(["describe", "cluster", "demo", "--kubeconfig"])
        .arg(&env.kubeconfig)
        .output()
        .expect("capw describe runs");
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{tree}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "Cluster/demo",
        "├─InMemoryCluster/demo",
        "KubeadmControlPlane/demo-control-plane",
        "│ └─Machine/demo-control-plane-",
        "└─Workers",
        "Machine/demo-worker-0",
        "inmemory/0.1.0",
        "control-plane/0.1.0",
        "Running",
    ] {
        assert!(tree.contains(want), "describe lacks {want}:\n{tree}");
    }

    // Record every deletion's resourceVersion (the store's commit order) while deleting.
    let deleted: Arc<Mutex<Vec<Deletion>>> = Arc::default();
    let mut watches = vec![];
    for (kind, api) in env.all_kinds() {
        let deleted = deleted.clone();
        let api: Api<DynamicObject> = api;
        watches.push(tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default()).boxed();
            while let Some(Ok(ev)) = s.next().await {
                if let watcher::Event::Delete(o) = ev {
                    let labels: Vec<String> = o.labels().keys().cloned().collect();
                    deleted
                        .lock()
                        .unwrap()
                        .push((rv(&o), kind.to_string(), o.name_any(), labels));
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.kubectl(&["delete", "cluster", "demo", "--wait=false"], None);
    env.eventually("every object of the cluster to be gone", 90, || async {
        let left = env.versions().await;
        left.is_empty().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for w in watches {
        w.abort();
    }
    let mut d = deleted.lock().unwrap().clone();
    d.sort();
    let last = |pred: &dyn Fn(&Deletion) -> bool| {
        d.iter()
            .filter(|e| pred(e))
            .map(|e| e.0)
            .max()
            .expect("deleted")
    };
    let first = |pred: &dyn Fn(&Deletion) -> bool| {
        d.iter()
            .filter(|e| pred(e))
            .map(|e| e.0)
            .min()
            .expect("deleted")
    };
    let is_cp_machine = |e: &Deletion| {
        e.1 == "Machine" && e.3.iter().any(|l| l == "cluster.x-k8s.io/control-plane")
    };
    let is_worker = |e: &Deletion| e.1 == "Machine" && !is_cp_machine(e);
    assert_eq!(d.iter().filter(|e| is_worker(e)).count(), 3, "{d:?}");
    assert_eq!(d.iter().filter(|e| is_cp_machine(e)).count(), 3, "{d:?}");
    let workers_gone = last(&is_worker);
    assert!(
        workers_gone < first(&is_cp_machine),
        "control-plane Machines went before the workers: {d:?}"
    );
    let cp_gone = last(&|e| e.1 == "KubeadmControlPlane");
    assert!(workers_gone < cp_gone, "{d:?}");
    let infra_gone = last(&|e| e.1 == "InMemoryCluster");
    assert!(
        cp_gone < infra_gone,
        "the infrastructure cluster went before the control plane: {d:?}"
    );
    assert!(infra_gone < last(&|e| e.1 == "Cluster"), "{d:?}");

    // Nothing is left: no object, no Secret of the cluster.
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "default");
    env.eventually("the cluster's Secrets to be collected", 30, || async {
        let left = secrets
            .list(&ListParams::default().labels("cluster.x-k8s.io/cluster-name=demo"))
            .await
            .ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn finalizers_and_owner_references_are_rebuilt_and_idle_writes_nothing() {
    let env = env("inmemory.wasm", MANIFEST).await;
    env.kubectl(&["apply", "-f", "-"], Some(&example()));
    env.converged("demo", 6).await;

    // Strip every finalizer: all come back.
    let kinds = env.all_kinds();
    let stripped = env.strip_finalizers(&kinds, |_, _| true).await;
    assert_eq!(
        stripped,
        1 + 6 + 1 + 6 + 6 + 1,
        "every object had a finalizer"
    );

    // Wipe the owner references of everything core or the control plane owns: all come back.
    let wiped = env.wipe_owners(&kinds, |kind, _| kind != "Cluster").await;
    // Nothing got recreated on the way.
    assert_eq!(env.versions().await.len(), wiped + 1);

    // Converged: a minute without a single write and without plugin calls.
    env.converged("demo", 6).await;
    // Progress a reconcile saw last (a count, a waiting reason) is written once it has stood
    // for the status pace, 5 s (`capw_reconcile::pace`): wait it out before counting.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (versions, calls) = (env.versions().await, env.calls());
    tokio::time::sleep(Duration::from_secs(60)).await;
    let after = env.versions().await;
    let changed: Vec<_> = after
        .iter()
        .filter(|(k, v)| versions.get(*k) != Some(v))
        .collect();
    assert!(
        changed.is_empty(),
        "objects written while idle: {changed:?}"
    );
    assert_eq!(
        env.calls(),
        calls,
        "plugins were called while nothing changed"
    );
}

/// The API server's writes so far (POST, PUT, PATCH and DELETE), by method.
async fn writes(client: &Client) -> BTreeMap<String, u64> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(req).await.expect("metrics");
    text.lines()
        .filter_map(|l| l.strip_prefix("capw_apiserver_requests_total{method=\""))
        .filter_map(|l| {
            let (m, rest) = l.split_once('"')?;
            let n = rest.rsplit(' ').next()?.parse().ok()?;
            ["POST", "PUT", "PATCH", "DELETE"]
                .contains(&m)
                .then(|| (m.to_string(), n))
        })
        .collect()
}

/// A provider reconcile that finds nothing to change writes nothing: the driver holds its
/// writes in one deferred scope, and the scope skips what equals the object as read. Each
/// infrastructure machine is woken by a label (a change the driver watches); the test's own
/// label PATCHes are the only writes the API server may see.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_steady_provider_reconcile_writes_nothing() {
    let env = env("inmemory.wasm", MANIFEST).await;
    env.kubectl(&["apply", "-f", "-"], Some(&example()));
    env.converged("demo", 6).await;
    // Converged is not yet idle: workers' Nodes and the sets' counts still settle. Start from
    // a quiet API server: ten seconds without a write.
    let mut last = writes(&env.client).await;
    for round in 0.. {
        assert!(
            round < 12,
            "the API server was still written to after two minutes"
        );
        tokio::time::sleep(Duration::from_secs(10)).await;
        let now = writes(&env.client).await;
        if now == last {
            break;
        }
        last = now;
    }
    let machines = env.dynamic(
        "infrastructure.cluster.x-k8s.io",
        "InMemoryMachine",
        "inmemorymachines",
    );
    let all = machines
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    assert_eq!(all.len(), 6, "the example's six machines");
    // The runtime's own status writes of the WasmProviders (their log counters move when a
    // plugin logs) are not the driver's: they are counted by a watch and allowed for.
    let providers: Api<DynamicObject> = Api::all_with(
        env.client.clone(),
        &ApiResource {
            group: "runtime.capw.dev".into(),
            version: "v1alpha1".into(),
            api_version: "runtime.capw.dev/v1alpha1".into(),
            kind: "WasmProvider".into(),
            plural: "wasmproviders".into(),
        },
    );
    let from = providers
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("resourceVersion");
    let provider_writes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let watching = {
        let (count, mut stream) = (
            provider_writes.clone(),
            providers
                .watch(&kube::api::WatchParams::default(), &from)
                .await
                .expect("watch")
                .boxed(),
        );
        tokio::spawn(async move {
            while let Some(Ok(ev)) = stream.next().await {
                if matches!(ev, kube::api::WatchEvent::Modified(_)) {
                    count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        })
    };
    let (before, calls) = (writes(&env.client).await, env.calls());
    for m in &all {
        let patch = json!({"metadata": {"labels": {"example.com/touched": "yes"}}});
        machines
            .patch(
                &m.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .expect("label");
    }
    env.eventually(
        "the plugin to be called for each touched machine",
        60,
        || async { (env.calls() >= calls + all.len() as u64).then_some(()) },
    )
    .await;
    // Let whatever the reconciles would write land.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = writes(&env.client).await;
    let delta: BTreeMap<&String, u64> = after
        .iter()
        .map(|(m, n)| (m, n - before.get(m).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    watching.abort();
    let allowed = provider_writes.load(std::sync::atomic::Ordering::Relaxed);
    let patches = delta.get(&"PATCH".to_string()).copied().unwrap_or(0);
    let labels = all.len() as u64;
    assert!(
        delta.keys().all(|m| *m == "PATCH") && (labels..=labels + allowed).contains(&patches),
        "writes beyond the test's own {labels} label patches and {allowed} WasmProvider status \
         writes: {delta:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_cluster_gets_no_plugin_calls_until_unpaused() {
    let env = env("inmemory.wasm", MANIFEST).await;
    env.kubectl(&["apply", "-f", "-"], Some(&variant("held", true)));
    let clusters: Api<Cluster> = Api::namespaced(env.client.clone(), "default");
    env.eventually("the Paused condition", 30, || async {
        let c = clusters.get_opt("held").await.ok()??;
        c.status?
            .conditions
            .iter()
            .any(|c| c.type_ == "Paused" && c.status == "True")
            .then_some(())
    })
    .await;
    let machines: Api<Machine> = Api::namespaced(env.client.clone(), "default");
    env.eventually("the Machines to report Paused", 30, || async {
        let list = machines.list(&ListParams::default()).await.ok()?;
        let paused = list.items.iter().filter(|m| {
            m.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Paused" && c.status == "True")
            })
        });
        (paused.count() == 3).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(env.calls(), 0, "a plugin was called for a paused cluster");
    assert!(
        machines
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len()
            == 3,
        "the control plane made Machines while paused"
    );

    env.set_paused("held", false);
    env.converged("held", 6).await;
    assert!(env.calls() > 0);

    // Paused again while running: provider objects say so, and touching them calls nothing.
    env.set_paused("held", true);
    let im = env.dynamic(
        "infrastructure.cluster.x-k8s.io",
        "InMemoryMachine",
        "inmemorymachines",
    );
    env.eventually("provider objects to report Paused", 30, || async {
        let o = im.get_opt("held-worker-0").await.ok()??;
        let paused = o
            .data
            .pointer("/status/conditions")?
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Paused" && c["status"] == "True");
        paused.then_some(())
    })
    .await;
    let calls = env.calls();
    for name in ["held-worker-0", "held-worker-1"] {
        let patch = json!({"metadata": {"annotations": {"touched": "yes"}}});
        im.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("touch");
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        env.calls(),
        calls,
        "a plugin was called for a paused cluster"
    );
}

/// A host that stopped between creating a config's data Secret and recording it in the config's
/// status left data the next host must not boot from: its join token was made in a workload
/// cluster that went down with that host. The next host replaces the data, as CABPK's
/// `storeBootstrapData` updates a Secret that exists, and the Machine joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_data_secret_left_unrecorded_by_a_stopped_host_is_made_again() {
    let env = env("inmemory.wasm", MANIFEST).await;
    env.kubectl(&["apply", "-f", "-"], Some(&variant("left", true)));
    let configs = env.dynamic(
        "bootstrap.cluster.x-k8s.io",
        "KubeadmConfig",
        "kubeadmconfigs",
    );
    let config = env
        .eventually("the paused worker's KubeadmConfig", 30, || async {
            configs.get_opt("left-worker-0").await.ok()?
        })
        .await;
    // What the stopped host wrote: a Secret it controls, with data that never joins.
    let stale =
        "#cloud-config\n# made with a token only the stopped host's workload cluster knew\n";
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {
            "name": "left-worker-0",
            "labels": {"cluster.x-k8s.io/cluster-name": "left"},
            "ownerReferences": [{
                "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
                "name": "left-worker-0", "uid": config.uid().expect("uid"),
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"value": stale, "format": "cloud-config"},
    }))
    .expect("secret");
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "default");
    secrets
        .create(&Default::default(), &secret)
        .await
        .expect("the stale data Secret");
    env.set_paused("left", false);
    // Booted from the stale data, the worker would never run kubeadm join nor be Running.
    env.converged("left", 6).await;
    let data = secrets.get("left-worker-0").await.expect("data Secret");
    let value = data
        .data
        .as_ref()
        .and_then(|d| d.get("value"))
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        .expect("value");
    assert!(value.contains("kubeadm join"), "{value}");
    let config = configs.get("left-worker-0").await.expect("config");
    assert_eq!(
        config.data.pointer("/status/dataSecretName"),
        Some(&json!("left-worker-0")),
        "{:?}",
        config.data
    );
}

/// A provider kind nobody serves in this host, patched the way an out-of-process provider
/// would, drives the Cluster and Machines through the same phases.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn out_of_process_providers_drive_machines_through_the_contract() {
    let env = env("inmemory.wasm", MANIFEST).await;
    let crd = |kind: &str, plural: &str, label: &str| {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.infrastructure.example.com"), "labels": {label: "v1alpha1_v1beta1"}},
            "spec": {"group": "infrastructure.example.com", "scope": "Namespaced",
                "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
                "versions": [{"name": "v1beta1", "served": true, "storage": true, "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
        })
        .to_string()
    };
    env.kubectl(
        &["apply", "-f", "-"],
        Some(&crd(
            "ExternalCluster",
            "externalclusters",
            "cluster.x-k8s.io/v1beta2",
        )),
    );
    env.kubectl(
        &["apply", "-f", "-"],
        Some(&crd(
            "ExternalMachine",
            "externalmachines",
            "cluster.x-k8s.io/v1beta1",
        )),
    );
    env.kubectl(
        &["apply", "-f", "-"],
        Some(&crd(
            "NewerMachine",
            "newermachines",
            "cluster.x-k8s.io/v1beta2",
        )),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let manifest = r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: ext, namespace: default}
spec:
  infrastructureRef: {apiGroup: infrastructure.example.com, kind: ExternalCluster, name: ext}
---
apiVersion: infrastructure.example.com/v1beta1
kind: ExternalCluster
metadata: {name: ext, namespace: default}
spec: {}
---
apiVersion: infrastructure.example.com/v1beta1
kind: ExternalMachine
metadata: {name: ext-old, namespace: default}
spec: {}
---
apiVersion: infrastructure.example.com/v1beta1
kind: NewerMachine
metadata: {name: ext-new, namespace: default}
spec: {}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata: {name: ext-old, namespace: default}
spec:
  clusterName: ext
  bootstrap: {dataSecretName: ext-bootstrap}
  infrastructureRef: {apiGroup: infrastructure.example.com, kind: ExternalMachine, name: ext-old}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata: {name: ext-new, namespace: default}
spec:
  clusterName: ext
  bootstrap: {dataSecretName: ext-bootstrap}
  infrastructureRef: {apiGroup: infrastructure.example.com, kind: NewerMachine, name: ext-new}
"#;
    env.kubectl(&["apply", "-f", "-"], Some(manifest));
    let machines: Api<Machine> = Api::namespaced(env.client.clone(), "default");
    let phases: Arc<Mutex<BTreeMap<String, Vec<String>>>> = Arc::default();
    {
        let phases = phases.clone();
        let machines = machines.clone();
        tokio::spawn(async move {
            let mut s = watcher(machines, watcher::Config::default()).boxed();
            while let Some(Ok(ev)) = s.next().await {
                if let watcher::Event::Apply(m) | watcher::Event::InitApply(m) = ev
                    && let Some(p) = m.status.as_ref().and_then(|s| s.phase.clone())
                {
                    let mut all = phases.lock().unwrap();
                    let seen = all.entry(m.name_any()).or_default();
                    if seen.last() != Some(&p) {
                        seen.push(p);
                    }
                }
            }
        });
    }
    let phase_of = |name: &'static str| {
        let machines = machines.clone();
        async move {
            machines
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .and_then(|m| m.status?.phase)
        }
    };
    for name in ["ext-old", "ext-new"] {
        env.eventually(&format!("{name} to be Provisioning"), 30, || async {
            (phase_of(name).await.as_deref() == Some("Provisioning")).then_some(())
        })
        .await;
    }
    // The infrastructure cluster provisions (v1beta2 field paths) with an endpoint.
    let ext = |kind: &str, plural: &str| {
        let ar = ApiResource {
            group: "infrastructure.example.com".into(),
            version: "v1beta1".into(),
            api_version: "infrastructure.example.com/v1beta1".into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        Api::<DynamicObject>::namespaced_with(env.client.clone(), "default", &ar)
    };
    let pp = PatchParams::default();
    ext("ExternalCluster", "externalclusters")
        .patch(
            "ext",
            &pp,
            &Patch::Merge(
                &json!({"spec": {"controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443}}}),
            ),
        )
        .await
        .expect("endpoint");
    ext("ExternalCluster", "externalclusters")
        .patch_status(
            "ext",
            &pp,
            &Patch::Merge(&json!({"status": {"initialization": {"provisioned": true},
            "failureDomains": [{"name": "fd-a", "controlPlane": true}]}})),
        )
        .await
        .expect("provisioned");
    let clusters: Api<Cluster> = Api::namespaced(env.client.clone(), "default");
    let c = env
        .eventually("the Cluster to be Provisioned", 30, || async {
            let c = clusters.get_opt("ext").await.ok()??;
            (c.status.as_ref()?.phase.as_deref() == Some("Provisioned")).then_some(c)
        })
        .await;
    assert_eq!(
        c.spec.control_plane_endpoint.expect("endpoint copied").host,
        "10.0.0.1"
    );
    assert_eq!(c.status.expect("status").failure_domains[0].name, "fd-a");

    // v1beta1 provider: spec.providerID plus status.ready.
    ext("ExternalMachine", "externalmachines")
        .patch(
            "ext-old",
            &pp,
            &Patch::Merge(&json!({"spec": {"providerID": "example:///ext-old"}})),
        )
        .await
        .expect("providerID");
    ext("ExternalMachine", "externalmachines")
        .patch_status(
            "ext-old",
            &pp,
            &Patch::Merge(&json!({"status": {"ready": true,
            "addresses": [{"type": "InternalIP", "address": "10.1.0.1"}]}})),
        )
        .await
        .expect("ready");
    // v1beta2 provider: status.initialization.provisioned.
    ext("NewerMachine", "newermachines")
        .patch(
            "ext-new",
            &pp,
            &Patch::Merge(&json!({"spec": {"providerID": "example:///ext-new"}})),
        )
        .await
        .expect("providerID");
    ext("NewerMachine", "newermachines")
        .patch_status(
            "ext-new",
            &pp,
            &Patch::Merge(&json!({"status": {"initialization": {"provisioned": true}}})),
        )
        .await
        .expect("provisioned");
    for name in ["ext-old", "ext-new"] {
        env.eventually(&format!("{name} to be Provisioned"), 30, || async {
            (phase_of(name).await.as_deref() == Some("Provisioned")).then_some(())
        })
        .await;
    }
    // The workload cluster of this test is the management API itself: its kubeconfig Secret
    // points there, and the Nodes are created here.
    let kubeconfig = std::fs::read_to_string(&env.kubeconfig).expect("kubeconfig");
    // The host trusts a workload kubeconfig only for the Cluster's own endpoint: the user sets
    // it, as upstream allows when no provider reports one.
    let port: i64 = kubeconfig
        .split("https://127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok())
        .expect("the management API's port in its kubeconfig");
    let clusters: Api<Cluster> = Api::namespaced(env.client.clone(), "default");
    clusters
        .patch(
            "ext",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": port}}}),
            ),
        )
        .await
        .expect("endpoint");
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "default");
    let mut s = Secret::default();
    s.metadata.name = Some("ext-kubeconfig".into());
    // As upstream, the kubeconfig Secret carries the cluster-name label core's cache selects.
    s.metadata.labels = Some(BTreeMap::from([(
        "cluster.x-k8s.io/cluster-name".to_string(),
        "ext".to_string(),
    )]));
    s.string_data = Some(BTreeMap::from([("value".to_string(), kubeconfig)]));
    secrets
        .create(&Default::default(), &s)
        .await
        .expect("kubeconfig secret");
    let nodes: Api<Node> = Api::all(env.client.clone());
    for (name, pid) in [
        ("ext-old-node", "example:///ext-old"),
        ("ext-new-node", "example:///ext-new"),
    ] {
        let n: Node = serde_json::from_value(
            json!({"metadata": {"name": name}, "spec": {"providerID": pid}}),
        )
        .expect("node");
        nodes.create(&Default::default(), &n).await.expect("node");
        nodes
            .patch_status(
                name,
                &pp,
                &Patch::Merge(&json!({"status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": ""}]}})),
            )
            .await
            .expect("node status");
    }
    for name in ["ext-old", "ext-new"] {
        let m = env
            .eventually(&format!("{name} to be Running"), 30, || async {
                let m = machines.get_opt(name).await.ok()??;
                (m.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(m)
            })
            .await;
        assert_eq!(
            m.status.expect("status").node_ref.expect("nodeRef").name,
            format!("{name}-node")
        );
        let seen = phases
            .lock()
            .unwrap()
            .get(name)
            .cloned()
            .unwrap_or_default();
        let order = ["Pending", "Provisioning", "Provisioned", "Running"];
        let idx: Vec<usize> = seen
            .iter()
            .filter_map(|p| order.iter().position(|o| o == p))
            .collect();
        assert!(
            idx.windows(2).all(|w| w[0] < w[1]),
            "{name} went through {seen:?}"
        );
        assert!(
            seen.iter().any(|p| p == "Provisioned"),
            "{name} went through {seen:?}"
        );
    }
    // Core adopted the provider objects and synced the Node.
    let old = ext("ExternalMachine", "externalmachines")
        .get("ext-old")
        .await
        .expect("get");
    assert!(
        old.owner_references()
            .iter()
            .any(|o| o.kind == "Machine" && o.controller == Some(true))
    );
    assert_eq!(
        old.labels()
            .get("cluster.x-k8s.io/cluster-name")
            .map(String::as_str),
        Some("ext")
    );
    let node = nodes.get("ext-old-node").await.expect("node");
    assert_eq!(
        node.annotations()
            .get("cluster.x-k8s.io/machine")
            .map(String::as_str),
        Some("ext-old")
    );
    assert_eq!(env.calls(), 0, "no plugin serves these kinds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_trapping_plugin_version_is_a_condition_and_other_clusters_keep_running() {
    // The trap build serves every InMemory object; rollback is off so it keeps serving.
    let env = env(
        "inmemory-trap.wasm",
        "capabilities: [sim-cloud]\nrollout:\n  maxFailureRate: 1.0\n",
    )
    .await;
    let doomed = variant("doomed", false).replacen(
        "kind: InMemoryMachine\nmetadata:\n  name: doomed-worker-1\n  namespace: default\nspec: {}",
        "kind: InMemoryMachine\nmetadata:\n  name: doomed-worker-1\n  namespace: default\nspec:\n  simulateTrap: true",
        1,
    );
    assert!(doomed.contains("simulateTrap"));
    env.kubectl(&["apply", "-f", "-"], Some(&doomed));
    env.kubectl(&["apply", "-f", "-"], Some(&example()));
    let im = env.dynamic(
        "infrastructure.cluster.x-k8s.io",
        "InMemoryMachine",
        "inmemorymachines",
    );
    let condition = env
        .eventually("the trapped machine's condition", 60, || async {
            let o = im.get_opt("doomed-worker-1").await.ok()??;
            o.data
                .pointer("/status/conditions")?
                .as_array()?
                .iter()
                .find(|c| c["type"] == "PluginCallSucceeded" && c["status"] == "False")
                .cloned()
        })
        .await;
    assert_eq!(condition["reason"], "PluginTrapped");
    let message = condition["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("plugin inmemory 0.1.1-trap") && message.contains("trapped"),
        "{message}"
    );
    // The healthy cluster converges on the same plugin version, and so does the rest of the
    // doomed one.
    env.converged("demo", 6).await;
    let machines: Api<Machine> = Api::namespaced(env.client.clone(), "default");
    env.eventually("the doomed cluster's other workers to run", 60, || async {
        let list = machines.list(&ListParams::default()).await.ok()?;
        let running = list
            .items
            .iter()
            .filter(|m| m.spec.cluster_name == "doomed")
            .filter(|m| m.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        (running == 5).then_some(())
    })
    .await;
    let stuck = machines.get("doomed-worker-1").await.expect("machine");
    assert_ne!(
        stuck.status.and_then(|s| s.phase).as_deref(),
        Some("Running")
    );
    let version = im
        .get("demo-worker-0")
        .await
        .expect("get")
        .annotations()
        .get("runtime.capw.dev/plugin-version")
        .cloned();
    assert_eq!(version.as_deref(), Some("inmemory/0.1.1-trap"));
    let metrics = env.host.metrics.render();
    assert!(
        metrics.contains("capw_plugin_traps_total{plugin=\"inmemory\",version=\"0.1.1-trap\"}"),
        "{metrics}"
    );
}
