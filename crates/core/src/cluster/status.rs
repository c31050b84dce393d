//! `updateStatus`: phase, worker counters, and the summary conditions of a Cluster.

use super::Scope;
use crate::context::CoreCtx;
use capw_api::cluster::ReplicaSummary;
use capw_api::common::names::{CONTROL_PLANE_LABEL, DEPLOYMENT_NAME_LABEL, SET_NAME_LABEL};
use capw_api::contract::conditions;
use capw_api::contract::conditions::{reasons, types};
use capw_api::contract::phases;
use capw_api::machine::Machine;
use capw_api::machinedeployment::MachineDeployment;
use capw_api::machineset::MachineSet;
use kube::ResourceExt;

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

/// `status.workers` and `WorkersAvailable` (`capi-lifecycle.md` §6.2): sums over the
/// Cluster's MachineDeployments, its stand-alone MachineSets and its stand-alone worker
/// Machines. Returns whether the workers are available, and what is not when they are not.
pub(super) fn workers(
    mds: &[&MachineDeployment],
    mss: &[&MachineSet],
    machines: &[&Machine],
) -> (ReplicaSummary, bool, String) {
    let mut sum = ReplicaSummary::default();
    let mut add = |field: fn(&mut ReplicaSummary) -> &mut Option<i32>, v: Option<i32>| {
        if let Some(v) = v {
            *field(&mut sum).get_or_insert(0) += v;
        }
    };
    let mut unavailable = vec![];
    for md in mds {
        let s = md.status.clone().unwrap_or_default();
        add(
            |s| &mut s.desired_replicas,
            Some(md.spec.replicas.unwrap_or(1)),
        );
        add(|s| &mut s.replicas, s.replicas);
        add(|s| &mut s.ready_replicas, s.ready_replicas);
        add(|s| &mut s.available_replicas, s.available_replicas);
        add(|s| &mut s.up_to_date_replicas, s.up_to_date_replicas);
        if !conditions::is_true(&s.conditions, types::AVAILABLE) {
            unavailable.push(format!("MachineDeployment {}", md.name_any()));
        }
    }
    for ms in mss {
        let s = ms.status.clone().unwrap_or_default();
        add(
            |s| &mut s.desired_replicas,
            Some(ms.spec.replicas.unwrap_or(1)),
        );
        add(|s| &mut s.replicas, s.replicas);
        add(|s| &mut s.ready_replicas, s.ready_replicas);
        add(|s| &mut s.available_replicas, s.available_replicas);
        add(|s| &mut s.up_to_date_replicas, s.up_to_date_replicas);
    }
    for m in machines {
        let has = |t: &str| {
            m.status
                .as_ref()
                .is_some_and(|s| conditions::is_true(&s.conditions, t))
        };
        add(|s| &mut s.desired_replicas, Some(1));
        add(|s| &mut s.replicas, Some(1));
        add(
            |s| &mut s.ready_replicas,
            Some(i32::from(has(types::READY))),
        );
        add(
            |s| &mut s.available_replicas,
            Some(i32::from(has(types::AVAILABLE))),
        );
        add(
            |s| &mut s.up_to_date_replicas,
            Some(i32::from(has(types::UP_TO_DATE))),
        );
        // Stand-alone Machines have no deployment to report availability: each counts.
        if !has(types::AVAILABLE) {
            unavailable.push(format!("Machine {}", m.name_any()));
        }
    }
    let ok = unavailable.is_empty();
    let message = if ok {
        String::new()
    } else {
        format!("* {} not available", unavailable.join(", "))
    };
    (sum, ok, message)
}

pub(super) fn update(scope: &mut Scope, ctx: &CoreCtx, ok: bool) {
    let generation = scope.generation();
    let ns = scope.ns();
    let name = scope.cluster.name_any();
    let mds = ctx.machine_deployments_of(&ns, &name);
    let mss: Vec<_> = ctx
        .machine_sets_of(&ns, &name)
        .into_iter()
        .filter(|s| !s.labels().contains_key(DEPLOYMENT_NAME_LABEL))
        .filter(|s| {
            !s.owner_references()
                .iter()
                .any(|o| o.kind == "MachineDeployment")
        })
        .collect();
    let standalone: Vec<_> = ctx
        .machines_of(&ns, &name)
        .into_iter()
        .filter(|m| !m.labels().contains_key(CONTROL_PLANE_LABEL))
        .filter(|m| {
            !m.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.kind == "MachineSet")
        })
        .filter(|m| !m.labels().contains_key(SET_NAME_LABEL))
        .collect();
    let (summary, workers_ok, message) = workers(
        &mds.iter().map(|d| &**d).collect::<Vec<_>>(),
        &mss.iter().map(|s| &**s).collect::<Vec<_>>(),
        &standalone.iter().map(|m| &**m).collect::<Vec<_>>(),
    );
    let none = mds.is_empty() && mss.is_empty() && standalone.is_empty();
    scope.status.workers = Some(summary);
    conditions::set(
        &mut scope.status.conditions,
        types::WORKERS_AVAILABLE,
        conditions::status_str(workers_ok),
        if none {
            reasons::NO_WORKERS
        } else if workers_ok {
            types::AVAILABLE
        } else {
            reasons::NOT_AVAILABLE
        },
        &message,
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
        let c: capw_api::cluster::Cluster = serde_json::from_value(json!({
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
        s.endpoint = Some(capw_api::common::ApiEndpoint {
            host: "h".into(),
            port: 1,
        });
        assert_eq!(phase(&s), phases::PROVISIONED);
    }
}
