//! The blueprint (upstream's `getBlueprint`): the ClusterClass and every template it references,
//! the templates of MachineDeployment classes no topology uses included, so a class whose
//! templates are missing fails before anything is generated.

use super::TopologyError;
use crate::context::CoreCtx;
use capw_api::clusterclass::{ClusterClass, TemplateReference};
use capw_api::common::ContractVersionedObjectReference;
use serde_json::Value;
use std::collections::BTreeMap;

/// A MachineDeployment class's two templates.
pub(super) struct WorkerTemplates {
    pub bootstrap: Value,
    pub infrastructure: Value,
}

pub(super) struct Blueprint {
    pub class: ClusterClass,
    pub infrastructure: Value,
    pub control_plane: Value,
    /// Set when the control plane is made of Machines.
    pub control_plane_machine: Option<Value>,
    pub workers: BTreeMap<String, WorkerTemplates>,
}

/// The template `reference` names, from the class's namespace, as JSON with its `apiVersion`
/// and `kind`. `field` is where the class holds the reference, for the error.
async fn template(
    ctx: &CoreCtx,
    ns: &str,
    reference: &TemplateReference,
    field: &str,
) -> Result<Value, TopologyError> {
    let r = ContractVersionedObjectReference {
        api_group: reference.group().to_string(),
        kind: reference.kind.clone(),
        name: reference.name.clone(),
    };
    let missing = |why: String| TopologyError::Blueprint {
        field: field.to_string(),
        kind: reference.kind.clone(),
        name: reference.name.clone(),
        why,
    };
    let (obj, resolved) = ctx
        .resolver
        .get(ns, &r)
        .await
        .map_err(|e| missing(e.to_string()))?
        .ok_or_else(|| missing("not found".to_string()))?;
    let mut value = serde_json::to_value(&obj).map_err(|e| missing(e.to_string()))?;
    value["apiVersion"] = Value::String(resolved.ar.api_version.clone());
    value["kind"] = Value::String(resolved.ar.kind.clone());
    Ok(value)
}

pub(super) async fn fetch(ctx: &CoreCtx, class: ClusterClass) -> Result<Blueprint, TopologyError> {
    let ns = kube::ResourceExt::namespace(&class).unwrap_or_default();
    let spec = &class.spec;
    let infrastructure = template(
        ctx,
        &ns,
        &spec.infrastructure.template_ref,
        "spec.infrastructure.templateRef",
    )
    .await?;
    let control_plane = template(
        ctx,
        &ns,
        &spec.control_plane.template_ref,
        "spec.controlPlane.templateRef",
    )
    .await?;
    let control_plane_machine = match &spec.control_plane.machine_infrastructure {
        Some(m) => Some(
            template(
                ctx,
                &ns,
                &m.template_ref,
                "spec.controlPlane.machineInfrastructure.templateRef",
            )
            .await?,
        ),
        None => None,
    };
    let mut workers = BTreeMap::new();
    for (i, md) in spec.workers.machine_deployments.iter().enumerate() {
        let at = format!("spec.workers.machineDeployments[{i}]");
        let bootstrap = template(
            ctx,
            &ns,
            &md.bootstrap.template_ref,
            &format!("{at}.bootstrap.templateRef"),
        )
        .await?;
        let infrastructure = template(
            ctx,
            &ns,
            &md.infrastructure.template_ref,
            &format!("{at}.infrastructure.templateRef"),
        )
        .await?;
        workers.insert(
            md.class.clone(),
            WorkerTemplates {
                bootstrap,
                infrastructure,
            },
        );
    }
    for (i, mp) in spec.workers.machine_pools.iter().enumerate() {
        let at = format!("spec.workers.machinePools[{i}]");
        template(
            ctx,
            &ns,
            &mp.bootstrap.template_ref,
            &format!("{at}.bootstrap.templateRef"),
        )
        .await?;
        template(
            ctx,
            &ns,
            &mp.infrastructure.template_ref,
            &format!("{at}.infrastructure.templateRef"),
        )
        .await?;
    }
    Ok(Blueprint {
        class,
        infrastructure,
        control_plane,
        control_plane_machine,
        workers,
    })
}
