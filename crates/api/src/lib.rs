//! The API types the host owns, as Rust types; their CRDs (`crds/`) are generated from these.

pub mod cluster;
pub mod clusterclass;
pub mod common;
pub mod contract;
pub mod machine;
pub mod machinedeployment;
pub mod machinehealthcheck;
pub mod machineset;
pub mod wasmprovider;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Every CRD the host installs, with the file name it has under `crds/`.
pub fn crds() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        ("cluster.x-k8s.io_clusters.yaml", cluster::Cluster::crd()),
        ("cluster.x-k8s.io_machines.yaml", machine::Machine::crd()),
        (
            "cluster.x-k8s.io_machinesets.yaml",
            machineset::MachineSet::crd(),
        ),
        (
            "cluster.x-k8s.io_machinedeployments.yaml",
            machinedeployment::MachineDeployment::crd(),
        ),
        (
            "cluster.x-k8s.io_machinehealthchecks.yaml",
            machinehealthcheck::MachineHealthCheck::crd(),
        ),
        (
            "runtime.capw.dev_wasmproviders.yaml",
            wasmprovider::WasmProvider::crd(),
        ),
        (
            "cluster.x-k8s.io_clusterclasses.yaml",
            clusterclass::ClusterClass::crd(),
        ),
    ]
}

/// The YAML of a generated CRD, as `crds/` holds it.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_yaml::Error> {
    Ok(format!(
        "# Generated from the Rust types in crates/api by `capw crds --write crds`; do not edit.\n{}",
        serde_yaml::to_string(crd)?
    ))
}
