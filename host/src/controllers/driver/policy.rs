//! What the host accepts of a plugin's result before it writes anything (SECURITY.md): a result
//! that breaks a rule is refused whole, as `PluginInvalidResult` naming the rule, and nothing of
//! it is written.
//!
//! - A status patch is the plugin's own status: it never touches a field the contract gives a
//!   meaning to. Those the host sets from the typed result (so `dataSecretName` is always the
//!   Secret the host wrote, never another cluster's), or core reads them.
//! - A kubeconfig must be one the host would build a client from (see
//!   [`crate::controllers::kubeconfig`]) for this Cluster's endpoint.
//! - A control plane asks for at most `spec.replicas` + 1 (the surge) Machines in all.

use super::context::Around;
use super::writeback::Result as Outcome;
use crate::controllers::kubeconfig;
use kube::api::DynamicObject;
use serde_json::Value;

/// Status fields the contract defines; a status patch may set none of them.
pub const CONTRACT_STATUS_FIELDS: &[&str] = &[
    "initialization",
    "ready",
    "initialized",
    "dataSecretName",
    "failureDomains",
    "failureDomain",
    "addresses",
    "interruptible",
    "conditions",
    "v1beta2",
    "deprecated",
    "replicas",
    "readyReplicas",
    "availableReplicas",
    "upToDateReplicas",
    "updatedReplicas",
    "unavailableReplicas",
    "version",
    "selector",
    "observedGeneration",
    "failureReason",
    "failureMessage",
];

/// The most Machines a control plane may have at once, as upstream's rollout allows.
const SURGE: i64 = 1;

fn common(r: &Outcome) -> &crate::runtime::plugin::Common {
    match r {
        Outcome::InfraCluster(r) => &r.common,
        Outcome::InfraMachine(r) => &r.common,
        Outcome::Bootstrap(r) => &r.common,
        Outcome::ControlPlane(r) => &r.common,
    }
}

/// Why the result must not be written, if it must not.
pub(super) fn check(obj: &DynamicObject, around: &Around, r: &Outcome) -> Result<(), String> {
    if let Some(text) = &common(r).status_patch {
        let patch: Value =
            serde_json::from_str(text).map_err(|e| format!("status-patch is not JSON: {e}"))?;
        let Some(map) = patch.as_object() else {
            return Err("status-patch must be a JSON object".into());
        };
        if let Some(field) = CONTRACT_STATUS_FIELDS
            .iter()
            .find(|f| map.contains_key(**f))
        {
            return Err(format!(
                "status-patch sets status.{field}, a Cluster API contract field: the host sets it \
                 from the typed result (conditions go in `conditions`), so leave it out of the patch"
            ));
        }
    }
    if let Outcome::ControlPlane(cp) = r {
        if let Some(text) = &cp.kubeconfig {
            let endpoint = around
                .cluster
                .as_ref()
                .and_then(|c| c.spec.control_plane_endpoint.as_ref());
            kubeconfig::sanitize(text, endpoint)
                .map_err(|e| format!("kubeconfig refused, nothing was written: {e}"))?;
        }
        let replicas = obj
            .data
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1)
            .max(0);
        let have = around.owned_machines.len() as i64;
        let asked = cp.machines_to_create.len() as i64;
        if have + asked > replicas + SURGE {
            return Err(format!(
                "machines-to-create asks for {asked} Machines with {have} existing, over spec.replicas ({replicas}) + {SURGE}: a control plane may have at most replicas + maxSurge Machines"
            ));
        }
        let mut names: Vec<&str> = cp
            .machines_to_create
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err("machines-to-create names the same Machine twice".into());
        }
    }
    Ok(())
}
