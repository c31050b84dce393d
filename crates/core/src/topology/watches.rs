//! What wakes the topology controller: a topology Cluster's spec, labels, annotations or its
//! `TopologyReconciled` condition (another writer of the status may drop it); its
//! ClusterClass; its topology-owned MachineDeployments; and its infrastructure cluster and
//! control plane, through a tracker of their kinds.

use super::controller::{TopologyCtx, reconcile};
use super::status::TOPOLOGY_RECONCILED;
use crate::caches::{Feeds, watch};
use crate::context::{Concurrency, CoreCtx, Registration};
use capw_api::cluster::Cluster;
use capw_api::clusterclass::ClusterClass;
use capw_api::common::names::{CLUSTER_NAME_LABEL, TOPOLOGY_OWNED_LABEL};
use capw_reconcile::external::Tracker;
use capw_reconcile::skeleton::Skeleton;
use futures::StreamExt;
use futures::future::{BoxFuture, ready};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::wrappers::UnboundedReceiverStream;

/// What of a Cluster the topology reads or writes: nothing when it has no topology.
fn relevant(c: &Cluster) -> Option<u64> {
    c.spec.topology.as_ref()?;
    let mut h = DefaultHasher::new();
    c.metadata.generation.hash(&mut h);
    c.labels().hash(&mut h);
    c.annotations().hash(&mut h);
    c.metadata.deletion_timestamp.is_some().hash(&mut h);
    let condition = c.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == TOPOLOGY_RECONCILED)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    });
    condition.hash(&mut h);
    Some(h.finish())
}

/// The ClusterClasses as they are applied, kept in `writer`'s store. Errors are dropped here,
/// so the watcher must back off: without it, an unreachable API server made this stream retry
/// at once, spending a core, and in a loop that never yielded once the runtime's other tasks
/// were gone, so a host that had lost its Lease could not exit.
fn classes_seen(
    api: Api<ClusterClass>,
    writer: reflector::store::Writer<ClusterClass>,
) -> impl futures::Stream<Item = ClusterClass> + Send {
    reflector::reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .applied_objects()
        .filter_map(|c| ready(c.ok()))
}

fn setup(ctx: &Arc<CoreCtx>, feeds: &Feeds, concurrency: &Concurrency) -> BoxFuture<'static, ()> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let tracker = Tracker::new(
        ctx.resolver.clone(),
        Arc::new(|o: &kube::api::DynamicObject| {
            let labels = o.labels();
            match (labels.get(CLUSTER_NAME_LABEL), o.namespace()) {
                (Some(c), Some(ns)) if labels.contains_key(TOPOLOGY_OWNED_LABEL) => {
                    vec![ObjectRef::new(c).within(&ns)]
                }
                _ => vec![],
            }
        }),
        tx,
    );
    let (classes, writer) = reflector::store::<ClusterClass>();
    let clusters = ctx.clusters.clone();
    let class_changes = classes_seen(Api::all(ctx.client.clone()), writer).flat_map(move |class| {
        let ns = class.namespace().unwrap_or_default();
        let users: Vec<ObjectRef<Cluster>> = clusters
            .state()
            .iter()
            .filter(|c| {
                c.spec.topology.as_ref().is_some_and(|t| {
                    t.class_ref.name == class.name_any()
                        && t.class_ref
                            .namespace
                            .clone()
                            .or_else(|| c.namespace())
                            .unwrap_or_default()
                            == ns
                })
            })
            .map(|c| ObjectRef::from_obj(&**c))
            .collect();
        futures::stream::iter(users)
    });
    let deployments = watch(&feeds.machine_deployments).filter_map(|md| {
        ready(md.labels().contains_key(TOPOLOGY_OWNED_LABEL).then(|| {
            ObjectRef::new(&md.spec.cluster_name).within(&md.namespace().unwrap_or_default())
        }))
    });
    let own = watch(&feeds.clusters)
        .map(|c| Ok((*c).clone()))
        .predicate_filter(relevant, Default::default());
    let triggers = futures::stream::select_all([
        class_changes.boxed(),
        deployments.boxed(),
        UnboundedReceiverStream::new(rx).boxed(),
    ]);
    let tctx = Arc::new(TopologyCtx {
        core: ctx.clone(),
        classes,
        tracker,
    });
    let store = ctx.clusters.clone();
    let concurrency = concurrency.clusters;
    let policy = Arc::new(Skeleton::new("topology", "", ctx.metrics.clone()));
    Box::pin(async move {
        kube::runtime::Controller::for_stream(own, store)
            .with_config(
                kube::runtime::controller::Config::default()
                    .concurrency(concurrency)
                    .debounce(Duration::from_millis(100)),
            )
            .reconcile_on(triggers)
            .run(
                reconcile,
                move |c, err, _| policy.error_policy(&*c, err),
                tctx,
            )
            .for_each(|_| async {})
            .await;
    })
}

/// The topology controller, as the manager starts it. It owns no kind of its own: it
/// reconciles Clusters that have a `spec.topology`.
pub const CONTROLLER: Registration = Registration { owns: None, setup };

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An API server that takes connections and drops them: each watch attempt fails at once.
    #[tokio::test]
    async fn the_class_watch_backs_off_while_the_api_server_is_unreachable() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let attempts = Arc::new(AtomicUsize::new(0));
        let counted = attempts.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::Relaxed);
                drop(conn);
            }
        });
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let (_, writer) = reflector::store::<ClusterClass>();
        let stream = classes_seen(Api::all(client), writer);
        let drained = tokio::time::timeout(Duration::from_secs(2), stream.for_each(|_| ready(())));
        assert!(drained.await.is_err(), "the class watch ended");
        let n = attempts.load(Ordering::Relaxed);
        // The default backoff starts at 0.8 s: about three attempts in 2 s. Without it, thousands.
        assert!((1..=10).contains(&n), "{n} watch attempts in 2 s");
    }
}
