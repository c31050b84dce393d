//! The kubeadm kinds' part of the host: what upstream's kubeadm bootstrap (CABPK) and control
//! plane (KCP) controllers do with the management cluster's Secrets or the workload cluster,
//! neither of which a component reaches. The contract path (`context`, `writeback`, the
//! reconcile in `lib.rs`) is the same for every provider; it asks [`Kind::of`] and calls
//! [`discovery`], [`files`] and [`config_map`] only for these kinds, so a provider of another
//! kind never gets kubeadm's behaviour by sharing its role. The functions here do not check
//! the kind again.
//!
//! - [`discovery`]: a joining `KubeadmConfig`'s discovery fields and its bootstrap token.
//! - [`files`]: a `KubeadmConfig`'s `files[].contentFrom` Secrets.
//! - [`config_map`]: a `KubeadmControlPlane`'s look at, and version roll of,
//!   `kube-system/kubeadm-config`.
//! - [`secrets`]: the cluster's kubeadm-shaped PKI (`<cluster>-ca`, `-etcd`, `-proxy`, `-sa`)
//!   and admin credential. Every control plane and bootstrap config gets the CA: it is the
//!   cluster's, not one kind's, so this one goes by role.

pub(crate) mod config_map;
pub(crate) mod discovery;
pub(crate) mod files;
pub(crate) mod secrets;

use kube::api::ApiResource;

/// The kubeadm kinds the host has specifics for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `bootstrap.cluster.x-k8s.io` `KubeadmConfig`.
    Config,
    /// `controlplane.cluster.x-k8s.io` `KubeadmControlPlane`.
    ControlPlane,
}

impl Kind {
    /// The kubeadm kind `ar` is, by group and kind: a plugin that serves a kind of that name in
    /// another group gets none of this.
    pub(crate) fn of(ar: &ApiResource) -> Option<Kind> {
        match (ar.group.as_str(), ar.kind.as_str()) {
            ("bootstrap.cluster.x-k8s.io", "KubeadmConfig") => Some(Kind::Config),
            ("controlplane.cluster.x-k8s.io", "KubeadmControlPlane") => Some(Kind::ControlPlane),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Kind;
    use kube::api::ApiResource;

    fn ar(group: &str, kind: &str) -> ApiResource {
        ApiResource {
            group: group.into(),
            version: "v1beta2".into(),
            api_version: format!("{group}/v1beta2"),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
        }
    }

    #[test]
    fn only_the_upstream_group_and_kind_are_kubeadm() {
        let cases = [
            (
                "bootstrap.cluster.x-k8s.io",
                "KubeadmConfig",
                Some(Kind::Config),
            ),
            (
                "controlplane.cluster.x-k8s.io",
                "KubeadmControlPlane",
                Some(Kind::ControlPlane),
            ),
            ("controlplane.cluster.x-k8s.io", "KubeadmConfig", None),
            ("example.com", "KubeadmControlPlane", None),
            ("bootstrap.cluster.x-k8s.io", "TalosConfig", None),
        ];
        for (group, kind, want) in cases {
            assert_eq!(Kind::of(&ar(group, kind)), want, "{group} {kind}");
        }
    }
}
