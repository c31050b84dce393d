//! Managed topologies (upstream's `internal/controllers/topology` and `exp/topology`): a
//! Cluster with `spec.topology` gets its infrastructure cluster, control plane,
//! MachineDeployments and MachineHealthChecks generated from its ClusterClass, and follows the
//! class and the topology as they change.
//!
//! One reconcile, in upstream's order: the class (reconciled first by its own controller), the
//! variables defaulted and checked, the [`blueprint`] (every template of the class), the
//! [`current`] state, the [`desired`] state (names, versions by [`upgrade`] sequencing, the
//! class's [`patches`] over the templates), then [`state`], which writes the difference;
//! [`status`] words the `TopologyReconciled` condition. [`finalizers`] deletes the templates a
//! topology MachineDeployment or MachineSet leaves behind.

mod blueprint;
mod controller;
mod current;
mod desired;
pub mod finalizers;
pub mod patches;
mod state;
mod status;
pub mod template;
pub mod upgrade;
pub mod variables;
mod watches;

pub use state::FIELD_MANAGER;

/// Deletes `name` in the background; one that is already gone counts as deleted, since
/// the topology deletes what it no longer wants and may race the garbage collector.
/// Whether it was there to delete.
async fn delete_if_present<K>(api: &kube::Api<K>, name: &str) -> Result<bool, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api
        .delete(name, &kube::api::DeleteParams::background())
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}
pub use watches::CONTROLLER;

/// Why a topology could not be reconciled; the message is the `TopologyReconciled` condition's.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("{field}: failed to get {kind} {name}: {why}")]
    Blueprint {
        field: String,
        kind: String,
        name: String,
        why: String,
    },
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Patch(#[from] patches::PatchError),
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    External(#[from] capw_reconcile::external::ExternalError),
    #[error("encoding an object: {0}")]
    Json(#[from] serde_json::Error),
}
