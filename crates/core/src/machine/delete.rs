//! `reconcileDelete`: the infrastructure machine first, then the bootstrap config, then the
//! Node in the workload cluster (only after the infrastructure is gone), then the finalizer.
//! Drain, volume detach and delete hooks are not implemented: no workloads run on capw's
//! simulated or Docker nodes yet.

use super::{Scope, write_back};
use crate::context::CoreCtx;
use crate::error::ReconcileError;
use crate::referenced;
use capw_api::contract::conditions;
use capw_api::contract::conditions::{reasons, types};
use capw_api::machine::Machine;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(5);

async fn step(
    scope: &mut Scope,
    ctx: &CoreCtx,
    reason: &'static str,
    message: String,
) -> Result<Action, ReconcileError> {
    let generation = scope.generation();
    conditions::set(
        &mut scope.status.conditions,
        types::DELETING,
        "True",
        reason,
        &message,
        generation,
    );
    super::status::update(scope, true);
    write_back(scope, ctx, false).await?;
    Err(ReconcileError::waiting(reason, message, WAIT))
}

pub(super) async fn reconcile_delete(
    machine: Arc<Machine>,
    ctx: &CoreCtx,
) -> Result<Action, ReconcileError> {
    let machine = ctx.written.machines.newest(machine);
    let ns = machine.namespace().unwrap_or_default();
    let cluster = ctx
        .clusters
        .get(&ObjectRef::new(&machine.spec.cluster_name).within(&ns));
    let mut scope = Scope::new(machine.clone(), cluster.clone());
    if referenced::delete(
        &ctx.resolver,
        &ctx.machine_tracker,
        &ns,
        Some(&machine.spec.infrastructure_ref),
    )
    .await?
    {
        return step(
            &mut scope,
            ctx,
            reasons::WAITING_FOR_INFRASTRUCTURE_DELETION,
            format!(
                "{} {} is being deleted",
                machine.spec.infrastructure_ref.kind, machine.spec.infrastructure_ref.name
            ),
        )
        .await;
    }
    if referenced::delete(
        &ctx.resolver,
        &ctx.machine_tracker,
        &ns,
        machine.spec.bootstrap.config_ref.as_ref(),
    )
    .await?
    {
        return step(
            &mut scope,
            ctx,
            reasons::WAITING_FOR_BOOTSTRAP_DELETION,
            "the bootstrap config is being deleted".into(),
        )
        .await;
    }
    // The Node goes after the infrastructure (upstream #2565), and not when the whole
    // Cluster is going: its API server may already be gone.
    let cluster_deleting = cluster
        .as_ref()
        .is_none_or(|c| c.metadata.deletion_timestamp.is_some());
    if let Some(node) = machine.status.as_ref().and_then(|s| s.node_ref.as_ref())
        && !cluster_deleting
        && let Ok(client) = ctx
            .remotes
            .client(&ctx.secrets, &ctx.clusters, &ns, &machine.spec.cluster_name)
            .await
    {
        let nodes: Api<Node> = Api::all(client);
        let deleted = tokio::time::timeout(
            Duration::from_secs(10),
            nodes.delete(&node.name, &DeleteParams::default()),
        )
        .await;
        if let Ok(Err(e)) = deleted
            && !matches!(&e, kube::Error::Api(s) if s.code == 404)
        {
            tracing::debug!(node = %node.name, error = %e, "deleting the Node failed");
        }
    }
    // The finalizer comes off next: nothing written is needed any more.
    ctx.written.machines.forget(&machine);
    Ok(Action::await_change())
}
