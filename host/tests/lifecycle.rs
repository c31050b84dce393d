//! Worker lifecycle end to end on the in-memory provider: a real `capw apiserver` over HTTPS,
//! the host's controllers in this process, the real `.wasm` plugins, and kubectl. A
//! MachineDeployment reaches Running, scales through `/scale`, rolls out a renamed template
//! within its surge and availability bounds (sampled throughout), and goes away with its
//! Cluster in upstream's order.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use capw_api::machine::Machine;
use capw_api::machinedeployment::MachineDeployment;
use capw_api::machineset::MachineSet;
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::host::Env;

/// Each KubeadmConfig's and InMemoryMachine's controller as first seen (`Kind/name` to
/// `Kind/name`), from watches started before anything is applied: the version they were
/// created as.
fn born_owners(env: &Env) -> Arc<Mutex<std::collections::BTreeMap<String, String>>> {
    let born = Arc::new(Mutex::new(std::collections::BTreeMap::new()));
    for api in [
        env.dynamic(
            "bootstrap.cluster.x-k8s.io",
            "KubeadmConfig",
            "kubeadmconfigs",
        ),
        env.dynamic(
            "infrastructure.cluster.x-k8s.io",
            "InMemoryMachine",
            "inmemorymachines",
        ),
    ] {
        let born = born.clone();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(Ok(e)) = events.next().await {
                let (watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = e else {
                    continue;
                };
                let kind = o.types.as_ref().map_or("", |t| t.kind.as_str()).to_string();
                let controller = o
                    .owner_references()
                    .iter()
                    .find(|r| r.controller == Some(true))
                    .map_or(String::new(), |r| format!("{}/{}", r.kind, r.name));
                born.lock()
                    .unwrap()
                    .entry(format!("{kind}/{}", o.name_any()))
                    .or_insert(controller);
            }
        });
    }
    born
}

/// The bundled in-memory stack, with the worker kinds printed on a time-out.
async fn env() -> Env {
    let mut env =
        support::host::start(support::host::BUNDLED_INMEMORY, support::host::SIM_CLOUD).await;
    env.dump = "clusters,inmemoryclusters,kubeadmcontrolplanes,md,ms";
    env.serving("the three bundled plugins to serve", 4).await;
    env
}

impl Env {
    /// The note of an Event with `reason` in the default namespace, if one exists.
    async fn event_note(&self, reason: &str) -> Option<String> {
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client.clone(), "default");
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .find_map(|e| e.note)
    }

    /// The Machines of MachineDeployment `md`.
    async fn workers(&self, md: &str) -> Vec<Machine> {
        let api: Api<Machine> = Api::namespaced(self.client.clone(), "default");
        api.list(&ListParams::default().labels(&format!("cluster.x-k8s.io/deployment-name={md}")))
            .await
            .expect("list machines")
            .items
    }

    /// Waits until `md` has exactly `n` Machines, all Running with a Node, in one MachineSet,
    /// and the deployment's status says so.
    async fn settled(&self, md: &str, n: usize) {
        let mds: Api<MachineDeployment> = Api::namespaced(self.client.clone(), "default");
        let sets: Api<MachineSet> = Api::namespaced(self.client.clone(), "default");
        self.eventually(
            &format!("MachineDeployment {md} to settle at {n} Running Machines"),
            120,
            || async {
                let ms = self.workers(md).await;
                let running = ms.iter().filter(|m| {
                    m.metadata.deletion_timestamp.is_none()
                        && m.status.as_ref().is_some_and(|s| {
                            s.phase.as_deref() == Some("Running") && s.node_ref.is_some()
                        })
                });
                let d = mds.get(md).await.ok()?;
                let st = d.status.clone()?;
                let owned = sets
                    .list(
                        &ListParams::default()
                            .labels(&format!("cluster.x-k8s.io/deployment-name={md}")),
                    )
                    .await
                    .ok()?
                    .items;
                (ms.len() == n
                    && running.count() == n
                    && owned.len() == 1
                    && st.replicas == Some(n as i32)
                    && st.available_replicas == Some(n as i32)
                    && st.phase.as_deref() == Some("Running"))
                .then_some(())
            },
        )
        .await;
    }
}

/// `examples/inmemory-cluster.yaml`: three control-plane Machines and a MachineDeployment
/// of three workers.
fn manifest() -> String {
    std::fs::read_to_string(support::repo_root().join("examples/inmemory-cluster.yaml"))
        .expect("example")
}

/// Samples the deployment's Machines until stopped; returns every violation of the rollout
/// bounds (more than `max` Machines, fewer than `min` available) it saw.
fn sample_bounds(
    env: &Env,
    md: &str,
    max: usize,
    min: usize,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(Vec<String>, usize)> {
    let api: Api<Machine> = Api::namespaced(env.client.clone(), "default");
    let selector = format!("cluster.x-k8s.io/deployment-name={md}");
    tokio::spawn(async move {
        let mut bad = vec![];
        let mut samples = 0;
        while !stop.load(Ordering::Relaxed) {
            if let Ok(list) = api.list(&ListParams::default().labels(&selector)).await {
                samples += 1;
                let available = list
                    .items
                    .iter()
                    .filter(|m| m.metadata.deletion_timestamp.is_none())
                    .filter(|m| {
                        m.status.as_ref().is_some_and(|s| {
                            s.conditions
                                .iter()
                                .any(|c| c.type_ == "Available" && c.status == "True")
                        })
                    })
                    .count();
                if list.items.len() > max || available < min {
                    bad.push(format!(
                        "{} Machines, {available} available",
                        list.items.len()
                    ));
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        (bad, samples)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_machine_deployment_scales_rolls_out_and_goes_with_its_cluster() {
    let env = env().await;
    let born = born_owners(&env);
    let out = env.kubectl(&["apply", "-f", "-"], Some(&manifest()));
    assert!(
        out.contains("machinedeployment.cluster.x-k8s.io/demo-md-0 created"),
        "{out}"
    );
    env.settled("demo-md-0", 3).await;

    // Every clone, the control plane's and the MachineSet's, is created already controlled by
    // the Machine of its name: no second write hands it over.
    let born = born.lock().unwrap().clone();
    assert!(
        born.len() >= 8,
        "the 3 workers' and at least 1 control-plane Machine's clones: {born:?}"
    );
    for (clone, controller) in &born {
        let name = clone.rsplit('/').next().unwrap();
        assert_eq!(
            controller,
            &format!("Machine/{name}"),
            "{clone} at its creation"
        );
    }

    // Upstream's defaults and labels, and kubectl reads like Cluster API.
    let md: Api<MachineDeployment> = Api::namespaced(env.client.clone(), "default");
    let d = md.get("demo-md-0").await.expect("md");
    assert_eq!(
        d.spec
            .selector
            .match_labels
            .get("cluster.x-k8s.io/deployment-name")
            .map(String::as_str),
        Some("demo-md-0"),
        "the empty selector is defaulted"
    );
    let strategy = d
        .spec
        .rollout
        .clone()
        .and_then(|r| r.strategy)
        .expect("strategy defaulted");
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    for m in env.workers("demo-md-0").await {
        for label in [
            "cluster.x-k8s.io/cluster-name",
            "cluster.x-k8s.io/set-name",
            "cluster.x-k8s.io/deployment-name",
        ] {
            assert!(
                m.labels().contains_key(label),
                "Machine {} lacks {label}",
                m.name_any()
            );
        }
        let infra = m.spec.infrastructure_ref.clone();
        assert_eq!(infra.kind, "InMemoryMachine");
        assert_eq!(
            infra.name,
            m.name_any(),
            "the clone is named like its Machine"
        );
    }
    // capw describe draws MachineDeployment → MachineSet → Machine, with ready counts.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capw"))
        .args(["describe", "cluster", "demo", "--kubeconfig"])
        .arg(&env.kubeconfig)
        .output()
        .expect("capw describe runs");
    let tree = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{tree}");
    let lines: Vec<&str> = tree.lines().collect();
    let at = |want: &str| {
        lines
            .iter()
            .position(|l| l.contains(want))
            .unwrap_or_else(|| panic!("describe lacks {want}:\n{tree}"))
    };
    let (md_line, ms_line) = (
        at("└─MachineDeployment/demo-md-0"),
        at("MachineSet/demo-md-0-"),
    );
    assert!(
        md_line < ms_line && ms_line < at("Machine/demo-md-0-"),
        "{tree}"
    );
    assert!(
        lines[md_line].contains("3/3") && lines[ms_line].contains("3/3"),
        "{tree}"
    );
    assert!(
        lines[ms_line].starts_with("    ├─") || lines[ms_line].starts_with("    └─"),
        "{tree}"
    );
    let table = env.kubectl(&["get", "md,ms"], None);
    for want in [
        "DESIRED",
        "CURRENT",
        "READY",
        "UP-TO-DATE",
        "PHASE",
        "Running",
        "demo-md-0",
        "v1.33.0",
    ] {
        assert!(
            table.contains(want),
            "kubectl get md,ms lacks {want}:\n{table}"
        );
    }
    env.eventually("the Cluster's worker counters", 30, || async {
        let c = env.kubectl(
            &[
                "get",
                "cluster",
                "demo",
                "-o",
                "jsonpath={.status.workers.desiredReplicas}/{.status.workers.availableReplicas}",
            ],
            None,
        );
        (c == "3/3").then_some(())
    })
    .await;

    // Scale through /scale, as `kubectl scale` and the autoscaler do.
    env.kubectl(&["scale", "md", "demo-md-0", "--replicas=5"], None);
    env.settled("demo-md-0", 5).await;
    let scale = env.kubectl(
        &[
            "get",
            "--raw",
            "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machinedeployments/demo-md-0/scale",
        ],
        None,
    );
    assert!(
        scale.contains("\"replicas\":5") && scale.contains("deployment-name=demo-md-0"),
        "{scale}"
    );
    env.kubectl(&["scale", "md", "demo-md-0", "--replicas=2"], None);
    env.settled("demo-md-0", 2).await;
    // Each scale has its own Event, saying what it did.
    let described = env.kubectl(&["describe", "md", "demo-md-0"], None);
    for step in ["-> 5", "5 -> 2"] {
        assert!(
            described.contains("SuccessfulScale") && described.contains(step),
            "no Event for the scale {step}:\n{described}"
        );
    }

    // A renamed template rolls out: never more than replicas + maxSurge (1) Machines, never
    // fewer than replicas − maxUnavailable (0) available.
    let before: Vec<String> = env
        .workers("demo-md-0")
        .await
        .iter()
        .map(|m| m.name_any())
        .collect();
    env.kubectl(
        &["apply", "-f", "-"],
        Some("apiVersion: infrastructure.cluster.x-k8s.io/v1beta2\nkind: InMemoryMachineTemplate\nmetadata:\n  name: demo-md-1\n  namespace: default\nspec:\n  template:\n    spec: {}\n"),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample_bounds(&env, "demo-md-0", 3, 2, stop.clone());
    env.kubectl(
        &[
            "patch",
            "md",
            "demo-md-0",
            "--type=merge",
            "-p",
            r#"{"spec":{"template":{"spec":{"infrastructureRef":{"name":"demo-md-1"}}}}}"#,
        ],
        None,
    );
    env.eventually("the rollout to replace every Machine", 120, || async {
        let ms = env.workers("demo-md-0").await;
        (ms.len() == 2 && ms.iter().all(|m| !before.contains(&m.name_any()))).then_some(())
    })
    .await;
    env.settled("demo-md-0", 2).await;
    stop.store(true, Ordering::Relaxed);
    let (bad, samples) = sampler.await.expect("sampler");
    assert!(samples > 10, "only {samples} samples");
    assert!(bad.is_empty(), "the rollout broke its bounds: {bad:?}");
    let im = support::dynamic(
        &env.client,
        "infrastructure.cluster.x-k8s.io",
        "InMemoryMachine",
        "inmemorymachines",
    );
    for m in env.workers("demo-md-0").await {
        let clone = im.get(&m.name_any()).await.expect("clone");
        assert_eq!(
            clone
                .annotations()
                .get("cluster.x-k8s.io/cloned-from-name")
                .map(String::as_str),
            Some("demo-md-1")
        );
    }
    let d = md.get("demo-md-0").await.expect("md");
    assert_eq!(
        d.annotations()
            .get("machinedeployment.clusters.x-k8s.io/revision")
            .map(String::as_str),
        Some("2")
    );

    // Deleting the Cluster removes the workers first, then the control plane.
    let deleted: Arc<Mutex<Vec<(u64, String, String)>>> = Arc::default();
    let mut watches = vec![];
    let kinds = [
        (
            "MachineDeployment",
            "machinedeployments",
            "cluster.x-k8s.io",
        ),
        ("MachineSet", "machinesets", "cluster.x-k8s.io"),
        ("Machine", "machines", "cluster.x-k8s.io"),
        (
            "KubeadmControlPlane",
            "kubeadmcontrolplanes",
            "controlplane.cluster.x-k8s.io",
        ),
        ("Cluster", "clusters", "cluster.x-k8s.io"),
    ];
    for (kind, plural, group) in kinds {
        let api = support::dynamic(&env.client, group, kind, plural);
        let deleted = deleted.clone();
        watches.push(tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default()).boxed();
            while let Some(Ok(ev)) = s.next().await {
                if let watcher::Event::Delete(o) = ev {
                    let o: DynamicObject = o;
                    let rv = o
                        .resource_version()
                        .and_then(|r| r.parse().ok())
                        .unwrap_or(0);
                    let what = if o.labels().contains_key("cluster.x-k8s.io/control-plane") {
                        format!("{kind}(control plane)")
                    } else {
                        kind.to_string()
                    };
                    deleted.lock().unwrap().push((rv, what, o.name_any()));
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.kubectl(&["delete", "cluster", "demo", "--wait=false"], None);
    env.eventually("the Cluster to be gone", 120, || async {
        let c: Api<capw_api::cluster::Cluster> = Api::namespaced(env.client.clone(), "default");
        c.get_opt("demo").await.ok()?.is_none().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for w in watches {
        w.abort();
    }
    let mut d = deleted.lock().unwrap().clone();
    d.sort();
    let last = |k: &str| {
        d.iter()
            .filter(|e| e.1 == k)
            .map(|e| e.0)
            .max()
            .unwrap_or_else(|| panic!("no {k} deleted: {d:?}"))
    };
    let first = |k: &str| {
        d.iter()
            .filter(|e| e.1 == k)
            .map(|e| e.0)
            .min()
            .unwrap_or_else(|| panic!("no {k} deleted: {d:?}"))
    };
    assert!(
        last("Machine") < first("Machine(control plane)"),
        "control-plane Machines went before the workers: {d:?}"
    );
    assert!(
        last("MachineSet") < first("Machine(control plane)"),
        "{d:?}"
    );
    assert!(
        last("MachineDeployment") < last("KubeadmControlPlane"),
        "{d:?}"
    );
    assert!(env.workers("demo-md-0").await.is_empty());
}

const HEALTH_CHECK: &str = r#"apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineHealthCheck
metadata:
  name: demo-workers
  namespace: default
spec:
  clusterName: demo
  selector:
    matchLabels:
      cluster.x-k8s.io/deployment-name: demo-md-0
  checks:
    unhealthyNodeConditions:
    - type: e2e.remediation.condition
      status: "False"
      timeoutSeconds: 3
  remediation:
    triggerIf:
      unhealthyLessThanOrEqualTo: 1
"#;

impl Env {
    /// A client for the workload cluster, from `<cluster>-kubeconfig`.
    async fn workload(&self, cluster: &str) -> Client {
        use k8s_openapi::api::core::v1::Secret;
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

    /// Sets the e2e condition False on the Node of Machine `m`, through the workload API, as
    /// upstream's remediation e2e does.
    async fn break_node(&self, m: &Machine) {
        use k8s_openapi::api::core::v1::Node;
        let node = m
            .status
            .clone()
            .and_then(|s| s.node_ref)
            .expect("nodeRef")
            .name;
        let nodes: Api<Node> = Api::all(self.workload("demo").await);
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let patch = serde_json::json!({"status": {"conditions": [{
            "type": "e2e.remediation.condition", "status": "False", "reason": "Broken",
            "message": "set by the test", "lastTransitionTime": now, "lastHeartbeatTime": now}]}});
        nodes
            .patch_status(
                &node,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Strategic(&patch),
            )
            .await
            .expect("patch node");
    }
}

/// A new Machine is written before its clones, so a clone the API server refuses must take
/// the Machine (and the other clone) with it, and say why; once the template is mended, the
/// set scales up as if nothing had happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_clone_the_api_server_refuses_takes_its_machine_with_it() {
    let env = env().await;
    // Labels on the clone that the template's schema takes as plain strings, but that object
    // metadata refuses: the Machine and the KubeadmConfig are created, the InMemoryMachine not.
    let worker_template = "name: demo-md-0\n  namespace: default\nspec:\n  template:\n    spec: {}";
    let manifest = manifest();
    assert!(manifest.contains(worker_template), "the example changed");
    let refused = manifest.replace(
        worker_template,
        "name: demo-md-0\n  namespace: default\nspec:\n  template:\n    metadata:\n      labels: {tier: \"not a label value!\"}\n    spec: {}",
    );
    env.kubectl(&["apply", "-f", "-"], Some(&refused));
    let why = env
        .eventually("the MachineSet to report a refused create", 120, || {
            env.event_note("FailedCreate")
        })
        .await;
    assert!(
        why.contains("metadata.labels") && why.contains("not a label value!"),
        "{why}"
    );
    // Nothing of an attempt outlives it: its Machine goes (through the Machine controller,
    // which its finalizer calls) and so does its KubeadmConfig.
    let configs = env.dynamic(
        "bootstrap.cluster.x-k8s.io",
        "KubeadmConfig",
        "kubeadmconfigs",
    );
    let infra = env.dynamic(
        "infrastructure.cluster.x-k8s.io",
        "InMemoryMachine",
        "inmemorymachines",
    );
    let workers = ListParams::default().labels("cluster.x-k8s.io/deployment-name=demo-md-0");
    env.eventually("the refused attempts to leave nothing", 60, || async {
        let machines = env.workers("demo-md-0").await;
        let configs = configs.list(&workers).await.ok()?.items;
        let infra = infra.list(&workers).await.ok()?.items;
        (machines.is_empty() && configs.is_empty() && infra.is_empty()).then_some(())
    })
    .await;
    // Mended, the template's next clone is made, and the set comes up.
    env.kubectl(&["apply", "-f", "-"], Some(&manifest));
    env.settled("demo-md-0", 3).await;
}

/// A creator that stops between writing a Machine and its clones (a crash, a lost Lease)
/// leaves a Machine whose objects never come. The Machine controller deletes it once it is a
/// minute old, with a Warning Event, so that its creator makes another; a stand-alone Machine
/// waiting for objects its user has not made yet is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_machine_its_creator_left_without_clones_is_deleted() {
    let env = env().await;
    env.kubectl(&["apply", "-f", "-"], Some(&manifest()));
    env.settled("demo-md-0", 3).await;
    let sets: Api<MachineSet> = Api::namespaced(env.client.clone(), "default");
    let set = sets
        .list(&ListParams::default().labels("cluster.x-k8s.io/deployment-name=demo-md-0"))
        .await
        .expect("sets")
        .items
        .remove(0);
    // Paused, the set neither scales the extra Machine away nor replaces it: only the
    // Machine controller acts on it.
    env.kubectl(
        &[
            "annotate",
            "machineset",
            &set.name_any(),
            "cluster.x-k8s.io/paused=",
        ],
        None,
    );
    let machine = |name: &str, owner: serde_json::Value, labels: serde_json::Value| {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "namespace": "default", "ownerReferences": owner, "labels": labels},
            "spec": {"clusterName": "demo", "version": "v1.33.0",
                "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryMachine", "name": name}}})
        .to_string()
    };
    let owner = json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
        "name": set.name_any(), "uid": set.uid(), "controller": true, "blockOwnerDeletion": true}]);
    let labels = json!({"cluster.x-k8s.io/set-name": set.name_any(),
        "cluster.x-k8s.io/deployment-name": "demo-md-0"});
    env.kubectl(
        &["apply", "-f", "-"],
        Some(&machine("demo-md-0-abandoned", owner, labels)),
    );
    env.kubectl(
        &["apply", "-f", "-"],
        Some(&machine("standalone-waiting", json!([]), json!({}))),
    );
    let why = env
        .eventually("the abandoned Machine to be deleted", 150, || async {
            let note = env.event_note("AbandonedByCreator").await?;
            let machines: Api<Machine> = Api::namespaced(env.client.clone(), "default");
            machines
                .get_opt("demo-md-0-abandoned")
                .await
                .ok()?
                .is_none()
                .then_some(note)
        })
        .await;
    assert!(
        why.contains("demo-md-0-abandoned")
            && why.contains(&format!("MachineSet {}", set.name_any())),
        "{why}"
    );
    let machines: Api<Machine> = Api::namespaced(env.client.clone(), "default");
    let waiting = machines
        .get("standalone-waiting")
        .await
        .expect("the stand-alone Machine stays");
    assert!(waiting.metadata.deletion_timestamp.is_none());
    assert_eq!(
        env.workers("demo-md-0").await.len(),
        3,
        "the set's own Machines stay"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_health_check_replaces_an_unhealthy_machine_and_short_circuits_when_too_many_are() {
    use capw_api::machinehealthcheck::MachineHealthCheck;
    let env = env().await;
    env.kubectl(
        &["apply", "-f", "-"],
        Some(&format!("{}\n---\n{HEALTH_CHECK}", manifest())),
    );
    env.settled("demo-md-0", 3).await;
    let checks: Api<MachineHealthCheck> = Api::namespaced(env.client.clone(), "default");
    env.eventually("the check to count 3 healthy Machines", 60, || async {
        let s = checks.get("demo-workers").await.ok()?.status?;
        (s.expected_machines == Some(3) && s.current_healthy == Some(3)).then_some(())
    })
    .await;
    let table = env.kubectl(&["get", "mhc"], None);
    assert!(
        table.contains("REPLICAS") && table.contains("HEALTHY"),
        "{table}"
    );

    // One Node reports the condition: its Machine is marked, and its MachineSet replaces it.
    let victim = env.workers("demo-md-0").await.remove(0);
    env.break_node(&victim).await;
    let machines: Api<Machine> = Api::namespaced(env.client.clone(), "default");
    env.eventually("the unhealthy Machine to be marked", 60, || async {
        let m = machines.get_opt(&victim.name_any()).await.ok()?;
        let Some(m) = m else { return Some(()) };
        let s = m.status?;
        s.conditions
            .iter()
            .any(|c| {
                c.type_ == "HealthCheckSucceeded"
                    && c.status == "False"
                    && c.reason == "UnhealthyNode"
            })
            .then_some(())
    })
    .await;
    env.eventually("the unhealthy Machine to be replaced", 90, || async {
        let ms = env.workers("demo-md-0").await;
        (ms.len() == 3 && ms.iter().all(|m| m.name_any() != victim.name_any())).then_some(())
    })
    .await;
    env.settled("demo-md-0", 3).await;
    env.eventually(
        "the check to count 3 healthy Machines again",
        60,
        || async {
            let s = checks.get("demo-workers").await.ok()?.status?;
            (s.current_healthy == Some(3)).then_some(())
        },
    )
    .await;

    // Two of three: more than the check allows, so it remediates nothing.
    let workers = env.workers("demo-md-0").await;
    for m in &workers[..2] {
        env.break_node(m).await;
    }
    env.eventually("the short-circuit", 60, || async {
        let s = checks.get("demo-workers").await.ok()?.status?;
        let blocked = s.conditions.iter().any(|c| {
            c.type_ == "RemediationAllowed" && c.status == "False" && c.reason == "TooManyUnhealthy"
        });
        (blocked && s.remediations_allowed == Some(0) && s.current_healthy == Some(1)).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = env.workers("demo-md-0").await;
    let names = |ms: &[Machine]| {
        let mut n: Vec<String> = ms.iter().map(|m| m.name_any()).collect();
        n.sort();
        n
    };
    assert_eq!(
        names(&after),
        names(&workers),
        "a short-circuited check remediated"
    );
    for m in &after {
        assert!(
            m.metadata.deletion_timestamp.is_none(),
            "{} is being deleted",
            m.name_any()
        );
        let owner = m.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "OwnerRemediated")
                .cloned()
        });
        assert!(
            owner.is_none(),
            "{} got OwnerRemediated while short-circuited: {owner:?}",
            m.name_any()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lifecycle_finalizers_and_owners_are_rebuilt_without_duplicates_and_idle_writes_nothing() {
    use std::collections::BTreeMap;
    let env = env().await;
    env.kubectl(
        &["apply", "-f", "-"],
        Some(&format!("{}\n---\n{HEALTH_CHECK}", manifest())),
    );
    env.settled("demo-md-0", 3).await;
    let kinds = || {
        [
            ("MachineDeployment", "machinedeployments"),
            ("MachineSet", "machinesets"),
            ("Machine", "machines"),
            ("MachineHealthCheck", "machinehealthchecks"),
        ]
        .map(|(k, p)| (k, support::dynamic(&env.client, "cluster.x-k8s.io", k, p)))
    };
    let workers_only = |kind: &str, o: &DynamicObject| {
        kind != "Machine" || o.labels().contains_key("cluster.x-k8s.io/deployment-name")
    };
    let machine_names = async || {
        let mut n: Vec<String> = env
            .workers("demo-md-0")
            .await
            .iter()
            .map(|m| m.name_any())
            .collect();
        n.sort();
        n
    };
    let names_before = machine_names().await;

    // Strip every finalizer of the lifecycle kinds: all come back.
    let stripped = env.strip_finalizers(&kinds(), workers_only).await;
    assert_eq!(
        stripped,
        1 + 1 + 3 + 1,
        "every lifecycle object had a finalizer"
    );

    // Wipe every owner reference of the deployment, its set and its Machines: all come back,
    // and no Machine is made twice.
    env.wipe_owners(&kinds(), workers_only).await;
    env.settled("demo-md-0", 3).await;
    assert_eq!(
        machine_names().await,
        names_before,
        "Machines were made again"
    );

    // Converged: a minute without a single write to any lifecycle object or Machine.
    let versions = async || {
        let mut out = BTreeMap::new();
        for (kind, api) in kinds() {
            for o in api.list(&ListParams::default()).await.expect("list").items {
                out.insert(
                    format!("{kind}/{}", o.name_any()),
                    o.resource_version().unwrap_or_default(),
                );
            }
        }
        out
    };
    // Progress a reconcile saw last (a count, a waiting reason) is written once it has stood
    // for the status pace, 5 s (`capw_reconcile::pace`): wait it out before counting.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle = versions().await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let after = versions().await;
    let changed: Vec<_> = after
        .iter()
        .filter(|(k, v)| idle.get(*k) != Some(v))
        .collect();
    assert!(
        changed.is_empty(),
        "objects written while idle: {changed:?}"
    );
}

/// The control-plane Machines (each test runs one cluster).
async fn control_plane_machines(client: &Client) -> Vec<Machine> {
    let api: Api<Machine> = Api::namespaced(client.clone(), "default");
    api.list(&ListParams::default().labels("cluster.x-k8s.io/control-plane"))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

fn healthy(m: &Machine) -> bool {
    m.metadata.deletion_timestamp.is_none()
        && m.status.as_ref().is_some_and(|s| s.node_ref.is_some())
}

const CONTROL_PLANE_HEALTH_CHECK: &str = r#"apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineHealthCheck
metadata:
  name: demo-control-plane
  namespace: default
spec:
  clusterName: demo
  selector:
    matchLabels:
      cluster.x-k8s.io/control-plane: ""
  checks:
    unhealthyNodeConditions:
    - type: e2e.remediation.condition
      status: "False"
      timeoutSeconds: 3
"#;

/// KubeadmControlPlane remediation (`capi-lifecycle.md` §5.7): a control-plane Machine a
/// MachineHealthCheck marks is replaced, one at a time; a replacement that fails within
/// `minHealthyPeriodSeconds` is a retry, and past `maxRetry` the control plane stops and says
/// why instead of replacing Machines forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_control_plane_replaces_an_unhealthy_machine_and_stops_at_max_retry() {
    let env = env().await;
    env.kubectl(
        &["apply", "-f", "-"],
        Some(&format!(
            "{}\n---\n{CONTROL_PLANE_HEALTH_CHECK}",
            manifest()
        )),
    );
    env.settled("demo-md-0", 3).await;
    env.kubectl(
        &["patch", "kcp", "demo-control-plane", "--type=merge", "-p",
          r#"{"spec":{"remediation":{"maxRetry":1,"retryPeriodSeconds":0,"minHealthyPeriodSeconds":3600}}}"#],
        None,
    );
    let get_cp = || -> serde_json::Value {
        serde_json::from_str(
            &env.kubectl(&["get", "kcp", "demo-control-plane", "-o", "json"], None),
        )
        .expect("json")
    };
    let three_healthy = || async {
        let ms = control_plane_machines(&env.client).await;
        (ms.len() == 3 && ms.iter().all(healthy)).then_some(ms)
    };
    let mut machines = env
        .eventually("3 healthy control-plane Machines", 120, three_healthy)
        .await;
    // The first failure, then the replacement failing within minHealthyPeriod (retry 1).
    for retry in [0, 1] {
        // The newest: after the first round, the replacement.
        machines.sort_by_key(|m| m.metadata.creation_timestamp.clone().map(|t| t.0));
        let victim = machines.last().expect("a Machine").name_any();
        let node = machines.last().expect("a Machine").clone();
        env.break_node(&node).await;
        machines = env
            .eventually(
                &format!("{victim} to be replaced (retry {retry})"),
                120,
                || async {
                    let ms = three_healthy().await?;
                    ms.iter().all(|m| m.name_any() != victim).then_some(ms)
                },
            )
            .await;
        let cp = get_cp();
        assert_eq!(
            (
                &cp["status"]["lastRemediation"]["machine"],
                &cp["status"]["lastRemediation"]["retryCount"]
            ),
            (&json!(victim), &json!(retry)),
            "{cp}"
        );
        // Deleted as a remediation: OwnerRemediated said MachineDeleting first, and the
        // control plane's Event says why the Machine went (the recorder folds the second
        // one into the first as a series, so only the first names its Machine).
        let events = env.kubectl(&["get", "events", "-o", "json"], None);
        assert!(
            retry > 0
                || events.contains(&format!(
                    "Deleted control-plane Machine {victim} to remediate it"
                )),
            "{events}"
        );
    }
    // A third failure would be retry 2, past maxRetry 1: nothing is deleted, and the control
    // plane says why.
    machines.sort_by_key(|m| m.metadata.creation_timestamp.clone().map(|t| t.0));
    let last = machines.last().expect("a Machine").clone();
    env.break_node(&last).await;
    env.eventually(
        "the control plane to refuse a third remediation",
        60,
        || async {
            let cp = get_cp();
            let c = cp["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Remediating")?
                .clone();
            (c["status"] == "True"
                && c["reason"] == "CannotBeRemediated"
                && c["message"]
                    .as_str()?
                    .contains("spec.remediation.maxRetry 1"))
            .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let ms = control_plane_machines(&env.client).await;
    assert!(
        ms.iter()
            .any(|m| m.name_any() == last.name_any() && m.metadata.deletion_timestamp.is_none()),
        "a Machine was remediated past maxRetry"
    );
    assert_eq!(ms.len(), 3);
}

/// A control-plane version change rolls the Machines one at a time within upstream's bounds
/// (maxSurge 1: at most replicas + 1 Machines; maxSurge 0: at most replicas, and never fewer
/// than replicas − 1 healthy), and `status.version` is the lowest version the Machines run:
/// it never shows the new version while a Machine still runs the old one. The workload's Nodes
/// report the version, and the replaced Machines' Nodes leave the workload cluster. Then the
/// workers roll to the same version, as the upgrade flow goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_control_plane_version_change_rolls_its_machines_within_bounds() {
    let env = env().await;
    env.kubectl(&["apply", "-f", "-"], Some(&manifest()));
    env.settled("demo-md-0", 3).await;
    let cps = ApiResource {
        group: "controlplane.cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "controlplane.cluster.x-k8s.io/v1beta2".into(),
        kind: "KubeadmControlPlane".into(),
        plural: "kubeadmcontrolplanes".into(),
    };
    let cps: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), "default", &cps);
    let status = |o: &DynamicObject, f: &str| o.data.pointer(&format!("/status/{f}")).cloned();
    for (from, to, surge, max) in [("v1.33.0", "v1.34.0", 1, 4), ("v1.34.0", "v1.35.0", 0, 3)] {
        env.eventually(&format!("the control plane to run {from}"), 120, || async {
            let ms = control_plane_machines(&env.client).await;
            let cp = cps.get("demo-control-plane").await.ok()?;
            (ms.len() == 3
                && ms
                    .iter()
                    .all(|m| healthy(m) && m.spec.version.as_deref() == Some(from))
                && status(&cp, "version") == Some(json!(from))
                && status(&cp, "upToDateReplicas") == Some(json!(3)))
            .then_some(())
        })
        .await;
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let (client, cps, stop) = (env.client.clone(), cps.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut bad, mut samples, mut rolling) = (vec![], 0, 0);
                while !stop.load(Ordering::Relaxed) {
                    // The status first: Machines of the old version only ever go away, so one
                    // still listed afterwards was there when the status was written.
                    let Ok(cp) = cps.get("demo-control-plane").await else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let ms = control_plane_machines(&client).await;
                    samples += 1;
                    let old = ms
                        .iter()
                        .filter(|m| m.spec.version.as_deref() == Some(from))
                        .count();
                    let up = ms.iter().filter(|m| healthy(m)).count();
                    if old > 0 && old < ms.len() {
                        rolling += 1;
                    }
                    if ms.len() > max || up < 2 {
                        bad.push(format!("{} Machines, {up} healthy", ms.len()));
                    }
                    if old > 0 && status(&cp, "version") == Some(json!(to)) {
                        bad.push(format!(
                            "status.version {to} while {old} Machines run {from}"
                        ));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                (bad, samples, rolling)
            })
        };
        env.kubectl(
            &[
                "patch",
                "kubeadmcontrolplane",
                "demo-control-plane",
                "--type",
                "merge",
                "-p",
                &json!({"spec": {"version": to,
                    "rollout": {"strategy": {"rollingUpdate": {"maxSurge": surge}}}}})
                .to_string(),
            ],
            None,
        );
        env.eventually(
            &format!("the control plane to roll to {to}"),
            180,
            || async {
                let ms = control_plane_machines(&env.client).await;
                let cp = cps.get("demo-control-plane").await.ok()?;
                (ms.len() == 3
                    && ms
                        .iter()
                        .all(|m| healthy(m) && m.spec.version.as_deref() == Some(to))
                    && status(&cp, "version") == Some(json!(to))
                    && status(&cp, "replicas") == Some(json!(3))
                    && status(&cp, "upToDateReplicas") == Some(json!(3)))
                .then_some(())
            },
        )
        .await;
        stop.store(true, Ordering::Relaxed);
        // The workload cluster agrees: the control plane's Nodes report the new version, and
        // the Nodes of the replaced Machines are gone.
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.workload("demo").await);
        env.eventually(&format!("the workload Nodes to run {to}"), 60, || async {
            let machines: Api<Machine> = Api::namespaced(env.client.clone(), "default");
            let mut want: Vec<String> = machines
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .iter()
                .filter_map(|m| m.status.clone()?.node_ref.map(|r| r.name))
                .collect();
            let cp: Vec<String> = control_plane_machines(&env.client)
                .await
                .iter()
                .map(|m| m.name_any())
                .collect();
            let list = nodes.list(&ListParams::default()).await.ok()?.items;
            let mut have: Vec<String> = list.iter().map(|n| n.name_any()).collect();
            want.sort();
            have.sort();
            let versions_ok = list.iter().filter(|n| cp.contains(&n.name_any())).all(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.node_info.as_ref())
                    .is_some_and(|i| i.kubelet_version == to)
            });
            (want == have && versions_ok).then_some(())
        })
        .await;
        // The API server presents the version the control plane rolled to.
        let version = env
            .workload("demo")
            .await
            .apiserver_version()
            .await
            .expect("/version");
        assert_eq!(version.git_version, to);
        let (bad, samples, rolling) = sampler.await.expect("sampler");
        assert!(
            bad.is_empty(),
            "maxSurge {surge}: {bad:?} in {samples} samples"
        );
        assert!(
            rolling > 0,
            "maxSurge {surge}: no sample caught the roll ({samples} samples)"
        );
    }
    let table = env.kubectl(&["get", "kubeadmcontrolplane"], None);
    assert!(
        table.contains("UP-TO-DATE") && table.contains("v1.35.0"),
        "{table}"
    );
    // The workers' Nodes kept running through the control plane's roll.
    env.settled("demo-md-0", 3).await;

    // Then the workers, as the upgrade flow goes: their Nodes report the version too.
    env.kubectl(
        &[
            "patch",
            "md",
            "demo-md-0",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"template":{"spec":{"version":"v1.35.0"}}}}"#,
        ],
        None,
    );
    env.eventually("the workers to roll to v1.35.0", 120, || async {
        let ms = env.workers("demo-md-0").await;
        (ms.len() == 3
            && ms
                .iter()
                .all(|m| healthy(m) && m.spec.version.as_deref() == Some("v1.35.0")))
        .then_some(())
    })
    .await;
    env.settled("demo-md-0", 3).await;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.workload("demo").await);
    env.eventually("every workload Node to report v1.35.0", 60, || async {
        let list = nodes.list(&ListParams::default()).await.ok()?.items;
        (list.len() == 6
            && list.iter().all(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.node_info.as_ref())
                    .is_some_and(|i| i.kubelet_version == "v1.35.0")
            }))
        .then_some(())
    })
    .await;
}

/// A KubeadmControlPlane of `spec` (with a machine template unless it has one) for the
/// admission checks below.
fn kcp(name: &str, spec: serde_json::Value) -> String {
    let mut spec = spec;
    spec["machineTemplate"] =
        spec.get("machineTemplate")
            .cloned()
            .unwrap_or(json!({"spec": {"infrastructureRef": {
        "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryMachineTemplate",
        "name": "e2e-control-plane"}}}));
    json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upstream_kubeadm_kinds_apply_as_written_and_are_checked_as_upstream() {
    let env = env().await;
    let text =
        std::fs::read_to_string(support::repo_root().join("host/tests/data/inmemory-e2e.yaml"))
            .expect("fixture");
    let out = env.kubectl(&["apply", "-f", "-"], Some(&text));
    assert!(
        out.contains("kubeadmcontrolplane.controlplane.cluster.x-k8s.io/e2e-control-plane created")
            && out.contains("kubeadmconfigtemplate.bootstrap.cluster.x-k8s.io/e2e-md-0 created"),
        "{out}"
    );
    env.settled("e2e-md-0", 2).await;

    // Stored as written, with upstream's defaults; the short name and upstream's columns.
    let get = |args: &[&str]| -> serde_json::Value {
        serde_json::from_str(&env.kubectl(args, None)).expect("json")
    };
    let cp = get(&["get", "kcp", "e2e-control-plane", "-o", "json"]);
    assert_eq!(
        cp["spec"]["rollout"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}),
        "{cp}"
    );
    assert_eq!(cp["spec"]["remediation"]["maxRetry"], 5, "{cp}");
    assert_eq!(
        cp["spec"]["machineNaming"]["template"],
        "{{ .kubeadmControlPlane.name }}-{{ .random }}"
    );
    assert_eq!(
        cp["spec"]["kubeadmConfigSpec"]["initConfiguration"]["nodeRegistration"]["kubeletExtraArgs"]
            [0]["name"],
        "eviction-hard"
    );
    env.eventually("the control plane's status", 60, || async {
        let cp = get(&["get", "kcp", "e2e-control-plane", "-o", "json"]);
        (cp["status"]["initialization"]["controlPlaneInitialized"] == true
            && cp["status"]["version"] == "v1.30.4"
            && cp["status"]["selector"]
                .as_str()
                .is_some_and(|s| s.contains("cluster.x-k8s.io/control-plane")))
        .then_some(())
    })
    .await;
    let table = env.kubectl(&["get", "kcp"], None);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "CLUSTER",
            "AVAILABLE",
            "DESIRED",
            "CURRENT",
            "READY",
            "AVAILABLE",
            "UP-TO-DATE",
            "INITIALIZED",
            "AGE",
            "VERSION"
        ],
        "{table}"
    );
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("e2e-control-plane")
                && l.contains("true")
                && l.ends_with("v1.30.4")),
        "{table}"
    );
    // The control plane's KubeadmConfig carries kubeadmConfigSpec; the workers' come from a
    // template with no spec.
    let configs = env.kubectl(&["get", "kubeadmconfigs"], None);
    assert!(
        configs
            .lines()
            .next()
            .is_some_and(|h| h.split_whitespace().collect::<Vec<_>>()
                == ["NAME", "CLUSTER", "DATA", "SECRET", "CREATED", "AGE"]),
        "{configs}"
    );
    assert_eq!(
        configs
            .lines()
            .filter(|l| l.contains(" e2e ") && l.contains("true"))
            .count(),
        3,
        "{configs}"
    );
    let machines = control_plane_machines(&env.client).await;
    let first = machines
        .first()
        .expect("a control-plane Machine")
        .name_any();
    let config = get(&["get", "kubeadmconfig", &first, "-o", "json"]);
    assert_eq!(
        config["spec"]["clusterConfiguration"]["apiServer"]["certSANs"],
        json!(["localhost", "127.0.0.1", "0.0.0.0", "host.docker.internal"])
    );
    // Status as upstream: the versions the Machines run and the generation it saw.
    let cp = get(&["get", "kcp", "e2e-control-plane", "-o", "json"]);
    assert_eq!(
        cp["status"]["versions"],
        json!([{"version": "v1.30.4", "replicas": 1}]),
        "{cp}"
    );
    assert_eq!(
        cp["status"]["observedGeneration"], cp["metadata"]["generation"],
        "{cp}"
    );
    assert_eq!(
        config["status"]["observedGeneration"], config["metadata"]["generation"],
        "{config}"
    );
    // machineTemplate.metadata reaches the Machine, its infrastructure and its config.
    for kind in ["machine", "inmemorymachine", "kubeadmconfig"] {
        let o = get(&["get", kind, &first, "-o", "json"]);
        assert_eq!(o["metadata"]["labels"]["team"], "platform", "{kind}: {o}");
        assert_eq!(
            o["metadata"]["annotations"]["example.com/owner"], "platform",
            "{kind}: {o}"
        );
        assert_eq!(
            o["metadata"]["labels"]["cluster.x-k8s.io/control-plane-name"], "e2e-control-plane",
            "{kind}: {o}"
        );
    }

    // Secrets as upstream: typed, labelled with the cluster and controlled by the control
    // plane; the kubeconfig holds an admin client certificate, and no token.
    for suffix in ["ca", "etcd", "proxy", "sa", "kubeconfig"] {
        let s = get(&["get", "secret", &format!("e2e-{suffix}"), "-o", "json"]);
        assert_eq!(s["type"], "cluster.x-k8s.io/secret", "{s}");
        assert_eq!(
            s["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"], "e2e",
            "{s}"
        );
        let controller = s["metadata"]["ownerReferences"]
            .as_array()
            .and_then(|refs| refs.iter().find(|o| o["controller"] == true))
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            (&controller["kind"], &controller["uid"]),
            (&json!("KubeadmControlPlane"), &cp["metadata"]["uid"]),
            "{s}"
        );
        if suffix != "kubeconfig" {
            for key in ["tls.crt", "tls.key"] {
                assert!(
                    s["data"][key].as_str().is_some_and(|v| !v.is_empty()),
                    "{suffix} {key}: {s}"
                );
            }
        }
    }
    let kubeconfig_secret = get(&["get", "secret", "e2e-kubeconfig", "-o", "json"]);
    let user = {
        use base64::Engine as _;
        let b64 = |v: &serde_json::Value| {
            base64::engine::general_purpose::STANDARD
                .decode(v.as_str().expect("base64 text"))
                .expect("base64")
        };
        let kc: serde_json::Value =
            serde_yaml::from_slice(&b64(&kubeconfig_secret["data"]["value"])).expect("kubeconfig");
        assert_eq!(kc["current-context"], "e2e-admin@e2e", "{kc}");
        let user = kc["users"][0]["user"].clone();
        assert!(user.get("token").is_none(), "{user}");
        let pem = String::from_utf8(b64(&user["client-certificate-data"])).expect("pem");
        let der = pem_der(&pem);
        let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("certificate");
        let subject = cert.subject().to_string();
        assert!(
            subject.contains("O=system:masters") && subject.contains("CN=kubernetes-admin"),
            "{subject}"
        );
        user
    };
    // The host's clients use it: the workload cluster answers with the control plane's Node.
    let workload = env.workload("e2e").await;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(workload.clone());
    assert!(
        !nodes
            .list(&Default::default())
            .await
            .expect("workload nodes")
            .items
            .is_empty(),
        "{user}"
    );
    // The first control-plane Machine's data is CABPK's init: the kubeadm PKI at
    // certificatesDir, the configuration file, and `kubeadm init` with it.
    let machines = get(&[
        "get",
        "machines",
        "-l",
        "cluster.x-k8s.io/control-plane",
        "-o",
        "json",
    ]);
    let first = machines["items"]
        .as_array()
        .and_then(|a| {
            a.iter().min_by_key(|m| {
                m["metadata"]["creationTimestamp"]
                    .as_str()
                    .map(String::from)
            })
        })
        .expect("a control-plane Machine");
    let data_secret = get(&[
        "get",
        "secret",
        first["spec"]["bootstrap"]["dataSecretName"]
            .as_str()
            .expect("dataSecretName"),
        "-o",
        "json",
    ]);
    use base64::Engine as _;
    let init = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(data_secret["data"]["value"].as_str().expect("value"))
            .expect("base64"),
    )
    .expect("utf8");
    for line in [
        "-   path: /etc/kubernetes/pki/ca.key",
        "-   path: /etc/kubernetes/pki/etcd/ca.crt",
        "-   path: /etc/kubernetes/pki/front-proxy-ca.crt",
        "-   path: /etc/kubernetes/pki/sa.key",
        "-   path: /run/kubeadm/kubeadm.yaml",
        "  - 'kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete'",
    ] {
        assert!(init.lines().any(|l| l == line), "{line}: {init}");
    }
    // As kubeadm init leaves a cluster: /version at the Machine's version, and the
    // ClusterConfiguration in kube-system/kubeadm-config, filled from the Cluster.
    let version = workload.apiserver_version().await.expect("/version");
    assert_eq!(
        (version.git_version.as_str(), version.minor.as_str()),
        ("v1.30.4", "30")
    );
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(workload, "kube-system");
    let cm = config_maps
        .get("kubeadm-config")
        .await
        .expect("kubeadm-config");
    let cc = cm
        .data
        .and_then(|d| d.get("ClusterConfiguration").cloned())
        .unwrap_or_default();
    for line in [
        "kind: ClusterConfiguration",
        "clusterName: e2e",
        "kubernetesVersion: v1.30.4",
        "apiVersion: kubeadm.k8s.io/v1beta3",
    ] {
        assert!(cc.lines().any(|l| l == line), "{line}: {cc}");
    }
    workers_join_with_bootstrap_tokens(&env, "e2e", "e2e-md-0").await;
    files_come_from_secrets(&env).await;

    // Admission, as upstream's webhooks and CEL rules: each refusal names the field.
    let refused = |manifest: String, says: &str| {
        let (ok, out) = support::kubectl(
            &env.kubeconfig,
            &env.home,
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&manifest),
        );
        assert!(
            !ok && out.contains(says),
            "wanted a refusal saying {says:?}: {out}"
        );
    };
    let fine = |manifest: String| {
        let (ok, out) = support::kubectl(
            &env.kubeconfig,
            &env.home,
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&manifest),
        );
        assert!(ok, "{out}");
    };
    refused(
        kcp("x", json!({"replicas": 2, "version": "v1.30.4"})),
        "spec.replicas: Invalid value",
    );
    refused(
        kcp("x", json!({"replicas": 2, "version": "v1.30.4"})),
        "cannot be an even number when etcd is stacked",
    );
    fine(kcp(
        "x",
        json!({"replicas": 2, "version": "v1.30.4",
        "kubeadmConfigSpec": {"clusterConfiguration": {"etcd": {"external": {"endpoints": ["https://e:2379"]}}}}}),
    ));
    refused(
        kcp("x", json!({"version": "1.30.4"})),
        "must be a Kubernetes version with its leading v",
    );
    refused(
        kcp(
            "x",
            json!({"replicas": 1, "version": "v1.30.4", "rollout": {"strategy": {"rollingUpdate": {"maxSurge": 0}}}}),
        ),
        "maxSurge 0 needs at least 3 replicas",
    );
    refused(
        kcp(
            "x",
            json!({"version": "v1.30.4", "rollout": {"strategy": {"rollingUpdate": {"maxSurge": 2}}}}),
        ),
        "value must be 1 or 0",
    );
    refused(
        kcp(
            "x",
            json!({"version": "v1.30.4", "kubeadmConfigSpec": {"initConfiguration": {"nodeRegistration": {"kubeletExtraArgs": {"eviction-hard": "x"}}}}}),
        ),
        // v1beta1's map shape: refused, naming the field.
        "spec.kubeadmConfigSpec.initConfiguration.nodeRegistration.kubeletExtraArgs",
    );
    refused(
        kcp(
            "x",
            json!({"version": "v1.30.4", "kubeadmConfigSpec": {"joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": [
        {"name": "v", "value": "1"}, {"name": "v", "value": "2"}]}}}}),
        ),
        "kubeletExtraArgs name must be unique",
    );
    refused(
        kcp(
            "x",
            json!({"version": "v1.30.4", "kubeadmConfigSpec": {"files": [
        {"path": "/a", "content": "x", "contentFrom": {"secret": {"name": "s", "key": "k"}}}]}}),
        ),
        "only one of content or contentFrom",
    );
    refused(
        kcp(
            "x",
            json!({"version": "v1.30.4", "kubeadmConfigSpec": {"files": [
        {"path": "/a", "content": "x"}, {"path": "/a", "content": "y"}]}}),
        ),
        "files path must be unique",
    );
    refused(
        kcp("x", json!({"version": "v1.30.4", "machineTemplate": {}})),
        "spec.machineTemplate.spec: Required value",
    );
    refused(
        kcp(
            "x",
            json!({"version": "v1.30.4", "machineTemplate": {"spec": {}}}),
        ),
        "spec.machineTemplate.spec.infrastructureRef: Required value",
    );
    // Updates: one minor version at a time, and the frozen fields stay frozen.
    let patch = |p: serde_json::Value| {
        support::kubectl(
            &env.kubeconfig,
            &env.home,
            &[
                "patch",
                "kcp",
                "e2e-control-plane",
                "--type=merge",
                "--dry-run=server",
                "-p",
                &p.to_string(),
            ],
            None,
        )
    };
    let (ok, out) = patch(json!({"spec": {"version": "v1.32.0"}}));
    assert!(
        !ok && out.contains("cannot update Kubernetes version from v1.30.4 to v1.32.0"),
        "{out}"
    );
    let (ok, out) = patch(json!({"spec": {"version": "v1.31.1"}}));
    assert!(ok, "{out}");
    let (ok, out) = patch(
        json!({"spec": {"kubeadmConfigSpec": {"clusterConfiguration": {"certificatesDir": "/etc/other"}}}}),
    );
    assert!(!ok && out.contains("immutable"), "{out}");

    // The scale subresource: odd replicas only, and the Machines follow.
    let (ok, out) = support::kubectl(
        &env.kubeconfig,
        &env.home,
        &["scale", "kcp", "e2e-control-plane", "--replicas=2"],
        None,
    );
    assert!(!ok && out.contains("cannot be an even number"), "{out}");
    env.kubectl(&["scale", "kcp", "e2e-control-plane", "--replicas=3"], None);
    env.eventually("the control plane to scale to 3", 120, || async {
        let ms = control_plane_machines(&env.client).await;
        (ms.len() == 3 && ms.iter().all(healthy)).then_some(())
    })
    .await;
    // Many reconciles later the admin certificate was kept, not made anew each time.
    let again = get(&["get", "secret", "e2e-kubeconfig", "-o", "json"]);
    assert_eq!(
        again["metadata"]["resourceVersion"], kubeconfig_secret["metadata"]["resourceVersion"],
        "the kubeconfig Secret was rewritten"
    );

    // rollout.after (what `clusterctl alpha rollout restart` sets): every Machine created
    // before it is replaced, one at a time.
    let before: Vec<String> = control_plane_machines(&env.client)
        .await
        .iter()
        .map(|m| m.name_any())
        .collect();
    let after = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    tokio::time::sleep(Duration::from_secs(1)).await;
    env.kubectl(
        &[
            "patch",
            "kcp",
            "e2e-control-plane",
            "--type=merge",
            "-p",
            &json!({"spec": {"rollout": {"after": after}}}).to_string(),
        ],
        None,
    );
    env.eventually("a restart of every control-plane Machine", 180, || async {
        let ms = control_plane_machines(&env.client).await;
        (ms.len() == 3
            && ms.iter().all(healthy)
            && ms.iter().all(|m| !before.contains(&m.name_any())))
        .then_some(())
    })
    .await;
}

/// The DER of the first PEM block.
fn pem_der(pem: &str) -> Vec<u8> {
    use base64::Engine as _;
    let body: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("pem body")
}

/// As CABPK: each worker's KubeadmConfig gets its discovery filled (the Cluster's endpoint,
/// the CA's SPKI pin, a bootstrap token), the token's `kube-system/bootstrap-token-<id>` Secret
/// is in the workload cluster and expires within the TTL, and the worker's bootstrap data
/// holds the token but no cluster secret. kube-public/cluster-info carries the CA the pin names.
/// `files[].contentFrom`, as CABPK's `resolveFiles`: a new worker's config whose Secret is
/// missing says so on its Ready condition, naming the field, and makes no data; once the
/// Secret exists, the data carries its content at the file's path.
async fn files_come_from_secrets(env: &Env) {
    use base64::Engine as _;
    let get = |args: &[&str]| -> serde_json::Value {
        serde_json::from_str(&env.kubectl(args, None)).expect("json")
    };
    let configs = |env: &Env| {
        let list: serde_json::Value = serde_json::from_str(&env.kubectl(
            &[
                "get",
                "kubeadmconfigs",
                "-l",
                "cluster.x-k8s.io/deployment-name=e2e-md-0",
                "-o",
                "json",
            ],
            None,
        ))
        .expect("json");
        list["items"].as_array().cloned().unwrap_or_default()
    };
    let before: Vec<String> = configs(env)
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str().map(String::from))
        .collect();
    env.kubectl(
        &[
            "patch",
            "kubeadmconfigtemplate",
            "e2e-md-0",
            "--type=merge",
            "-p",
            r#"{"spec":{"template":{"spec":{"files":[{"path":"/etc/extra.conf","permissions":"0600","contentFrom":{"secret":{"name":"e2e-extra","key":"extra.conf"}}}]}}}}"#,
        ],
        None,
    );
    env.kubectl(
        &["scale", "machinedeployment", "e2e-md-0", "--replicas=3"],
        None,
    );
    let new = env
        .eventually("the new worker's config to report the missing Secret", 60, || async {
            configs(env).into_iter().find(|c| {
                let name = c["metadata"]["name"].as_str().unwrap_or_default();
                !before.iter().any(|b| b == name)
                    && c["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c["type"] == "Ready"
                                && c["status"] == "False"
                                && c["reason"] == "FileContentUnavailable"
                                && c["message"].as_str().is_some_and(|m| {
                                    m.contains("spec.files[0].contentFrom.secret: Secret default/e2e-extra not found")
                                })
                        })
                    })
            })
        })
        .await;
    let name = new["metadata"]["name"].as_str().expect("name").to_string();
    assert!(new["status"]["dataSecretName"].is_null(), "{new}");
    env.kubectl(
        &[
            "create",
            "secret",
            "generic",
            "e2e-extra",
            "--from-literal=extra.conf=key: value",
        ],
        None,
    );
    let data_secret = env
        .eventually("the config's data once the Secret exists", 90, || async {
            let c = get(&["get", "kubeadmconfig", &name, "-o", "json"]);
            c["status"]["dataSecretName"].as_str().map(String::from)
        })
        .await;
    let secret = get(&["get", "secret", &data_secret, "-o", "json"]);
    let value = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(secret["data"]["value"].as_str().expect("value"))
            .expect("base64"),
    )
    .expect("utf8");
    for line in [
        "-   path: /etc/extra.conf",
        "    permissions: '0600'",
        "      key: value",
    ] {
        assert!(value.lines().any(|l| l == line), "{line}: {value}");
    }
    env.settled("e2e-md-0", 3).await;
}

async fn workers_join_with_bootstrap_tokens(env: &Env, cluster: &str, deployment: &str) {
    use base64::Engine as _;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let get = |args: &[&str]| -> serde_json::Value {
        serde_json::from_str(&env.kubectl(args, None)).expect("json")
    };
    let ca_secret = get(&["get", "secret", &format!("{cluster}-ca"), "-o", "json"]);
    let ca = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(ca_secret["data"]["tls.crt"].as_str().expect("tls.crt"))
            .expect("base64"),
    )
    .expect("pem");
    let pin = capw_apiserver::tls::spki_sha256(&ca).expect("the CA's pin");
    let c = get(&["get", "cluster", cluster, "-o", "json"]);
    let endpoint = format!(
        "{}:{}",
        c["spec"]["controlPlaneEndpoint"]["host"]
            .as_str()
            .expect("host"),
        c["spec"]["controlPlaneEndpoint"]["port"]
    );
    let configs = get(&[
        "get",
        "kubeadmconfigs",
        "-l",
        &format!("cluster.x-k8s.io/deployment-name={deployment}"),
        "-o",
        "json",
    ]);
    let configs = configs["items"].as_array().expect("items").clone();
    assert!(!configs.is_empty(), "no worker KubeadmConfigs");
    let workload = env.workload(cluster).await;
    let tokens: Api<Secret> = Api::namespaced(workload.clone(), "kube-system");
    for config in &configs {
        let name = config["metadata"]["name"].as_str().expect("name");
        let bt = &config["spec"]["joinConfiguration"]["discovery"]["bootstrapToken"];
        assert_eq!(bt["apiServerEndpoint"], json!(endpoint), "{name}: {bt}");
        assert_eq!(bt["caCertHashes"], json!([pin]), "{name}: {bt}");
        let token = bt["token"].as_str().expect("a token");
        let (id, secret) =
            capw_apiserver::bootstrap_token::parse(token).expect("a bootstrap token");
        let stored = tokens
            .get(&format!("bootstrap-token-{id}"))
            .await
            .expect("the token's Secret in the workload cluster");
        assert_eq!(
            stored.type_.as_deref(),
            Some("bootstrap.kubernetes.io/token")
        );
        let data = stored.data.expect("data");
        let field = |k: &str| String::from_utf8(data[k].0.clone()).expect("utf8");
        assert_eq!(field("token-secret"), secret);
        assert_eq!(field("usage-bootstrap-authentication"), "true");
        let expires: jiff::Timestamp = field("expiration").parse().expect("RFC 3339");
        let left = expires.as_second() - jiff::Timestamp::now().as_second();
        assert!(left > 0 && left <= 15 * 60, "expires in {left} s");
        // The bootstrap data: the token, no CA key, no cluster token.
        let data_secret = get(&["get", "secret", name, "-o", "json"]);
        let value = String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(data_secret["data"]["value"].as_str().expect("value"))
                .expect("base64"),
        )
        .expect("utf8");
        assert!(value.contains(token), "{value}");
        assert!(value.contains(&pin), "{value}");
        assert!(!value.contains("PRIVATE KEY"), "{value}");
        assert!(!value.contains("/etc/capw/token"), "{value}");
        // CABPK's worker join: the join configuration file, then `kubeadm join` with it.
        for line in [
            "-   path: /run/kubeadm/kubeadm-join-config.yaml",
            "      kind: JoinConfiguration",
            "          key: node.cluster.x-k8s.io/uninitialized",
            "  - kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > /run/cluster-api/bootstrap-success.complete",
        ] {
            assert!(value.lines().any(|l| l == line), "{line}: {value}");
        }
        assert!(!value.contains("/etc/kubernetes/pki"), "{value}");
        // The node got its lasting credential with the token, as a kubelet's TLS bootstrap.
        let csrs: Api<k8s_openapi::api::certificates::v1::CertificateSigningRequest> =
            Api::all(workload.clone());
        let user = format!("system:bootstrap:{id}");
        env.eventually("the worker's certificate request is signed", 30, || async {
            let list = csrs.list(&Default::default()).await.ok()?;
            list.items
                .into_iter()
                .find(|c| c.spec.username.as_deref() == Some(user.as_str()))
                .filter(|c| {
                    let st = c.status.clone().unwrap_or_default();
                    st.certificate.is_some()
                        && st
                            .conditions
                            .iter()
                            .flatten()
                            .any(|c| c.type_ == "Approved")
                })
                .map(|_| ())
        })
        .await;
    }
    let public: Api<ConfigMap> = Api::namespaced(workload, "kube-public");
    let info = public.get("cluster-info").await.expect("cluster-info");
    let kc = info.data.expect("data")["kubeconfig"].clone();
    let kc = kube::config::Kubeconfig::from_yaml(&kc).expect("a kubeconfig");
    let ca_data = kc.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.certificate_authority_data.clone())
        .expect("CA data");
    let listed = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(ca_data)
            .expect("base64"),
    )
    .expect("pem");
    assert_eq!(
        capw_apiserver::tls::spki_sha256(&listed).as_deref(),
        Some(pin.as_str())
    );
}
