//! The provider objects a Cluster or Machine references, as core handles them in both
//! controllers: read one (starting its dynamic watch, adopting it, and picking up the v1beta1
//! failure fields it carries), and delete one in a deletion step; and back from a changed
//! provider object to the Cluster or Machine that references it, for the trackers.

use super::adopt;
use super::error::ReconcileError;
use capw_api::cluster::Cluster;
use capw_api::common::names::CLUSTER_NAME_LABEL;
use capw_api::common::{ContractVersionedObjectReference, Deprecated, V1Beta1Deprecated};
use capw_api::contract::ProviderObject;
use capw_api::machine::Machine;
use capw_reconcile::by_cluster::ByCluster;
use capw_reconcile::external::{ExternalError, OwnerMap, Resolver, Tracker, owner_of_kind};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::ResourceExt;
use kube::api::DeleteParams;
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::Value;
use std::sync::Arc;

/// A referenced object as JSON, with the legacy failure fields core copies (without effect).
pub struct Referenced {
    pub object: ProviderObject,
    pub deprecated: Option<Deprecated>,
}

/// Reads a referenced object, watches its kind, and ensures `owner` (in place of the controller
/// reference of `creator`, see [`adopt::ensure`]) and the cluster-name label on it.
pub async fn read_and_adopt<K: Resource<DynamicType = ()> + Send + Sync + 'static>(
    resolver: &Resolver,
    tracker: &Tracker<K>,
    ns: &str,
    reference: &ContractVersionedObjectReference,
    owner: OwnerReference,
    creator: Option<&OwnerReference>,
    cluster: &str,
) -> Result<Option<Referenced>, ReconcileError> {
    let Some((obj, resolved)) = resolver.get(ns, reference).await? else {
        return Ok(None);
    };
    tracker.ensure(&resolved);
    if obj.metadata.deletion_timestamp.is_none() {
        adopt::ensure(&resolver.api(ns, &resolved), &obj, owner, creator, cluster)
            .await
            .map_err(|e| match e {
                adopt::AdoptError::Kube(e) => ExternalError::Kube(e),
                e => ExternalError::NotAdopted(e.to_string()),
            })?;
    }
    let object = ProviderObject {
        value: serde_json::to_value(&*obj).unwrap_or(Value::Null),
        contract: resolved.contract,
    };
    let (reason, message) = object.failure();
    let deprecated = (reason.is_some() || message.is_some()).then(|| Deprecated {
        v1beta1: Some(V1Beta1Deprecated {
            failure_reason: reason,
            failure_message: message.map(|m| {
                format!(
                    "Failure detected from referenced resource {}.{} with name {}: {m}",
                    reference.kind, reference.api_group, reference.name
                )
            }),
        }),
    });
    Ok(Some(Referenced { object, deprecated }))
}

/// Deletes a referenced object unless it is gone or going; returns whether it still exists.
pub async fn delete<K: Resource<DynamicType = ()> + Send + Sync + 'static>(
    resolver: &Resolver,
    tracker: &Tracker<K>,
    ns: &str,
    reference: Option<&ContractVersionedObjectReference>,
) -> Result<bool, ReconcileError> {
    let Some(r) = reference.filter(|r| r.is_set()) else {
        return Ok(false);
    };
    let found = match resolver.get(ns, r).await {
        Ok(f) => f,
        // No CRD serves the kind any more, so no object of it can exist.
        Err(ExternalError::NoContract { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let Some((obj, resolved)) = found else {
        return Ok(false);
    };
    tracker.ensure(&resolved);
    if obj.metadata.deletion_timestamp.is_none() {
        match resolver
            .api(ns, &resolved)
            .delete(&r.name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

/// A scope whose Machines come from one template: a MachineSet's or a MachineDeployment's.
pub trait Templated {
    fn template(&mut self) -> TemplateParts<'_>;
}

/// The namespace, the Machine template's spec, the Cluster, and where the missing templates go.
pub type TemplateParts<'a> = (
    String,
    &'a capw_api::machine::MachineSpec,
    &'a capw_api::cluster::Cluster,
    &'a mut Vec<String>,
);

/// [`Templated`] for a scope with `ns()`, `spec.template.spec`, `cluster` and
/// `missing_templates`, as the MachineSet's and the MachineDeployment's have.
macro_rules! templated {
    ($scope:ty) => {
        impl $crate::referenced::Templated for $scope {
            fn template(&mut self) -> $crate::referenced::TemplateParts<'_> {
                let ns = self.ns();
                let spec = &self.spec.template.spec;
                (ns, spec, &self.cluster, &mut self.missing_templates)
            }
        }
    };
}
pub(crate) use templated;

/// The templates a MachineSet's or MachineDeployment's Machine template references: each gets
/// a plain owner reference to the Cluster (upstream's `getTemplatesAndSetOwner`). The ones that
/// do not exist go into `missing`, for the caller to report: a missing template blocks scaling
/// up the current revision, not the rest of the reconcile (an old revision must still scale
/// down after its template is gone).
pub async fn reconcile_templates(
    scope: &mut impl Templated,
    ctx: &crate::context::CoreCtx,
) -> Result<(), ReconcileError> {
    use kube::ResourceExt;
    let resolver = &ctx.resolver;
    let (ns, spec, cluster, missing) = scope.template();
    let ns = ns.as_str();
    let refs = [
        Some(spec.infrastructure_ref.clone()),
        spec.bootstrap.config_ref.clone(),
    ];
    let uid = cluster.uid().unwrap_or_default();
    missing.clear();
    for r in refs
        .into_iter()
        .flatten()
        .filter(|r| r.is_set() && r.kind.ends_with("Template"))
    {
        match resolver.get(ns, &r).await? {
            None => missing.push(format!("{} {ns}/{} does not exist", r.kind, r.name)),
            Some((obj, resolved)) => {
                if obj.metadata.deletion_timestamp.is_none()
                    && !obj.owner_references().iter().any(|o| o.uid == uid)
                {
                    adopt::ensure(
                        &resolver.api(ns, &resolved),
                        &obj,
                        adopt::owner_ref("Cluster", &cluster.name_any(), &uid, false),
                        None,
                        &cluster.name_any(),
                    )
                    .await
                    .map_err(|e| match e {
                        adopt::AdoptError::Kube(e) => ExternalError::Kube(e),
                        e => ExternalError::NotAdopted(e.to_string()),
                    })?;
                }
            }
        }
    }
    Ok(())
}

/// The objects of `K` that may refer to a provider object of cluster `.1` in namespace `.0`.
type Candidates<K> = Box<dyn Fn(&str, &str) -> Vec<Arc<K>> + Send + Sync>;

/// The owner of a provider object, or, when it has no owner yet (just cloned from a template)
/// or lost its references, the objects whose refs name it, so it is adopted or put back right
/// away, not at the next resync. The search is narrowed to the object's cluster when it
/// carries the cluster-name label, as every object capw clones does: a scan of every Machine
/// for each new object made creating a thousand clusters quadratic.
fn referrers<K>(
    store: &Store<K>,
    owner_kind: &'static str,
    refs: for<'a> fn(&'a K) -> [Option<&'a ContractVersionedObjectReference>; 2],
    candidates: Candidates<K>,
) -> OwnerMap<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let store = store.clone();
    Arc::new(move |o: &DynamicObject| {
        if let Some(r) = owner_of_kind::<K>(o, owner_kind) {
            return vec![r];
        }
        let Some(types) = o.types.as_ref() else {
            return vec![];
        };
        let group = types.api_version.split('/').next().unwrap_or_default();
        let ns = o.metadata.namespace.as_deref().unwrap_or_default();
        let names_it = |k: &K| {
            refs(k).into_iter().flatten().any(|r| {
                r.kind == types.kind
                    && r.api_group == group
                    && Some(&r.name) == o.metadata.name.as_ref()
            })
        };
        let pick = |k: &Arc<K>| names_it(k).then(|| ObjectRef::from_obj(&**k));
        match o.labels().get(CLUSTER_NAME_LABEL) {
            Some(cluster) => candidates(ns, cluster).iter().filter_map(pick).collect(),
            None => store
                .state()
                .iter()
                .filter(|k| k.meta().namespace.as_deref() == Some(ns))
                .filter_map(pick)
                .collect(),
        }
    })
}

/// The Cluster a changed infrastructure cluster or control plane belongs to.
pub(crate) fn referrers_of_cluster(store: &Store<Cluster>) -> OwnerMap<Cluster> {
    let clusters = store.clone();
    referrers(
        store,
        "Cluster",
        |c| {
            [
                c.spec.infrastructure_ref.as_ref(),
                c.spec.control_plane_ref.as_ref(),
            ]
        },
        Box::new(move |ns, name| {
            clusters
                .get(&ObjectRef::new(name).within(ns))
                .into_iter()
                .collect()
        }),
    )
}

/// The Machine a changed infrastructure machine or bootstrap config belongs to.
pub(crate) fn referrers_of_machine(
    store: &Store<Machine>,
    index: Arc<ByCluster<Machine>>,
) -> OwnerMap<Machine> {
    let machines = store.clone();
    referrers(
        store,
        "Machine",
        |m| {
            [
                Some(&m.spec.infrastructure_ref),
                m.spec.bootstrap.config_ref.as_ref(),
            ]
        },
        Box::new(move |ns, cluster| index.get(&machines, ns, cluster)),
    )
}
