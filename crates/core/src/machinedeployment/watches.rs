//! What wakes the MachineDeployment controller: its own changes; its MachineSets and Machines
//! (by their `deployment-name` label); and its Cluster's pause.

use super::deployment_of;
use crate::caches::{Feeds, watch};
use crate::context::{Concurrency, CoreCtx, on_cluster_change};
use futures::StreamExt;
use futures::future::{BoxFuture, ready};
use std::sync::Arc;

pub(super) fn setup(
    ctx: &Arc<CoreCtx>,
    feeds: &Feeds,
    concurrency: &Concurrency,
) -> BoxFuture<'static, ()> {
    let machines = watch(&feeds.machines).filter_map(|m| ready(deployment_of(&*m)));
    let sets = watch(&feeds.machine_sets).filter_map(|ms| ready(deployment_of(&*ms)));
    let triggers = futures::stream::select_all([
        machines.boxed(),
        sets.boxed(),
        on_cluster_change(ctx, feeds, CoreCtx::machine_deployments_of).boxed(),
    ]);
    Box::pin(super::run(
        ctx.clone(),
        watch(&feeds.machine_deployments),
        triggers,
        concurrency.machines,
    ))
}
