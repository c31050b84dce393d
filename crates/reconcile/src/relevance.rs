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

/// [`metadata`] for the driver, whose reconcile adds its own finalizer and goes on to call the
/// plugin: that write must not wake it again. The finalizer going missing from an object the
/// driver has already reconciled (it carries the plugin version) must, so it is put back.
pub fn metadata_for_driver<K: Resource>(o: &K, own_finalizer: &str) -> Option<u64> {
    let lost = !o.finalizers().iter().any(|f| f == own_finalizer)
        && o.annotations().contains_key(PLUGIN_VERSION_ANNOTATION);
    hash_of((metadata_but(o, Some(own_finalizer)), lost))
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

/// What a Machine's infrastructure machine depends on: [`machine_for_providers`] but the
/// `providerID`, which the Machine copies from the infrastructure machine itself.
pub fn machine_for_infrastructure(m: &Machine) -> Option<u64> {
    machine_for_providers(m, false)
}

/// What a Machine's bootstrap config depends on: [`machine_for_providers`] but the
/// `dataSecretName`, which the Machine copies from the bootstrap config itself, and the
/// `providerID`: the bootstrap data is rendered before there is a machine to have one.
pub fn machine_for_bootstrap(m: &Machine) -> Option<u64> {
    machine_for_providers(m, true)
}

/// What provider objects of a Machine depend on: its spec, annotations, pause, deletion, and
/// whether its Node was deleted (a bootstrap config keeps the join token alive again then, for
/// a machine that boots anew and joins with it). The spec is hashed without the fields core
/// copies from the providers' own answers, so the copy does not call them again.
fn machine_for_providers(m: &Machine, bootstrap: bool) -> Option<u64> {
    use capw_api::contract::conditions::{is_true, reasons, types};
    let conditions = m.status.as_ref().map(|s| s.conditions.as_slice());
    let paused = conditions.is_some_and(|c| is_true(c, types::PAUSED));
    let node_deleted =
        conditions.is_some_and(|cs| cs.iter().any(|c| c.reason == reasons::NODE_DELETED));
    let mut spec = m.spec.clone();
    spec.provider_id = None;
    if bootstrap {
        spec.bootstrap.data_secret_name = None;
    }
    hash_of((
        serde_json::to_vec(&spec).ok(),
        m.annotations(),
        paused,
        node_deleted,
        m.metadata.deletion_timestamp.is_some(),
    ))
}

/// What provider objects of a Cluster depend on: its spec, annotations, deletion, and whether
/// its control plane is initialized (workers' bootstrap waits for that).
pub fn cluster_for_providers(c: &Cluster) -> Option<u64> {
    hash_of((c.metadata.generation, cluster_but_spec(c)))
}

/// What infrastructure objects of a Cluster depend on: [`cluster_for_providers`] but its
/// `controlPlaneEndpoint`. The infrastructure cluster gave it, and the Cluster copies it;
/// infrastructure machines do not read it (upstream's wake only on pause and provisioning).
pub fn cluster_for_infrastructure(c: &Cluster) -> Option<u64> {
    let mut spec = c.spec.clone();
    spec.control_plane_endpoint = None;
    hash_of((serde_json::to_vec(&spec).ok(), cluster_but_spec(c)))
}

fn cluster_but_spec(c: &Cluster) -> impl Hash + '_ {
    (
        c.annotations(),
        c.metadata.deletion_timestamp.is_some(),
        control_plane_initialized(c),
    )
}

fn control_plane_initialized(c: &Cluster) -> Option<bool> {
    c.status
        .as_ref()
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.control_plane_initialized)
}

/// What a Machine depends on of its Cluster: spec (pause) and annotations.
pub fn cluster_for_machines(c: &Cluster) -> Option<u64> {
    hash_of((c.metadata.generation, c.annotations()))
}

/// What a MachineSet depends on of its Cluster: [`cluster_for_machines`], and whether its
/// control plane is initialized. Its preflight checks hold worker Machines back until the
/// control plane has a version; upstream looks again 15 s later, and this wakes it when the
/// control plane comes up instead.
pub fn cluster_for_machine_sets(c: &Cluster) -> Option<u64> {
    hash_of((cluster_for_machines(c), control_plane_initialized(c)))
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

/// What a Cluster reads of one of its Machines: whether it is a control-plane, set or
/// stand-alone Machine, its `Ready`, `Available` and `UpToDate` (the stand-alone workers'
/// counters), whether it has a Node (a Cluster without a control-plane provider is initialized
/// by one), and deletion. A Machine's status is written several times on its way up; the
/// reasons and messages in between wake no Cluster.
pub fn machine_for_cluster(m: &Machine) -> Option<u64> {
    use capw_api::common::names::{CONTROL_PLANE_LABEL, SET_NAME_LABEL};
    use capw_api::contract::conditions::{is_true, types};
    let status = m.status.as_ref().map(|s| {
        (
            [types::READY, types::AVAILABLE, types::UP_TO_DATE].map(|t| is_true(&s.conditions, t)),
            s.node_ref.is_some(),
        )
    });
    let owners: Vec<(&str, Option<bool>)> = m
        .owner_references()
        .iter()
        .map(|o| (o.kind.as_str(), o.controller))
        .collect();
    hash_of((
        m.labels().contains_key(CONTROL_PLANE_LABEL),
        m.labels().contains_key(SET_NAME_LABEL),
        owners,
        status,
        m.metadata.deletion_timestamp.is_some(),
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

    /// A Cluster at generation 1 with an empty spec and no status.
    fn cluster() -> Cluster {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c", "namespace": "default", "generation": 1},
            "spec": {},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn object(finalizers: &[&str], reconciled: bool) -> ConfigMap {
        let mut o = ConfigMap::default();
        o.metadata.name = Some("o".into());
        o.metadata.finalizers = Some(finalizers.iter().map(|s| s.to_string()).collect());
        if reconciled {
            o.metadata.annotations =
                Some([(PLUGIN_VERSION_ANNOTATION.to_string(), "p/1".to_string())].into());
        }
        o
    }

    #[test]
    fn the_driver_is_not_woken_by_its_own_first_write_but_by_a_lost_finalizer() {
        let h = |o: &ConfigMap| metadata_for_driver(o, "mine");
        let new = object(&[], false);
        let taken = object(&["mine"], true);
        let paused = object(&["mine"], false);
        let stripped = object(&[], true);
        assert_eq!(h(&new), h(&taken));
        assert_eq!(h(&new), h(&paused));
        assert_ne!(h(&taken), h(&stripped));
        assert_ne!(h(&new), h(&object(&["theirs"], false)));
        assert_ne!(metadata(&new), metadata(&paused));
    }

    #[test]
    fn providers_are_not_woken_by_their_own_answers_copied_to_the_machine() {
        let mut m: Machine = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "m", "namespace": "default"},
            "spec": {"clusterName": "c", "bootstrap": {},
                     "infrastructureRef": {"apiGroup": "x", "kind": "Y", "name": "z"}},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let (infra, bootstrap) = (machine_for_infrastructure(&m), machine_for_bootstrap(&m));
        m.spec.bootstrap.data_secret_name = Some("m-data".into());
        assert_ne!(
            machine_for_infrastructure(&m),
            infra,
            "the data to boot with"
        );
        assert_eq!(machine_for_bootstrap(&m), bootstrap);
        let infra = machine_for_infrastructure(&m);
        m.spec.provider_id = Some("in-memory://m".into());
        assert_eq!(machine_for_infrastructure(&m), infra);
        assert_eq!(machine_for_bootstrap(&m), bootstrap);
        m.spec.version = Some("v1.30.4".into());
        assert_ne!(machine_for_infrastructure(&m), infra);
        assert_ne!(machine_for_bootstrap(&m), bootstrap);
    }

    #[test]
    fn infrastructure_is_not_woken_by_the_endpoint_it_gave_the_cluster() {
        let mut c = cluster();
        let (infra, others) = (cluster_for_infrastructure(&c), cluster_for_providers(&c));
        c.spec.control_plane_endpoint =
            serde_json::from_value(serde_json::json!({"host": "127.0.0.1", "port": 6443}))
                .unwrap_or_else(|e| panic!("{e}"));
        c.metadata.generation = Some(2);
        assert_eq!(cluster_for_infrastructure(&c), infra);
        assert_ne!(
            cluster_for_providers(&c),
            others,
            "kubeadm needs the endpoint"
        );
        c.spec.paused = Some(true);
        c.metadata.generation = Some(3);
        assert_ne!(cluster_for_infrastructure(&c), infra, "pause");
    }

    #[test]
    fn a_machine_set_wakes_when_its_control_plane_comes_up() {
        let mut c = cluster();
        let (sets, machines) = (cluster_for_machine_sets(&c), cluster_for_machines(&c));
        c.status = serde_json::from_value(
            serde_json::json!({"initialization": {"controlPlaneInitialized": true}}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(cluster_for_machine_sets(&c), sets);
        assert_eq!(cluster_for_machines(&c), machines);
    }

    /// A Machine's waiting messages wake no Cluster; what it counts (`Ready`) and its Node do.
    #[test]
    fn a_cluster_wakes_for_what_it_counts_of_a_machine() {
        let machine = |reason: &str, ready: &str, node: bool| -> Machine {
            let mut status = serde_json::json!({"conditions": [
                {"type": "Ready", "status": ready, "reason": reason, "message": reason,
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
            if node {
                status["nodeRef"] = serde_json::json!({"name": "n"});
            }
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "m", "namespace": "default"},
                "spec": {"clusterName": "c", "bootstrap": {},
                         "infrastructureRef": {"apiGroup": "x", "kind": "Y", "name": "z"}},
                "status": status,
            }))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let waiting = machine_for_cluster(&machine("WaitingForBootstrapData", "False", false));
        assert_eq!(
            machine_for_cluster(&machine("VMBooting", "False", false)),
            waiting
        );
        assert_ne!(
            machine_for_cluster(&machine("VMBooting", "False", true)),
            waiting
        );
        assert_ne!(
            machine_for_cluster(&machine("Ready", "True", false)),
            waiting
        );
    }
}
