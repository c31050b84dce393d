//! What changes of an object wake which controller. Controllers write status often; waking
//! on every write would re-run each reconcile (and each plugin call) once per write for
//! nothing, so each watch passes only the changes the woken reconcile depends on.

use crate::api::cluster::Cluster;
use crate::api::common::names::PLUGIN_VERSION_ANNOTATION;
use crate::api::machine::Machine;
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
    let meta = o.meta();
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
        o.finalizers(),
        meta.deletion_timestamp.is_some(),
    ))
}

/// What provider objects of a Machine depend on: its spec, annotations, pause and deletion.
pub fn machine_for_providers(m: &Machine) -> Option<u64> {
    let paused = m.status.as_ref().is_some_and(|s| {
        crate::contract::conditions::is_true(
            &s.conditions,
            crate::contract::conditions::types::PAUSED,
        )
    });
    hash_of((
        m.metadata.generation,
        m.annotations(),
        paused,
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
