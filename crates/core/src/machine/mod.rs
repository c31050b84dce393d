//! The Machine controller (`capi-contract.md` §4): finalizer, pause, owner and labels, the
//! bootstrap and infrastructure phases read through the contract, the node reference from the
//! workload cluster, phase and conditions, and the ordered deletion. Phases live in
//! `phases.rs`, the Node in `node.rs`, deletion in `delete.rs`, status in `status.rs`, and a
//! Machine its creator left without its objects in `abandoned.rs`.

mod abandoned;
mod delete;
mod node;
mod phases;
mod status;
mod watches;

use super::context::{CoreCtx, Registration};
use super::error::ReconcileError;
use super::machine_conditions::OTHERS;
use super::written::Trail;
use capw_api::cluster::Cluster;
use capw_api::common::names::{MACHINE_FINALIZER, PAUSED_ANNOTATION};
use capw_api::contract::conditions::{self, set_paused};
use capw_api::machine::{Machine, MachineStatus};
use capw_reconcile::skeleton::{Phases, write_status_at};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
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
    /// This reconcile's writes of the Machine: the status is written over the version the
    /// last one made.
    pub trail: Trail<Machine>,
}

impl Scope {
    pub fn new(machine: Arc<Machine>, cluster: Option<Arc<Cluster>>) -> Self {
        Scope {
            status: machine.status.clone().unwrap_or_default(),
            trail: Trail::new(&*machine),
            machine,
            cluster,
            spec_patch: Map::new(),
            requeue: None,
        }
    }

    pub fn requeue_after(&mut self, d: Duration) {
        self.requeue = Some(self.requeue.map_or(d, |r| r.min(d)));
    }

    pub fn ns(&self) -> String {
        self.machine.namespace().unwrap_or_default()
    }

    pub fn generation(&self) -> Option<i64> {
        self.machine.metadata.generation
    }

    /// Notes a write of the Machine: its answer is the version the status is written over.
    pub fn wrote(&mut self, written: Machine) {
        self.trail.wrote(written);
    }
}

/// Status writes after a conflict before the reconcile is left to the next one.
const CONFLICT_RETRIES: usize = 3;
const CONFLICT_PAUSE: Duration = Duration::from_millis(20);

/// Takes the other controllers' conditions (`machine_conditions::OTHERS`) from `latest` into
/// `status`: a status written after a conflict keeps the latest of these, whatever this
/// reconcile read.
fn keep_foreign_conditions(status: &mut MachineStatus, latest: Option<&MachineStatus>) {
    let latest = latest.map_or(&[][..], |s| &s.conditions[..]);
    conditions::keep_foreign(&mut status.conditions, latest, &OTHERS);
}

/// Writes what changed: the spec fields core sets, then status. With `pace`, a status change
/// that is only progress (a waiting condition's reason or message) waits for the Machine's pace
/// (`CoreCtx::hold_status`), unless the spec changed too.
pub(crate) async fn write_back(
    scope: &mut Scope,
    ctx: &CoreCtx,
    pace: bool,
) -> Result<(), ReconcileError> {
    let result = write(scope, ctx, pace).await;
    ctx.written.machines.keep(&mut scope.trail);
    result
}

async fn write(scope: &mut Scope, ctx: &CoreCtx, pace: bool) -> Result<(), ReconcileError> {
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &scope.ns());
    let name = scope.machine.name_any();
    let before = scope.machine.status.as_ref();
    let pace = pace && scope.spec_patch.is_empty();
    if let Some(wait) = ctx.hold_status(pace, &*scope.machine, before, &scope.status, &[]) {
        scope.requeue_after(wait);
        return Ok(());
    }
    if !scope.spec_patch.is_empty() {
        let patch = serde_json::json!({"spec": scope.spec_patch});
        let written = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let status = &mut scope.status;
        conditions::observe_own_write(
            &mut status.conditions,
            &mut status.observed_generation,
            scope.machine.metadata.generation,
            written.metadata.generation,
        );
        scope.wrote(written);
    }
    // Other controllers set conditions here too: the status is written only over the version
    // it was computed from. A reconcile refused because the Machine changed meanwhile reads
    // it once, keeps the other controllers' conditions from it, recomputes the summaries and
    // writes again: a read instead of a whole reconcile after a delay.
    let mut before = scope.machine.status.clone();
    for _ in 0..CONFLICT_RETRIES {
        let version = scope.trail.version();
        match write_status_at(&api, &name, version, before.as_ref(), &scope.status).await {
            Ok(Some(written)) => {
                scope.wrote(written);
                return Ok(());
            }
            Ok(None) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                // The write that won may not be visible yet (the API server shows a write
                // once it is durable): give it a moment before reading.
                tokio::time::sleep(CONFLICT_PAUSE).await;
                let latest = api.get(&name).await?;
                keep_foreign_conditions(&mut scope.status, latest.status.as_ref());
                scope.trail.reread(&latest);
                before = latest.status.clone();
                scope.machine = Arc::new(latest);
                // The summaries read the foreign conditions; the observed generation stays
                // what this reconcile observed.
                status::update(scope, false);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(ReconcileError::waiting(
        "MachineChanged",
        format!("Machine {name} kept changing while it was reconciled; reading it again"),
        Duration::from_millis(200),
    ))
}

fn paused(m: &Machine, cluster: Option<&Cluster>) -> bool {
    m.annotations().contains_key(PAUSED_ANNOTATION)
        || cluster.is_some_and(super::cluster::is_paused)
}

async fn apply(machine: Arc<Machine>, ctx: &CoreCtx) -> Result<Action, ReconcileError> {
    let machine = ctx.written.machines.newest(machine);
    let ns = machine.namespace().unwrap_or_default();
    let cluster = ctx
        .clusters
        .get(&ObjectRef::new(&machine.spec.cluster_name).within(&ns));
    let mut scope = Scope::new(machine, cluster);
    let generation = scope.generation();
    let is_paused = paused(&scope.machine, scope.cluster.as_deref());
    set_paused(
        &mut scope.status.conditions,
        is_paused,
        "the Machine or its Cluster is paused",
        generation,
    );
    if is_paused {
        write_back(&mut scope, ctx, false).await?;
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
    if abandoned::reconcile(&scope, ctx).await? {
        // Deleting: the deletion is the next reconcile's, through the finalizer.
        return Ok(Action::await_change());
    }
    steps.run(node::reconcile_node(&mut scope, ctx).await);
    status::update(&mut scope, steps.ok());
    write_back(&mut scope, ctx, steps.ok()).await?;
    steps.finish()?;
    Ok(Action::requeue(scope.requeue.unwrap_or(SYNC)))
}

/// The Machine controller, as the manager starts it.
pub const CONTROLLER: Registration = Registration {
    owns: Some("Machine"),
    setup: watches::setup,
};

/// Runs the Machine controller until the process ends.
async fn run(
    ctx: Arc<CoreCtx>,
    own: impl futures::Stream<Item = Arc<Machine>> + Send + 'static,
    triggers: impl futures::Stream<Item = ObjectRef<Machine>> + Send + 'static,
    concurrency: u16,
) {
    let store = ctx.machines.clone();
    let controller = super::context::CoreController {
        name: "machine",
        finalizer: MACHINE_FINALIZER,
        // Provider objects change in bursts (status, then spec, then labels): the debounce
        // folds them into one reconcile and one status write. Every hop of a machine's
        // provisioning waits for it once (150 ms against 50 ms cost the quickstart about
        // 0.4 s), and at a thousand clusters it saves about a tenth of the host's CPU.
        debounce: Duration::from_millis(150),
        apply: |o, ctx| Box::pin(apply(o, ctx)),
        cleanup: |o, ctx| Box::pin(delete::reconcile_delete(o, ctx)),
    };
    super::context::run(ctx, store, own, triggers, concurrency, controller).await
}

pub(crate) fn object_ref(m: &Machine) -> k8s_openapi::api::core::v1::ObjectReference {
    capw_reconcile::events::reference(m, &())
}

#[cfg(test)]
mod tests {
    use super::*;
    use capw_api::contract::conditions::{Condition, types};

    fn cond(type_: &str, status: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            ..Default::default()
        }
    }

    /// After a conflict the Machine controller's own conditions stay as it computed them and
    /// the other controllers' come from the latest read, including one removed meanwhile.
    #[test]
    fn keeps_the_latest_foreign_conditions() {
        let mut ours = MachineStatus {
            conditions: vec![
                cond(types::READY, "True"),
                cond(types::UP_TO_DATE, "True"),
                cond(types::OWNER_REMEDIATED, "False"),
            ],
            ..Default::default()
        };
        let latest = MachineStatus {
            conditions: vec![
                cond(types::READY, "False"),
                cond(types::UP_TO_DATE, "False"),
                cond(types::HEALTH_CHECK_SUCCEEDED, "False"),
            ],
            ..Default::default()
        };
        keep_foreign_conditions(&mut ours, Some(&latest));
        let got: Vec<(&str, &str)> = ours
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (types::READY, "True"),
                (types::UP_TO_DATE, "False"),
                (types::HEALTH_CHECK_SUCCEEDED, "False"),
            ]
        );
    }
}
