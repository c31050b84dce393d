//! The Machine controller (`capi-contract.md` §4): finalizer, pause, owner and labels, the
//! bootstrap and infrastructure phases read through the contract, the node reference from the
//! workload cluster, phase and conditions, and the ordered deletion. Phases live in
//! `phases.rs`, the Node in `node.rs`, deletion in `delete.rs`, status in `status.rs`.

mod delete;
mod node;
mod phases;
mod status;

use super::context::CoreCtx;
use super::error::ReconcileError;
use crate::api::cluster::Cluster;
use crate::api::common::names::{MACHINE_FINALIZER, PAUSED_ANNOTATION};
use crate::api::machine::{Machine, MachineStatus};
use crate::contract::conditions::set_paused;
use crate::controllers::skeleton::{Phases, write_status_at};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

const SYNC: Duration = Duration::from_secs(600);
pub(crate) const EXTERNAL_READY_WAIT: Duration = Duration::from_secs(30);

/// What the phases of one reconcile work on; written back once at the end.
pub(crate) struct Scope {
    pub machine: Arc<Machine>,
    pub cluster: Option<Arc<Cluster>>,
    pub status: MachineStatus,
    /// Fields of `spec` core sets (providerID, bootstrap.dataSecretName, failureDomain).
    pub spec_patch: Map<String, Value>,
    pub requeue: Option<Duration>,
    /// The resourceVersion the status is written over: the read one, or the one this
    /// reconcile's own Machine writes returned.
    pub version: Option<String>,
}

impl Scope {
    pub fn requeue_after(&mut self, d: Duration) {
        self.requeue = Some(self.requeue.map_or(d, |r| r.min(d)));
    }

    pub fn ns(&self) -> String {
        self.machine.namespace().unwrap_or_default()
    }

    pub fn generation(&self) -> Option<i64> {
        self.machine.metadata.generation
    }
}

pub(crate) async fn write_back(scope: &Scope, ctx: &CoreCtx) -> Result<(), ReconcileError> {
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &scope.ns());
    let name = scope.machine.name_any();
    let mut version = scope.version.clone();
    if !scope.spec_patch.is_empty() {
        let patch = serde_json::json!({"spec": scope.spec_patch});
        version = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?
            .resource_version();
    }
    // Other controllers set conditions here too (`machine_conditions`): the status is written
    // only over the version it was computed from.
    match write_status_at(
        &api,
        &name,
        version,
        scope.machine.status.as_ref(),
        &scope.status,
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Err(ReconcileError::waiting(
            "MachineChanged",
            format!("Machine {name} changed while it was reconciled; reading it again"),
            Duration::from_millis(200),
        )),
        Err(e) => Err(e.into()),
    }
}

fn paused(m: &Machine, cluster: Option<&Cluster>) -> bool {
    m.annotations().contains_key(PAUSED_ANNOTATION)
        || cluster.is_some_and(super::cluster::is_paused)
}

async fn apply(machine: Arc<Machine>, ctx: &CoreCtx) -> Result<Action, ReconcileError> {
    let ns = machine.namespace().unwrap_or_default();
    let cluster = ctx
        .clusters
        .get(&ObjectRef::new(&machine.spec.cluster_name).within(&ns));
    let mut scope = Scope {
        status: machine.status.clone().unwrap_or_default(),
        machine,
        cluster,
        spec_patch: Map::new(),
        requeue: None,
        version: None,
    };
    scope.version = scope.machine.resource_version();
    let generation = scope.generation();
    let is_paused = paused(&scope.machine, scope.cluster.as_deref());
    set_paused(
        &mut scope.status.conditions,
        is_paused,
        "the Machine or its Cluster is paused",
        generation,
    );
    if is_paused {
        write_back(&scope, ctx).await?;
        return Ok(Action::await_change());
    }
    if scope.cluster.is_none() {
        return Err(ReconcileError::waiting(
            "ClusterNotFound",
            format!(
                "Machine {}: spec.clusterName {} names no Cluster in namespace {ns}",
                scope.machine.name_any(),
                scope.machine.spec.cluster_name
            ),
            Duration::from_secs(10),
        ));
    }
    let mut steps = Phases::default();
    steps.run(phases::reconcile_owner_and_labels(&mut scope, ctx).await);
    steps.run(phases::reconcile_bootstrap(&mut scope, ctx).await);
    steps.run(phases::reconcile_infrastructure(&mut scope, ctx).await);
    steps.run(node::reconcile_node(&mut scope, ctx).await);
    status::update(&mut scope, steps.ok());
    write_back(&scope, ctx).await?;
    steps.finish()?;
    Ok(Action::requeue(scope.requeue.unwrap_or(SYNC)))
}

/// Runs the Machine controller until the process ends.
pub async fn run(
    ctx: Arc<CoreCtx>,
    own: impl futures::Stream<Item = Arc<Machine>> + Send + 'static,
    triggers: impl futures::Stream<Item = ObjectRef<Machine>> + Send + 'static,
    concurrency: u16,
) {
    let store = ctx.machines.clone();
    let controller = super::context::CoreController {
        name: "machine",
        finalizer: MACHINE_FINALIZER,
        // Provider objects change in bursts (status, then spec, then labels): a short debounce
        // folds them into one reconcile and one status write. Every hop of a machine's
        // provisioning waits for it once, so it stays short (150 ms cost the quickstart 0.4 s).
        debounce: Duration::from_millis(50),
        apply: |o, ctx| Box::pin(apply(o, ctx)),
        cleanup: |o, ctx| Box::pin(delete::reconcile_delete(o, ctx)),
    };
    super::context::run(ctx, store, own, triggers, concurrency, controller).await
}

pub(crate) fn object_ref(m: &Machine) -> k8s_openapi::api::core::v1::ObjectReference {
    m.object_ref(&())
}
