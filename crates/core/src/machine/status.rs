//! `updateStatus`: the phase (with `lastUpdated` on change) and the `Ready`/`Available`
//! summaries of a Machine.

use super::Scope;
use capw_api::contract::conditions;
use capw_api::contract::conditions::{reasons, types};
use capw_api::contract::phases;
use kube::ResourceExt;

pub(super) fn phase(scope: &Scope) -> &'static str {
    let s = &scope.status;
    let init = s.initialization.clone().unwrap_or_default();
    let mut phase = phases::PENDING;
    if init.bootstrap_data_secret_created == Some(true)
        && init.infrastructure_provisioned != Some(true)
    {
        phase = phases::PROVISIONING;
    }
    if super::phases::provider_id(scope).is_some() {
        phase = phases::PROVISIONED;
    }
    if s.node_ref.is_some() && init.infrastructure_provisioned == Some(true) {
        phase = phases::RUNNING;
    }
    if scope.machine.metadata.deletion_timestamp.is_some() {
        phase = phases::DELETING;
    }
    phase
}

pub(super) fn update(scope: &mut Scope, ok: bool) {
    let generation = scope.generation();
    let deleting = scope.machine.metadata.deletion_timestamp.is_some();
    if !deleting {
        conditions::set(
            &mut scope.status.conditions,
            types::DELETING,
            "False",
            reasons::NOT_DELETING,
            "",
            generation,
        );
    }
    let health_checked = scope
        .status
        .conditions
        .iter()
        .any(|c| c.type_ == types::HEALTH_CHECK_SUCCEEDED);
    let ready = conditions::Summary {
        type_: types::READY,
        false_reason: reasons::NOT_READY,
        required: &[
            types::BOOTSTRAP_CONFIG_READY,
            types::INFRASTRUCTURE_READY,
            types::NODE_HEALTHY,
        ],
        noun: "Machine",
    }
    .set(
        &mut scope.status.conditions,
        scope
            .machine
            .spec
            .readiness_gates
            .iter()
            .map(|g| (g.condition_type.as_str(), g.polarity.as_deref()))
            // A MachineHealthCheck's verdict counts once there is one (upstream ignores it
            // while absent).
            .chain(health_checked.then_some((types::HEALTH_CHECK_SUCCEEDED, None))),
        deleting,
        generation,
    );
    // Available is Ready held for minReadySeconds; with the default of 0 it is Ready.
    let min_ready = scope.machine.spec.min_ready_seconds.unwrap_or(0);
    let held = scope
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == types::READY && c.status == "True")
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
        types::AVAILABLE,
        conditions::status_str(available),
        if available {
            types::AVAILABLE
        } else {
            reasons::NOT_AVAILABLE
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn scope(machine: serde_json::Value) -> Scope {
        let m: capw_api::machine::Machine = serde_json::from_value(machine).unwrap();
        Scope::new(Arc::new(m), None)
    }

    fn machine(status: serde_json::Value, extra_spec: serde_json::Value) -> serde_json::Value {
        let mut spec = json!({"clusterName": "c", "bootstrap": {"dataSecretName": "d"},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "X", "name": "m"}});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
            s.extend(e.clone());
        }
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m", "namespace": "ns", "generation": 1}, "spec": spec, "status": status})
    }

    fn cond(t: &str, ok: bool) -> serde_json::Value {
        json!({"type": t, "status": if ok { "True" } else { "False" }, "reason": "R",
            "message": "", "lastTransitionTime": "2020-01-01T00:00:00Z"})
    }

    /// Phase by upstream's rules, each later one overriding.
    #[test]
    fn phase_table() {
        let cases = [
            ("nothing yet", json!({}), phases::PENDING),
            (
                "bootstrap data, no infrastructure",
                json!({"initialization": {"bootstrapDataSecretCreated": true}}),
                phases::PROVISIONING,
            ),
            (
                "provisioned, no node",
                json!({"initialization": {"bootstrapDataSecretCreated": true, "infrastructureProvisioned": true}}),
                phases::PENDING,
            ),
            (
                "node and infrastructure",
                json!({"initialization": {"infrastructureProvisioned": true}, "nodeRef": {"name": "n"}}),
                phases::RUNNING,
            ),
            (
                "node without infrastructure",
                json!({"nodeRef": {"name": "n"}}),
                phases::PENDING,
            ),
        ];
        for (name, status, want) in cases {
            assert_eq!(phase(&scope(machine(status, json!({})))), want, "{name}");
        }
        let mut with_id = scope(machine(json!({}), json!({"providerID": "p://1"})));
        assert_eq!(phase(&with_id), phases::PROVISIONED, "a provider ID");
        let mut m = (*with_id.machine).clone();
        m.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::now(),
        ));
        with_id.machine = Arc::new(m);
        assert_eq!(phase(&with_id), phases::DELETING, "deletion overrides all");
    }

    /// Ready is the three contract conditions and the readiness gates; Available is Ready
    /// (minReadySeconds 0).
    #[test]
    fn ready_and_available_table() {
        let all = |boot, infra, node| {
            json!({"conditions": [
            cond(types::BOOTSTRAP_CONFIG_READY, boot), cond(types::INFRASTRUCTURE_READY, infra), cond(types::NODE_HEALTHY, node)]})
        };
        let gated = |gate_ok: bool| {
            let mut s = all(true, true, true);
            s["conditions"]
                .as_array_mut()
                .unwrap()
                .push(cond("MyGate", gate_ok));
            s
        };
        let cases = [
            ("all true", all(true, true, true), json!({}), true, ""),
            (
                "bootstrap not ready",
                all(false, true, true),
                json!({}),
                false,
                "not yet: BootstrapConfigReady",
            ),
            (
                "node not healthy",
                all(true, true, false),
                json!({}),
                false,
                "not yet: NodeHealthy",
            ),
            (
                "two missing",
                all(true, false, false),
                json!({}),
                false,
                "not yet: InfrastructureReady, NodeHealthy",
            ),
            (
                "gate met",
                gated(true),
                json!({"readinessGates": [{"conditionType": "MyGate"}]}),
                true,
                "",
            ),
            (
                "gate unmet",
                gated(false),
                json!({"readinessGates": [{"conditionType": "MyGate"}]}),
                false,
                "not yet: MyGate",
            ),
            (
                "negative gate",
                gated(false),
                json!({"readinessGates": [{"conditionType": "MyGate", "polarity": "Negative"}]}),
                true,
                "",
            ),
        ];
        for (name, status, spec, ready, message) in cases {
            let mut s = scope(machine(status, spec));
            update(&mut s, true);
            let get = |t: &str| {
                s.status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == t)
                    .cloned()
                    .unwrap()
            };
            let r = get(types::READY);
            assert_eq!(r.status, conditions::status_str(ready), "{name}: Ready");
            assert_eq!(r.message, message, "{name}: Ready message");
            assert_eq!(
                get(types::AVAILABLE).status,
                conditions::status_str(ready),
                "{name}: Available"
            );
            assert_eq!(get(types::DELETING).status, "False", "{name}: Deleting");
        }
    }
}
