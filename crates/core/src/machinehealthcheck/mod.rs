//! The MachineHealthCheck controller (`capi-lifecycle.md` §4): the targets (Machines the
//! selector picks in the Cluster, less those paused or opted out), each one's verdict from
//! its Node in the workload cluster (read through the same workload clients the Machine
//! controller uses), the short-circuit, and the marks: `HealthCheckSucceeded` on every target,
//! `OwnerRemediated=False` on the unhealthy ones when remediation is allowed. The owner (a
//! MachineSet, or the control plane) remediates. The verdict rules are in `targets.rs`.

pub mod targets;
mod watches;

use super::context::{CoreCtx, Registration};
use super::error::ReconcileError;
use super::machine_conditions;
use capw_api::common::names::{
    CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, PAUSED_ANNOTATION, SKIP_REMEDIATION_ANNOTATION,
};
use capw_api::contract::conditions::{self, reasons, types};
use capw_api::machine::Machine;
use capw_api::machinehealthcheck::{MachineHealthCheck, MachineHealthCheckStatus};
use capw_reconcile::skeleton::write_status;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use targets::{ClusterState, NodeCondition, NodeState, Verdict};

pub const FINALIZER: &str = "machinehealthcheck.cluster.x-k8s.io";
/// Nodes are read, not watched: a check looks again this often while it has targets.
const POLL: Duration = Duration::from_secs(5);

fn since(c: &conditions::Condition) -> Option<i64> {
    (c.status == "True")
        .then(|| c.last_transition_time.parse::<jiff::Timestamp>().ok())
        .flatten()
        .map(|t| t.as_second())
}

async fn nodes(
    ctx: &CoreCtx,
    ns: &str,
    cluster: &str,
) -> Option<HashMap<String, Vec<NodeCondition>>> {
    let client = ctx
        .remotes
        .client(&ctx.secrets, &ctx.clusters, ns, cluster)
        .await
        .ok()?;
    let list = Api::<Node>::all(client)
        .list(&ListParams::default())
        .await
        .ok()?;
    Some(
        list.items
            .into_iter()
            .map(|n| {
                let conds = n
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| NodeCondition {
                        type_: c.type_,
                        status: c.status,
                        since: c.last_transition_time.map(|t| t.0.as_second()).unwrap_or(0),
                    })
                    .collect();
                (n.metadata.name.unwrap_or_default(), conds)
            })
            .collect(),
    )
}

async fn apply(mhc: Arc<MachineHealthCheck>, ctx: &CoreCtx) -> Result<Action, ReconcileError> {
    let ns = mhc.namespace().unwrap_or_default();
    let name = mhc.name_any();
    let generation = mhc.metadata.generation;
    let cluster_name = mhc.spec.cluster_name.clone();
    let Some(cluster) = ctx.clusters.get(&ObjectRef::new(&cluster_name).within(&ns)) else {
        return Err(ReconcileError::waiting(
            "ClusterNotFound",
            format!(
                "MachineHealthCheck {ns}/{name}: spec.clusterName {cluster_name} names no Cluster"
            ),
            Duration::from_secs(10),
        ));
    };
    let mut status = mhc.status.clone().unwrap_or_default();
    let paused =
        mhc.annotations().contains_key(PAUSED_ANNOTATION) || super::cluster::is_paused(&cluster);
    conditions::set_paused(
        &mut status.conditions,
        paused,
        "the MachineHealthCheck or its Cluster is paused",
        generation,
    );
    let api: Api<MachineHealthCheck> = Api::namespaced(ctx.client.clone(), &ns);
    if paused {
        write_status(&api, &name, mhc.status.as_ref(), &status).await?;
        return Ok(Action::await_change());
    }
    // The cluster label and a plain owner reference to the Cluster, as upstream sets them.
    super::adopt::ensure_cluster_owner(&api, &*mhc, &cluster).await?;
    if mhc.labels().get(CLUSTER_NAME_LABEL) != Some(&cluster_name) {
        let patch = serde_json::json!({"metadata": {"labels": {CLUSTER_NAME_LABEL: cluster_name}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    let mut selector = mhc.spec.selector.clone();
    selector
        .match_labels
        .insert(CLUSTER_NAME_LABEL.into(), cluster_name.clone());
    let mut targets: Vec<Arc<Machine>> = ctx
        .machines_of(&ns, &cluster_name)
        .into_iter()
        .filter(|m| selector.matches(m.labels()))
        .filter(|m| {
            !m.annotations().contains_key(PAUSED_ANNOTATION)
                && !m.annotations().contains_key(SKIP_REMEDIATION_ANNOTATION)
        })
        .collect();
    targets.sort_by_key(|m| m.name_any());
    let cs = cluster.status.clone().unwrap_or_default();
    let state = ClusterState {
        infrastructure_ready: cs
            .conditions
            .iter()
            .find(|c| c.type_ == types::INFRASTRUCTURE_READY)
            .and_then(since),
        control_plane_initialized: cs
            .conditions
            .iter()
            .find(|c| c.type_ == types::CONTROL_PLANE_INITIALIZED)
            .and_then(since),
    };
    // Nodes are read only once the control plane is initialized: before, there is no API.
    let node_list = match state.control_plane_initialized {
        Some(_) => nodes(ctx, &ns, &cluster_name).await,
        None => None,
    };
    let checks = mhc.spec.checks.clone().unwrap_or_default();
    let now = jiff::Timestamp::now().as_second();
    let verdicts: Vec<(Arc<Machine>, Verdict)> = targets
        .iter()
        .map(|m| {
            let node = match (
                m.status.as_ref().and_then(|s| s.node_ref.as_ref()),
                &node_list,
            ) {
                (None, _) => NodeState::NotYet,
                (Some(_), None) => NodeState::Unknown,
                (Some(r), Some(list)) => match list.get(&r.name) {
                    Some(c) => NodeState::Found(c.clone()),
                    None => NodeState::Gone(r.name.clone()),
                },
            };
            let cp = m.labels().contains_key(CONTROL_PLANE_LABEL);
            let v = targets::verdict(m, &node, state, &checks, cp, now);
            (m.clone(), v)
        })
        .collect();
    let expected = verdicts.len() as i32;
    let healthy = verdicts
        .iter()
        .filter(|(_, v)| *v == Verdict::Healthy)
        .count() as i32;
    let trigger = mhc
        .spec
        .remediation
        .as_ref()
        .and_then(|r| r.trigger_if.as_ref());
    let (ok, left, short_message) = targets::allowed(trigger, expected, expected - healthy)
        .map_err(|e| ReconcileError::Invalid(format!("MachineHealthCheck {ns}/{name}: {e}")))?;
    let owner = |m: &Machine| {
        m.owner_references().iter().any(|o| {
            o.controller == Some(true)
                && (o.kind == "MachineSet" || o.kind.ends_with("ControlPlane"))
        })
    };
    let mut recheck = POLL;
    for (m, v) in &verdicts {
        match v {
            Verdict::Healthy => {
                machine_conditions::set(
                    ctx,
                    m,
                    types::HEALTH_CHECK_SUCCEEDED,
                    "True",
                    reasons::HEALTH_CHECK_SUCCEEDED,
                    "",
                )
                .await?
            }
            Verdict::Unhealthy { reason, message } => {
                let has = |type_: &str| {
                    m.status
                        .as_ref()
                        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
                };
                let first = has(types::HEALTH_CHECK_SUCCEEDED).is_none_or(|c| c.status != "False");
                let mut marks = vec![(
                    types::HEALTH_CHECK_SUCCEEDED,
                    "False",
                    *reason,
                    message.as_str(),
                )];
                // The owner remediates: ask it when allowed, unless it is at it already
                // (its reasons are never overwritten).
                if ok
                    && m.metadata.deletion_timestamp.is_none()
                    && owner(m)
                    && has(types::OWNER_REMEDIATED).is_none_or(|c| c.status == "True")
                {
                    marks.push((
                        types::OWNER_REMEDIATED,
                        "False",
                        reasons::WAITING_FOR_REMEDIATION,
                        "Waiting for remediation",
                    ));
                }
                // One write for both, so the second is never refused for the first.
                machine_conditions::set_all(ctx, m, &marks).await?;
                if first {
                    let note = format!(
                        "Machine {} has been marked as unhealthy by {name}: {message}",
                        m.name_any()
                    );
                    ctx.event_about(
                        &capw_reconcile::events::reference(&*mhc, &()),
                        m.object_ref(&()),
                        false,
                        "MachineMarkedUnhealthy",
                        note,
                    )
                    .await;
                }
            }
            Verdict::Pending(after) => {
                recheck = recheck.min(Duration::from_secs((*after).max(1) as u64))
            }
            Verdict::NotEvaluated => {}
        }
    }
    if ok {
        conditions::set(
            &mut status.conditions,
            types::REMEDIATION_ALLOWED,
            "True",
            reasons::REMEDIATION_ALLOWED,
            "",
            generation,
        );
    } else {
        conditions::set(
            &mut status.conditions,
            types::REMEDIATION_ALLOWED,
            "False",
            reasons::TOO_MANY_UNHEALTHY,
            &short_message,
            generation,
        );
        if mhc.status.as_ref().is_none_or(|s| {
            !s.conditions
                .iter()
                .any(|c| c.type_ == types::REMEDIATION_ALLOWED && c.status == "False")
        }) {
            ctx.event(
                &capw_reconcile::events::reference(&*mhc, &()),
                true,
                "RemediationRestricted",
                short_message.clone(),
            )
            .await;
        }
    }
    let new = MachineHealthCheckStatus {
        conditions: status.conditions,
        expected_machines: Some(expected),
        current_healthy: Some(healthy),
        remediations_allowed: Some(left),
        targets: verdicts.iter().map(|(m, _)| m.name_any()).collect(),
        observed_generation: generation,
    };
    write_status(&api, &name, mhc.status.as_ref(), &new).await?;
    if verdicts.is_empty() {
        return Ok(Action::requeue(Duration::from_secs(60)));
    }
    Ok(Action::requeue(recheck))
}

async fn cleanup(_: Arc<MachineHealthCheck>, _: &CoreCtx) -> Result<Action, ReconcileError> {
    Ok(Action::await_change())
}

/// The MachineHealthCheck controller, as the manager starts it.
pub const CONTROLLER: Registration = Registration {
    owns: Some("MachineHealthCheck"),
    setup: watches::setup,
};

/// Runs the MachineHealthCheck controller until the process ends.
async fn run(
    ctx: Arc<CoreCtx>,
    own: impl futures::Stream<Item = Arc<MachineHealthCheck>> + Send + 'static,
    triggers: impl futures::Stream<Item = ObjectRef<MachineHealthCheck>> + Send + 'static,
    concurrency: u16,
) {
    let store = ctx.machine_health_checks.clone();
    let controller = super::context::CoreController {
        name: "machinehealthcheck",
        finalizer: FINALIZER,
        debounce: Duration::from_millis(100),
        apply: |o, ctx| Box::pin(apply(o, ctx)),
        cleanup: |o, ctx| Box::pin(cleanup(o, ctx)),
    };
    super::context::run(ctx, store, own, triggers, concurrency, controller).await
}
