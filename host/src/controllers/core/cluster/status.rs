//! `updateStatus`: phase, worker counters, and the summary conditions of a Cluster.

use super::Scope;
use crate::api::cluster::ReplicaSummary;
use crate::api::common::names::CONTROL_PLANE_LABEL;
use crate::contract::conditions;
use crate::contract::conditions::{reasons, types};
use crate::contract::phases;
use crate::controllers::core::context::CoreCtx;
use kube::ResourceExt;

fn count(n: usize) -> Option<i32> {
    i32::try_from(n).ok()
}

/// The phase by upstream's rules, each later rule overriding.
pub(super) fn phase(scope: &Scope) -> &'static str {
    let c = &scope.cluster;
    let mut phase = phases::PENDING;
    if c.spec
        .infrastructure_ref
        .as_ref()
        .is_some_and(|r| r.is_set())
        || c.spec
            .control_plane_ref
            .as_ref()
            .is_some_and(|r| r.is_set())
    {
        phase = phases::PROVISIONING;
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
        phase = phases::PROVISIONED;
    }
    if c.metadata.deletion_timestamp.is_some() {
        phase = phases::DELETING;
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
                .is_some_and(|s| conditions::is_true(&s.conditions, types::READY))
        })
        .count();
    let available = workers
        .iter()
        .filter(|m| {
            m.status
                .as_ref()
                .is_some_and(|s| conditions::is_true(&s.conditions, types::AVAILABLE))
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
        types::WORKERS_AVAILABLE,
        conditions::status_str(workers_ok),
        if workers.is_empty() {
            reasons::NO_WORKERS
        } else if workers_ok {
            types::AVAILABLE
        } else {
            reasons::NOT_AVAILABLE
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
            types::DELETING,
            "False",
            reasons::NOT_DELETING,
            "",
            generation,
        );
    }
    conditions::Summary {
        type_: types::AVAILABLE,
        false_reason: reasons::NOT_AVAILABLE,
        required: &[
            types::INFRASTRUCTURE_READY,
            types::CONTROL_PLANE_AVAILABLE,
            types::WORKERS_AVAILABLE,
        ],
        noun: "Cluster",
    }
    .set(
        &mut scope.status.conditions,
        scope
            .cluster
            .spec
            .availability_gates
            .iter()
            .map(|g| (g.condition_type.as_str(), g.polarity.as_deref())),
        deleting,
        generation,
    );
    scope.status.phase = Some(phase(scope).to_string());
    if ok {
        scope.status.observed_generation = generation;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn scope(spec: serde_json::Value, status: serde_json::Value) -> Scope {
        let c: crate::api::cluster::Cluster = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c", "namespace": "ns"}, "spec": spec, "status": status}))
        .unwrap();
        Scope {
            status: c.status.clone().unwrap_or_default(),
            cluster: Arc::new(c),
            endpoint: None,
            requeue: None,
        }
    }

    /// Phase by upstream's rules, each later one overriding.
    #[test]
    fn phase_table() {
        let infra = json!({"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "X", "name": "c"}});
        let mut with_ep = infra.clone();
        with_ep["controlPlaneEndpoint"] = json!({"host": "10.0.0.1", "port": 6443});
        let provisioned = json!({"initialization": {"infrastructureProvisioned": true}});
        let cases = [
            ("no references", json!({}), json!({}), phases::PENDING),
            (
                "references set",
                infra.clone(),
                json!({}),
                phases::PROVISIONING,
            ),
            (
                "provisioned, no endpoint",
                infra.clone(),
                provisioned.clone(),
                phases::PROVISIONING,
            ),
            (
                "endpoint, not provisioned",
                with_ep.clone(),
                json!({}),
                phases::PROVISIONING,
            ),
            (
                "provisioned with an endpoint",
                with_ep.clone(),
                provisioned.clone(),
                phases::PROVISIONED,
            ),
        ];
        for (name, spec, status, want) in cases {
            assert_eq!(phase(&scope(spec, status)), want, "{name}");
        }
        // The endpoint about to be copied from the infrastructure counts too.
        let mut s = scope(infra, provisioned);
        s.endpoint = Some(crate::api::common::ApiEndpoint {
            host: "h".into(),
            port: 1,
        });
        assert_eq!(phase(&s), phases::PROVISIONED);
    }
}
