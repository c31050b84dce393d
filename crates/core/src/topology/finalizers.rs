//! The topology finalizers (upstream's `topology/machinedeployment` and `topology/machineset`
//! controllers): a topology-owned MachineDeployment or MachineSet keeps a finalizer, and when it
//! goes its bootstrap and infrastructure templates go with it, unless another MachineDeployment
//! or MachineSet of the cluster still uses them. This is how a rotated worker template
//! disappears: the old MachineSet is deleted once scaled to 0, and takes the old templates
//! along. A MachineDeployment also takes its same-named MachineHealthCheck.

use crate::caches::{Feeds, watch};
use crate::context::{Concurrency, CoreController, CoreCtx, Registration, run};
use crate::error::ReconcileError;
use capw_api::common::ContractVersionedObjectReference;
use capw_api::common::names::TOPOLOGY_OWNED_LABEL;
use capw_api::machine::MachineSpec;
use capw_api::machinedeployment::MachineDeployment;
use capw_api::machinehealthcheck::MachineHealthCheck;
use capw_api::machineset::MachineSet;
use futures::StreamExt;
use futures::future::{BoxFuture, ready};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use std::sync::Arc;
use std::time::Duration;

pub const MACHINEDEPLOYMENT_TOPOLOGY_FINALIZER: &str =
    "machinedeployment.topology.cluster.x-k8s.io";
pub const MACHINESET_TOPOLOGY_FINALIZER: &str = "machineset.topology.cluster.x-k8s.io";

fn templates_of(spec: &MachineSpec) -> Vec<ContractVersionedObjectReference> {
    spec.bootstrap
        .config_ref
        .iter()
        .chain(std::iter::once(&spec.infrastructure_ref))
        .filter(|r| r.is_set())
        .cloned()
        .collect()
}

/// Deletes the templates `of` uses that no other MachineDeployment or MachineSet of the cluster
/// (`self_name` excluded, of its kind `kind`) references.
async fn delete_unused(
    ctx: &CoreCtx,
    ns: &str,
    cluster: &str,
    kind: &str,
    self_name: &str,
    of: &MachineSpec,
) -> Result<(), ReconcileError> {
    let mut in_use = vec![];
    for md in ctx.machine_deployments_of(ns, cluster) {
        if kind == "MachineDeployment" && md.name_any() == self_name {
            continue;
        }
        in_use.extend(templates_of(&md.spec.template.spec));
    }
    for ms in ctx.machine_sets_of(ns, cluster) {
        if kind == "MachineSet" && ms.name_any() == self_name {
            continue;
        }
        in_use.extend(templates_of(&ms.spec.template.spec));
    }
    for t in templates_of(of) {
        if in_use.contains(&t) {
            continue;
        }
        let r = ctx.resolver.resolve(&t.api_group, &t.kind).await?;
        super::delete_if_present(&ctx.resolver.api(ns, &r), &t.name).await?;
    }
    Ok(())
}

fn nothing<K>(_: Arc<K>, _: &CoreCtx) -> BoxFuture<'_, Result<Action, ReconcileError>> {
    Box::pin(ready(Ok(Action::await_change())))
}

fn cleanup_deployment(
    md: Arc<MachineDeployment>,
    ctx: &CoreCtx,
) -> BoxFuture<'_, Result<Action, ReconcileError>> {
    Box::pin(async move {
        let ns = md.namespace().unwrap_or_default();
        let api: Api<MachineHealthCheck> = Api::namespaced(ctx.client.clone(), &ns);
        super::delete_if_present(&api, &md.name_any()).await?;
        // Its MachineSets hold the templates until they are gone.
        let sets = ctx
            .machine_sets_of(&ns, &md.spec.cluster_name)
            .iter()
            .filter(|ms| {
                ms.owner_references()
                    .iter()
                    .any(|o| o.kind == "MachineDeployment" && o.name == md.name_any())
            })
            .count();
        if sets > 0 {
            return Err(ReconcileError::waiting(
                "WaitingForMachineSetsDeletion",
                format!(
                    "MachineDeployment {}: {sets} MachineSets are still there",
                    md.name_any()
                ),
                Duration::from_secs(5),
            ));
        }
        delete_unused(
            ctx,
            &ns,
            &md.spec.cluster_name,
            "MachineDeployment",
            &md.name_any(),
            &md.spec.template.spec,
        )
        .await?;
        Ok(Action::await_change())
    })
}

fn cleanup_set(
    ms: Arc<MachineSet>,
    ctx: &CoreCtx,
) -> BoxFuture<'_, Result<Action, ReconcileError>> {
    Box::pin(async move {
        let ns = ms.namespace().unwrap_or_default();
        delete_unused(
            ctx,
            &ns,
            &ms.spec.cluster_name,
            "MachineSet",
            &ms.name_any(),
            &ms.spec.template.spec,
        )
        .await?;
        Ok(Action::await_change())
    })
}

fn owned<K: ResourceExt>(o: &Arc<K>) -> futures::future::Ready<bool> {
    ready(o.labels().contains_key(TOPOLOGY_OWNED_LABEL))
}

/// Runs a finalizer controller over the topology-owned objects of a shared cache.
fn finalizer_controller<K>(
    ctx: &Arc<CoreCtx>,
    store: kube::runtime::reflector::Store<K>,
    feed: &Arc<capw_reconcile::fanout::Fanout<K>>,
    concurrency: &Concurrency,
    name: &'static str,
    finalizer: &'static str,
    cleanup: crate::context::Phase<K>,
) -> BoxFuture<'static, ()>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    Box::pin(run(
        ctx.clone(),
        store,
        watch(feed).filter(owned),
        futures::stream::empty(),
        concurrency.machines,
        CoreController {
            name,
            finalizer,
            debounce: Duration::from_millis(100),
            apply: nothing,
            cleanup,
        },
    ))
}

fn setup_deployments(
    ctx: &Arc<CoreCtx>,
    feeds: &Feeds,
    concurrency: &Concurrency,
) -> BoxFuture<'static, ()> {
    finalizer_controller(
        ctx,
        ctx.machine_deployments.clone(),
        &feeds.machine_deployments,
        concurrency,
        "topology/machinedeployment",
        MACHINEDEPLOYMENT_TOPOLOGY_FINALIZER,
        cleanup_deployment,
    )
}

fn setup_sets(
    ctx: &Arc<CoreCtx>,
    feeds: &Feeds,
    concurrency: &Concurrency,
) -> BoxFuture<'static, ()> {
    finalizer_controller(
        ctx,
        ctx.machine_sets.clone(),
        &feeds.machine_sets,
        concurrency,
        "topology/machineset",
        MACHINESET_TOPOLOGY_FINALIZER,
        cleanup_set,
    )
}

/// The finalizer on topology-owned MachineDeployments.
pub const DEPLOYMENTS: Registration = Registration {
    owns: None,
    setup: setup_deployments,
};

/// The finalizer on topology-owned MachineSets.
pub const SETS: Registration = Registration {
    owns: None,
    setup: setup_sets,
};
