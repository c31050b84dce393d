//! What changes of an object wake which controller. Controllers write status often; waking
//! on every write would re-run each reconcile (and each plugin call) once per write for
//! nothing, so each watch passes only the changes the woken reconcile depends on.

use capw_api::cluster::Cluster;
use capw_api::common::names::PLUGIN_VERSION_ANNOTATION;
use capw_api::machine::Machine;
use capw_api::machinedeployment::MachineDeployment;
use capw_api::machineset::MachineSet;
use kube::{Resource, ResourceExt};
use std::hash::{Hash, Hasher};

fn hash_of(v: impl Hash) -> Option<u64> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.hash(&mut h);
    Some(h.finish())
}

/// Everything but status: spec (through the generation), labels, annotations (except the
/// plugin version the driver records), owner references, finalizers and deletion.
pub fn metadata<K: Resource>(o: &K) -> Option<u64> {
    metadata_but(o, None)
}

/// [`metadata`] without the watcher's own finalizer: for a controller that adds it and goes
/// on reconciling in the same pass, so its write must not wake it again.
pub fn metadata_but_finalizer<K: Resource>(o: &K, own: &str) -> Option<u64> {
    metadata_but(o, Some(own))
}

fn metadata_but<K: Resource>(o: &K, own_finalizer: Option<&str>) -> Option<u64> {
    let meta = o.meta();
    let finalizers: Vec<&String> = o
        .finalizers()
        .iter()
        .filter(|f| Some(f.as_str()) != own_finalizer)
        .collect();
    let annotations: Vec<(&String, &String)> = o
        .annotations()
        .iter()
        .filter(|(k, _)| k.as_str() != PLUGIN_VERSION_ANNOTATION)
        .collect();
    let owners: Vec<(&str, &str, &str, Option<bool>)> = o
        .owner_references()
        .iter()
        .map(|r| {
            (
                r.api_version.as_str(),
                r.kind.as_str(),
                r.uid.as_str(),
                r.controller,
            )
        })
        .collect();
    hash_of((
        meta.generation,
        o.labels(),
        annotations,
        owners,
        finalizers,
        meta.deletion_timestamp.is_some(),
    ))
}

/// What provider objects of a Machine depend on: its spec, annotations, pause, deletion, and
/// whether its Node was deleted (a bootstrap config keeps the join token alive again then, for
/// a machine that boots anew and joins with it).
pub fn machine_for_providers(m: &Machine) -> Option<u64> {
    use capw_api::contract::conditions::{is_true, reasons, types};
    let conditions = m.status.as_ref().map(|s| s.conditions.as_slice());
    let paused = conditions.is_some_and(|c| is_true(c, types::PAUSED));
    let node_deleted =
        conditions.is_some_and(|cs| cs.iter().any(|c| c.reason == reasons::NODE_DELETED));
    hash_of((
        m.metadata.generation,
        m.annotations(),
        paused,
        node_deleted,
        m.metadata.deletion_timestamp.is_some(),
    ))
}

/// What provider objects of a Cluster depend on: its spec, annotations, deletion, and whether
/// its control plane is initialized (workers' bootstrap waits for that).
pub fn cluster_for_providers(c: &Cluster) -> Option<u64> {
    let initialized = c
        .status
        .as_ref()
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.control_plane_initialized);
    hash_of((
        c.metadata.generation,
        c.annotations(),
        c.metadata.deletion_timestamp.is_some(),
        initialized,
    ))
}

/// What a Machine depends on of its Cluster: spec (pause) and annotations.
pub fn cluster_for_machines(c: &Cluster) -> Option<u64> {
    hash_of((c.metadata.generation, c.annotations()))
}

/// Which owners an object has, by kind: what decides whether a Cluster counts a MachineSet
/// on its own or through its MachineDeployment.
fn owner_kinds<K: Resource>(o: &K) -> Vec<&str> {
    o.meta()
        .owner_references
        .iter()
        .flatten()
        .map(|r| r.kind.as_str())
        .collect()
}

/// What a Cluster's worker counters read of a MachineSet: its desired replicas, its counters,
/// whether a deployment owns it, and deletion. Its many other status writes wake no Cluster.
pub fn machine_set_for_cluster(ms: &MachineSet) -> Option<u64> {
    let counters = ms.status.as_ref().map(|s| {
        (
            s.replicas,
            s.ready_replicas,
            s.available_replicas,
            s.up_to_date_replicas,
        )
    });
    hash_of((
        ms.spec.replicas,
        counters,
        ms.labels()
            .get(capw_api::common::names::DEPLOYMENT_NAME_LABEL),
        owner_kinds(ms),
        ms.metadata.deletion_timestamp.is_some(),
    ))
}

/// What a Cluster's worker counters and `WorkersAvailable` read of a MachineDeployment: its
/// desired replicas, its counters, its `Available` condition and deletion.
pub fn machine_deployment_for_cluster(md: &MachineDeployment) -> Option<u64> {
    let status = md.status.as_ref().map(|s| {
        (
            s.replicas,
            s.ready_replicas,
            s.available_replicas,
            s.up_to_date_replicas,
            capw_api::contract::conditions::is_true(
                &s.conditions,
                capw_api::contract::conditions::types::AVAILABLE,
            ),
        )
    });
    hash_of((
        md.spec.replicas,
        status,
        md.metadata.deletion_timestamp.is_some(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn with_finalizers(f: &[&str]) -> ConfigMap {
        let mut o = ConfigMap::default();
        o.metadata.name = Some("o".into());
        o.metadata.finalizers = Some(f.iter().map(|s| s.to_string()).collect());
        o
    }

    #[test]
    fn the_own_finalizer_does_not_count_but_another_does() {
        let bare = with_finalizers(&[]);
        let own = with_finalizers(&["mine"]);
        let other = with_finalizers(&["theirs"]);
        assert_eq!(
            metadata_but_finalizer(&bare, "mine"),
            metadata_but_finalizer(&own, "mine")
        );
        assert_ne!(
            metadata_but_finalizer(&bare, "mine"),
            metadata_but_finalizer(&other, "mine")
        );
        assert_ne!(metadata(&bare), metadata(&own));
    }
}
