//! One topology reconcile (upstream's `topology/cluster` `Reconcile`): skip Clusters without a
//! topology; stop while paused or deleting; wait for a reconciled class; default and check the
//! variables; then blueprint, current state, desired state and reconcile state, and the
//! `TopologyReconciled` condition that says how far it got.

use super::status::{self, TOPOLOGY_RECONCILED, Verdict};
use super::{TopologyError, blueprint, current, desired, state, variables};
use crate::context::CoreCtx;
use crate::error::ReconcileError;
use capw_api::cluster::{Cluster, is_paused};
use capw_api::clusterclass::ClusterClass;
use capw_api::contract::conditions;
use capw_reconcile::external::Tracker;
use capw_reconcile::skeleton::write_conditions_at;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// While a step is pending, look again even if no watched object changes (a Machine rolling
/// shows on its MachineDeployment, but not every step of it).
const PENDING_RECHECK: Duration = Duration::from_secs(15);

pub(super) struct TopologyCtx {
    pub core: Arc<CoreCtx>,
    pub classes: Store<ClusterClass>,
    /// Wakes a Cluster when its infrastructure cluster or control plane changes.
    pub tracker: Arc<Tracker<Cluster>>,
}

pub(super) async fn reconcile(
    cluster: Arc<Cluster>,
    ctx: Arc<TopologyCtx>,
) -> Result<Action, ReconcileError> {
    if cluster.spec.topology.is_none() {
        return Ok(Action::await_change());
    }
    let ns = cluster.namespace().unwrap_or_default();
    let span = tracing::info_span!("reconcile", controller = "topology", object.ref = %format!("{ns}/{}", cluster.name_any()));
    apply(cluster, &ctx).instrument(span).await
}

fn class_of(cluster: &Cluster, classes: &Store<ClusterClass>) -> Result<ClusterClass, String> {
    let topology = cluster.spec.topology.clone().unwrap_or_default();
    let ns = topology
        .class_ref
        .namespace
        .clone()
        .or_else(|| cluster.namespace())
        .unwrap_or_default();
    classes
        .get(&ObjectRef::new(&topology.class_ref.name).within(&ns))
        .map(|c| (*c).clone())
        .ok_or_else(|| {
            format!(
                "error reading the ClusterClass: ClusterClass {ns}/{} not found; create it, or fix spec.topology.classRef",
                topology.class_ref.name
            )
        })
}

async fn apply(cluster: Arc<Cluster>, ctx: &TopologyCtx) -> Result<Action, ReconcileError> {
    if cluster.metadata.deletion_timestamp.is_some() {
        write_condition(ctx, &cluster, status::deleting()).await?;
        return Ok(Action::await_change());
    }
    if is_paused(&cluster) {
        write_condition(ctx, &cluster, status::paused()).await?;
        return Ok(Action::await_change());
    }
    let class = match class_of(&cluster, &ctx.classes) {
        Ok(c) => c,
        Err(message) => {
            write_condition(ctx, &cluster, status::failed(message.clone())).await?;
            return Err(ReconcileError::Invalid(message));
        }
    };
    if !crate::clusterclass::reconciled(&class) {
        write_condition(ctx, &cluster, status::class_not_reconciled()).await?;
        return Ok(Action::await_change());
    }
    match generate_and_write(&cluster, class, ctx).await {
        Ok((verdict, pending)) => {
            write_condition(ctx, &cluster, verdict).await?;
            Ok(if pending {
                Action::requeue(PENDING_RECHECK)
            } else {
                Action::await_change()
            })
        }
        Err(e) => {
            write_condition(ctx, &cluster, status::failed(e.to_string())).await?;
            Err(ReconcileError::Invalid(format!(
                "Cluster {}/{}: {e}",
                cluster.namespace().unwrap_or_default(),
                cluster.name_any()
            )))
        }
    }
}

/// The reconcile proper; returns the condition and whether a step is still pending.
async fn generate_and_write(
    cluster: &Cluster,
    class: ClusterClass,
    ctx: &TopologyCtx,
) -> Result<(Verdict, bool), TopologyError> {
    let topology = cluster.spec.topology.clone().unwrap_or_default();
    let definitions = class.status.clone().unwrap_or_default().variables;
    let mut values = topology.variables.clone();
    variables::default(&mut values, &definitions);
    let errors = variables::validate(&values, &definitions, "spec.topology.variables");
    if !errors.is_empty() {
        let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
        return Err(TopologyError::Invalid(list.join("; ")));
    }
    let blueprint = blueprint::fetch(&ctx.core, class).await?;
    let current = current::fetch(&ctx.core, cluster).await?;
    let mut desired = desired::generate(cluster, &values, &blueprint, &current)?;
    state::reconcile(&ctx.core, cluster, &current, &mut desired).await?;
    for obj in [&desired.infrastructure, &desired.control_plane] {
        let (group, kind) = current::group_kind(obj);
        let resolved = ctx.core.resolver.resolve(&group, &kind).await?;
        ctx.tracker.ensure(&resolved);
    }
    let cp_spec_version = current
        .control_plane
        .as_ref()
        .and_then(|cp| cp["spec"]["version"].as_str());
    // Upstream names the MachineDeployments that wait or roll by their own names, and those
    // not created yet by their topology names.
    let mut workers = desired.workers.clone();
    let md_name = |t: &String| {
        current
            .deployments
            .get(t)
            .map_or_else(|| t.clone(), |d| d.object.name_any())
    };
    workers.pending_upgrade = workers.pending_upgrade.iter().map(md_name).collect();
    workers.upgrading = workers.upgrading.iter().map(md_name).collect();
    let verdict = status::after_reconcile(
        &topology.version,
        &desired.control_plane_tracker,
        &workers,
        cp_spec_version,
    );
    let pending = verdict.0 != "True"
        || desired.control_plane_tracker.upgrading
        || !desired.workers.upgrading.is_empty();
    Ok((verdict, pending))
}

/// Sets `TopologyReconciled` on the Cluster's status as the cache last saw it; a write only when
/// it changed.
async fn write_condition(
    ctx: &TopologyCtx,
    cluster: &Cluster,
    (status, reason, message): Verdict,
) -> Result<(), ReconcileError> {
    let api: Api<Cluster> = Api::namespaced(
        ctx.core.client.clone(),
        &cluster.namespace().unwrap_or_default(),
    );
    let mut latest = ctx
        .core
        .clusters
        .get(&ObjectRef::from_obj(cluster))
        .unwrap_or_else(|| Arc::new(cluster.clone()));
    // The Cluster controller writes the rest of the list: the condition is written over the
    // version it was read from, and read again if that changed, so neither drops the other's.
    for _ in 0..3 {
        let mut list = latest
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let before = list.clone();
        conditions::set(
            &mut list,
            TOPOLOGY_RECONCILED,
            status,
            reason,
            &message,
            latest.metadata.generation,
        );
        if list == before {
            return Ok(());
        }
        match write_conditions_at(&api, &cluster.name_any(), latest.resource_version(), &list).await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                latest = Arc::new(api.get(&cluster.name_any()).await?);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(ReconcileError::waiting(
        "ClusterChanged",
        format!(
            "Cluster {} kept changing while its topology condition was written; reading it again",
            cluster.name_any()
        ),
        Duration::from_millis(20),
    ))
}
