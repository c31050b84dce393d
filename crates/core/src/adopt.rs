//! Owner references and the cluster-name label on referenced objects, re-added whenever they
//! are lost (upstream's owner-reference resilience).

use capw_api::common::names::CLUSTER_NAME_LABEL;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

/// Ensures `owner` among `obj`'s ownerReferences and the cluster-name label. Writes only when
/// needed.
///
/// `creator` is the controller that made `obj` before `owner` existed (a Machine's MachineSet
/// or control plane, see [`on_create_owner`]): its controller reference, matched by UID, gives
/// way to `owner`. A controller reference to anything else stays, and `obj` is not adopted:
/// the object belongs to someone else, whatever its kind is called.
pub async fn ensure(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    owner: OwnerReference,
    creator: Option<&OwnerReference>,
    cluster: &str,
) -> Result<bool, AdoptError> {
    let old = obj.metadata.owner_references.clone().unwrap_or_default();
    let mut refs: Vec<OwnerReference> = old
        .iter()
        .filter(|o| {
            !(o.controller == Some(true)
                && creator.is_some_and(|c| c.uid == o.uid && same_kind(c, o)))
        })
        .filter(|o| !(o.kind == owner.kind && o.name == owner.name && o.uid != owner.uid))
        .cloned()
        .collect();
    if owner.controller == Some(true)
        && let Some(other) = refs
            .iter()
            .find(|o| o.controller == Some(true) && o.uid != owner.uid)
    {
        return Err(AdoptError::ControlledByOther {
            object: format!(
                "{} {}",
                obj.types.as_ref().map_or("object", |t| t.kind.as_str()),
                obj.metadata.name.clone().unwrap_or_default()
            ),
            owner: format!("{} {} ({})", other.kind, other.name, other.api_version),
            adopter: format!("{} {}", owner.kind, owner.name),
        });
    }
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

/// Why a referenced object was not adopted.
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error(
        "{object} is controlled by {owner}, which did not create {adopter}: an object is adopted only from the MachineSet or control plane that made the Machine; reference an object of this Machine's own, or delete the Machine"
    )]
    ControlledByOther {
        object: String,
        owner: String,
        adopter: String,
    },
}

fn group_of(api_version: &str) -> String {
    api_version
        .parse::<kube::core::GroupVersion>()
        .map(|gv| gv.group)
        .unwrap_or_default()
}

fn same_kind(a: &OwnerReference, b: &OwnerReference) -> bool {
    a.kind == b.kind && group_of(&a.api_version) == group_of(&b.api_version)
}

/// The controller that made `machine` and the objects it references, before the Machine
/// existed: a core MachineSet or MachinePool, or, for a control-plane Machine, the control plane
/// its Cluster names in `spec.controlPlaneRef`. Decided by group, kind and role as upstream's
/// Machine controller decides, never by a kind's name alone: a kind called
/// `KubeadmControlPlane` in some other group is nobody's creator, and a control plane of any
/// name is its Machines' creator.
pub fn on_create_owner<'a>(
    machine: &'a capw_api::machine::Machine,
    cluster: Option<&capw_api::cluster::Cluster>,
) -> Option<&'a OwnerReference> {
    use capw_api::common::names::{API_GROUP, CONTROL_PLANE_LABEL};
    use kube::ResourceExt;
    let control_plane = cluster
        .and_then(|c| c.spec.control_plane_ref.as_ref())
        .filter(|r| r.is_set() && machine.labels().contains_key(CONTROL_PLANE_LABEL));
    machine
        .owner_references()
        .iter()
        .filter(|o| o.controller == Some(true))
        .find(|o| {
            let group = group_of(&o.api_version);
            (group == API_GROUP && (o.kind == "MachineSet" || o.kind == "MachinePool"))
                || control_plane.is_some_and(|r| r.api_group == group && r.kind == o.kind)
        })
}

/// An owner reference to a core object.
pub fn owner_ref(kind: &str, name: &str, uid: &str, controller: bool) -> OwnerReference {
    OwnerReference {
        api_version: capw_api::common::names::API_VERSION.into(),
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
    cluster: &capw_api::cluster::Cluster,
) -> Result<bool, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use kube::ResourceExt;
    let Some(patch) = cluster_owner_patch(obj, cluster) else {
        return Ok(false);
    };
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(true)
}

/// The merge patch [`ensure_cluster_owner`] writes, if `obj` lacks the owner reference.
pub fn cluster_owner_patch<K: kube::Resource>(
    obj: &K,
    cluster: &capw_api::cluster::Cluster,
) -> Option<serde_json::Value> {
    use kube::ResourceExt;
    let uid = cluster.uid().unwrap_or_default();
    if obj.owner_references().iter().any(|o| o.uid == uid) {
        return None;
    }
    let mut refs: Vec<OwnerReference> = obj
        .owner_references()
        .iter()
        .filter(|o| !(o.kind == "Cluster" && o.name == cluster.name_any()))
        .cloned()
        .collect();
    refs.push(owner_ref("Cluster", &cluster.name_any(), &uid, false));
    Some(json!({"metadata": {"ownerReferences": refs}}))
}

/// Claims `obj` for a MachineSet or MachineDeployment over its resourceVersion: adds
/// `controller` to its owner references when given (an orphan its selector matches) and sets
/// `labels`. `None` when someone changed or deleted it first: that change wakes the owner
/// again, as upstream's controller-ref manager retries.
pub async fn claim<K>(
    api: &Api<K>,
    obj: &K,
    controller: Option<OwnerReference>,
    labels: serde_json::Map<String, serde_json::Value>,
) -> Result<Option<K>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use kube::ResourceExt;
    let mut refs = obj.owner_references().to_vec();
    refs.extend(controller);
    let patch = json!({"metadata": {
        "ownerReferences": refs,
        "labels": labels,
        "resourceVersion": obj.resource_version(),
    }});
    match api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(claimed) => Ok(Some(claimed)),
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}
