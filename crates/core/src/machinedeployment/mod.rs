//! The MachineDeployment controller (`capi-lifecycle.md` §3): defaulting as upstream's
//! webhook does, the cluster label and owner, the templates, adoption of MachineSets, then
//! a rollout step (`RollingUpdate` or `OnDelete`) or, while paused, scaling only; status and
//! conditions; deletion. The rollout arithmetic is in `rollout.rs`, pure, so the golden
//! simulations (`simulation.rs`) run the same code; which set is current in `revisions.rs`;
//! the MachineSet writes in `sync.rs`; status in `status.rs`.

pub(crate) mod defaults;
pub mod revisions;
pub mod rollout;
#[cfg(test)]
mod simulation;
mod status;
mod sync;
mod watches;

use super::context::{CoreCtx, Registration};
use super::error::ReconcileError;
use super::written::Trail;
use capw_api::cluster::Cluster;
use capw_api::common::names::{
    DEPLOYMENT_NAME_LABEL, MACHINEDEPLOYMENT_FINALIZER, PAUSED_ANNOTATION,
};
use capw_api::contract::conditions::{self, set_paused};
use capw_api::machine::Machine;
use capw_api::machinedeployment::{
    MachineDeployment, MachineDeploymentSpec, MachineDeploymentStatus,
};
use capw_api::machineset::MachineSet;
use capw_reconcile::skeleton::Phases;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;
use std::time::Duration;

const SYNC: Duration = Duration::from_secs(600);

pub(crate) struct Scope {
    pub md: Arc<MachineDeployment>,
    /// The spec with upstream's defaults: what this reconcile acts on.
    pub spec: MachineDeploymentSpec,
    pub cluster: Arc<Cluster>,
    /// The deployment's MachineSets, oldest first.
    pub sets: Vec<Arc<MachineSet>>,
    /// The deployment's Machines (by its label), read from the cache once per reconcile.
    pub machines: Vec<Arc<Machine>>,
    pub status: MachineDeploymentStatus,
    pub missing_templates: Vec<String>,
    pub rollout_error: Option<String>,
    pub requeue: Option<Duration>,
    /// The reconcile's changes to the deployment's metadata and spec (defaults, the cluster
    /// label and owner, the revision), as one merge patch written by [`write_back`]: upstream's
    /// patch helper writes them once, where they had a request each.
    pub object_patch: serde_json::Value,
}

impl Scope {
    pub fn ns(&self) -> String {
        self.md.namespace().unwrap_or_default()
    }

    pub fn name(&self) -> String {
        self.md.name_any()
    }

    pub fn generation(&self) -> Option<i64> {
        self.md.metadata.generation
    }

    pub fn replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(1)
    }

    pub fn requeue_after(&mut self, d: Duration) {
        self.requeue = Some(self.requeue.map_or(d, |r| r.min(d)));
    }

    pub fn object_ref(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        capw_reconcile::events::reference(&*self.md, &())
    }

    /// Adds `patch` (RFC 7386) to what [`write_back`] writes to the deployment.
    pub fn patch_object(&mut self, patch: &serde_json::Value) {
        json_patch::merge(&mut self.object_patch, patch);
    }
}

/// Writes what changed: the deployment's metadata and spec in one request, then its status,
/// which records the generation that write made. Nothing when nothing changed. With `pace`,
/// a status change that is only progress waits for the deployment's pace (`CoreCtx::hold_status`).
async fn write_back(scope: &mut Scope, ctx: &CoreCtx, pace: bool) -> Result<(), ReconcileError> {
    let mut trail = Trail::new(&*scope.md);
    let result = write(scope, ctx, pace, &mut trail).await;
    ctx.written.machine_deployments.keep(&mut trail);
    result
}

async fn write(
    scope: &mut Scope,
    ctx: &CoreCtx,
    pace: bool,
    trail: &mut Trail<MachineDeployment>,
) -> Result<(), ReconcileError> {
    let api: Api<MachineDeployment> = Api::namespaced(ctx.client.clone(), &scope.ns());
    if scope
        .object_patch
        .as_object()
        .is_some_and(|p| !p.is_empty())
    {
        let written = api
            .patch(
                &scope.name(),
                &PatchParams::default(),
                &Patch::Merge(&scope.object_patch),
            )
            .await?;
        scope.object_patch = serde_json::json!({});
        let status = &mut scope.status;
        conditions::observe_own_write(
            &mut status.conditions,
            &mut status.observed_generation,
            scope.md.metadata.generation,
            written.metadata.generation,
        );
        trail.wrote(written);
    }
    let held = ctx
        .write_status_paced(
            &api,
            &*scope.md,
            pace,
            scope.md.status.as_ref(),
            &scope.status,
            trail,
        )
        .await?;
    if let Some(wait) = held {
        scope.requeue_after(wait);
    }
    Ok(())
}

fn scope_of(md: Arc<MachineDeployment>, ctx: &CoreCtx) -> Result<Scope, ReconcileError> {
    let ns = md.namespace().unwrap_or_default();
    let Some(cluster) = ctx
        .clusters
        .get(&ObjectRef::new(&md.spec.cluster_name).within(&ns))
    else {
        return Err(ReconcileError::waiting(
            "ClusterNotFound",
            format!(
                "MachineDeployment {}: spec.clusterName {} names no Cluster in namespace {ns}",
                md.name_any(),
                md.spec.cluster_name
            ),
            Duration::from_secs(10),
        ));
    };
    let md_name = md.name_any();
    let machines = ctx
        .machines_of(&ns, &md.spec.cluster_name)
        .into_iter()
        .filter(|m| m.labels().get(DEPLOYMENT_NAME_LABEL) == Some(&md_name))
        .collect();
    Ok(Scope {
        machines,
        spec: defaults::defaulted(&md),
        status: md.status.clone().unwrap_or_default(),
        md,
        cluster,
        sets: vec![],
        missing_templates: vec![],
        rollout_error: None,
        requeue: None,
        object_patch: serde_json::json!({}),
    })
}

async fn apply(md: Arc<MachineDeployment>, ctx: &CoreCtx) -> Result<Action, ReconcileError> {
    let md = ctx.written.machine_deployments.newest(md);
    let mut scope = scope_of(md, ctx)?;
    let generation = scope.generation();
    let paused = scope.md.annotations().contains_key(PAUSED_ANNOTATION)
        || super::cluster::is_paused(&scope.cluster);
    set_paused(
        &mut scope.status.conditions,
        paused,
        "the MachineDeployment or its Cluster is paused",
        generation,
    );
    if paused {
        write_back(&mut scope, ctx, false).await?;
        return Ok(Action::await_change());
    }
    if let Some(p) = super::machineset::defaults::patch(
        &*scope.md,
        &scope.md.spec,
        &scope.spec,
        &scope.spec.cluster_name,
    ) {
        scope.patch_object(&p);
    }
    let mut steps = Phases::default();
    sync::reconcile_owner(&mut scope);
    steps.run(crate::referenced::reconcile_templates(&mut scope, ctx).await);
    steps.run(sync::adopt(&mut scope, ctx).await);
    if steps.ok() {
        steps.run(sync::rollout(&mut scope, ctx).await);
    }
    status::update(&mut scope, steps.ok());
    write_back(&mut scope, ctx, steps.ok()).await?;
    steps.finish()?;
    Ok(Action::requeue(scope.requeue.unwrap_or(SYNC)))
}

/// `reconcileDelete`: every MachineSet at once; the finalizer goes once none is left.
async fn cleanup(md: Arc<MachineDeployment>, ctx: &CoreCtx) -> Result<Action, ReconcileError> {
    let mut scope = scope_of(md, ctx)?;
    sync::adopt(&mut scope, ctx).await?;
    sync::delete_all(&scope, ctx).await?;
    let remaining = scope.sets.len();
    status::update(&mut scope, true);
    write_back(&mut scope, ctx, false).await?;
    if remaining > 0 {
        return Err(ReconcileError::waiting(
            "WaitingForMachineSetsDeletion",
            format!(
                "MachineDeployment {}: {remaining} MachineSets are being deleted",
                scope.name()
            ),
            Duration::from_secs(10),
        ));
    }
    Ok(Action::await_change())
}

/// The MachineDeployment controller, as the manager starts it.
pub const CONTROLLER: Registration = Registration {
    owns: Some("MachineDeployment"),
    setup: watches::setup,
};

/// Runs the MachineDeployment controller until the process ends.
async fn run(
    ctx: Arc<CoreCtx>,
    own: impl futures::Stream<Item = Arc<MachineDeployment>> + Send + 'static,
    triggers: impl futures::Stream<Item = ObjectRef<MachineDeployment>> + Send + 'static,
    concurrency: u16,
) {
    let store = ctx.machine_deployments.clone();
    let controller = super::context::CoreController {
        name: "machinedeployment",
        finalizer: MACHINEDEPLOYMENT_FINALIZER,
        // Every status change of every Machine of the deployment wakes it: the debounce folds
        // a pool's burst into one reconcile and one status write.
        debounce: Duration::from_millis(250),
        apply: |o, ctx| Box::pin(apply(o, ctx)),
        cleanup: |o, ctx| Box::pin(cleanup(o, ctx)),
    };
    super::context::run(ctx, store, own, triggers, concurrency, controller).await
}

/// The deployment a changed MachineSet or Machine concerns: its `deployment-name` label.
pub(crate) fn deployment_of<K: ResourceExt>(o: &K) -> Option<ObjectRef<MachineDeployment>> {
    let ns = o.namespace()?;
    let name = o.labels().get(DEPLOYMENT_NAME_LABEL)?;
    Some(ObjectRef::new(name).within(&ns))
}

crate::referenced::templated!(Scope);
