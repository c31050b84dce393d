//! Owner references and the cluster-name label on referenced objects, re-added whenever they
//! are lost (upstream's owner-reference resilience).

use crate::api::common::names::CLUSTER_NAME_LABEL;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

/// Ensures `owner` among `obj`'s ownerReferences (dropping controller references of the
/// `replace` kinds, the on-create owners) and the cluster-name label. Writes only when needed.
pub async fn ensure(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    owner: OwnerReference,
    replace: &[&str],
    cluster: &str,
) -> Result<bool, kube::Error> {
    let old = obj.metadata.owner_references.clone().unwrap_or_default();
    let mut refs: Vec<OwnerReference> = old
        .iter()
        .filter(|o| !(o.controller == Some(true) && replace.contains(&o.kind.as_str())))
        .filter(|o| !(o.kind == owner.kind && o.name == owner.name && o.uid != owner.uid))
        .cloned()
        .collect();
    match refs.iter_mut().find(|o| o.uid == owner.uid) {
        Some(existing) => {
            if existing.controller != owner.controller || existing.api_version != owner.api_version
            {
                *existing = owner.clone();
            }
        }
        None => refs.push(owner),
    }
    let labelled = obj
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CLUSTER_NAME_LABEL))
        .is_some_and(|v| v == cluster);
    if refs == old && labelled {
        return Ok(false);
    }
    let name = obj.metadata.name.clone().unwrap_or_default();
    let patch = json!({"metadata": {
        "ownerReferences": refs,
        "labels": {CLUSTER_NAME_LABEL: cluster},
    }});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(true)
}

/// An owner reference to a core object.
pub fn owner_ref(kind: &str, name: &str, uid: &str, controller: bool) -> OwnerReference {
    OwnerReference {
        api_version: crate::api::common::names::API_VERSION.into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: controller.then_some(true),
        block_owner_deletion: Some(true),
    }
}

/// A plain (non-controller) owner reference to `cluster` on a core object (stand-alone
/// MachineSets, MachineDeployments, MachineHealthChecks), added when missing. Returns whether it
/// wrote.
pub async fn ensure_cluster_owner<K>(
    api: &Api<K>,
    obj: &K,
    cluster: &crate::api::cluster::Cluster,
) -> Result<bool, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use kube::ResourceExt;
    let uid = cluster.uid().unwrap_or_default();
    if obj.owner_references().iter().any(|o| o.uid == uid) {
        return Ok(false);
    }
    let mut refs: Vec<OwnerReference> = obj
        .owner_references()
        .iter()
        .filter(|o| !(o.kind == "Cluster" && o.name == cluster.name_any()))
        .cloned()
        .collect();
    refs.push(owner_ref("Cluster", &cluster.name_any(), &uid, false));
    let patch = json!({"metadata": {"ownerReferences": refs}});
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(true)
}
