//! Which kubeadm API a Kubernetes version reads, as CABPK decides it
//! (`KubeVersionToKubeadmAPIGroupVersion`).

/// Why a version has no kubeadm API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// Not a semantic version, with or without the leading `v`.
    #[error("{0:?} is not a Kubernetes version (want vMAJOR.MINOR.PATCH, such as v1.30.4)")]
    Invalid(String),
    /// Older than v1.22, whose kubeadm API (v1beta2) Cluster API no longer writes.
    #[error(
        "Kubernetes {0} is too old: Cluster API writes kubeadm configuration for v1.22 and later"
    )]
    TooOld(String),
}

/// The kubeadm configuration API group version a document is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeadmApi {
    /// `kubeadm.k8s.io/v1beta3`: Kubernetes v1.22 up to v1.31.
    V1Beta3,
    /// `kubeadm.k8s.io/v1beta4`: Kubernetes v1.31 and later.
    V1Beta4,
}

impl KubeadmApi {
    /// The API version, as the documents' `apiVersion` says it.
    pub fn api_version(self) -> &'static str {
        match self {
            KubeadmApi::V1Beta3 => "kubeadm.k8s.io/v1beta3",
            KubeadmApi::V1Beta4 => "kubeadm.k8s.io/v1beta4",
        }
    }

    /// The API that `version` (a Machine's `spec.version`) reads. Pre-releases count as their
    /// release, as upstream's tolerant parse does.
    pub fn for_version(version: &str) -> Result<KubeadmApi, VersionError> {
        let v = parse(version)?;
        match (v.major, v.minor) {
            (1, 0..=21) | (0, _) => Err(VersionError::TooOld(version.to_string())),
            (1, 22..=30) => Ok(KubeadmApi::V1Beta3),
            _ => Ok(KubeadmApi::V1Beta4),
        }
    }
}

/// `semver.ParseTolerant`: a leading `v` is allowed.
pub fn parse(version: &str) -> Result<semver::Version, VersionError> {
    let bare = version.trim().strip_prefix('v').unwrap_or(version.trim());
    semver::Version::parse(bare).map_err(|_| VersionError::Invalid(version.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream's `TestKubeVersionToKubeadmAPIGroupVersion` cases.
    #[test]
    fn version_cut_offs_as_upstream() {
        for (v, want) in [
            ("1.12.0", None),
            ("1.14.99", None),
            (
                "1.22.0-alpha.0.734+ba502ee555924a",
                Some(KubeadmApi::V1Beta3),
            ),
            ("1.22.0", Some(KubeadmApi::V1Beta3)),
            ("1.23.99", Some(KubeadmApi::V1Beta3)),
            ("v1.30.4", Some(KubeadmApi::V1Beta3)),
            ("1.31.0", Some(KubeadmApi::V1Beta4)),
            ("1.32.99", Some(KubeadmApi::V1Beta4)),
            ("v1.33.1", Some(KubeadmApi::V1Beta4)),
            ("99.99.99", Some(KubeadmApi::V1Beta4)),
        ] {
            assert_eq!(KubeadmApi::for_version(v).ok(), want, "{v}");
        }
        assert!(matches!(
            KubeadmApi::for_version("latest"),
            Err(VersionError::Invalid(_))
        ));
    }
}
