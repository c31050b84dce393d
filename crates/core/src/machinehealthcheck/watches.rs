//! What wakes the MachineHealthCheck controller: its own changes; a Machine of its Cluster that
//! its selector matches; and its Cluster's pause.

use super::MachineHealthCheck;
use crate::caches::{Feeds, mapped, watch};
use crate::context::{Concurrency, CoreCtx, on_cluster_change};
use capw_api::machine::Machine;
use futures::StreamExt;
use futures::future::BoxFuture;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;

pub(super) fn setup(
    ctx: &Arc<CoreCtx>,
    feeds: &Feeds,
    concurrency: &Concurrency,
) -> BoxFuture<'static, ()> {
    let triggers = futures::stream::select_all([
        mapped(ctx, &feeds.machines, checks_of_machine).boxed(),
        on_cluster_change(ctx, feeds, CoreCtx::machine_health_checks_of).boxed(),
    ]);
    Box::pin(super::run(
        ctx.clone(),
        watch(&feeds.machine_health_checks),
        triggers,
        concurrency.machines,
    ))
}

/// The checks a changed Machine concerns: those of its Cluster whose selector matches it.
fn checks_of_machine(ctx: &CoreCtx, m: &Machine) -> Vec<ObjectRef<MachineHealthCheck>> {
    let ns = m.namespace().unwrap_or_default();
    ctx.machine_health_checks_of(&ns, &m.spec.cluster_name)
        .iter()
        .filter(|c| c.spec.selector.matches(m.labels()))
        .map(|c| ObjectRef::from_obj(&**c))
        .collect()
}
