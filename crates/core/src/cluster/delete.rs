//! `reconcileDelete`: workers first (MachineDeployments, stand-alone MachineSets and
//! Machines), then the control plane, then the infrastructure cluster,
//! then the finalizer. Each step waits for the previous one to be gone.

use super::{Scope, write_back};
use crate::context::CoreCtx;
use crate::error::ReconcileError;
use crate::referenced;
use capw_api::cluster::Cluster;
use capw_api::common::names::CONTROL_PLANE_LABEL;
use capw_api::contract::conditions;
use capw_api::contract::conditions::{reasons, types};
use capw_api::machine::Machine;
use capw_api::machinedeployment::MachineDeployment;
use capw_api::machineset::MachineSet;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kube::runtime::controller::Action;
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
    scope.status.phase = Some(capw_api::contract::phases::DELETING.into());
    write_back(scope, ctx, false).await?;
    Err(ReconcileError::waiting(reason, message, WAIT))
}

fn ignore_gone<T>(r: Result<T, kube::Error>) -> Result<(), ReconcileError> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub(super) async fn reconcile_delete(
    cluster: Arc<Cluster>,
    ctx: &CoreCtx,
) -> Result<Action, ReconcileError> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let mut scope = Scope {
        status: cluster.status.clone().unwrap_or_default(),
        cluster: cluster.clone(),
        endpoint: None,
        requeue: None,
    };
    // Workers are read live here: the cache may lag behind deletions this step waits for.
    let machines: Api<Machine> = Api::namespaced(ctx.client.clone(), &ns);
    let lp = kube::api::ListParams::default().labels(&format!(
        "{}={name}",
        capw_api::common::names::CLUSTER_NAME_LABEL
    ));
    // Upstream's order: MachineDeployments, then stand-alone MachineSets, in one pass; the
    // sets of a deployment and the Machines of a set go through their owners.
    let deployments: Api<MachineDeployment> = Api::namespaced(ctx.client.clone(), &ns);
    let sets: Api<MachineSet> = Api::namespaced(ctx.client.clone(), &ns);
    let mds: Vec<MachineDeployment> = deployments
        .list(&kube::api::ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|d| d.spec.cluster_name == name)
        .collect();
    let mss: Vec<MachineSet> = sets
        .list(&kube::api::ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|s| s.spec.cluster_name == name)
        .collect();
    for d in mds
        .iter()
        .filter(|d| d.metadata.deletion_timestamp.is_none())
    {
        ignore_gone(
            deployments
                .delete(&d.name_any(), &DeleteParams::background())
                .await,
        )?;
    }
    for s in mss
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
    {
        let controlled = s
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true));
        if !controlled {
            ignore_gone(
                sets.delete(&s.name_any(), &DeleteParams::background())
                    .await,
            )?;
        }
    }
    let all = machines.list(&lp).await?.items;
    let has_cp_provider = cluster
        .spec
        .control_plane_ref
        .as_ref()
        .is_some_and(|r| r.is_set());
    let direct: Vec<&Machine> = all
        .iter()
        .filter(|m| !has_cp_provider || !m.labels().contains_key(CONTROL_PLANE_LABEL))
        .collect();
    if !direct.is_empty() || !mds.is_empty() || !mss.is_empty() {
        for m in &direct {
            let owned_by_cluster = m
                .owner_references()
                .iter()
                .any(|o| o.kind == "Cluster" && o.name == name)
                || m.owner_references().is_empty();
            if m.metadata.deletion_timestamp.is_none() && owned_by_cluster {
                match machines
                    .delete(&m.name_any(), &DeleteParams::background())
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let mut waiting = vec![];
        let list = |kind: &str, names: Vec<String>| {
            (!names.is_empty()).then(|| format!("{kind} {}", names.join(", ")))
        };
        waiting.extend(list(
            "MachineDeployments",
            mds.iter().map(|d| d.name_any()).collect(),
        ));
        waiting.extend(list(
            "MachineSets",
            mss.iter().map(|s| s.name_any()).collect(),
        ));
        waiting.extend(list(
            "Machines",
            direct.iter().map(|m| m.name_any()).collect(),
        ));
        return step(
            &mut scope,
            ctx,
            reasons::WAITING_FOR_WORKERS_DELETION,
            format!("{} are being deleted", waiting.join("; ")),
        )
        .await;
    }
    if referenced::delete(
        &ctx.resolver,
        &ctx.cluster_tracker,
        &ns,
        cluster.spec.control_plane_ref.as_ref(),
    )
    .await?
    {
        return step(
            &mut scope,
            ctx,
            reasons::WAITING_FOR_CONTROL_PLANE_DELETION,
            "the control plane is being deleted".into(),
        )
        .await;
    }
    if referenced::delete(
        &ctx.resolver,
        &ctx.cluster_tracker,
        &ns,
        cluster.spec.infrastructure_ref.as_ref(),
    )
    .await?
    {
        return step(
            &mut scope,
            ctx,
            reasons::WAITING_FOR_INFRASTRUCTURE_DELETION,
            "the infrastructure cluster is being deleted".into(),
        )
        .await;
    }
    ctx.remotes.forget(&ns, &name);
    ctx.event(
        &super::object_ref(&cluster),
        false,
        "Deleted",
        format!("Cluster {name} has been deleted"),
    )
    .await;
    Ok(Action::await_change())
}
