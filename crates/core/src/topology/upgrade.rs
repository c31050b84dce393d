//! Upgrade sequencing (upstream v1.11's `computeControlPlaneVersion`,
//! `computeMachineDeploymentVersion` and the upgrade tracker): which version the control plane
//! and each MachineDeployment get in this reconcile when `spec.topology.version` moves. The
//! control plane goes first and only from a stable state; the MachineDeployments follow in
//! list order once it is stable again, at most `upgrade-concurrency` at a time, and the hold
//! and defer annotations keep them back. Pure functions of what the reconcile read.

use std::collections::BTreeSet;

/// `topology.cluster.x-k8s.io/defer-upgrade` on a MachineDeployment topology: this one waits.
pub const DEFER_UPGRADE: &str = "topology.cluster.x-k8s.io/defer-upgrade";
/// `topology.cluster.x-k8s.io/hold-upgrade-sequence`: this one and every later one wait.
pub const HOLD_UPGRADE_SEQUENCE: &str = "topology.cluster.x-k8s.io/hold-upgrade-sequence";
/// `topology.cluster.x-k8s.io/upgrade-concurrency` on the Cluster (default 1).
pub const UPGRADE_CONCURRENCY: &str = "topology.cluster.x-k8s.io/upgrade-concurrency";

/// The control plane as it is: its `spec.version` and `status.version`.
#[derive(Debug, Clone)]
pub struct ControlPlaneNow {
    pub spec_version: String,
    pub status_version: Option<String>,
}

impl ControlPlaneNow {
    /// No `status.version` yet: the first Machines are still being made.
    pub fn provisioning(&self) -> bool {
        self.status_version.is_none()
    }

    /// `spec.version` above `status.version` (build metadata counts, as upstream's
    /// `version.Compare` with build tags does).
    pub fn upgrading(&self) -> bool {
        match &self.status_version {
            Some(status) => newer(&self.spec_version, status),
            None => false,
        }
    }
}

fn parse(v: &str) -> Option<semver::Version> {
    semver::Version::parse(v.trim_start_matches('v')).ok()
}

/// Whether `a` is above `b`; with equal versions, build metadata decides as upstream's
/// build-tag comparison does.
fn newer(a: &str, b: &str) -> bool {
    match (parse(a), parse(b)) {
        (Some(a), Some(b)) => a.cmp_precedence(&b).then(a.build.cmp(&b.build)).is_gt(),
        _ => a != b,
    }
}

/// What the control plane is doing, as upstream's `ControlPlaneUpgradeTracker`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ControlPlaneTracker {
    pub provisioning: bool,
    pub upgrading: bool,
    /// It takes the new version in this reconcile.
    pub starting: bool,
    /// It should take the new version and does not yet.
    pub pending: bool,
}

impl ControlPlaneTracker {
    pub fn stable(&self) -> bool {
        !(self.provisioning || self.upgrading || self.starting || self.pending)
    }
}

/// The control plane's version for this reconcile. `workers_upgrading`: a MachineDeployment
/// is still rolling to its version.
pub fn control_plane_version(
    desired: &str,
    current: Option<&ControlPlaneNow>,
    workers_upgrading: bool,
) -> (String, ControlPlaneTracker) {
    let mut t = ControlPlaneTracker::default();
    let Some(cp) = current else {
        return (desired.to_string(), t);
    };
    t.pending = cp.spec_version != desired;
    if cp.provisioning() {
        t.provisioning = true;
        return (cp.spec_version.clone(), t);
    }
    if cp.upgrading() {
        t.upgrading = true;
        return (cp.spec_version.clone(), t);
    }
    if !t.pending || workers_upgrading {
        return (cp.spec_version.clone(), t);
    }
    t.pending = false;
    t.starting = true;
    (desired.to_string(), t)
}

/// A MachineDeployment topology as it is.
#[derive(Debug, Clone, Default)]
pub struct WorkerNow {
    pub name: String,
    /// Its MachineDeployment's `spec.template.spec.version`; `None` when it does not exist yet.
    pub version: Option<String>,
    /// Some of its Machines are not at its version yet.
    pub rolling: bool,
    /// The topology's `defer-upgrade` annotation.
    pub defer: bool,
    /// The topology's `hold-upgrade-sequence` annotation.
    pub hold: bool,
}

/// What the MachineDeployments are doing, as upstream's `WorkerUpgradeTracker`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerTracker {
    pub upgrading: BTreeSet<String>,
    pub pending_create: BTreeSet<String>,
    pub pending_upgrade: BTreeSet<String>,
    pub deferred: BTreeSet<String>,
}

/// Each MachineDeployment's version for this reconcile, in topology order.
pub fn machine_deployment_versions(
    desired: &str,
    control_plane: &ControlPlaneTracker,
    workers: &[WorkerNow],
    concurrency: usize,
) -> (Vec<String>, WorkerTracker) {
    let mut t = WorkerTracker {
        upgrading: workers
            .iter()
            .filter(|w| w.rolling)
            .map(|w| w.name.clone())
            .collect(),
        ..Default::default()
    };
    let mut held = false;
    let mut out = Vec::with_capacity(workers.len());
    for w in workers {
        held |= w.hold;
        let Some(current) = &w.version else {
            if !control_plane.stable() {
                t.pending_create.insert(w.name.clone());
            }
            out.push(desired.to_string());
            continue;
        };
        if current == desired {
            out.push(current.clone());
            continue;
        }
        let keep = if w.defer || held {
            t.deferred.insert(w.name.clone());
            true
        } else {
            t.upgrading.len() >= concurrency.max(1) || !control_plane.stable()
        };
        if keep {
            t.pending_upgrade.insert(w.name.clone());
            out.push(current.clone());
        } else {
            t.upgrading.insert(w.name.clone());
            out.push(desired.to_string());
        }
    }
    (out, t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(spec: &str, status: Option<&str>) -> ControlPlaneNow {
        ControlPlaneNow {
            spec_version: spec.into(),
            status_version: status.map(String::from),
        }
    }

    /// Upstream's `TestComputeControlPlaneVersion` rows (Runtime SDK off).
    #[test]
    fn compute_control_plane_version() {
        let v = |c: Option<&ControlPlaneNow>, md: bool| control_plane_version("v1.29.0", c, md);
        // No control plane yet: the topology's version.
        assert_eq!(v(None, false).0, "v1.29.0");
        // At the version and stable.
        let (ver, t) = v(Some(&cp("v1.29.0", Some("v1.29.0"))), false);
        assert_eq!((ver.as_str(), t.stable()), ("v1.29.0", true));
        // Provisioning or upgrading: keeps its version, pending the new one.
        let (ver, t) = v(Some(&cp("v1.28.0", None)), false);
        assert_eq!(
            (ver.as_str(), t.provisioning, t.pending),
            ("v1.28.0", true, true)
        );
        let (ver, t) = v(Some(&cp("v1.28.0", Some("v1.27.0"))), false);
        assert_eq!(
            (ver.as_str(), t.upgrading, t.stable()),
            ("v1.28.0", true, false)
        );
        // Stable, but a MachineDeployment is still rolling: waits.
        let (ver, t) = v(Some(&cp("v1.28.0", Some("v1.28.0"))), true);
        assert_eq!((ver.as_str(), t.pending), ("v1.28.0", true));
        // Stable and nothing rolling: starts the upgrade.
        let (ver, t) = v(Some(&cp("v1.28.0", Some("v1.28.0"))), false);
        assert_eq!(
            (ver.as_str(), t.starting, t.pending, t.stable()),
            ("v1.29.0", true, false, false)
        );
        // Build metadata counts as a newer version.
        assert!(cp("v1.29.0+b", Some("v1.29.0+a")).upgrading());
        assert!(!cp("v1.29.0", Some("v1.29.0")).upgrading());
    }

    fn md(name: &str, version: Option<&str>) -> WorkerNow {
        WorkerNow {
            name: name.into(),
            version: version.map(String::from),
            ..Default::default()
        }
    }

    /// Upstream's `TestComputeMachineDeploymentVersion` and `TestIsMachineDeploymentDeferred`
    /// rows: pending create, equal versions, deferral, hold, concurrency, an unstable control
    /// plane.
    #[test]
    fn compute_machine_deployment_versions() {
        let stable = ControlPlaneTracker::default();
        let upgrading = ControlPlaneTracker {
            upgrading: true,
            ..Default::default()
        };
        let d = "v1.29.0";
        // A new MachineDeployment takes the topology's version; it waits to be created while the
        // control plane is not stable.
        let (v, t) = machine_deployment_versions(d, &stable, &[md("a", None)], 1);
        assert_eq!(
            (v, t.pending_create.is_empty()),
            (vec![d.to_string()], true)
        );
        let (_, t) = machine_deployment_versions(d, &upgrading, &[md("a", None)], 1);
        assert!(t.pending_create.contains("a"));
        // Already there.
        let (v, _) = machine_deployment_versions(d, &stable, &[md("a", Some(d))], 1);
        assert_eq!(v, [d]);
        // One at a time: the second waits.
        let three = [
            md("a", Some("v1.28.0")),
            md("b", Some("v1.28.0")),
            md("c", Some("v1.28.0")),
        ];
        let (v, t) = machine_deployment_versions(d, &stable, &three, 1);
        assert_eq!(v, [d, "v1.28.0", "v1.28.0"]);
        assert_eq!(t.pending_upgrade.len(), 2);
        // Two at a time.
        let (v, _) = machine_deployment_versions(d, &stable, &three, 2);
        assert_eq!(v, [d, d, "v1.28.0"]);
        // One still rolling from before counts against the concurrency.
        let mut rolling = three.clone();
        rolling[2].rolling = true;
        let (v, _) = machine_deployment_versions(d, &stable, &rolling, 2);
        assert_eq!(v, [d, "v1.28.0", "v1.28.0"]);
        // The control plane is not stable: nobody moves.
        let (v, _) = machine_deployment_versions(d, &upgrading, &three, 3);
        assert_eq!(v, ["v1.28.0"; 3]);
        // defer-upgrade holds only that one; hold-upgrade-sequence holds it and those after it.
        let mut deferred = three.clone();
        deferred[0].defer = true;
        let (v, t) = machine_deployment_versions(d, &stable, &deferred, 3);
        assert_eq!(v, ["v1.28.0", d, d]);
        assert!(t.deferred.contains("a"));
        let mut held = three.clone();
        held[1].hold = true;
        let (v, t) = machine_deployment_versions(d, &stable, &held, 3);
        assert_eq!(v, [d, "v1.28.0", "v1.28.0"]);
        assert_eq!(t.deferred.len(), 2);
    }
}
