//! The Cluster controller (`capi-contract.md` §3): finalizer, pause, the infrastructure and
//! control-plane phases read through the contract, phase and conditions, and the ordered
//! deletion. Phases live in `phases.rs`, deletion in `delete.rs`, status in `status.rs`.

mod delete;
mod phases;
mod status;
mod watches;

use super::context::{CoreCtx, Registration};
use super::error::ReconcileError;
use super::written::Trail;
use capw_api::cluster::{Cluster, ClusterStatus};
use capw_api::common::names::CLUSTER_FINALIZER;
use capw_api::contract::conditions::{self, set_paused};
use capw_reconcile::skeleton::{Phases, write_status_at};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;
use std::time::Duration;

/// How often a settled Cluster is looked at again (upstream's sync period).
const SYNC: Duration = Duration::from_secs(600);
/// Upstream's `externalReadyWait`.
pub(crate) const EXTERNAL_READY_WAIT: Duration = Duration::from_secs(30);

/// What the phases of one reconcile work on; written back once at the end.
pub(crate) struct Scope {
    pub cluster: Arc<Cluster>,
    pub status: ClusterStatus,
    /// `spec.controlPlaneEndpoint` to set, when core copies it.
    pub endpoint: Option<capw_api::common::ApiEndpoint>,
    pub requeue: Option<Duration>,
}

impl Scope {
    pub fn requeue_after(&mut self, d: Duration) {
        self.requeue = Some(self.requeue.map_or(d, |r| r.min(d)));
    }

    pub fn ns(&self) -> String {
        self.cluster.namespace().unwrap_or_default()
    }

    pub fn generation(&self) -> Option<i64> {
        self.cluster.metadata.generation
    }
}

pub(crate) use capw_api::cluster::is_paused;

/// Conditions of the Cluster that other controllers own: the topology controller's.
const FOREIGN: &[&str] = &[conditions::types::TOPOLOGY_RECONCILED];
/// Status writes after a conflict before the reconcile is left to the next one.
const CONFLICT_RETRIES: usize = 3;
const CONFLICT_PAUSE: Duration = Duration::from_millis(20);

/// The status fields that count Machines: a change of these alone is progress, paced.
const COUNTERS: &[&str] = &["controlPlane", "workers"];

/// Writes what changed: the endpoint into spec, then status. Nothing when nothing changed.
/// With `pace`, a status change that is only progress waits for the Cluster's pace
/// (`CoreCtx::hold_status`); a change of state, such as `initialization`, is written at once.
///
/// The status is written only over the version it was computed from, since the topology
/// controller sets its condition on the same list: a write refused because the Cluster changed
/// meanwhile reads it again, keeps the foreign conditions from it and writes once more.
pub(crate) async fn write_back(
    scope: &mut Scope,
    ctx: &CoreCtx,
    pace: bool,
) -> Result<(), ReconcileError> {
    let mut trail = Trail::new(&*scope.cluster);
    let result = write(scope, ctx, pace, &mut trail).await;
    ctx.written.clusters.keep(&mut trail);
    result
}

async fn write(
    scope: &mut Scope,
    ctx: &CoreCtx,
    pace: bool,
    trail: &mut Trail<Cluster>,
) -> Result<(), ReconcileError> {
    let api: Api<Cluster> = Api::namespaced(ctx.client.clone(), &scope.ns());
    let name = scope.cluster.name_any();
    if let Some(ep) = &scope.endpoint
        && scope.cluster.spec.control_plane_endpoint.as_ref() != Some(ep)
    {
        let patch = serde_json::json!({"spec": {"controlPlaneEndpoint": ep}});
        let written = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let status = &mut scope.status;
        conditions::observe_own_write(
            &mut status.conditions,
            &mut status.observed_generation,
            scope.cluster.metadata.generation,
            written.metadata.generation,
        );
        trail.wrote(written);
    }
    let mut before = scope.cluster.status.clone();
    if let Some(wait) = ctx.hold_status(
        pace,
        &*scope.cluster,
        before.as_ref(),
        &scope.status,
        COUNTERS,
    ) {
        scope.requeue_after(wait);
        return Ok(());
    }
    for _ in 0..CONFLICT_RETRIES {
        match write_status_at(&api, &name, trail.version(), before.as_ref(), &scope.status).await {
            Ok(written) => {
                if let Some(written) = written {
                    trail.wrote(written);
                }
                return Ok(());
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                tokio::time::sleep(CONFLICT_PAUSE).await;
                let latest = api.get(&name).await?;
                let foreign = latest
                    .status
                    .as_ref()
                    .map_or(&[][..], |s| &s.conditions[..]);
                conditions::keep_foreign(&mut scope.status.conditions, foreign, FOREIGN);
                trail.reread(&latest);
                before = latest.status;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(ReconcileError::waiting(
        "ClusterChanged",
        format!("Cluster {name} kept changing while it was reconciled; reading it again"),
        CONFLICT_PAUSE,
    ))
}

async fn apply(cluster: Arc<Cluster>, ctx: &CoreCtx) -> Result<Action, ReconcileError> {
    let cluster = ctx.written.clusters.newest(cluster);
    let mut scope = Scope {
        status: cluster.status.clone().unwrap_or_default(),
        cluster,
        endpoint: None,
        requeue: None,
    };
    let generation = scope.generation();
    let paused = is_paused(&scope.cluster);
    set_paused(
        &mut scope.status.conditions,
        paused,
        "the Cluster is paused",
        generation,
    );
    if paused {
        write_back(&mut scope, ctx, false).await?;
        return Ok(Action::await_change());
    }
    let mut steps = Phases::default();
    steps.run(phases::reconcile_infrastructure(&mut scope, ctx).await);
    steps.run(phases::reconcile_control_plane(&mut scope, ctx).await);
    status::update(&mut scope, ctx, steps.ok());
    write_back(&mut scope, ctx, steps.ok()).await?;
    steps.finish()?;
    Ok(Action::requeue(scope.requeue.unwrap_or(SYNC)))
}

/// The Cluster controller, as the manager starts it.
pub const CONTROLLER: Registration = Registration {
    owns: Some("Cluster"),
    setup: watches::setup,
};

/// Runs the Cluster controller until the process ends. `triggers` carries reconcile requests
/// from Machines and from the dynamic watches on provider kinds.
async fn run(
    ctx: Arc<CoreCtx>,
    own: impl futures::Stream<Item = Arc<Cluster>> + Send + 'static,
    triggers: impl futures::Stream<Item = ObjectRef<Cluster>> + Send + 'static,
    concurrency: u16,
) {
    let store = ctx.clusters.clone();
    let controller = super::context::CoreController {
        name: "cluster",
        finalizer: CLUSTER_FINALIZER,
        // A Cluster summarizes every Machine, set and deployment: the debounce folds a burst
        // of their changes (a pool provisioning) into one reconcile and one status write.
        debounce: Duration::from_millis(250),
        apply: |o, ctx| Box::pin(apply(o, ctx)),
        cleanup: |o, ctx| Box::pin(delete::reconcile_delete(o, ctx)),
    };
    super::context::run(ctx, store, own, triggers, concurrency, controller).await
}

/// The reference an Event about `c` is attached to.
pub(crate) fn object_ref(c: &Cluster) -> k8s_openapi::api::core::v1::ObjectReference {
    capw_reconcile::events::reference(c, &())
}
