//! Starts everything the host runs against one management API: the CRDs it owns, the plugin
//! runtime with the WasmProvider controller and the drop-in directory, the simulated cloud, the
//! core Cluster and Machine controllers, the provider driver, and the `/metrics` and
//! `/healthz` endpoint. `capw up`, `capw run`, the tests and the benchmarks all start it here.

use capw_api::cluster::Cluster;
use capw_api::common::names::CLUSTER_NAME_LABEL;
use capw_api::machine::Machine;
use capw_api::machinedeployment::MachineDeployment;
use capw_api::machinehealthcheck::MachineHealthCheck;
use capw_api::machineset::MachineSet;
use capw_core::context::CoreCtx;
use capw_core::{cluster, machine, machinedeployment, machinehealthcheck, machineset};
use capw_driver::Driver;
use capw_reconcile::by_cluster::ByCluster;
use capw_reconcile::external::{OwnerMap, Resolver, Tracker, owner_of_kind};
use capw_reconcile::fanout::Fanout;
use capw_reconcile::metrics::{METRICS_CONTENT_TYPE, Metrics};
use capw_reconcile::relevance;
use capw_reconcile::remote;
use capw_runtime::capabilities::sim_cloud::{SimCloud, SimSettings};
use capw_runtime::{Registry, Runtime};
use capw_runtime::{dropin, wasmprovider};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::wrappers::UnboundedReceiverStream;

#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error("installing CRD {name}: {source}")]
    Crd { name: String, source: kube::Error },
    #[error("creating the plugin directory {path}: {source}")]
    PluginDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Engine(#[from] capw_runtime::engine::EngineError),
    #[error("cannot serve metrics on {addr}: {source}")]
    Metrics {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// How to run the host.
#[derive(Debug, Clone)]
pub struct HostConfig {
    pub plugins: PathBuf,
    pub cache_dir: PathBuf,
    pub sim: SimSettings,
    /// Where `/metrics` and `/healthz` are served; `None` serves nothing.
    pub metrics: Option<SocketAddr>,
    pub cluster_concurrency: u16,
    pub machine_concurrency: u16,
    /// How often the drop-in directory is scanned when no change was reported (the fallback of
    /// the file watcher).
    pub dropin_interval: Duration,
}

impl HostConfig {
    pub fn new(plugins: PathBuf, cache_dir: PathBuf) -> Self {
        HostConfig {
            plugins,
            cache_dir,
            sim: SimSettings::default(),
            metrics: None,
            cluster_concurrency: 50,
            machine_concurrency: 100,
            dropin_interval: Duration::from_secs(10),
        }
    }
}

/// A running host.
pub struct Host {
    pub registry: Arc<Registry>,
    pub metrics: Arc<Metrics>,
    pub sim: Arc<SimCloud>,
    pub driver: Arc<Driver>,
    pub clusters: Store<Cluster>,
    pub machines: Store<Machine>,
    /// Where metrics are served, when they are.
    pub metrics_addr: Option<SocketAddr>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Host {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Installs the host's own CRDs (server-side apply) and waits until they are established.
pub async fn install_crds(client: &Client) -> Result<(), ManagerError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (_, crd) in capw_api::crds() {
        let name = crd.name_any();
        api.patch(
            &name,
            &PatchParams::apply("capw-host").force(),
            &Patch::Apply(&crd),
        )
        .await
        .map_err(|source| ManagerError::Crd {
            name: name.clone(),
            source,
        })?;
        let established = kube::runtime::wait::await_condition(
            api.clone(),
            &name,
            kube::runtime::conditions::is_crd_established(),
        );
        let _ = tokio::time::timeout(Duration::from_secs(10), established).await;
    }
    Ok(())
}

fn reporter(name: &str) -> Reporter {
    Reporter {
        controller: name.into(),
        instance: std::env::var("HOSTNAME").ok(),
    }
}

/// The objects of `K` that may refer to a provider object of cluster `.1` in namespace `.0`.
type Candidates<K> = Box<dyn Fn(&str, &str) -> Vec<Arc<K>> + Send + Sync>;

/// The owner of a provider object, or, when it has no owner yet (just cloned from a template)
/// or lost its references, the objects whose refs name it, so it is adopted or put back right
/// away, not at the next resync. The search is narrowed to the object's cluster when it
/// carries the cluster-name label, as every object capw clones does: a scan of every Machine
/// for each new object made creating a thousand clusters quadratic.
fn referrers<K>(
    store: &Store<K>,
    owner_kind: &'static str,
    refs: for<'a> fn(&'a K) -> [Option<&'a capw_api::common::ContractVersionedObjectReference>; 2],
    candidates: Candidates<K>,
) -> OwnerMap<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let store = store.clone();
    Arc::new(move |o: &DynamicObject| {
        if let Some(r) = owner_of_kind::<K>(o, owner_kind) {
            return vec![r];
        }
        let Some(types) = o.types.as_ref() else {
            return vec![];
        };
        let group = types.api_version.split('/').next().unwrap_or_default();
        let ns = o.metadata.namespace.as_deref().unwrap_or_default();
        let names_it = |k: &K| {
            refs(k).into_iter().flatten().any(|r| {
                r.kind == types.kind
                    && r.api_group == group
                    && Some(&r.name) == o.metadata.name.as_ref()
            })
        };
        let pick = |k: &Arc<K>| names_it(k).then(|| ObjectRef::from_obj(&**k));
        match o.labels().get(CLUSTER_NAME_LABEL) {
            Some(cluster) => candidates(ns, cluster).iter().filter_map(pick).collect(),
            None => store
                .state()
                .iter()
                .filter(|k| k.meta().namespace.as_deref() == Some(ns))
                .filter_map(pick)
                .collect(),
        }
    })
}

fn referrers_of_cluster(store: &Store<Cluster>) -> OwnerMap<Cluster> {
    let clusters = store.clone();
    referrers(
        store,
        "Cluster",
        |c| {
            [
                c.spec.infrastructure_ref.as_ref(),
                c.spec.control_plane_ref.as_ref(),
            ]
        },
        Box::new(move |ns, name| {
            clusters
                .get(&ObjectRef::new(name).within(ns))
                .into_iter()
                .collect()
        }),
    )
}

fn referrers_of_machine(
    store: &Store<Machine>,
    index: Arc<ByCluster<Machine>>,
) -> OwnerMap<Machine> {
    let machines = store.clone();
    referrers(
        store,
        "Machine",
        |m| {
            [
                Some(&m.spec.infrastructure_ref),
                m.spec.bootstrap.config_ref.as_ref(),
            ]
        },
        Box::new(move |ns, cluster| index.get(&machines, ns, cluster)),
    )
}

/// A reflector cache of `K` over the whole API, indexed by cluster (the index is fed first);
/// its changes fan out to subscribers.
fn cached<K>(
    client: &Client,
    index: Arc<ByCluster<K>>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> (Store<K>, Arc<Fanout<K>>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let changes: Arc<Fanout<K>> = Arc::default();
    let stream = reflector::reflector(
        writer,
        watcher(Api::<K>::all(client.clone()), watcher::Config::default())
            .default_backoff()
            .inspect(move |e| {
                if let Ok(e) = e {
                    index.note(e)
                }
            }),
    )
    .touched_objects();
    let fanout = changes.clone();
    tasks.push(tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            if let Ok(o) = ev {
                fanout.send(&Arc::new(o));
            }
        }
    }));
    (store, changes)
}

/// What the Cluster controller last counted of each MachineSet and MachineDeployment
/// (`relevance::*_for_cluster`), by kind, namespace and name.
type Counted = std::collections::HashMap<(&'static str, String, String), u64>;

/// Whether a change of `o` changes what its Cluster's status counts: a new digest, or the
/// object is gone from the cache (deleted). The sets and deployments write their status
/// several times per Machine; forwarding each write woke the Cluster for nothing.
///
/// Not kube's `predicate_filter`, which the other feeds use: these changes come from
/// `touched_objects`, which does not mark deletions, and a set's final removal carries the
/// digest of its last update, so the predicate would drop the one event the Cluster must see.
/// The cache lookup here tells the removal apart.
fn counted_anew<K>(counted: &mut Counted, store: &Store<K>, o: &K, digest: Option<u64>) -> bool
where
    K: kube::Resource<DynamicType = ()> + Clone,
{
    let key = (
        std::any::type_name::<K>(),
        o.meta().namespace.clone().unwrap_or_default(),
        o.meta().name.clone().unwrap_or_default(),
    );
    if store.get(&ObjectRef::from_obj(o)).is_none() {
        counted.remove(&key);
        return true;
    }
    let digest = digest.unwrap_or_default();
    counted.insert(key, digest) != Some(digest)
}

/// The change feeds the worker lifecycle controllers wake on.
struct Lifecycle {
    ms_changes: Arc<Fanout<MachineSet>>,
    md_changes: Arc<Fanout<MachineDeployment>>,
    mhc_changes: Arc<Fanout<MachineHealthCheck>>,
    machine_changes: tokio::sync::mpsc::UnboundedReceiver<Arc<Machine>>,
    cluster_changes: tokio::sync::mpsc::UnboundedReceiver<Arc<Cluster>>,
    /// Reconcile requests for Clusters, whose worker counters sum up sets and deployments.
    clusters: tokio::sync::mpsc::UnboundedSender<ObjectRef<Cluster>>,
}

/// Runs the MachineSet, MachineDeployment and MachineHealthCheck controllers once their caches
/// hold the world (the Cluster and Machine caches are ready when this starts).
/// A MachineSet wakes on its Machines (and orphans its selector matches), its deployment and
/// its Cluster; a MachineDeployment on its sets, its Machines and its Cluster.
async fn run_lifecycle(ctx: Arc<CoreCtx>, feeds: Lifecycle, concurrency: u16) {
    let _ = ctx.machine_sets.wait_until_ready().await;
    let _ = ctx.machine_deployments.wait_until_ready().await;
    let (ms_tx, ms_rx) = tokio::sync::mpsc::unbounded_channel::<ObjectRef<MachineSet>>();
    let (md_tx, md_rx) = tokio::sync::mpsc::unbounded_channel::<ObjectRef<MachineDeployment>>();
    let (mhc_tx, mhc_rx) = tokio::sync::mpsc::unbounded_channel::<ObjectRef<MachineHealthCheck>>();
    let _ = ctx.machine_health_checks.wait_until_ready().await;
    let Lifecycle {
        ms_changes,
        md_changes,
        mhc_changes,
        mut machine_changes,
        mut cluster_changes,
        clusters,
    } = feeds;
    let own_ms = ms_changes.subscribe();
    let own_md = md_changes.subscribe();
    let own_mhc = mhc_changes.subscribe();
    let mut sets = ms_changes.subscribe();
    let mut deployments = md_changes.subscribe();
    let forward = {
        let ctx = ctx.clone();
        async move {
            let mut seen: std::collections::HashMap<(String, String), u64> = Default::default();
            let mut counted: Counted = Default::default();
            loop {
                tokio::select! {
                    Some(m) = machine_changes.recv() => {
                        for r in machineset::sets_of_machine(&ctx, &m) {
                            let _ = ms_tx.send(r);
                        }
                        if let Some(r) = machinedeployment::deployment_of(&*m) {
                            let _ = md_tx.send(r);
                        }
                        for r in machinehealthcheck::checks_of_machine(&ctx, &m) {
                            let _ = mhc_tx.send(r);
                        }
                    }
                    Some(ms) = sets.recv() => {
                        if let Some(r) = machinedeployment::deployment_of(&*ms) {
                            let _ = md_tx.send(r);
                        }
                        let ns = ms.namespace().unwrap_or_default();
                        let digest = relevance::machine_set_for_cluster(&ms);
                        if counted_anew(&mut counted, &ctx.machine_sets, &ms, digest) {
                            let _ = clusters.send(ObjectRef::new(&ms.spec.cluster_name).within(&ns));
                        }
                    }
                    Some(md) = deployments.recv() => {
                        let ns = md.namespace().unwrap_or_default();
                        let digest = relevance::machine_deployment_for_cluster(&md);
                        if counted_anew(&mut counted, &ctx.machine_deployments, &md, digest) {
                            let _ = clusters.send(ObjectRef::new(&md.spec.cluster_name).within(&ns));
                        }
                        let name = md.name_any();
                        for ms in ctx.machine_sets_of(&ns, &md.spec.cluster_name) {
                            if machinedeployment::deployment_of(&*ms).is_some_and(|r| r.name == name) {
                                let _ = ms_tx.send(ObjectRef::from_obj(&*ms));
                            }
                        }
                    }
                    Some(c) = cluster_changes.recv() => {
                        let ns = c.namespace().unwrap_or_default();
                        // Sets and deployments care about the Cluster's pause, not its status.
                        let relevance = relevance::cluster_for_machines(&c).unwrap_or_default();
                        if seen.insert((ns.clone(), c.name_any()), relevance) == Some(relevance) {
                            continue;
                        }
                        let name = c.name_any();
                        for ms in ctx.machine_sets_of(&ns, &name) {
                            let _ = ms_tx.send(ObjectRef::from_obj(&*ms));
                        }
                        for md in ctx.machine_deployments_of(&ns, &name) {
                            let _ = md_tx.send(ObjectRef::from_obj(&*md));
                        }
                        for mhc in ctx.machine_health_checks_of(&ns, &name) {
                            let _ = mhc_tx.send(ObjectRef::from_obj(&*mhc));
                        }
                    }
                    else => return,
                }
            }
        }
    };
    tokio::join!(
        forward,
        machineset::run(
            ctx.clone(),
            UnboundedReceiverStream::new(own_ms),
            UnboundedReceiverStream::new(ms_rx),
            concurrency
        ),
        machinedeployment::run(
            ctx.clone(),
            UnboundedReceiverStream::new(own_md),
            UnboundedReceiverStream::new(md_rx),
            concurrency
        ),
        machinehealthcheck::run(
            ctx.clone(),
            UnboundedReceiverStream::new(own_mhc),
            UnboundedReceiverStream::new(mhc_rx),
            concurrency
        ),
    );
}

/// Starts the host; it runs until the returned `Host` is dropped.
pub async fn start(client: Client, config: HostConfig) -> Result<Host, ManagerError> {
    std::fs::create_dir_all(&config.plugins).map_err(|source| ManagerError::PluginDir {
        path: config.plugins.clone(),
        source,
    })?;
    install_crds(&client).await?;
    let mut tasks = vec![];
    let metrics = Arc::new(Metrics::default());
    let runtime = Arc::new(Runtime::new(&config.cache_dir)?);
    let sim = SimCloud::new(config.sim.clone());
    let _ = runtime.engine.services.sim_cloud.set(sim.clone());
    let registry = Arc::new(Registry::default());
    let wp = Arc::new(wasmprovider::Ctx {
        claims: Default::default(),
        client: client.clone(),
        plugins_dir: config.plugins.clone(),
        runtime,
        registry: registry.clone(),
        recorder: Recorder::new(client.clone(), wasmprovider::reporter()),
        skeleton: capw_reconcile::skeleton::Skeleton::new(
            "wasmprovider",
            wasmprovider::FINALIZER,
            metrics.clone(),
        ),
    });
    tasks.push(tokio::spawn(wasmprovider::run(wp)));
    tasks.push(tokio::spawn(dropin::run(
        client.clone(),
        config.plugins.clone(),
        config.dropin_interval,
    )));

    // Caches of Clusters and Machines; their changes also fan out as reconcile requests.
    let (cluster_tx, cluster_rx) = tokio::sync::mpsc::unbounded_channel::<ObjectRef<Cluster>>();
    let (machine_tx, machine_rx) = tokio::sync::mpsc::unbounded_channel::<ObjectRef<Machine>>();
    let (clusters, cluster_writer) = reflector::store::<Cluster>();
    let machine_changes: Arc<Fanout<Machine>> = Arc::default();
    let indexes = capw_core::context::Indexes::default();
    let machines_by_cluster = indexes.machines.clone();
    let cluster_changes: Arc<Fanout<Cluster>> = Arc::default();
    let (machines, machine_writer) = reflector::store::<Machine>();
    {
        let index = indexes.machines.clone();
        let stream = reflector::reflector(
            machine_writer,
            watcher(
                Api::<Machine>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .inspect(move |e| {
                if let Ok(e) = e {
                    index.note(e)
                }
            }),
        )
        .touched_objects();
        let tx = cluster_tx.clone();
        let fanout = machine_changes.clone();
        tasks.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                if let Ok(m) = ev {
                    let _ = tx.send(
                        ObjectRef::new(&m.spec.cluster_name)
                            .within(&m.namespace().unwrap_or_default()),
                    );
                    fanout.send(&Arc::new(m));
                }
            }
        }));
    }
    {
        let stream = reflector::reflector(
            cluster_writer,
            watcher(
                Api::<Cluster>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff(),
        )
        .touched_objects();
        let tx = machine_tx.clone();
        let (machines, index) = (machines.clone(), indexes.machines.clone());
        let fanout = cluster_changes.clone();
        tasks.push(tokio::spawn(async move {
            // Machines care about their Cluster's spec (pause) and annotations, not its status.
            let mut seen: std::collections::HashMap<(String, String), u64> = Default::default();
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                let Ok(c) = ev else { continue };
                let ns = c.namespace().unwrap_or_default();
                let relevance = relevance::cluster_for_machines(&c).unwrap_or_default();
                if seen.insert((ns.clone(), c.name_any()), relevance) != Some(relevance) {
                    for m in index.get(&machines, &ns, &c.name_any()) {
                        let _ = tx.send(ObjectRef::from_obj(&*m));
                    }
                }
                fanout.send(&Arc::new(c));
            }
        }));
    }
    let (secrets, secret_writer) = reflector::store::<Secret>();
    {
        let stream = reflector::reflector(
            secret_writer,
            watcher(
                Api::<Secret>::all(client.clone()),
                watcher::Config::default().labels(CLUSTER_NAME_LABEL),
            )
            .default_backoff(),
        )
        .touched_objects();
        let tx = machine_tx.clone();
        let (machines, index) = (machines.clone(), indexes.machines.clone());
        tasks.push(tokio::spawn(async move {
            // A rewritten `<cluster>-kubeconfig` (by its control plane, or by anyone) is
            // checked again at once by the Machines that build clients from it.
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                let Ok(s) = ev else { continue };
                let Some(cluster) = s.name_any().strip_suffix("-kubeconfig").map(str::to_string)
                else {
                    continue;
                };
                let ns = s.namespace().unwrap_or_default();
                for m in index.get(&machines, &ns, &cluster) {
                    let _ = tx.send(ObjectRef::from_obj(&*m));
                }
            }
        }));
    }
    let lifecycle_cluster_tx = cluster_tx.clone();
    let (machine_sets, ms_changes) =
        cached::<MachineSet>(&client, indexes.machine_sets.clone(), &mut tasks);
    let (machine_deployments, md_changes) =
        cached::<MachineDeployment>(&client, indexes.machine_deployments.clone(), &mut tasks);
    let (machine_health_checks, mhc_changes) =
        cached::<MachineHealthCheck>(&client, indexes.machine_health_checks.clone(), &mut tasks);
    let resolver = Resolver::new(client.clone());
    // One client per workload cluster, shared by core and the provider driver.
    let remotes = Arc::new(remote::Remotes::default());
    let ctx = Arc::new(CoreCtx {
        client: client.clone(),
        resolver: resolver.clone(),
        remotes: remotes.clone(),
        recorder: Recorder::new(client.clone(), reporter("capw-core")),
        metrics: metrics.clone(),
        clusters: clusters.clone(),
        machines: machines.clone(),
        machines_written: Default::default(),
        index: indexes,
        machine_sets: machine_sets.clone(),
        machine_deployments: machine_deployments.clone(),
        machine_health_checks: machine_health_checks.clone(),
        expectations: Default::default(),
        secrets: secrets.clone(),
        cluster_tracker: Tracker::new(
            resolver.clone(),
            referrers_of_cluster(&clusters),
            cluster_tx,
        ),
        machine_tracker: Tracker::new(
            resolver.clone(),
            referrers_of_machine(&machines, machines_by_cluster.clone()),
            machine_tx,
        ),
    });
    {
        let (clusters, machines) = (clusters.clone(), machines.clone());
        let (own_clusters, own_machines) =
            (cluster_changes.subscribe(), machine_changes.subscribe());
        let ctx = ctx.clone();
        let (cc, mc) = (config.cluster_concurrency, config.machine_concurrency);
        let lifecycle = Lifecycle {
            ms_changes,
            md_changes,
            mhc_changes,
            machine_changes: machine_changes.subscribe(),
            cluster_changes: cluster_changes.subscribe(),
            clusters: lifecycle_cluster_tx,
        };
        tasks.push(tokio::spawn(async move {
            // Controllers read the caches: start them once the caches hold the world. Each
            // store has this one waiter: kube-runtime's `wait_until_ready` keeps one waker, so
            // a second task waiting on the same store at the same time may never be woken.
            let _ = clusters.wait_until_ready().await;
            let _ = machines.wait_until_ready().await;
            tokio::join!(
                run_lifecycle(ctx.clone(), lifecycle, mc),
                cluster::run(
                    ctx.clone(),
                    UnboundedReceiverStream::new(own_clusters),
                    UnboundedReceiverStream::new(cluster_rx),
                    cc
                ),
                machine::run(
                    ctx,
                    UnboundedReceiverStream::new(own_machines),
                    UnboundedReceiverStream::new(machine_rx),
                    mc
                ),
            );
        }));
    }
    let driver = Driver::new(
        client.clone(),
        registry.clone(),
        resolver,
        capw_driver::Caches {
            clusters: clusters.clone(),
            machines: machines.clone(),
            machines_by_cluster,
            secrets,
            machine_changes,
            cluster_changes,
            remotes,
        },
        Recorder::new(client.clone(), reporter("capw-driver")),
        metrics.clone(),
    );
    tasks.push(tokio::spawn(driver.clone().run()));
    let mut metrics_addr = None;
    if let Some(addr) = config.metrics {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ManagerError::Metrics { addr, source })?;
        metrics_addr = listener.local_addr().ok();
        let m = metrics.clone();
        let app = axum::Router::new()
            .route(
                "/metrics",
                axum::routing::get(move || {
                    let m = m.clone();
                    async move { ([("content-type", METRICS_CONTENT_TYPE)], m.render()) }
                }),
            )
            .route("/healthz", axum::routing::get(|| async { "ok" }));
        tasks.push(tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "the metrics endpoint stopped");
            }
        }));
    }
    Ok(Host {
        registry,
        metrics,
        sim,
        driver,
        clusters,
        machines,
        metrics_addr,
        tasks,
    })
}

impl Host {
    /// One line for `capw up`'s live status.
    pub fn status_line(&self) -> String {
        let clusters = self.clusters.state();
        let machines = self.machines.state();
        let phase_count = |phases: Vec<Option<String>>, want: &str| {
            phases.iter().filter(|p| p.as_deref() == Some(want)).count()
        };
        let provisioned = phase_count(
            clusters
                .iter()
                .map(|c| c.status.as_ref().and_then(|s| s.phase.clone()))
                .collect(),
            "Provisioned",
        );
        let running = phase_count(
            machines
                .iter()
                .map(|m| m.status.as_ref().and_then(|s| s.phase.clone()))
                .collect(),
            "Running",
        );
        let plugins: Vec<String> = self
            .registry
            .names()
            .iter()
            .filter_map(|n| {
                self.registry
                    .get(n)
                    .map(|s| format!("{n} {}", s.current().metadata.version))
            })
            .collect();
        format!(
            "clusters {provisioned}/{} provisioned · machines {running}/{} running · plugins: {}",
            clusters.len(),
            machines.len(),
            if plugins.is_empty() {
                "none yet".to_string()
            } else {
                plugins.join(", ")
            }
        )
    }
}
