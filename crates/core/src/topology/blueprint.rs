//! The blueprint (upstream's `getBlueprint`): the ClusterClass and every template it references,
//! the templates of MachineDeployment classes no topology uses included, so a class whose
//! templates are missing fails before anything is generated.

use super::TopologyError;
use crate::context::CoreCtx;
use capw_api::clusterclass::{ClusterClass, TemplateReference};
use capw_api::common::ContractVersionedObjectReference;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

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
    super::current::read(ctx, ns, &r)
        .await
        .map_err(|e| missing(e.to_string()))?
        .ok_or_else(|| missing("not found".to_string()))
}

pub(super) async fn fetch(ctx: &CoreCtx, class: ClusterClass) -> Result<Blueprint, TopologyError> {
    let ns = kube::ResourceExt::namespace(&class).unwrap_or_default();
    let spec = &class.spec;
    // Every template the class references (the class controller's list: each once, in
    // upstream's order), so a missing one fails before anything is generated.
    let mut fetched = HashMap::new();
    for (field, reference) in crate::clusterclass::template_references(spec) {
        let value = template(ctx, &ns, reference, &field).await?;
        fetched.insert(reference.clone(), value);
    }
    let get = |reference: &TemplateReference, field: &str| {
        fetched
            .get(reference)
            .cloned()
            .ok_or_else(|| TopologyError::Blueprint {
                field: field.to_string(),
                kind: reference.kind.clone(),
                name: reference.name.clone(),
                why: "the reference has no kind or name".to_string(),
            })
    };
    let infrastructure = get(
        &spec.infrastructure.template_ref,
        "spec.infrastructure.templateRef",
    )?;
    let control_plane = get(
        &spec.control_plane.template_ref,
        "spec.controlPlane.templateRef",
    )?;
    let control_plane_machine = spec
        .control_plane
        .machine_infrastructure
        .as_ref()
        .map(|m| {
            get(
                &m.template_ref,
                "spec.controlPlane.machineInfrastructure.templateRef",
            )
        })
        .transpose()?;
    let mut workers = BTreeMap::new();
    for (i, md) in spec.workers.machine_deployments.iter().enumerate() {
        let at = format!("spec.workers.machineDeployments[{i}]");
        let templates = WorkerTemplates {
            bootstrap: get(
                &md.bootstrap.template_ref,
                &format!("{at}.bootstrap.templateRef"),
            )?,
            infrastructure: get(
                &md.infrastructure.template_ref,
                &format!("{at}.infrastructure.templateRef"),
            )?,
        };
        workers.insert(md.class.clone(), templates);
    }
    Ok(Blueprint {
        class,
        infrastructure,
        control_plane,
        control_plane_machine,
        workers,
    })
}
