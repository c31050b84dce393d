//! Clusters from apply to Running with the in-memory provider, Wasm against native.
//!
//! `cargo bench -p capw-cli --bench clusters` brings CAPW_BENCH_CLUSTERS (default 1000) clusters,
//! each with one control-plane Machine and three workers, from creation to every Machine
//! Running, twice in one run: once with the bundled providers as components (from
//! `scripts/build-plugins`), once with the same providers' logic crates (`plugins/*/logic`)
//! compiled into this binary and driven through the same host, as an in-process transport. Each run has
//! its own `capw apiserver` child process, so the peak RSS reported is the host's.
//!
//! The workers come from a MachineDeployment per cluster; `CAPW_BENCH_WORKERS=standalone`
//! writes them out as stand-alone Machines instead (the figures from before MachineDeployment).
//! `CAPW_BENCH_ROLLOUT=1` then points every MachineDeployment at a renamed template at once and
//! reports the time until every cluster has rolled, next to the time to create them.
//! `CAPW_BENCH_UPGRADE=1` gives each cluster three control-plane Machines, then patches every
//! control plane's and every MachineDeployment's version at once (the workers wait for their
//! control plane, as the skew preflight says) and reports the time until every cluster runs the
//! new version, next to the time to create them.
//!
//! `CAPW_BENCH_SHAPE=compare` runs components only, twice: the clusters written out by hand as
//! above, then the same shape as managed topologies of one ClusterClass (one Cluster object
//! each); with `CAPW_BENCH_UPGRADE=1` each is then upgraded, by hand with one patch to the
//! control plane and one to the MachineDeployment, as a topology with one patch to
//! `spec.topology.version`. It reports both times and the requests per cluster, and then the
//! topologies once more with the Cluster and ClusterClass admission webhooks served and
//! registered (`CAPW_BENCH_WEBHOOKS=1`, as `capw up` runs), so their cost is measured too.

// Benchmark code: a failed step aborts the run where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
#[path = "../tests/support/process.rs"]
mod process;

use capw_manager::{self as manager, HostConfig};
use capw_runtime::Limits;
use capw_runtime::capabilities::sim_cloud::{SimCloud, SimSettings};
use capw_runtime::contract::*;
use capw_runtime::plugin::{CallError, Plugin};
use capw_runtime::slot::{Rollout, Slot};
use capw_sdk::sim_cloud as sdk_sim;
use common::{apiserver, repo, requests};
use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The same allocator as the `capw` binary, so the host measured here allocates as it does there
/// (`main` applies the binary's memory settings too).
#[cfg(not(feature = "dhat-heap"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `--features dhat-heap`: the heap is profiled from the first create until every cluster
/// runs, and the profile is written to `target/tmp/dhat-host.json`; `CAPW_HEAP_PROFILE=that
/// cargo bench -p capw-apiserver --bench heap` prints it by allocating function.
#[cfg(feature = "dhat-heap")]
#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

#[cfg(feature = "dhat-heap")]
static PROFILER: Mutex<Option<dhat::Profiler>> = Mutex::new(None);

fn start_heap_profile() {
    #[cfg(feature = "dhat-heap")]
    {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dhat-host.json");
        *PROFILER.lock().expect("lock") = Some(
            dhat::Profiler::builder()
                .file_name(path)
                .trim_backtraces(Some(24))
                .build(),
        );
    }
}

fn stop_heap_profile() {
    #[cfg(feature = "dhat-heap")]
    drop(PROFILER.lock().expect("lock").take());
}

/// The simulated cloud of the current run, for the native providers' `sim_cloud` calls.
static SIM: Mutex<Option<Arc<SimCloud>>> = Mutex::new(None);

fn sim() -> Arc<SimCloud> {
    SIM.lock()
        .expect("lock")
        .clone()
        .expect("the simulated cloud is set before native providers run")
}

/// The providers' host calls in the native build, answered by this run's simulated cloud (in
/// a component they are the `capw:host/sim-cloud` imports, answered by the same cloud).
struct NativeHost;

impl capw_sdk::host::Native for NativeHost {
    fn ensure_vm_from_image(
        &self,
        cluster: &str,
        name: &str,
        image: &sdk_sim::VmImage,
        data: &str,
    ) -> Result<sdk_sim::Vm, sdk_sim::SimCloudError> {
        let v = sim()
            .ensure_vm(cluster, name, &image.kubernetes_version, data)
            .map_err(|e| sdk_sim::SimCloudError::Invalid(e.to_string()))?;
        Ok(sdk_sim::Vm {
            name: v.name,
            provider_id: v.provider_id,
            running: v.running,
            addresses: v.addresses,
        })
    }
    fn delete_vm(&self, cluster: &str, name: &str) -> Result<bool, sdk_sim::SimCloudError> {
        Ok(sim().delete_vm(cluster, name))
    }
    fn ensure_api_server(
        &self,
        cluster: &str,
    ) -> Result<sdk_sim::ApiServer, sdk_sim::SimCloudError> {
        let (host, port) = sim()
            .ensure_api_server(cluster)
            .map_err(|e| sdk_sim::SimCloudError::Unavailable(e.to_string()))?;
        Ok(sdk_sim::ApiServer { host, port })
    }
    fn delete_api_server(&self, cluster: &str) -> Result<bool, sdk_sim::SimCloudError> {
        Ok(sim().delete_api_server(cluster))
    }
}

/// The SDK's copy of a contract type as the host's, and back. Both are generated from the same
/// WIT with serde derives, so the field names agree; the copy costs about what lifting and
/// lowering the same values across the component boundary does.
fn convert<A: serde::Serialize, B: serde::de::DeserializeOwned>(a: A) -> B {
    serde_json::from_value(serde_json::to_value(a).expect("serializes")).expect("same shape")
}

/// A bundled provider's logic crate, compiled into this binary, as a plugin transport.
struct Native<P>(std::marker::PhantomData<fn() -> P>);

impl<P: capw_sdk::Provider + 'static> Transport for Native<P> {
    fn metadata<'a>(
        &'a self,
        _plugin: &'a Plugin,
    ) -> BoxFuture<'a, Result<PluginMetadata, CallError>> {
        Box::pin(async { Ok(convert(P::metadata())) })
    }

    fn call<'a>(
        &'a self,
        _plugin: &'a Plugin,
        request: Request,
        ctx: Context,
    ) -> BoxFuture<'a, Result<Result<Response, ProviderError>, CallError>> {
        let ctx: capw_sdk::Context = convert(ctx);
        fn answer<T: serde::Serialize, H: serde::de::DeserializeOwned>(
            r: Result<T, capw_sdk::ProviderError>,
            case: fn(H) -> Response,
        ) -> Result<Response, ProviderError> {
            r.map(|st| case(convert(st))).map_err(convert)
        }
        let r = match request {
            Request::ReconcileCluster => answer(P::reconcile_cluster(ctx), Response::Cluster),
            Request::DeleteCluster => answer(P::delete_cluster(ctx), Response::Deleted),
            Request::ReconcileMachine => answer(P::reconcile_machine(ctx), Response::Machine),
            Request::DeleteMachine => answer(P::delete_machine(ctx), Response::Deleted),
            Request::ReconcileBootstrap => answer(P::reconcile_bootstrap(ctx), Response::Bootstrap),
            Request::DeleteBootstrap => answer(P::delete_bootstrap(ctx), Response::Deleted),
            Request::ReconcileControlPlane => {
                answer(P::reconcile_control_plane(ctx), Response::ControlPlane)
            }
            Request::DeleteControlPlane => answer(P::delete_control_plane(ctx), Response::Deleted),
        };
        Box::pin(async { Ok(r) })
    }
}

/// A provider's logic crate as a plugin, validated as a component's metadata is.
fn native<P: capw_sdk::Provider + 'static>() -> Plugin {
    capw_sdk::host::install(Arc::new(NativeHost));
    Plugin::with_transport(
        convert(P::metadata()),
        Arc::new(Native::<P>(std::marker::PhantomData)),
        Limits::default(),
    )
    .expect("native plugin")
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Wasm,
    Native,
}

struct Outcome {
    wall: Duration,
    /// With `CAPW_BENCH_ROLLOUT`: from patching every MachineDeployment to all rolled.
    rollout: Option<Duration>,
    /// With `CAPW_BENCH_UPGRADE`: from patching every version to every Machine upgraded.
    upgrade: Option<Duration>,
    /// Requests from the clusters' convergence to the end of the upgrade (or rollout).
    upgrade_requests: u64,
    requests: u64,
    peak_rss_mib: f64,
    /// CPU seconds spent from the first create to convergence: this host, the API server.
    cpu: (f64, f64),
    reconciles: u64,
    plugin_calls: u64,
}

/// Peak RSS since the last reset, in MiB.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Requests the API server served so far, by method.
async fn requests_by_method(client: &kube::Client) -> Vec<(String, u64)> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(req).await.unwrap_or_default();
    text.lines()
        .filter_map(|l| l.strip_prefix("capw_apiserver_requests_total{method=\""))
        .filter_map(|l| {
            let (m, rest) = l.split_once('"')?;
            Some((m.to_string(), rest.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// Resource requests by verb and resource, most first (`capw_apiserver_resource_requests`).
async fn requests_by_kind(client: &kube::Client) -> Vec<(String, u64)> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(req).await.unwrap_or_default();
    let mut out: Vec<(String, u64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("capw_apiserver_resource_requests_total{verb=\""))
        .filter_map(|l| {
            let (verb, rest) = l.split_once('"')?;
            let resource = rest.strip_prefix(",resource=\"")?.split_once('"')?.0;
            let n = rest.rsplit(' ').next()?.parse().ok()?;
            Some((format!("{verb} {resource}"), n))
        })
        .collect();
    out.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    out
}

fn ar(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: "v1beta2".into(),
        api_version: format!("{group}/v1beta2"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// `CAPW_BENCH_WORKERS=standalone` writes the workers out as stand-alone Machines (the
/// figures before MachineDeployment); by default they come from a MachineDeployment.
/// The benchmark's MachineDeployments, which the rollout and upgrade runs patch and watch.
fn machine_deployments(client: &kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        "default",
        &ar(
            "cluster.x-k8s.io",
            "MachineDeployment",
            "machinedeployments",
        ),
    )
}

fn standalone_workers() -> bool {
    std::env::var("CAPW_BENCH_WORKERS").as_deref() == Ok("standalone")
}

/// Polls `check` every `every` until it is done, printing its progress (the `Err`) every 10 s.
/// A run not done 30 minutes after `start` fails with that progress and `detail()`.
async fn converge<F, Fut>(
    start: Instant,
    every: Duration,
    detail: impl Fn() -> String,
    mut check: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let mut last_report = Instant::now();
    loop {
        let progress = match check().await {
            Ok(()) => return,
            Err(p) => p,
        };
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!("  {progress} after {:.0?}", start.elapsed());
            last_report = Instant::now();
        }
        assert!(
            start.elapsed() < Duration::from_secs(1800),
            "{progress} after 30 minutes{}",
            detail()
        );
        tokio::time::sleep(every).await;
    }
}

/// How many of `api`'s MachineDeployments have seen their latest generation and have
/// `replicas` Machines, all up to date and available.
async fn rolled(api: &Api<DynamicObject>, replicas: usize) -> usize {
    let r = replicas as i64;
    let list = api.list(&Default::default()).await.expect("list");
    list.items
        .iter()
        .filter(|d| {
            let s = &d.data["status"];
            s["observedGeneration"].as_i64() == d.metadata.generation
                && s["replicas"].as_i64() == Some(r)
                && s["upToDateReplicas"].as_i64() == Some(r)
                && s["availableReplicas"].as_i64() == Some(r)
        })
        .count()
}

/// Clusters as managed topologies of one ClusterClass (`CAPW_BENCH_SHAPE=topology`).
fn topology() -> bool {
    std::env::var("CAPW_BENCH_SHAPE").as_deref() == Ok("topology")
}

/// The in-memory ClusterClass the topology shape uses, with its templates: the same objects the
/// hand-written shape makes per cluster, made once. Waits until the class is reconciled.
async fn create_class(client: &kube::Client) {
    let infra = "infrastructure.cluster.x-k8s.io";
    let objects = [
        (
            ar(infra, "InMemoryClusterTemplate", "inmemoryclustertemplates"),
            json!({"apiVersion": format!("{infra}/v1beta2"), "kind": "InMemoryClusterTemplate", "metadata": {"name": "bench"},
                "spec": {"template": {"spec": {}}}}),
        ),
        (
            ar(infra, "InMemoryMachineTemplate", "inmemorymachinetemplates"),
            json!({"apiVersion": format!("{infra}/v1beta2"), "kind": "InMemoryMachineTemplate", "metadata": {"name": "bench"},
                "spec": {"template": {"spec": {}}}}),
        ),
        (
            ar(
                "controlplane.cluster.x-k8s.io",
                "KubeadmControlPlaneTemplate",
                "kubeadmcontrolplanetemplates",
            ),
            json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlaneTemplate", "metadata": {"name": "bench"},
                "spec": {"template": {"spec": {}}}}),
        ),
        (
            ar(
                "bootstrap.cluster.x-k8s.io",
                "KubeadmConfigTemplate",
                "kubeadmconfigtemplates",
            ),
            json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate", "metadata": {"name": "bench"},
                "spec": {"template": {"spec": {}}}}),
        ),
        (
            ar("cluster.x-k8s.io", "ClusterClass", "clusterclasses"),
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass", "metadata": {"name": "bench"},
                "spec": {
                    "infrastructure": {"templateRef": {"apiVersion": format!("{infra}/v1beta2"), "kind": "InMemoryClusterTemplate", "name": "bench"}},
                    "controlPlane": {
                        "templateRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlaneTemplate", "name": "bench"},
                        "machineInfrastructure": {"templateRef": {"apiVersion": format!("{infra}/v1beta2"), "kind": "InMemoryMachineTemplate", "name": "bench"}}},
                    "workers": {"machineDeployments": [{"class": "default-worker",
                        "bootstrap": {"templateRef": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate", "name": "bench"}},
                        "infrastructure": {"templateRef": {"apiVersion": format!("{infra}/v1beta2"), "kind": "InMemoryMachineTemplate", "name": "bench"}}}]}}}),
        ),
    ];
    for (ar, obj) in objects {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
        let o: DynamicObject = serde_json::from_value(obj).expect("object");
        api.create(&PostParams::default(), &o)
            .await
            .expect("create");
    }
    let classes: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ar("cluster.x-k8s.io", "ClusterClass", "clusterclasses"),
    );
    converge(
        Instant::now(),
        Duration::from_millis(100),
        String::new,
        || async {
            let c = classes.get("bench").await.expect("class");
            let ready = c.data["status"]["conditions"].as_array().is_some_and(|l| {
                l.iter()
                    .any(|c| c["type"] == "VariablesReady" && c["status"] == "True")
            });
            if ready {
                Ok(())
            } else {
                Err("the ClusterClass to reconcile".into())
            }
        },
    )
    .await;
}

fn control_planes() -> usize {
    if std::env::var("CAPW_BENCH_UPGRADE").is_ok() {
        3
    } else {
        1
    }
}

/// Patches every control plane's version and every MachineDeployment's at once, and waits
/// until every control plane reports the new version with all its Machines up to date, and
/// every MachineDeployment has rolled.
async fn upgrade(client: &kube::Client, clusters: usize, workers: usize) -> Duration {
    let to = "v1.34.0";
    let cps: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ar(
            "controlplane.cluster.x-k8s.io",
            "KubeadmControlPlane",
            "kubeadmcontrolplanes",
        ),
    );
    let mds = machine_deployments(client);
    let topologies: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ar("cluster.x-k8s.io", "Cluster", "clusters"),
    );
    let start = Instant::now();
    futures::stream::iter(0..clusters)
        .map(|i| {
            let (cps, mds, topologies) = (cps.clone(), mds.clone(), topologies.clone());
            async move {
                if topology() {
                    let patch = json!({"spec": {"topology": {"version": to}}});
                    topologies
                        .patch(
                            &format!("c{i}"),
                            &PatchParams::default(),
                            &Patch::Merge(&patch),
                        )
                        .await
                        .expect("patch topology");
                    return;
                }
                let cp = json!({"spec": {"version": to}});
                cps.patch(
                    &format!("c{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(&cp),
                )
                .await
                .expect("patch control plane");
                let md = json!({"spec": {"template": {"spec": {"version": to}}}});
                mds.patch(
                    &format!("c{i}-md"),
                    &PatchParams::default(),
                    &Patch::Merge(&md),
                )
                .await
                .expect("patch md");
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    // A control plane's status.version is the lowest its Machines run, so with all of them up
    // to date and available it has rolled.
    let n = control_planes() as i64;
    converge(start, Duration::from_millis(250), String::new, || async {
        let list = cps.list(&Default::default()).await.expect("list control planes");
        let upgraded = list
            .items
            .iter()
            .filter(|c| {
                let s = &c.data["status"];
                s["version"] == to
                    && s["replicas"].as_i64() == Some(n)
                    && s["upToDateReplicas"].as_i64() == Some(n)
                    && s["availableReplicas"].as_i64() == Some(n)
            })
            .count();
        let md_rolled = rolled(&mds, workers).await;
        if upgraded == clusters && md_rolled == clusters {
            Ok(())
        } else {
            Err(format!(
                "upgrade: {upgraded}/{clusters} control planes at {to}, {md_rolled}/{clusters} worker pools rolled"
            ))
        }
    })
    .await;
    start.elapsed()
}

/// Points every cluster's MachineDeployment at a renamed template at once, and waits until
/// every one has rolled: all its Machines up to date and available, the old ones gone.
async fn roll_out(client: &kube::Client, clusters: usize, workers: usize) -> Duration {
    let infra = "infrastructure.cluster.x-k8s.io";
    let templates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ar(infra, "InMemoryMachineTemplate", "inmemorymachinetemplates"),
    );
    let mds = machine_deployments(client);
    for i in 0..clusters {
        let o: DynamicObject = serde_json::from_value(json!({"apiVersion": format!("{infra}/v1beta2"),
            "kind": "InMemoryMachineTemplate", "metadata": {"name": format!("c{i}-md-v2")}, "spec": {"template": {"spec": {}}}}))
        .expect("template");
        templates
            .create(&PostParams::default(), &o)
            .await
            .expect("create template");
    }
    let start = Instant::now();
    futures::stream::iter(0..clusters)
        .map(|i| {
            let mds = mds.clone();
            async move {
                let patch = json!({"spec": {"template": {"spec": {"infrastructureRef": {"name": format!("c{i}-md-v2")}}}}});
                mds.patch(&format!("c{i}-md"), &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .expect("patch md");
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    converge(start, Duration::from_millis(250), String::new, || async {
        let rolled = rolled(&mds, workers).await;
        if rolled == clusters {
            Ok(())
        } else {
            Err(format!("rollout: {rolled}/{clusters} rolled"))
        }
    })
    .await;
    start.elapsed()
}

async fn create_cluster(client: &kube::Client, i: usize, workers: usize) {
    let name = format!("c{i}");
    let pp = PostParams::default();
    let create = |ar: ApiResource, obj: serde_json::Value| {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
        async move {
            let o: DynamicObject = serde_json::from_value(obj).expect("object");
            // The components' CRDs are installed as they load: under the heap profiler that
            // can be after the first creates.
            let mut tries = 0;
            loop {
                match api.create(&PostParams::default(), &o).await {
                    Err(kube::Error::Api(e)) if e.code == 404 && tries < 60 => {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    r => {
                        r.expect("create");
                        break;
                    }
                }
            }
        }
    };
    let _ = pp;
    let infra = "infrastructure.cluster.x-k8s.io";
    if topology() {
        create(
            ar("cluster.x-k8s.io", "Cluster", "clusters"),
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": name},
                "spec": {"topology": {"classRef": {"name": "bench"}, "version": "v1.33.0",
                    "controlPlane": {"replicas": control_planes()},
                    "workers": {"machineDeployments": [{"class": "default-worker", "name": "md", "replicas": workers}]}}}}),
        )
        .await;
        return;
    }
    create(
        ar("cluster.x-k8s.io", "Cluster", "clusters"),
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": name},
            "spec": {"infrastructureRef": {"apiGroup": infra, "kind": "InMemoryCluster", "name": name},
                     "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": name}}}),
    )
    .await;
    create(
        ar(infra, "InMemoryCluster", "inmemoryclusters"),
        json!({"apiVersion": format!("{infra}/v1beta2"), "kind": "InMemoryCluster", "metadata": {"name": name}, "spec": {}}),
    )
    .await;
    create(
        ar(infra, "InMemoryMachineTemplate", "inmemorymachinetemplates"),
        json!({"apiVersion": format!("{infra}/v1beta2"), "kind": "InMemoryMachineTemplate", "metadata": {"name": name},
            "spec": {"template": {"spec": {}}}}),
    )
    .await;
    create(
        ar("controlplane.cluster.x-k8s.io", "KubeadmControlPlane", "kubeadmcontrolplanes"),
        json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane", "metadata": {"name": name},
            "spec": {"replicas": control_planes(), "version": "v1.33.0",
                "machineTemplate": {"spec": {"infrastructureRef": {"apiGroup": infra, "kind": "InMemoryMachineTemplate", "name": name}}}}}),
    )
    .await;
    if !standalone_workers() {
        let t = format!("{name}-md");
        create(
            ar("bootstrap.cluster.x-k8s.io", "KubeadmConfigTemplate", "kubeadmconfigtemplates"),
            json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate", "metadata": {"name": t},
                "spec": {"template": {"spec": {}}}}),
        )
        .await;
        create(
            ar(infra, "InMemoryMachineTemplate", "inmemorymachinetemplates"),
            json!({"apiVersion": format!("{infra}/v1beta2"), "kind": "InMemoryMachineTemplate", "metadata": {"name": t},
                "spec": {"template": {"spec": {}}}}),
        )
        .await;
        create(
            ar("cluster.x-k8s.io", "MachineDeployment", "machinedeployments"),
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment", "metadata": {"name": t},
                "spec": {"clusterName": name, "replicas": workers,
                    "template": {"spec": {"clusterName": name, "version": "v1.33.0",
                        "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": t}},
                        "infrastructureRef": {"apiGroup": infra, "kind": "InMemoryMachineTemplate", "name": t}}}}}),
        )
        .await;
        return;
    }
    for w in 0..workers {
        let m = format!("{name}-w{w}");
        create(
            ar("bootstrap.cluster.x-k8s.io", "KubeadmConfig", "kubeadmconfigs"),
            json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig", "metadata": {"name": m}, "spec": {}}),
        )
        .await;
        create(
            ar(infra, "InMemoryMachine", "inmemorymachines"),
            json!({"apiVersion": format!("{infra}/v1beta2"), "kind": "InMemoryMachine", "metadata": {"name": m}, "spec": {}}),
        )
        .await;
        create(
            ar("cluster.x-k8s.io", "Machine", "machines"),
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "metadata": {"name": m},
                "spec": {"clusterName": name, "version": "v1.33.0",
                    "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": m}},
                    "infrastructureRef": {"apiGroup": infra, "kind": "InMemoryMachine", "name": m}}}),
        )
        .await;
    }
}

async fn run(mode: Mode, clusters: usize, workers: usize) -> Outcome {
    start_heap_profile();
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut child, kubeconfig) = apiserver(&dir.path().join("api"));
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    let client = kube::Client::try_from(cfg).expect("client");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins");
    if mode == Mode::Wasm {
        let bundled = repo().join("target/plugins/bundled");
        for e in std::fs::read_dir(&bundled)
            .expect("target/plugins/bundled: run scripts/build-plugins first")
        {
            let e = e.expect("entry");
            std::fs::copy(e.path(), plugins.join(e.file_name())).expect("copy");
        }
    }
    let mut config = HostConfig::new(plugins, dir.path().join("cache"));
    if std::env::var("CAPW_BENCH_WEBHOOKS").is_ok() {
        config.webhooks = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    }
    config.sim = SimSettings {
        boot_delay: Duration::ZERO,
        node_delay: Duration::ZERO,
    };
    let host = manager::start(client.clone(), config)
        .await
        .expect("host starts");
    *SIM.lock().expect("lock") = Some(host.sim.clone());
    if mode == Mode::Native {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for (name, plugin) in [
            ("inmemory", native::<capw_inmemory::InMemory>()),
            ("bootstrap", native::<capw_bootstrap::Bootstrap>()),
            (
                "control-plane",
                native::<capw_control_plane::ControlPlane>(),
            ),
        ] {
            for text in plugin.metadata.crds.clone() {
                let crd: CustomResourceDefinition = serde_json::from_str(&text).expect("crd");
                let crd_name = crd.metadata.name.clone().expect("name");
                crds.patch(
                    &crd_name,
                    &PatchParams::apply("bench").force(),
                    &Patch::Apply(&crd),
                )
                .await
                .expect("crd");
            }
            host.registry
                .insert(name, Arc::new(Slot::new(plugin, Rollout::default())));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    while host.driver.driven().len() < 4 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if topology() {
        create_class(&client).await;
    }
    let before = requests(&client).await;
    let apiserver_pid = child.id().to_string();
    let cpu_before = (
        process::cpu_seconds("self"),
        process::cpu_seconds(&apiserver_pid),
    );
    let start = Instant::now();
    let creating = {
        let client = client.clone();
        tokio::spawn(async move {
            futures::stream::iter(0..clusters)
                .map(|i| {
                    let client = client.clone();
                    async move { create_cluster(&client, i, workers).await }
                })
                .buffer_unordered(32)
                .collect::<Vec<()>>()
                .await;
        })
    };
    let want = clusters * (control_planes() + workers);
    converge(
        start,
        Duration::from_millis(100),
        || format!(": {}", host.status_line()),
        || async {
            let running = host
                .machines
                .state()
                .iter()
                .filter(|m| m.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            if running >= want {
                Ok(())
            } else {
                Err(format!("{mode:?}: {running}/{want} machines Running"))
            }
        },
    )
    .await;
    let wall = start.elapsed();
    let cpu = (
        process::cpu_seconds("self") - cpu_before.0,
        process::cpu_seconds(&apiserver_pid) - cpu_before.1,
    );
    creating.await.expect("creation");
    let created_requests = requests(&client).await - before;
    let rollout = if std::env::var("CAPW_BENCH_ROLLOUT").is_ok() && !standalone_workers() {
        Some(roll_out(&client, clusters, workers).await)
    } else {
        None
    };
    let upgrade = if std::env::var("CAPW_BENCH_UPGRADE").is_ok() && !standalone_workers() {
        Some(upgrade(&client, clusters, workers).await)
    } else {
        None
    };
    let upgrade_requests = requests(&client).await - before - created_requests;
    let by_method: Vec<String> = requests_by_method(&client)
        .await
        .into_iter()
        .map(|(m, n)| format!("{m} {n}"))
        .collect();
    eprintln!(
        "  {mode:?}: requests by method since start: {}",
        by_method.join(", ")
    );
    let by_kind: Vec<String> = requests_by_kind(&client)
        .await
        .into_iter()
        .filter(|(_, n)| *n as f64 / clusters as f64 >= 0.05)
        .map(|(k, n)| format!("{k} {:.2}", n as f64 / clusters as f64))
        .collect();
    eprintln!(
        "  {mode:?}: requests per cluster by verb and resource since start: {}",
        by_kind.join(", ")
    );
    let text = host.metrics.render();
    let mut waits: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("capw_reconcile_waits_total"))
        .collect();
    waits.sort_by_key(|l| {
        std::cmp::Reverse(l.rsplit(' ').next().and_then(|n| n.parse::<u64>().ok()))
    });
    eprintln!("  {mode:?}: reconciles that waited: {}", waits.join(", "));
    let per_controller: Vec<String> = ["cluster", "machine", "machineset", "machinedeployment"]
        .iter()
        .map(|c| format!("{c} {}", host.metrics.reconcile_count(c)))
        .collect();
    eprintln!("  {mode:?}: reconciles: {}", per_controller.join(", "));
    stop_heap_profile();
    let out = Outcome {
        wall,
        requests: created_requests,
        peak_rss_mib: peak_rss_mib(),
        cpu,
        rollout,
        upgrade,
        upgrade_requests,
        reconciles: ["cluster", "machine", "machineset", "machinedeployment"]
            .iter()
            .map(|c| host.metrics.reconcile_count(c))
            .sum(),
        plugin_calls: host
            .registry
            .names()
            .iter()
            .filter_map(|n| host.registry.get(n))
            .map(|s| {
                s.current()
                    .counters
                    .calls
                    .load(std::sync::atomic::Ordering::Relaxed)
            })
            .sum(),
    };
    drop(host);
    let _ = child.kill();
    let _ = child.wait();
    out
}

/// One bundled provider call with a realistic context, component against native: where the
/// end-to-end difference comes from.
async fn probe() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = capw_runtime::Runtime::new(dir.path()).expect("runtime");
    let bytes = std::fs::read(repo().join("target/plugins/bootstrap.wasm"))
        .expect("target/plugins/bootstrap.wasm: run scripts/build-plugins first");
    let grants = [capw_runtime::Capability::LOG].into();
    let wasm = Plugin::load(
        &rt.engine,
        &rt.cache,
        &bytes,
        None,
        grants,
        Limits::default(),
    )
    .await
    .expect("bootstrap loads");
    let native = native::<capw_bootstrap::Bootstrap>();
    let (ca, key) = capw_apiserver::tls::generate_ca().expect("ca");
    let cluster = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "c0", "namespace": "default", "uid": "u1", "resourceVersion": "10",
            "labels": {"cluster.x-k8s.io/cluster-name": "c0"}, "finalizers": ["cluster.cluster.x-k8s.io"]},
        "spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": 40000},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryCluster", "name": "c0"},
            "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "c0"}},
        "status": {"phase": "Provisioned", "initialization": {"infrastructureProvisioned": true, "controlPlaneInitialized": true},
            "conditions": (0..8).map(|i| json!({"type": format!("Cond{i}"), "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"})).collect::<Vec<_>>()}});
    let machine = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
        "metadata": {"name": "c0-w0", "namespace": "default", "uid": "u2", "labels": {"cluster.x-k8s.io/cluster-name": "c0"}},
        "spec": {"clusterName": "c0", "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "c0-w0"}},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryMachine", "name": "c0-w0"}}});
    let ctx = Context {
        object: json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
            "metadata": {"name": "c0-w0", "namespace": "default"}, "spec": {}})
        .to_string(),
        cluster: Some(cluster.to_string()),
        machine: Some(machine.to_string()),
        infrastructure_cluster: None,
        bootstrap_data: None,
        secrets: vec![
            ("ca.crt".into(), ca),
            ("ca.key".into(), key),
            ("token".into(), "t".repeat(64)),
        ],
        owned_machines: vec![],
    };
    let bytes_in = ctx.object.len() + cluster.to_string().len() + machine.to_string().len();
    for (label, p) in [("component", &wasm), ("native", &native)] {
        for _ in 0..200 {
            p.reconcile_bootstrap(&ctx).await.expect("warm-up");
        }
        let n = 2000;
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(p.reconcile_bootstrap(&ctx).await.expect("call"));
        }
        println!(
            "probe: bootstrap reconcile ({} B of objects in), {label}: {:.1?} per call",
            bytes_in,
            t.elapsed() / n
        );
    }
}

fn print(mode: Mode, clusters: usize, o: &Outcome) {
    println!(
        "{:<7} wall {:>8.1?}  {:>6.1} clusters/s  API requests {:>8}  ({:.1}/cluster)  core reconciles {:>7}  plugin calls {:>7}  peak host RSS {:>7.1} MiB",
        format!("{mode:?}"),
        o.wall,
        clusters as f64 / o.wall.as_secs_f64(),
        o.requests,
        o.requests as f64 / clusters as f64,
        o.reconciles,
        o.plugin_calls,
        o.peak_rss_mib
    );
    println!(
        "{:<7} CPU to convergence: host with the benchmark's clients {:.1} s, API server {:.1} s ({:.0} ms per cluster)",
        format!("{mode:?}"),
        o.cpu.0,
        o.cpu.1,
        (o.cpu.0 + o.cpu.1) * 1000.0 / clusters as f64
    );
    if let Some(u) = o.upgrade {
        println!(
            "{:<7} {}: upgrade {u:.1?}, API requests {} ({:.1}/cluster)",
            format!("{mode:?}"),
            if topology() { "topology" } else { "by hand" },
            o.upgrade_requests,
            o.upgrade_requests as f64 / clusters as f64
        );
        println!(
            "{:<7} upgrade of every cluster at once ({} control-plane Machines, then 3 workers): {u:.1?}, {:.2}× the time to create the clusters",
            format!("{mode:?}"),
            control_planes(),
            u.as_secs_f64() / o.wall.as_secs_f64()
        );
    }
    if let Some(r) = o.rollout {
        println!(
            "{:<7} rollout of every MachineDeployment at once: {r:.1?}, {:.2}× the time to create the clusters",
            format!("{mode:?}"),
            r.as_secs_f64() / o.wall.as_secs_f64()
        );
    }
    println!("RESULT {}", o.wall.as_secs_f64());
}

/// Each mode runs in a process of its own, so neither inherits the other's heap or tasks.
fn main() {
    capw_manager::memory::no_transparent_huge_pages();
    let clusters: usize = std::env::var("CAPW_BENCH_CLUSTERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let workers = 3;
    if let Ok(mode) = std::env::var("CAPW_BENCH_MODE") {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        if mode == "probe" {
            rt.block_on(probe());
            return;
        }
        let mode = if mode == "native" {
            Mode::Native
        } else {
            Mode::Wasm
        };
        let o = rt.block_on(run(mode, clusters, workers));
        print(mode, clusters, &o);
        return;
    }
    println!(
        "clusters: {clusters} × ({} control-plane + {workers} workers {}), in-memory provider, {} cores",
        control_planes(),
        if standalone_workers() {
            "as stand-alone Machines"
        } else {
            "from a MachineDeployment"
        },
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let exe = std::env::current_exe().expect("this benchmark's path");
    if std::env::var("CAPW_BENCH_SHAPE").as_deref() == Ok("compare") {
        compare(&exe, clusters);
        return;
    }
    // Rounds alternate the modes; the two share two cores with the API server, so one run of
    // each is noisy and the per-round ratios are all printed.
    let rounds: usize = std::env::var("CAPW_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut modes = vec!["probe"];
    for _ in 0..rounds {
        modes.extend(["wasm", "native"]);
    }
    let mut walls: Vec<f64> = vec![];
    for mode in modes {
        eprintln!("running {mode}...");
        let out = Command::new(&exe)
            .env("CAPW_BENCH_MODE", mode)
            .stderr(Stdio::inherit())
            .output()
            .expect("the benchmark runs a mode");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{mode} failed: {text}");
        for line in text.lines() {
            match line.strip_prefix("RESULT ") {
                Some(w) => walls.push(w.parse::<f64>().expect("wall time")),
                None => println!("{line}"),
            }
        }
    }
    let mut ratios: Vec<f64> = walls.chunks(2).map(|p| p[0] / p[1]).collect();
    for (i, r) in ratios.iter().enumerate() {
        println!("round {}: ratio Wasm/native wall time {r:.3}", i + 1);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "median ratio Wasm/native wall time over {rounds} round(s): {:.3}",
        ratios[ratios.len() / 2]
    );
}

/// `CAPW_BENCH_SHAPE=compare`: the same clusters by hand, then as topologies, components only.
fn compare(exe: &Path, clusters: usize) {
    let mut walls = vec![];
    for (label, shape, webhooks) in [
        ("hand", "hand", false),
        ("topology", "topology", false),
        ("admitted", "topology", true),
    ] {
        eprintln!("running {label}...");
        let mut run = Command::new(exe);
        run.env("CAPW_BENCH_MODE", "wasm")
            .env("CAPW_BENCH_SHAPE", shape)
            .stderr(Stdio::inherit());
        if webhooks {
            run.env("CAPW_BENCH_WEBHOOKS", "1");
        }
        let out = run.output().expect("the benchmark runs a shape");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{label} failed: {text}");
        for line in text.lines() {
            match line.strip_prefix("RESULT ") {
                Some(w) => walls.push(w.parse::<f64>().expect("wall time")),
                None => println!("{label:<8} {line}"),
            }
        }
    }
    println!(
        "{clusters} clusters: topology/by hand create wall time {:.3}; with admission webhooks/without {:.3}",
        walls[1] / walls[0],
        walls[2] / walls[1]
    );
}
