//! The checks a MachineSet runs before it creates or remediates Machines
//! (`capi-lifecycle.md` §2.7): the control plane must be stable, and the workers' version
//! within the skew policy. They run only when the Cluster has a control plane with
//! `spec.version`; `machineset.cluster.x-k8s.io/skip-preflight-checks` opts out. In a managed
//! topology the control plane is not stable while it has not taken `spec.topology.version`
//! yet, and a MachineSet waits until its version is the control plane's.

use capw_api::common::ContractVersionedObjectReference;

pub const ALL: &str = "All";
pub const CONTROL_PLANE_IS_STABLE: &str = "ControlPlaneIsStable";
pub const KUBERNETES_VERSION_SKEW: &str = "KubernetesVersionSkew";
pub const KUBEADM_VERSION_SKEW: &str = "KubeadmVersionSkew";
pub const CONTROL_PLANE_VERSION_SKEW: &str = "ControlPlaneVersionSkew";

/// What the checks read of the control plane.
#[derive(Debug, Clone, Default)]
pub struct ControlPlane {
    /// `Kind namespace/name`, for messages.
    pub describe: String,
    pub spec_version: Option<String>,
    pub status_version: Option<String>,
}

fn parse(v: &str) -> Option<semver::Version> {
    semver::Version::parse(v.trim_start_matches('v')).ok()
}

/// The failed checks' messages, one per check; empty when scaling up may go on.
pub fn failures(
    cp: Option<&ControlPlane>,
    ms_version: Option<&str>,
    bootstrap: Option<&ContractVersionedObjectReference>,
    skip_annotation: Option<&str>,
    topology_version: Option<&str>,
) -> Vec<String> {
    let skipped: Vec<&str> = skip_annotation
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let runs = |check: &str| !skipped.contains(&ALL) && !skipped.contains(&check);
    let Some(cp) = cp else { return vec![] };
    let Some(cp_spec) = cp.spec_version.as_deref().and_then(parse) else {
        return vec![];
    };
    let mut out = vec![];
    let cp_v = cp.spec_version.as_deref().unwrap_or_default();
    let pending = topology_version.filter(|t| *t != cp_v);
    if let (true, Some(t)) = (runs(CONTROL_PLANE_IS_STABLE), pending) {
        out.push(format!(
            "{} has a pending version upgrade to {t} (\"{CONTROL_PLANE_IS_STABLE}\" preflight check failed)",
            cp.describe
        ));
    } else if runs(CONTROL_PLANE_IS_STABLE) {
        match cp.status_version.as_deref().and_then(parse) {
            None => out.push(format!(
                "{} is provisioning (\"{CONTROL_PLANE_IS_STABLE}\" preflight check failed)",
                cp.describe
            )),
            Some(observed) if cp_spec > observed => out.push(format!(
                "{} is upgrading (\"{CONTROL_PLANE_IS_STABLE}\" preflight check failed)",
                cp.describe
            )),
            Some(_) => {}
        }
    }
    let Some(ms) = ms_version.and_then(parse) else {
        return out;
    };
    let ms_v = ms_version.unwrap_or_default();
    if topology_version.is_some() && runs(CONTROL_PLANE_VERSION_SKEW) && ms_v != cp_v {
        out.push(format!(
            "MachineSet version ({ms_v}) is not yet the same as the ControlPlane version ({cp_v}), waiting for version to be propagated to the MachineSet (\"{CONTROL_PLANE_VERSION_SKEW}\" preflight check failed)"
        ));
    }
    if runs(KUBERNETES_VERSION_SKEW) {
        if ms.minor > cp_spec.minor {
            out.push(format!(
                "MachineSet version ({ms_v}) and ControlPlane version ({cp_v}) do not conform to the kubernetes version skew policy as MachineSet version is higher than ControlPlane version (\"{KUBERNETES_VERSION_SKEW}\" preflight check failed)"
            ));
        } else if ms.minor + 3 < cp_spec.minor {
            out.push(format!(
                "MachineSet version ({ms_v}) and ControlPlane version ({cp_v}) do not conform to the kubernetes version skew policy as MachineSet version is more than 3 minor versions older than the ControlPlane version (\"{KUBERNETES_VERSION_SKEW}\" preflight check failed)"
            ));
        }
    }
    let kubeadm = bootstrap.is_some_and(|b| {
        b.api_group == "bootstrap.cluster.x-k8s.io" && b.kind == "KubeadmConfigTemplate"
    });
    if kubeadm && runs(KUBEADM_VERSION_SKEW) && ms.minor != cp_spec.minor {
        out.push(format!(
            "MachineSet version ({ms_v}) and ControlPlane version ({cp_v}) do not conform to kubeadm version skew policy as kubeadm only supports joining with the same major+minor version as the control plane (\"{KUBEADM_VERSION_SKEW}\" preflight check failed)"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(spec: &str, status: Option<&str>) -> ControlPlane {
        ControlPlane {
            describe: "KubeadmControlPlane ns/cp".into(),
            spec_version: Some(spec.into()),
            status_version: status.map(str::to_string),
        }
    }

    #[test]
    fn preflight_table() {
        // No control plane, or none with a version: nothing to check.
        assert!(failures(None, Some("v1.30.0"), None, None, None).is_empty());
        let unversioned = ControlPlane::default();
        assert!(failures(Some(&unversioned), Some("v1.30.0"), None, None, None).is_empty());
        // Stable, same version.
        let stable = cp("v1.30.0", Some("v1.30.0"));
        assert!(failures(Some(&stable), Some("v1.30.0"), None, None, None).is_empty());
        // Provisioning and upgrading block.
        let f = failures(
            Some(&cp("v1.30.0", None)),
            Some("v1.30.0"),
            None,
            None,
            None,
        );
        assert!(
            f[0].contains("is provisioning") && f[0].contains(CONTROL_PLANE_IS_STABLE),
            "{f:?}"
        );
        let upgrading = cp("v1.31.0", Some("v1.30.0"));
        let f = failures(Some(&upgrading), Some("v1.30.0"), None, None, None);
        assert!(f[0].contains("is upgrading"), "{f:?}");
        // The skip annotation unblocks, by name or with All.
        assert!(
            failures(
                Some(&upgrading),
                Some("v1.30.0"),
                None,
                Some("ControlPlaneIsStable"),
                None
            )
            .is_empty()
        );
        assert!(failures(Some(&upgrading), Some("v1.30.0"), None, Some("All"), None).is_empty());
        // Workers newer than the control plane, or more than 3 minors older, are refused.
        let f = failures(Some(&stable), Some("v1.31.0"), None, None, None);
        assert!(
            f.len() == 1 && f[0].contains(KUBERNETES_VERSION_SKEW),
            "{f:?}"
        );
        let f = failures(Some(&stable), Some("v1.26.0"), None, None, None);
        assert!(f.len() == 1 && f[0].contains("more than 3"), "{f:?}");
        assert!(failures(Some(&stable), Some("v1.27.0"), None, None, None).is_empty());
        // kubeadm workers must match the control plane's minor.
        let kubeadm = ContractVersionedObjectReference {
            api_group: "bootstrap.cluster.x-k8s.io".into(),
            kind: "KubeadmConfigTemplate".into(),
            name: "t".into(),
        };
        let f = failures(Some(&stable), Some("v1.29.0"), Some(&kubeadm), None, None);
        assert!(f.len() == 1 && f[0].contains(KUBEADM_VERSION_SKEW), "{f:?}");
        // A topology's control plane that has not taken the topology's version is not stable,
        // and a MachineSet waits for the control plane's version (upstream's wording).
        let f = failures(Some(&stable), Some("v1.30.0"), None, None, Some("v1.31.0"));
        assert_eq!(
            f,
            [
                "KubeadmControlPlane ns/cp has a pending version upgrade to v1.31.0 (\"ControlPlaneIsStable\" preflight check failed)"
            ]
        );
        let f = failures(
            Some(&cp("v1.31.0", Some("v1.31.0"))),
            Some("v1.30.0"),
            None,
            None,
            Some("v1.31.0"),
        );
        assert_eq!(
            f,
            [
                "MachineSet version (v1.30.0) is not yet the same as the ControlPlane version (v1.31.0), waiting for version to be propagated to the MachineSet (\"ControlPlaneVersionSkew\" preflight check failed)"
            ]
        );
        assert!(failures(Some(&stable), Some("v1.30.0"), None, None, Some("v1.30.0")).is_empty());
    }
}
