//! The caches the core controllers share, and the feeds their watches subscribe to.
//!
//! One reflector per kind over the whole API, not one per controller: five controllers read
//! Machines, and a second decoded copy of every Machine per reader is what a thousand clusters
//! cannot afford. Each kind's by-cluster index is fed before its store, and each change is
//! fanned out only after the store has it, so a reconcile it triggers reads a cache at least as
//! new as the change. A controller's `setup` declares which of these feeds it watches and how it
//! maps a change to its own objects; this module knows no controller.

use crate::context::{CoreCtx, Indexes, Requests};
use crate::referenced::{referrers_of_cluster, referrers_of_machine};
use crate::written::{OwnWrites, Written};
use capw_api::cluster::Cluster;
use capw_api::common::names::CLUSTER_NAME_LABEL;
use capw_api::machine::Machine;
use capw_api::machinedeployment::MachineDeployment;
use capw_api::machinehealthcheck::MachineHealthCheck;
use capw_api::machineset::MachineSet;
use capw_reconcile::by_cluster::ByCluster;
use capw_reconcile::events::BoundedRecorder;
use capw_reconcile::external::{Resolver, Tracker};
use capw_reconcile::fanout::Fanout;
use capw_reconcile::metrics::Metrics;
use capw_reconcile::remote::Remotes;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::sync::Arc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;

/// What the core controllers use but do not own: the host makes these once and shares them
/// with the provider driver.
pub struct Shared {
    pub client: Client,
    pub resolver: Arc<Resolver>,
    /// One client per workload cluster.
    pub remotes: Arc<Remotes>,
    pub recorder: BoundedRecorder,
    pub metrics: Arc<Metrics>,
}

/// Every change the shared caches saw, per kind, and the requests of the provider-kind
/// trackers; a controller's `setup` subscribes to what it watches.
pub struct Feeds {
    pub clusters: Arc<Fanout<Cluster>>,
    pub machines: Arc<Fanout<Machine>>,
    pub machine_sets: Arc<Fanout<MachineSet>>,
    pub machine_deployments: Arc<Fanout<MachineDeployment>>,
    pub machine_health_checks: Arc<Fanout<MachineHealthCheck>>,
    /// Secrets labelled with a cluster name.
    pub secrets: Arc<Fanout<Secret>>,
    /// Changes of a Cluster's provider objects, mapped to the Cluster.
    pub(crate) cluster_requests: Requests<Cluster>,
    /// Changes of a Machine's provider objects, mapped to the Machine.
    pub(crate) machine_requests: Requests<Machine>,
}

/// Every change of `fanout` from now on, as a stream.
pub(crate) fn watch<K>(fanout: &Fanout<K>) -> UnboundedReceiverStream<Arc<K>> {
    UnboundedReceiverStream::new(fanout.subscribe())
}

/// Requests for the objects `f` maps each change of `fanout` to.
pub(crate) fn mapped<T, K>(
    ctx: &Arc<CoreCtx>,
    fanout: &Fanout<T>,
    f: fn(&CoreCtx, &T) -> Vec<ObjectRef<K>>,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static
where
    T: Send + Sync + 'static,
    K: kube::Resource + Send + 'static,
    K::DynamicType: Send,
{
    let ctx = ctx.clone();
    watch(fanout).flat_map(move |o| futures::stream::iter(f(&ctx, &o)))
}

/// Starts the shared caches; their tasks are pushed to `tasks`.
pub fn start(shared: Shared, tasks: &mut Vec<JoinHandle<()>>) -> (Arc<CoreCtx>, Feeds) {
    let Shared {
        client,
        resolver,
        remotes,
        recorder,
        metrics,
    } = shared;
    let index = Indexes::default();
    let all = watcher::Config::default;
    let (clusters, cluster_feed) = cached::<Cluster>(&client, None, all(), tasks);
    let (machines, machine_feed) =
        cached::<Machine>(&client, Some(index.machines.clone()), all(), tasks);
    let (machine_sets, ms_feed) =
        cached::<MachineSet>(&client, Some(index.machine_sets.clone()), all(), tasks);
    let (machine_deployments, md_feed) = cached::<MachineDeployment>(
        &client,
        Some(index.machine_deployments.clone()),
        all(),
        tasks,
    );
    let (machine_health_checks, mhc_feed) = cached::<MachineHealthCheck>(
        &client,
        Some(index.machine_health_checks.clone()),
        all(),
        tasks,
    );
    let (secrets, secret_feed) =
        cached::<Secret>(&client, None, all().labels(CLUSTER_NAME_LABEL), tasks);
    let (cluster_requests, machine_requests) = (Requests::default(), Requests::default());
    let ctx = Arc::new(CoreCtx {
        client,
        cluster_tracker: Tracker::new(
            resolver.clone(),
            referrers_of_cluster(&clusters),
            cluster_requests.sender(),
        ),
        machine_tracker: Tracker::new(
            resolver.clone(),
            referrers_of_machine(&machines, index.machines.clone()),
            machine_requests.sender(),
        ),
        resolver,
        remotes,
        recorder,
        metrics,
        clusters,
        machines,
        written: Default::default(),
        status_pace: capw_reconcile::pace::Pace::new(crate::context::STATUS_PACE),
        index,
        machine_sets,
        machine_deployments,
        machine_health_checks,
        expectations: Default::default(),
        secrets,
    });
    follow(&ctx, &cluster_feed, |w| &w.clusters, tasks);
    follow(&ctx, &machine_feed, |w| &w.machines, tasks);
    follow(&ctx, &ms_feed, |w| &w.machine_sets, tasks);
    follow(&ctx, &md_feed, |w| &w.machine_deployments, tasks);
    let feeds = Feeds {
        clusters: cluster_feed,
        machines: machine_feed,
        machine_sets: ms_feed,
        machine_deployments: md_feed,
        machine_health_checks: mhc_feed,
        secrets: secret_feed,
        cluster_requests,
        machine_requests,
    };
    (ctx, feeds)
}

/// Lets the controllers' own writes of `K` follow the cache (`Written::observe`).
fn follow<K>(
    ctx: &Arc<CoreCtx>,
    feed: &Fanout<K>,
    written: fn(&OwnWrites) -> &Written<K>,
    tasks: &mut Vec<JoinHandle<()>>,
) where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let ctx = ctx.clone();
    let mut changes = watch(feed);
    tasks.push(tokio::spawn(async move {
        while let Some(o) = changes.next().await {
            written(&ctx.written).observe(&o);
        }
    }));
}

/// A reflector cache of `K` over the whole API, its index (if any) fed first; its changes fan
/// out to subscribers once the store has them.
fn cached<K>(
    client: &Client,
    index: Option<Arc<ByCluster<K>>>,
    config: watcher::Config,
    tasks: &mut Vec<JoinHandle<()>>,
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
        watcher(Api::<K>::all(client.clone()), config)
            .modify(capw_reconcile::trim::for_cache::<K>)
            .default_backoff()
            .inspect(move |e| {
                if let (Ok(e), Some(index)) = (e, &index) {
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
