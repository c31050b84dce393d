//! What wakes the MachineSet controller: its own changes; a Machine it controls, or an orphan
//! its selector matches (which it may adopt); its MachineDeployment; and its Cluster's pause
//! and control plane initialization (which its preflight checks wait for).

use super::MachineSet;
use crate::caches::{Feeds, mapped, watch};
use crate::context::{Concurrency, CoreCtx, on_cluster_change_by};
use crate::machinedeployment::deployment_of;
use capw_api::machine::Machine;
use capw_api::machinedeployment::MachineDeployment;
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
        mapped(ctx, &feeds.machines, sets_of_machine).boxed(),
        mapped(ctx, &feeds.machine_deployments, sets_of_deployment).boxed(),
        on_cluster_change_by(
            ctx,
            feeds,
            CoreCtx::machine_sets_of,
            capw_reconcile::relevance::cluster_for_machine_sets,
        )
        .boxed(),
    ]);
    Box::pin(super::run(
        ctx.clone(),
        watch(&feeds.machine_sets),
        triggers,
        concurrency.machines,
    ))
}

/// The MachineSets a changed Machine concerns: its controller, or for an orphan every set in
/// its namespace whose selector matches it (which may adopt it).
fn sets_of_machine(ctx: &CoreCtx, m: &Machine) -> Vec<ObjectRef<MachineSet>> {
    let ns = m.namespace().unwrap_or_default();
    if let Some(owner) = m
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
    {
        if owner.kind == "MachineSet" {
            return vec![ObjectRef::new(&owner.name).within(&ns)];
        }
        return vec![];
    }
    ctx.machine_sets_of(&ns, &m.spec.cluster_name)
        .iter()
        .filter(|s| s.spec.selector.matches(m.labels()))
        .map(|s| ObjectRef::from_obj(&**s))
        .collect()
}

/// The MachineSets of a changed MachineDeployment (by their `deployment-name` label).
fn sets_of_deployment(ctx: &CoreCtx, md: &MachineDeployment) -> Vec<ObjectRef<MachineSet>> {
    let (ns, name) = (md.namespace().unwrap_or_default(), md.name_any());
    ctx.machine_sets_of(&ns, &md.spec.cluster_name)
        .iter()
        .filter(|ms| deployment_of(&***ms).is_some_and(|r| r.name == name))
        .map(|ms| ObjectRef::from_obj(&**ms))
        .collect()
}
