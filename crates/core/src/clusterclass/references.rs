//! The templates a class references: each must exist, gets the class as an owner (not a
//! controller: a template may serve several classes), and is compared with the apiVersion
//! its CRD's contract label names as latest.

use super::super::adopt::owner_ref;
use super::ReconcileError;
use crate::context::CoreCtx;
use capw_api::clusterclass::{ClusterClass, ClusterClassSpec, TemplateReference};
use capw_api::common::ContractVersionedObjectReference;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;

/// A reference whose apiVersion is older than the one its CRD's contract names.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Outdated {
    pub(super) kind: String,
    pub(super) name: String,
    pub(super) current: String,
    pub(super) latest: String,
}

/// Every template reference of the class, with the field it is in, each once, in upstream's
/// order: infrastructure, control plane, its machine infrastructure, then each worker class's
/// bootstrap and infrastructure.
pub(crate) fn of(spec: &ClusterClassSpec) -> Vec<(String, &TemplateReference)> {
    let mut refs: Vec<(String, &TemplateReference)> = vec![
        (
            "spec.infrastructure.templateRef".into(),
            &spec.infrastructure.template_ref,
        ),
        (
            "spec.controlPlane.templateRef".into(),
            &spec.control_plane.template_ref,
        ),
    ];
    if let Some(m) = &spec.control_plane.machine_infrastructure {
        refs.push((
            "spec.controlPlane.machineInfrastructure.templateRef".into(),
            &m.template_ref,
        ));
    }
    for (i, md) in spec.workers.machine_deployments.iter().enumerate() {
        let at = format!("spec.workers.machineDeployments[{i}]");
        refs.push((
            format!("{at}.bootstrap.templateRef"),
            &md.bootstrap.template_ref,
        ));
        refs.push((
            format!("{at}.infrastructure.templateRef"),
            &md.infrastructure.template_ref,
        ));
    }
    for (i, mp) in spec.workers.machine_pools.iter().enumerate() {
        let at = format!("spec.workers.machinePools[{i}]");
        refs.push((
            format!("{at}.bootstrap.templateRef"),
            &mp.bootstrap.template_ref,
        ));
        refs.push((
            format!("{at}.infrastructure.templateRef"),
            &mp.infrastructure.template_ref,
        ));
    }
    let mut seen = std::collections::HashSet::new();
    refs.retain(|(_, r)| !r.kind.is_empty() && !r.name.is_empty() && seen.insert((*r).clone()));
    refs
}

/// Owns every template; returns the outdated references, or the first that failed.
pub(super) async fn reconcile(
    class: &ClusterClass,
    ctx: &CoreCtx,
) -> Result<Vec<Outdated>, ReconcileError> {
    let ns = class.namespace().unwrap_or_default();
    let uid = class.uid().unwrap_or_default();
    let mut outdated = vec![];
    for (field, r) in of(&class.spec) {
        let reference = ContractVersionedObjectReference {
            api_group: r.group().into(),
            kind: r.kind.clone(),
            name: r.name.clone(),
        };
        let Some((obj, resolved)) = ctx.resolver.get(&ns, &reference).await? else {
            return Err(ReconcileError::Invalid(format!(
                "{} {ns}/{} ({field}) does not exist: create it, or point {field} at a template that does",
                r.kind, r.name
            )));
        };
        let version = r.api_version.rsplit('/').next().unwrap_or_default();
        if version != resolved.ar.version {
            outdated.push(Outdated {
                kind: r.kind.clone(),
                name: r.name.clone(),
                current: version.into(),
                latest: resolved.ar.version.clone(),
            });
        }
        if obj.owner_references().iter().any(|o| o.uid == uid) {
            continue;
        }
        let mut owners = obj.owner_references().to_vec();
        let mut owner = owner_ref("ClusterClass", &class.name_any(), &uid, false);
        owner.block_owner_deletion = None;
        owners.push(owner);
        // Over the version read: an owner another writer added meanwhile is not lost.
        let patch = json!({"metadata": {
            "resourceVersion": obj.resource_version(),
            "ownerReferences": owners,
        }});
        ctx.resolver
            .api(&ns, &resolved)
            .patch(
                &obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
    }
    Ok(outdated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A template two fields share is owned once; upstream's order and field paths.
    #[test]
    fn every_template_once_with_its_field() {
        let t = |kind: &str, name: &str| json!({"templateRef": {"apiVersion": "g/v1beta2", "kind": kind, "name": name}});
        let spec: ClusterClassSpec = serde_json::from_value(json!({
            "infrastructure": t("DockerClusterTemplate", "c"),
            "controlPlane": {
                "templateRef": {"apiVersion": "g/v1beta2", "kind": "KubeadmControlPlaneTemplate", "name": "cp"},
                "machineInfrastructure": t("DockerMachineTemplate", "m"),
            },
            "workers": {
                "machineDeployments": [{"class": "a", "bootstrap": t("KubeadmConfigTemplate", "b"), "infrastructure": t("DockerMachineTemplate", "w")}],
                "machinePools": [{"class": "a", "bootstrap": t("KubeadmConfigTemplate", "b"), "infrastructure": t("DockerMachinePoolTemplate", "p")}],
            },
        }))
        .unwrap();
        let fields: Vec<String> = of(&spec)
            .into_iter()
            .map(|(f, r)| format!("{f}={}", r.name))
            .collect();
        assert_eq!(
            fields,
            [
                "spec.infrastructure.templateRef=c",
                "spec.controlPlane.templateRef=cp",
                "spec.controlPlane.machineInfrastructure.templateRef=m",
                "spec.workers.machineDeployments[0].bootstrap.templateRef=b",
                "spec.workers.machineDeployments[0].infrastructure.templateRef=w",
                "spec.workers.machinePools[0].infrastructure.templateRef=p",
            ]
        );
    }
}
