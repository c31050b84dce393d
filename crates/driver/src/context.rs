//! Gathering what a call needs: the owning Machine and Cluster, the Cluster's infrastructure
//! cluster, the Machine's bootstrap data, the cluster's Secrets (`kubeadm/secrets.rs`), and a control
//! plane's Machines.

use super::kubeadm;
use super::{DriverError, KindCtx, Role};
use capw_api::cluster::Cluster;
use capw_api::common::names::{
    CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, CONTROL_PLANE_NAME_LABEL, PAUSED_ANNOTATION,
};
use capw_api::machine::Machine;
use capw_runtime::Context;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use std::sync::Arc;

/// The context of one call and what the write-back needs of it.
pub(super) struct Around {
    pub context: Context,
    pub cluster: Option<Cluster>,
    pub paused: bool,
    /// Whether core has set the owner the contract asks providers to wait for: a Machine for
    /// infrastructure machines and bootstrap configs, a Cluster for the others.
    pub owned: bool,
    pub owned_machines: Vec<Machine>,
    /// The Machine a machine-scoped object belongs to.
    pub machine: Option<Machine>,
    /// Host work on the object (the bootstrap token's upkeep) needs it looked at again within
    /// this time, whatever the plugin asks.
    pub requeue_within: Option<std::time::Duration>,
}

pub(super) fn owner_name<'a>(obj: &'a DynamicObject, kind: &str) -> Option<&'a str> {
    obj.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.kind == kind && o.api_version.starts_with("cluster.x-k8s.io/"))
        .map(|o| o.name.as_str())
}

/// An object as the context carries it: trimmed (`capw_reconcile::trim`), as the caches it
/// comes from already hold it, so it is serialized as it is; one that is not gets a trimmed
/// clone.
fn json<T: Resource + Clone + serde::Serialize>(v: &T) -> Option<String> {
    if !capw_reconcile::trim::needed(v) {
        return serde_json::to_string(v).ok();
    }
    let mut v = v.clone();
    capw_reconcile::trim::for_cache(&mut v);
    serde_json::to_string(&v).ok()
}

/// The Machine a machine-scoped object belongs to and the object's Cluster, from the caches:
/// the Cluster through that Machine, else the owner reference, else the cluster-name label.
pub(super) fn owners(
    obj: &DynamicObject,
    kctx: &KindCtx,
) -> (Option<Arc<Machine>>, Option<Arc<Cluster>>) {
    let caches = &kctx.driver.caches;
    let ns = obj.namespace().unwrap_or_default();
    let machine = owner_name(obj, "Machine")
        .filter(|_| kctx.role.machine_scoped())
        .and_then(|name| caches.machines.get(&ObjectRef::new(name).within(&ns)));
    let cluster = machine
        .as_ref()
        .map(|m| m.spec.cluster_name.clone())
        .or_else(|| owner_name(obj, "Cluster").map(str::to_string))
        .or_else(|| obj.labels().get(CLUSTER_NAME_LABEL).cloned())
        .and_then(|name| caches.clusters.get(&ObjectRef::new(&name).within(&ns)));
    (machine, cluster)
}

/// Whether the object or its Cluster is paused.
pub(super) fn is_paused(obj: &DynamicObject, cluster: Option<&Cluster>) -> bool {
    obj.annotations().contains_key(PAUSED_ANNOTATION)
        || cluster.is_some_and(capw_api::cluster::is_paused)
}

pub(super) async fn gather(obj: &DynamicObject, kctx: &KindCtx) -> Result<Around, DriverError> {
    let caches = &kctx.driver.caches;
    let ns = obj.namespace().unwrap_or_default();
    let machines: Api<Machine> = Api::namespaced(kctx.driver.client.clone(), &ns);
    let (machine, cluster) = owners(obj, kctx);
    let machine = machine.map(|m| (*m).clone());
    let cluster = cluster.map(|c| (*c).clone());
    let paused = is_paused(obj, cluster.as_ref());
    let mut context = Context {
        object: json(obj).unwrap_or_default(),
        cluster: cluster.as_ref().and_then(json),
        machine: machine.as_ref().and_then(json),
        infrastructure_cluster: None,
        bootstrap_data: None,
        secrets: vec![],
        owned_machines: vec![],
    };
    let mut around = Around {
        context: Context::of(String::new()),
        cluster: cluster.clone(),
        paused,
        owned: if kctx.role.machine_scoped() {
            machine.is_some()
        } else {
            owner_name(obj, "Cluster").is_some()
        },
        owned_machines: vec![],
        machine: machine.clone(),
        requeue_within: None,
    };
    if paused {
        around.context = context;
        return Ok(around);
    }
    if kctx.role != Role::InfraCluster
        && let Some(r) = cluster
            .as_ref()
            .and_then(|c| c.spec.infrastructure_ref.as_ref())
            .filter(|r| r.is_set())
        && let Ok(Some((infra, _))) = kctx.driver.resolver.get(&ns, r).await
    {
        context.infrastructure_cluster = json(&*infra);
    }
    if kctx.role == Role::InfraMachine
        && let Some(secret) = machine
            .as_ref()
            .and_then(|m| m.spec.bootstrap.data_secret_name.clone())
    {
        // The Secret was written before the Machine named it, but the cache may not have it yet.
        let s = match caches.secrets.get(&ObjectRef::new(&secret).within(&ns)) {
            Some(s) => Some((*s).clone()),
            None => {
                Api::<Secret>::namespaced(kctx.driver.client.clone(), &ns)
                    .get_opt(&secret)
                    .await?
            }
        };
        if let Some(value) = s.as_ref().and_then(|s| s.data.as_ref()?.get("value")) {
            context.bootstrap_data = Some(String::from_utf8_lossy(&value.0).into_owned());
        }
    }
    if matches!(kctx.role, Role::ControlPlane | Role::BootstrapConfig)
        && let Some(c) = &cluster
        && c.metadata.deletion_timestamp.is_none()
        && obj.metadata.deletion_timestamp.is_none()
    {
        let worker = kctx.role == Role::BootstrapConfig
            && machine
                .as_ref()
                .is_some_and(|m| !m.labels().contains_key(CONTROL_PLANE_LABEL));
        context.secrets = kubeadm::secrets::cluster_secrets(kctx, obj, c, worker).await?;
        if kubeadm::Kind::of(&kctx.ar) == Some(kubeadm::Kind::Config) {
            context
                .secrets
                .extend(kubeadm::files::sources(kctx, obj).await?);
        }
    }
    if kctx.role == Role::ControlPlane
        && let Some(c) = &cluster
    {
        let uid = obj.metadata.uid.clone().unwrap_or_default();
        let cluster_name = c.name_any();
        let mine = caches
            .machines_by_cluster
            .get(&caches.machines, &ns, &cluster_name)
            .into_iter()
            .filter(|m| m.labels().contains_key(CONTROL_PLANE_LABEL));
        let cp_name = obj.name_any();
        let mut owned = vec![];
        for m in mine {
            let m = (*m).clone();
            let controller = m
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true))
                .cloned();
            match controller {
                Some(o) if o.uid == uid => owned.push(m),
                // A control-plane Machine that lost its owner references (a restore, an
                // accident) is adopted back by the control plane that created it.
                None if m.labels().get(CONTROL_PLANE_NAME_LABEL) == Some(&cp_name) => {
                    let mut refs = m.owner_references().to_vec();
                    refs.push(OwnerReference {
                        api_version: kctx.ar.api_version.clone(),
                        kind: kctx.ar.kind.clone(),
                        name: cp_name.clone(),
                        uid: uid.clone(),
                        controller: Some(true),
                        block_owner_deletion: Some(true),
                    });
                    let patch = serde_json::json!({"metadata": {"ownerReferences": refs}});
                    machines
                        .patch(
                            &m.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(&patch),
                        )
                        .await?;
                    owned.push(m);
                }
                _ => {}
            }
        }
        around.owned_machines = owned;
        context.owned_machines = around.owned_machines.iter().filter_map(json).collect();
    }
    around.context = context;
    Ok(around)
}
