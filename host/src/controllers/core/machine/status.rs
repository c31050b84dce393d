//! `updateStatus`: the phase (with `lastUpdated` on change) and the `Ready`/`Available`
//! summaries of a Machine.

use super::Scope;
use crate::controllers::conditions;
use kube::ResourceExt;

pub(super) fn phase(scope: &Scope) -> &'static str {
    let s = &scope.status;
    let init = s.initialization.clone().unwrap_or_default();
    let mut phase = "Pending";
    if init.bootstrap_data_secret_created == Some(true)
        && init.infrastructure_provisioned != Some(true)
    {
        phase = "Provisioning";
    }
    if super::phases::provider_id(scope).is_some() {
        phase = "Provisioned";
    }
    if s.node_ref.is_some() && init.infrastructure_provisioned == Some(true) {
        phase = "Running";
    }
    if scope.machine.metadata.deletion_timestamp.is_some() {
        phase = "Deleting";
    }
    phase
}

pub(super) fn update(scope: &mut Scope, ok: bool) {
    let generation = scope.generation();
    let deleting = scope.machine.metadata.deletion_timestamp.is_some();
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
        &["BootstrapConfigReady", "InfrastructureReady", "NodeHealthy"],
        scope
            .machine
            .spec
            .readiness_gates
            .iter()
            .map(|g| (g.condition_type.as_str(), g.polarity.as_deref())),
    );
    let ready = !deleting && missing.is_empty();
    let message = if deleting {
        "the Machine is being deleted".to_string()
    } else if missing.is_empty() {
        String::new()
    } else {
        format!("not yet: {}", missing.join(", "))
    };
    conditions::set(
        &mut scope.status.conditions,
        "Ready",
        conditions::status_str(ready),
        if ready { "Ready" } else { "NotReady" },
        &message,
        generation,
    );
    // Available is Ready held for minReadySeconds; with the default of 0 it is Ready.
    let min_ready = scope.machine.spec.min_ready_seconds.unwrap_or(0);
    let held = scope
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .and_then(|c| c.last_transition_time.parse::<jiff::Timestamp>().ok())
        .is_some_and(|t| {
            jiff::Timestamp::now().as_second() - t.as_second() >= i64::from(min_ready)
        });
    let available = ready && (min_ready == 0 || held);
    if ready && !available {
        scope.requeue_after(std::time::Duration::from_secs(min_ready.max(1) as u64));
    }
    conditions::set(
        &mut scope.status.conditions,
        "Available",
        conditions::status_str(available),
        if available {
            "Available"
        } else {
            "NotAvailable"
        },
        "",
        generation,
    );
    let phase = phase(scope);
    if scope.status.phase.as_deref() != Some(phase) {
        let from = scope.status.phase.clone().unwrap_or_default();
        scope.status.phase = Some(phase.to_string());
        scope.status.last_updated = Some(conditions::now());
        // Upstream records phase changes in `lastUpdated`, not as Events; at a thousand
        // clusters the Events would be a tenth of all API writes.
        tracing::debug!(machine = %scope.machine.name_any(), %from, to = phase, "phase changed");
    }
    if ok {
        scope.status.observed_generation = generation;
    }
}
