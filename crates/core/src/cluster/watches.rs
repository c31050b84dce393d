//! What wakes the Cluster controller: its own changes; a Machine, MachineSet or
//! MachineDeployment of it only when what the Cluster reads of it changed (at a thousand
//! clusters every Machine status write woke its Cluster: 25 reconciles per Cluster); and its
//! infrastructure cluster and control plane, through the tracker.

use crate::caches::{Feeds, watch};
use crate::context::{Concurrency, CoreCtx};
use capw_api::cluster::Cluster;
use capw_reconcile::relevance;
use futures::StreamExt;
use futures::future::{BoxFuture, ready};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use std::collections::HashMap;
use std::sync::Arc;

pub(super) fn setup(
    ctx: &Arc<CoreCtx>,
    feeds: &Feeds,
    concurrency: &Concurrency,
) -> BoxFuture<'static, ()> {
    let machines = counted(
        watch(&feeds.machines),
        ctx.machines.clone(),
        relevance::machine_for_cluster,
        |m| &m.spec.cluster_name,
    );
    let sets = counted(
        watch(&feeds.machine_sets),
        ctx.machine_sets.clone(),
        relevance::machine_set_for_cluster,
        |ms| &ms.spec.cluster_name,
    );
    let deployments = counted(
        watch(&feeds.machine_deployments),
        ctx.machine_deployments.clone(),
        relevance::machine_deployment_for_cluster,
        |md| &md.spec.cluster_name,
    );
    let triggers = futures::stream::select_all([
        machines.boxed(),
        sets.boxed(),
        deployments.boxed(),
        feeds.cluster_requests.take(),
    ]);
    Box::pin(super::run(
        ctx.clone(),
        watch(&feeds.clusters),
        triggers,
        concurrency.clusters,
    ))
}

/// The Cluster of each change of `changes` that changes what the Cluster's status counts: a new
/// digest, or the object is gone from the cache (deleted). Machines, sets and deployments write
/// their status several times on the way up; forwarding each write woke the Cluster for
/// nothing.
///
/// Not kube's `predicate_filter`, which the other feeds use: these changes come from
/// `touched_objects`, which does not mark deletions, and a set's final removal carries the
/// digest of its last update, so the predicate would drop the one event the Cluster must see.
/// The cache lookup here tells the removal apart.
fn counted<K>(
    changes: impl futures::Stream<Item = Arc<K>> + Send + 'static,
    store: Store<K>,
    digest: fn(&K) -> Option<u64>,
    cluster_of: fn(&K) -> &str,
) -> impl futures::Stream<Item = ObjectRef<Cluster>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let mut counted: HashMap<(String, String), u64> = HashMap::new();
    changes.filter_map(move |o| {
        let key = (o.namespace().unwrap_or_default(), o.name_any());
        let anew = if store.get(&ObjectRef::from_obj(&*o)).is_none() {
            counted.remove(&key);
            true
        } else {
            let digest = digest(&o).unwrap_or_default();
            counted.insert(key.clone(), digest) != Some(digest)
        };
        ready(anew.then(|| ObjectRef::new(cluster_of(&o)).within(&key.0)))
    })
}
