//! The current state (upstream's `getCurrentState`): what the topology generated before, read
//! through the Cluster's references and the topology labels. Only objects that carry
//! `topology.cluster.x-k8s.io/owned` count, so a MachineDeployment a user wrote next to a
//! topology is never taken over.

use super::TopologyError;
use crate::context::CoreCtx;
use capw_api::cluster::Cluster;
use capw_api::common::ContractVersionedObjectReference;
use capw_api::common::names::{
    DEPLOYMENT_NAME_LABEL, TOPOLOGY_DEPLOYMENT_NAME_LABEL, TOPOLOGY_OWNED_LABEL,
};
use capw_api::machine::Machine;
use capw_api::machinedeployment::MachineDeployment;
use capw_api::machinehealthcheck::MachineHealthCheck;
use kube::ResourceExt;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

pub(super) struct CurrentDeployment {
    pub object: Arc<MachineDeployment>,
    pub bootstrap: Option<Value>,
    pub infrastructure: Option<Value>,
    pub health_check: Option<Arc<MachineHealthCheck>>,
    /// Some of its Machines are not at its version yet.
    pub rolling: bool,
}

#[derive(Default)]
pub(super) struct Current {
    pub infrastructure: Option<Value>,
    pub control_plane: Option<Value>,
    /// The control plane's machine template, through its `spec.machineTemplate.spec.infrastructureRef`.
    pub control_plane_machine: Option<Value>,
    pub control_plane_health_check: Option<Arc<MachineHealthCheck>>,
    /// By topology name.
    pub deployments: BTreeMap<String, CurrentDeployment>,
}

/// The object `reference` names in `ns`, as JSON, or `None` when it is gone.
pub(super) async fn read(
    ctx: &CoreCtx,
    ns: &str,
    reference: &ContractVersionedObjectReference,
) -> Result<Option<Value>, TopologyError> {
    let Some((obj, resolved)) = ctx.resolver.get(ns, reference).await? else {
        return Ok(None);
    };
    let mut value = serde_json::to_value(&*obj)?;
    value["apiVersion"] = Value::String(resolved.ar.api_version.clone());
    value["kind"] = Value::String(resolved.ar.kind.clone());
    Ok(Some(value))
}

/// A `{apiGroup, kind, name}` reference held at `pointer` in `obj`.
pub(super) fn reference_at(obj: &Value, pointer: &str) -> Option<ContractVersionedObjectReference> {
    let r = obj.pointer(pointer)?;
    let reference = ContractVersionedObjectReference {
        api_group: r["apiGroup"].as_str()?.to_string(),
        kind: r["kind"].as_str()?.to_string(),
        name: r["name"].as_str()?.to_string(),
    };
    reference.is_set().then_some(reference)
}

/// The API group and kind of an object.
pub(super) fn group_kind(obj: &Value) -> (String, String) {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    (
        api_version
            .rsplit_once('/')
            .map_or("", |(g, _)| g)
            .to_string(),
        obj["kind"].as_str().unwrap_or_default().to_string(),
    )
}

pub(super) const CONTROL_PLANE_MACHINE_REF: &str = "/spec/machineTemplate/spec/infrastructureRef";

pub(super) async fn fetch(ctx: &CoreCtx, cluster: &Cluster) -> Result<Current, TopologyError> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let mut current = Current::default();
    if let Some(r) = cluster
        .spec
        .infrastructure_ref
        .as_ref()
        .filter(|r| r.is_set())
    {
        current.infrastructure = read(ctx, &ns, r).await?;
    }
    if let Some(r) = cluster
        .spec
        .control_plane_ref
        .as_ref()
        .filter(|r| r.is_set())
    {
        current.control_plane = read(ctx, &ns, r).await?;
    }
    if let Some(cp) = &current.control_plane {
        if let Some(r) = reference_at(cp, CONTROL_PLANE_MACHINE_REF) {
            current.control_plane_machine = read(ctx, &ns, &r).await?;
        }
        let cp_name = cp["metadata"]["name"].as_str().unwrap_or_default();
        current.control_plane_health_check = health_check(ctx, &ns, &name, cp_name);
    }
    let machines = ctx.machines_of(&ns, &name);
    for md in ctx.machine_deployments_of(&ns, &name) {
        if !md.labels().contains_key(TOPOLOGY_OWNED_LABEL) {
            continue;
        }
        let Some(topology) = md.labels().get(TOPOLOGY_DEPLOYMENT_NAME_LABEL).cloned() else {
            continue;
        };
        if let Some(other) = current.deployments.get(&topology) {
            return Err(TopologyError::Invalid(format!(
                "MachineDeployments {} and {} both have the label {TOPOLOGY_DEPLOYMENT_NAME_LABEL}={topology}; delete the one the topology did not create",
                other.object.name_any(),
                md.name_any()
            )));
        }
        let spec = &md.spec.template.spec;
        let bootstrap = match spec.bootstrap.config_ref.as_ref().filter(|r| r.is_set()) {
            Some(r) => read(ctx, &ns, r).await?,
            None => None,
        };
        let infrastructure = if spec.infrastructure_ref.is_set() {
            read(ctx, &ns, &spec.infrastructure_ref).await?
        } else {
            None
        };
        let md_name = md.name_any();
        let rolling = rolling(&md, &machines);
        current.deployments.insert(
            topology,
            CurrentDeployment {
                health_check: health_check(ctx, &ns, &name, &md_name),
                object: md,
                bootstrap,
                infrastructure,
                rolling,
            },
        );
    }
    Ok(current)
}

/// Whether some of `md`'s Machines are not at its version, as upstream's
/// `MachineDeploymentState.IsUpgrading`: a Machine still being deleted counts, so the next
/// MachineDeployment starts only once the old Machines are gone, and a Machine without a
/// version says nothing.
fn rolling(md: &MachineDeployment, machines: &[Arc<Machine>]) -> bool {
    let Some(version) = md.spec.template.spec.version.as_ref() else {
        return false;
    };
    let name = md.name_any();
    machines.iter().any(|m| {
        m.labels()
            .get(DEPLOYMENT_NAME_LABEL)
            .is_some_and(|d| *d == name)
            && m.spec.version.as_ref().is_some_and(|v| v != version)
    })
}

/// The topology's MachineHealthCheck named `name` (named after what it checks).
fn health_check(
    ctx: &CoreCtx,
    ns: &str,
    cluster: &str,
    name: &str,
) -> Option<Arc<MachineHealthCheck>> {
    ctx.machine_health_checks_of(ns, cluster)
        .into_iter()
        .find(|m| m.name_any() == name && m.labels().contains_key(TOPOLOGY_OWNED_LABEL))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn md(version: Option<&str>) -> MachineDeployment {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "MachineDeployment",
            "metadata": {"name": "md-0", "namespace": "default"},
            "spec": {"clusterName": "c", "template": {"spec": {
                "clusterName": "c", "version": version,
                "bootstrap": {}, "infrastructureRef": {"apiGroup": "x", "kind": "Y", "name": "z"},
            }}},
        }))
        .unwrap()
    }

    fn machine(deployment: &str, version: Option<&str>, deleting: bool) -> Arc<Machine> {
        let mut m = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Machine",
            "metadata": {"name": "m", "namespace": "default", "finalizers": ["f"],
                         "labels": {DEPLOYMENT_NAME_LABEL: deployment}},
            "spec": {"clusterName": "c", "version": version,
                     "bootstrap": {}, "infrastructureRef": {"apiGroup": "x", "kind": "Y", "name": "z"}},
        });
        if deleting {
            m["metadata"]["deletionTimestamp"] = json!("2026-12-05T00:00:00Z");
        }
        Arc::new(serde_json::from_value(m).unwrap())
    }

    #[test]
    fn a_deleting_machine_at_the_old_version_still_rolls() {
        let md = md(Some("v1.30.4"));
        assert!(rolling(&md, &[machine("md-0", Some("v1.29.10"), true)]));
        assert!(rolling(&md, &[machine("md-0", Some("v1.29.10"), false)]));
        assert!(!rolling(&md, &[machine("md-0", Some("v1.30.4"), false)]));
    }

    #[test]
    fn other_deployments_and_machines_without_a_version_say_nothing() {
        let md = md(Some("v1.30.4"));
        assert!(!rolling(&md, &[machine("md-1", Some("v1.29.10"), false)]));
        assert!(!rolling(&md, &[machine("md-0", None, false)]));
        assert!(!rolling(
            &self::md(None),
            &[machine("md-0", Some("v1.29.10"), false)]
        ));
    }
}
