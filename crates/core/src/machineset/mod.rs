//! The MachineSet controller (`capi-lifecycle.md` §2): defaulting as upstream's webhook does,
//! the cluster label and owner, the templates, adoption of orphans, remediation of Machines a
//! MachineHealthCheck marked, in-place propagation, scaling (creating Machines from the
//! templates, deleting by priority), status and conditions, and deletion. Creating and
//! deleting is in `machines.rs`, the victims' order in `deletion_order.rs`, the checks before
//! scaling up in `preflight.rs`, remediation in `remediation.rs`, status in `status.rs`.

pub(crate) mod defaults;
pub mod deletion_order;
mod machines;
pub mod preflight;
mod remediation;
mod status;
mod watches;

use super::context::{CoreCtx, Registration};
use super::error::ReconcileError;
use super::written::Trail;
use capw_api::cluster::Cluster;
use capw_api::common::names::{DEPLOYMENT_NAME_LABEL, MACHINESET_FINALIZER, PAUSED_ANNOTATION};
use capw_api::contract::conditions::set_paused;
use capw_api::machine::Machine;
use capw_api::machinedeployment::MachineDeployment;
use capw_api::machineset::{MachineSet, MachineSetSpec, MachineSetStatus};
use capw_reconcile::skeleton::Phases;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;
use std::time::Duration;

const SYNC: Duration = Duration::from_secs(600);
/// Upstream's requeue while Machines are not all ready, and after a blocked scale-up.
pub(crate) const RECHECK: Duration = Duration::from_secs(15);

/// What the phases of one reconcile work on; the status is written once at the end.
pub(crate) struct Scope {
    pub ms: Arc<MachineSet>,
    /// The spec with upstream's defaults: what this reconcile acts on.
    pub spec: MachineSetSpec,
    pub cluster: Arc<Cluster>,
    /// The owning MachineDeployment, for a set that has one.
    pub md: Option<Arc<MachineDeployment>>,
    /// The set's Machines (adopted ones included), deleting ones too.
    pub machines: Vec<Arc<Machine>>,
    /// Machines this set created that the cache does not show yet, and Machines it deleted
    /// that the cache does not show as deleting.
    pub unseen_created: Vec<String>,
    pub unseen_deleted: Vec<String>,
    pub status: MachineSetStatus,
    /// Why scaling up cannot go on: preflight checks, missing templates.
    pub blocked: Vec<String>,
    /// Referenced templates that do not exist.
    pub missing_templates: Vec<String>,
    pub requeue: Option<Duration>,
}

impl Scope {
    pub fn ns(&self) -> String {
        self.ms.namespace().unwrap_or_default()
    }

    pub fn name(&self) -> String {
        self.ms.name_any()
    }

    pub fn generation(&self) -> Option<i64> {
        self.ms.metadata.generation
    }

    pub fn requeue_after(&mut self, d: Duration) {
        self.requeue = Some(self.requeue.map_or(d, |r| r.min(d)));
    }

    pub fn replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(1)
    }

    /// Whether this set is its deployment's current revision (or has no deployment).
    pub fn is_current_revision(&self) -> bool {
        use crate::machinedeployment::revisions::revision;
        self.md
            .as_ref()
            .is_none_or(|md| revision(&**md) == revision(&*self.ms))
    }

    pub fn object_ref(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        capw_reconcile::events::reference(&*self.ms, &())
    }
}

/// Writes the status when it changed. With `pace`, a change that is only progress waits for
/// the set's pace (`CoreCtx::hold_status`).
async fn write_back(scope: &mut Scope, ctx: &CoreCtx, pace: bool) -> Result<(), ReconcileError> {
    let api: Api<MachineSet> = Api::namespaced(ctx.client.clone(), &scope.ns());
    let mut trail = Trail::new(&*scope.ms);
    let held = ctx
        .write_status_paced(
            &api,
            &*scope.ms,
            pace,
            scope.ms.status.as_ref(),
            &scope.status,
            &mut trail,
        )
        .await?;
    ctx.written.machine_sets.keep(&mut trail);
    if let Some(wait) = held {
        scope.requeue_after(wait);
    }
    Ok(())
}

async fn scope_of(ms: Arc<MachineSet>, ctx: &CoreCtx) -> Result<Scope, ReconcileError> {
    let ns = ms.namespace().unwrap_or_default();
    let Some(cluster) = ctx
        .clusters
        .get(&ObjectRef::new(&ms.spec.cluster_name).within(&ns))
    else {
        return Err(ReconcileError::waiting(
            "ClusterNotFound",
            format!(
                "MachineSet {}: spec.clusterName {} names no Cluster in namespace {ns}",
                ms.name_any(),
                ms.spec.cluster_name
            ),
            Duration::from_secs(10),
        ));
    };
    let md = ms
        .labels()
        .get(DEPLOYMENT_NAME_LABEL)
        .and_then(|n| ctx.machine_deployments.get(&ObjectRef::new(n).within(&ns)));
    Ok(Scope {
        spec: defaults::defaulted(&ms),
        status: ms.status.clone().unwrap_or_default(),
        ms,
        cluster,
        md,
        machines: vec![],
        unseen_created: vec![],
        unseen_deleted: vec![],
        blocked: vec![],
        missing_templates: vec![],
        requeue: None,
    })
}

async fn apply(ms: Arc<MachineSet>, ctx: &CoreCtx) -> Result<Action, ReconcileError> {
    let ms = ctx.written.machine_sets.newest(ms);
    let mut scope = scope_of(ms, ctx).await?;
    let generation = scope.generation();
    let paused = scope.ms.annotations().contains_key(PAUSED_ANNOTATION)
        || super::cluster::is_paused(&scope.cluster);
    set_paused(
        &mut scope.status.conditions,
        paused,
        "the MachineSet or its Cluster is paused",
        generation,
    );
    if paused {
        write_back(&mut scope, ctx, false).await?;
        return Ok(Action::await_change());
    }
    let api: Api<MachineSet> = Api::namespaced(ctx.client.clone(), &scope.ns());
    defaults::write(
        &api,
        &*scope.ms,
        &scope.ms.spec,
        &scope.spec,
        &scope.spec.cluster_name,
    )
    .await?;
    let mut steps = Phases::default();
    steps.run(machines::reconcile_owner_and_labels(&scope, ctx).await);
    steps.run(crate::referenced::reconcile_templates(&mut scope, ctx).await);
    steps.run(machines::adopt(&mut scope, ctx).await);
    // Acting on Machines needs the whole picture: a failed adoption could hide Machines.
    if steps.ok() {
        steps.run(remediation::reconcile(&mut scope, ctx).await);
        steps.run(machines::sync(&mut scope, ctx).await);
        steps.run(machines::sync_replicas(&mut scope, ctx).await);
    }
    status::update(&mut scope, steps.ok());
    write_back(&mut scope, ctx, steps.ok()).await?;
    steps.finish()?;
    Ok(Action::requeue(scope.requeue.unwrap_or(SYNC)))
}

/// `reconcileDelete`: every Machine at once; the finalizer goes once none is left.
async fn cleanup(ms: Arc<MachineSet>, ctx: &CoreCtx) -> Result<Action, ReconcileError> {
    let mut scope = scope_of(ms, ctx).await?;
    machines::adopt(&mut scope, ctx).await?;
    machines::delete_all(&scope, ctx).await?;
    let remaining = scope.machines.len();
    status::update(&mut scope, true);
    write_back(&mut scope, ctx, false).await?;
    if remaining == 0 {
        ctx.expectations
            .forget(&format!("{}/{}", scope.ns(), scope.name()));
    }
    if remaining > 0 {
        return Err(ReconcileError::waiting(
            "WaitingForMachinesDeletion",
            format!(
                "MachineSet {}: {remaining} Machines are being deleted",
                scope.name()
            ),
            Duration::from_secs(10),
        ));
    }
    Ok(Action::await_change())
}

/// The MachineSet controller, as the manager starts it.
pub const CONTROLLER: Registration = Registration {
    owns: Some("MachineSet"),
    setup: watches::setup,
};

/// Runs the MachineSet controller until the process ends.
async fn run(
    ctx: Arc<CoreCtx>,
    own: impl futures::Stream<Item = Arc<MachineSet>> + Send + 'static,
    triggers: impl futures::Stream<Item = ObjectRef<MachineSet>> + Send + 'static,
    concurrency: u16,
) {
    let store = ctx.machine_sets.clone();
    let controller = super::context::CoreController {
        name: "machineset",
        finalizer: MACHINESET_FINALIZER,
        // As for deployments, but shorter: a set also creates and deletes the Machines.
        debounce: Duration::from_millis(150),
        apply: |o, ctx| Box::pin(apply(o, ctx)),
        cleanup: |o, ctx| Box::pin(cleanup(o, ctx)),
    };
    super::context::run(ctx, store, own, triggers, concurrency, controller).await
}

crate::referenced::templated!(Scope);
