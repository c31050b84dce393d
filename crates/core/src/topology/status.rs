//! The Cluster's `TopologyReconciled` condition (upstream's `reconcileTopologyReconciledCondition`):
//! which step of the topology is pending, in upstream's reasons and words, so a user sees why
//! the workers have not taken the new version yet.

use super::upgrade::{ControlPlaneTracker, WorkerTracker};
use std::collections::BTreeSet;

pub(super) use capw_api::contract::conditions::types::TOPOLOGY_RECONCILED;

/// A condition as (status, reason, message).
pub(super) type Verdict = (&'static str, &'static str, String);

pub(super) const CLASS_NOT_RECONCILED: &str = "ClusterClass not reconciled. If this condition persists please check ClusterClass status. A ClusterClass is reconciled if.status.observedGeneration == .metadata.generation is true. If this is not the case either ClusterClass reconciliation failed or the ClusterClass is paused";

pub(super) fn failed(message: String) -> Verdict {
    ("False", "ReconcileFailed", message)
}

pub(super) fn class_not_reconciled() -> Verdict {
    (
        "False",
        "ClusterClassNotReconciled",
        CLASS_NOT_RECONCILED.into(),
    )
}

pub(super) fn paused() -> Verdict {
    (
        "False",
        "Paused",
        "Cluster spec.paused is set to true".into(),
    )
}

pub(super) fn deleting() -> Verdict {
    ("False", "Deleting", "Cluster is deleting".into())
}

fn names(n: &BTreeSet<String>) -> String {
    n.iter().cloned().collect::<Vec<_>>().join(", ")
}

/// After a reconcile that wrote what it could. `cp_spec_version`: the control plane's
/// `spec.version` as it was read.
pub(super) fn after_reconcile(
    version: &str,
    cp: &ControlPlaneTracker,
    workers: &WorkerTracker,
    cp_spec_version: Option<&str>,
) -> Verdict {
    let (reason, mut message) = if cp.pending {
        (
            "ControlPlaneUpgradePending",
            format!("Control plane rollout and upgrade to version {version} on hold."),
        )
    } else if !workers.pending_upgrade.is_empty() {
        (
            "MachineDeploymentsUpgradePending",
            format!(
                "MachineDeployment(s) {} rollout and upgrade to version {version} on hold.",
                names(&workers.pending_upgrade)
            ),
        )
    } else if !workers.pending_create.is_empty() {
        (
            "MachineDeploymentsCreatePending",
            format!(
                "MachineDeployment(s) for Topologies {} creation on hold.",
                names(&workers.pending_create)
            ),
        )
    } else if !workers.deferred.is_empty() {
        (
            "MachineDeploymentsUpgradeDeferred",
            format!(
                "MachineDeployment(s) {} rollout and upgrade to version {version} deferred.",
                names(&workers.deferred)
            ),
        )
    } else {
        return ("True", "ReconcileSucceeded", String::new());
    };
    if cp.provisioning {
        message.push_str(" Control plane is completing initial provisioning");
    } else if cp.upgrading {
        message.push_str(&format!(
            " Control plane is upgrading to version {}",
            cp_spec_version.unwrap_or_default()
        ));
    } else if !workers.upgrading.is_empty() {
        message.push_str(&format!(
            " MachineDeployment(s) {} are upgrading",
            names(&workers.upgrading)
        ));
    }
    ("False", reason, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_pending_step_names_the_reason_and_what_it_waits_for() {
        let cp = ControlPlaneTracker {
            upgrading: true,
            ..Default::default()
        };
        let mut w = WorkerTracker::default();
        w.pending_upgrade.insert("md-0".into());
        let (s, r, m) = after_reconcile("v1.29.10", &cp, &w, Some("v1.29.10"));
        assert_eq!((s, r), ("False", "MachineDeploymentsUpgradePending"));
        assert_eq!(
            m,
            "MachineDeployment(s) md-0 rollout and upgrade to version v1.29.10 on hold. Control plane is upgrading to version v1.29.10"
        );
        let done = after_reconcile("v1.29.10", &Default::default(), &Default::default(), None);
        assert_eq!(done.1, "ReconcileSucceeded");
    }
}
