//! `reconcileUnhealthyMachines` (`capi-lifecycle.md` §2.6): a MachineSet remediates the
//! Machines a MachineHealthCheck marked (`HealthCheckSucceeded=False`, `OwnerRemediated=False`)
//! by deleting them; scaling then replaces them. Only the deployment's current revision
//! remediates, newest first, at most `remediation.maxInFlight` at once, and only when the
//! preflight checks pass. The condition is written before the delete, so a reconcile that
//! stops in between starts again where it was.

use super::machines::run_preflight;
use super::{RECHECK, Scope};
use crate::context::CoreCtx;
use crate::error::ReconcileError;
use crate::machine_conditions;
use capw_api::common::names::REMEDIATE_MACHINE_ANNOTATION;
use capw_api::contract::conditions::{reasons, types};
use capw_api::machine::Machine;
use kube::api::{Api, DeleteParams};
use kube::{Resource, ResourceExt};
use std::sync::Arc;

fn condition<'a>(m: &'a Machine, type_: &str) -> Option<&'a capw_api::common::Condition> {
    m.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
}

fn is(m: &Machine, type_: &str, status: &str) -> bool {
    condition(m, type_).is_some_and(|c| c.status == status)
}

/// Remediation order: the `remediate-machine` annotation first, then the newest (it probably
/// runs the least), then by name.
pub fn sort_for_remediation(machines: &mut [Arc<Machine>]) {
    machines.sort_by(|a, b| {
        let marked = |m: &Machine| m.annotations().contains_key(REMEDIATE_MACHINE_ANNOTATION);
        let created = |m: &Machine| {
            m.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second())
                .unwrap_or(0)
        };
        marked(b)
            .cmp(&marked(a))
            .then(created(b).cmp(&created(a)))
            .then(a.name_any().cmp(&b.name_any()))
    });
}

pub(super) async fn reconcile(scope: &mut Scope, ctx: &CoreCtx) -> Result<(), ReconcileError> {
    // A Machine healthy again is no longer waiting for its owner.
    for m in &scope.machines {
        if m.metadata.deletion_timestamp.is_none()
            && is(m, types::HEALTH_CHECK_SUCCEEDED, "True")
            && condition(m, types::OWNER_REMEDIATED).is_some()
        {
            machine_conditions::remove(ctx, m, types::OWNER_REMEDIATED).await?;
        }
    }
    let mut candidates: Vec<Arc<Machine>> = scope
        .machines
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter(|m| {
            is(m, types::HEALTH_CHECK_SUCCEEDED, "False") && is(m, types::OWNER_REMEDIATED, "False")
        })
        .cloned()
        .collect();
    if candidates.is_empty() {
        return Ok(());
    }
    if !scope.is_current_revision() {
        for m in &candidates {
            machine_conditions::set(
                ctx,
                m,
                types::OWNER_REMEDIATED,
                "False",
                reasons::CANNOT_BE_REMEDIATED,
                "Machine won't be remediated because it is pending removal due to rollout",
            )
            .await?;
        }
        return Ok(());
    }
    let in_flight = scope
        .machines
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_some())
        .filter(|m| {
            condition(m, types::OWNER_REMEDIATED)
                .is_some_and(|c| c.reason == reasons::MACHINE_DELETING)
        })
        .count() as i32;
    let max_in_flight = scope.md.as_ref().and_then(|md| {
        let limit = md.spec.remediation.as_ref()?.max_in_flight.as_ref()?;
        limit.scaled(md.spec.replicas.unwrap_or(1), true).ok()
    });
    let tokens = max_in_flight.map_or(candidates.len() as i32, |max| (max - in_flight).max(0));
    sort_for_remediation(&mut candidates);
    let (picked, deferred) = candidates.split_at((tokens as usize).min(candidates.len()));
    for m in deferred {
        machine_conditions::set(
            ctx,
            m,
            types::OWNER_REMEDIATED,
            "False",
            reasons::REMEDIATION_DEFERRED,
            &format!(
                "Waiting because there are already too many remediations in progress (spec.remediation.maxInFlight is {})",
                max_in_flight.unwrap_or_default()
            ),
        )
        .await?;
    }
    if picked.is_empty() {
        return Ok(());
    }
    let failed = run_preflight(scope, ctx).await?;
    if !failed.is_empty() {
        let message = failed
            .iter()
            .map(|f| format!("* {f}"))
            .collect::<Vec<_>>()
            .join("\n");
        for m in picked {
            machine_conditions::set(
                ctx,
                m,
                types::OWNER_REMEDIATED,
                "False",
                reasons::REMEDIATION_DEFERRED,
                &message,
            )
            .await?;
        }
        scope.requeue_after(RECHECK);
        return Ok(());
    }
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &scope.ns());
    for m in picked {
        machine_conditions::set(
            ctx,
            m,
            types::OWNER_REMEDIATED,
            "False",
            reasons::MACHINE_DELETING,
            "Machine is deleting",
        )
        .await?;
        match api.delete(&m.name_any(), &DeleteParams::background()).await {
            Ok(_) => {
                ctx.event_about(
                    &scope.object_ref(),
                    m.object_ref(&()),
                    false,
                    "MachineRemediated",
                    format!("Deleted unhealthy Machine {} to replace it", m.name_any()),
                )
                .await
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn remediation_goes_annotated_then_newest_first() {
        let m = |name: &str, created: &str, marked: bool| -> Arc<Machine> {
            let mut v = json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": name, "creationTimestamp": created},
                "spec": {"clusterName": "c", "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": name}},
            });
            if marked {
                v["metadata"]["annotations"] = json!({REMEDIATE_MACHINE_ANNOTATION: ""});
            }
            Arc::new(serde_json::from_value(v).unwrap())
        };
        let mut list = vec![
            m("old", "2026-01-01T00:00:00Z", false),
            m("new", "2026-01-03T00:00:00Z", false),
            m("marked", "2026-01-01T00:00:00Z", true),
            m("new-b", "2026-01-03T00:00:00Z", false),
        ];
        sort_for_remediation(&mut list);
        let names: Vec<String> = list.iter().map(|m| m.name_any()).collect();
        assert_eq!(names, ["marked", "new", "new-b", "old"]);
    }
}
