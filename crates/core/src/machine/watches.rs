//! What wakes the Machine controller: its own changes; its Cluster when the Cluster's pause or
//! annotations change (not its status); a rewritten `<cluster>-kubeconfig` Secret, which the
//! Machines that build workload clients from it check again at once; and its infrastructure
//! machine and bootstrap config, through the tracker.

use crate::caches::{Feeds, watch};
use crate::context::{Concurrency, CoreCtx, on_cluster_change};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::iter;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;

pub(super) fn setup(
    ctx: &Arc<CoreCtx>,
    feeds: &Feeds,
    concurrency: &Concurrency,
) -> BoxFuture<'static, ()> {
    let of_cluster = {
        let ctx = ctx.clone();
        move |ns: String, cluster: &str| {
            iter(
                ctx.machines_of(&ns, cluster)
                    .iter()
                    .map(|m| ObjectRef::from_obj(&**m))
                    .collect::<Vec<_>>(),
            )
        }
    };
    let clusters = on_cluster_change(ctx, feeds, CoreCtx::machines_of);
    let kubeconfigs = watch(&feeds.secrets).flat_map(move |s| {
        let cluster = s.name_any().strip_suffix("-kubeconfig").map(str::to_string);
        match cluster {
            Some(cluster) => of_cluster(s.namespace().unwrap_or_default(), &cluster),
            None => iter(vec![]),
        }
    });
    let triggers = futures::stream::select_all([
        clusters.boxed(),
        kubeconfigs.boxed(),
        feeds.machine_requests.take(),
    ]);
    Box::pin(super::run(
        ctx.clone(),
        watch(&feeds.machines),
        triggers,
        concurrency.machines,
    ))
}
