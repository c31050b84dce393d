//! `updateStatus`: phase, worker counters, and the summary conditions of a Cluster.

use super::Scope;
use crate::api::cluster::ReplicaSummary;
use crate::api::common::names::CONTROL_PLANE_LABEL;
use crate::controllers::conditions;
use crate::controllers::core::context::CoreCtx;
use kube::ResourceExt;

fn count(n: usize) -> Option<i32> {
    i32::try_from(n).ok()
}

/// The phase by upstream's rules, each later rule overriding.
pub(super) fn phase(scope: &Scope) -> &'static str {
    let c = &scope.cluster;
    let mut phase = "Pending";
    if c.spec
        .infrastructure_ref
        .as_ref()
        .is_some_and(|r| r.is_set())
        || c.spec
            .control_plane_ref
            .as_ref()
            .is_some_and(|r| r.is_set())
    {
        phase = "Provisioning";
    }
    let endpoint_valid = scope
        .endpoint
        .as_ref()
        .or(c.spec.control_plane_endpoint.as_ref())
        .is_some_and(|e| e.is_valid());
    let provisioned = scope
        .status
        .initialization
        .as_ref()
        .and_then(|i| i.infrastructure_provisioned)
        == Some(true);
    if provisioned && endpoint_valid {
        phase = "Provisioned";
    }
    if c.metadata.deletion_timestamp.is_some() {
        phase = "Deleting";
    }
    phase
}

pub(super) fn update(scope: &mut Scope, ctx: &CoreCtx, ok: bool) {
    let generation = scope.generation();
    let ns = scope.ns();
    let workers: Vec<_> = ctx
        .machines_of(&ns, &scope.cluster.name_any())
        .into_iter()
        .filter(|m| !m.labels().contains_key(CONTROL_PLANE_LABEL))
        .collect();
    let ready = workers
        .iter()
        .filter(|m| {
            m.status
                .as_ref()
                .is_some_and(|s| conditions::is_true(&s.conditions, "Ready"))
        })
        .count();
    let available = workers
        .iter()
        .filter(|m| {
            m.status
                .as_ref()
                .is_some_and(|s| conditions::is_true(&s.conditions, "Available"))
        })
        .count();
    scope.status.workers = Some(ReplicaSummary {
        desired_replicas: count(workers.len()),
        replicas: count(workers.len()),
        up_to_date_replicas: count(workers.len()),
        ready_replicas: count(ready),
        available_replicas: count(available),
    });
    // Stand-alone Machines have no MachineDeployment to report availability: they count as
    // available workers when each of them is.
    let workers_ok = available == workers.len();
    conditions::set(
        &mut scope.status.conditions,
        "WorkersAvailable",
        conditions::status_str(workers_ok),
        if workers.is_empty() {
            "NoWorkers"
        } else if workers_ok {
            "Available"
        } else {
            "NotAvailable"
        },
        &if workers_ok {
            String::new()
        } else {
            format!("{available} of {} worker Machines available", workers.len())
        },
        generation,
    );
    let deleting = scope.cluster.metadata.deletion_timestamp.is_some();
    if !deleting {
        conditions::set(
            &mut scope.status.conditions,
            "Deleting",
            "False",
            "NotDeleting",
            "",
            generation,
        );
    }
    let missing = conditions::not_met(
        &scope.status.conditions,
        &[
            "InfrastructureReady",
            "ControlPlaneAvailable",
            "WorkersAvailable",
        ],
        scope
            .cluster
            .spec
            .availability_gates
            .iter()
            .map(|g| (g.condition_type.as_str(), g.polarity.as_deref())),
    );
    let available = !deleting && missing.is_empty();
    let message = if deleting {
        "the Cluster is being deleted".to_string()
    } else if missing.is_empty() {
        String::new()
    } else {
        format!("not yet: {}", missing.join(", "))
    };
    conditions::set(
        &mut scope.status.conditions,
        "Available",
        conditions::status_str(available),
        if available {
            "Available"
        } else {
            "NotAvailable"
        },
        &message,
        generation,
    );
    scope.status.phase = Some(phase(scope).to_string());
    if ok {
        scope.status.observed_generation = generation;
    }
}
