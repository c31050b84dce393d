//! The contract rules for `metadata()`: identity, version, contract, one CRD per kind, and
//! declared roles that fit the provider type.

use super::plugin_info;
use super::{PluginMetadata, ProviderType};

/// The contract rules for `metadata()`.
pub fn validate_metadata(m: &PluginMetadata) -> Result<(), String> {
    let label = !m.name.is_empty()
        && m.name.len() <= 63
        && m.name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !label {
        return Err(format!("name {:?} is not a DNS label", m.name));
    }
    if semver::Version::parse(&m.version).is_err() {
        return Err(format!("version {:?} is not a semantic version", m.version));
    }
    if m.contract_version != "v1beta2" {
        return Err(format!(
            "contract version {:?} is not supported (this host speaks v1beta2)",
            m.contract_version
        ));
    }
    if m.crds.len() != m.kinds.len() {
        return Err(format!(
            "{} kinds but {} CRDs: every served kind needs its CRD",
            m.kinds.len(),
            m.crds.len()
        ));
    }
    check_roles(m)?;
    for (i, crd) in m.crds.iter().enumerate() {
        let v: serde_json::Value = serde_json::from_str(crd)
            .or_else(|_| serde_yaml::from_str(crd))
            .map_err(|e| format!("crds[{i}] is neither JSON nor YAML: {e}"))?;
        if v.pointer("/metadata/labels/cluster.x-k8s.io~1v1beta2")
            .and_then(serde_json::Value::as_str)
            .is_none()
        {
            return Err(format!(
                "crds[{i}] lacks the contract label cluster.x-k8s.io/v1beta2"
            ));
        }
    }
    Ok(())
}

/// Every served kind's declared role fits the provider type, and a template names a kind this
/// plugin serves in the same group with the role the template stamps out.
fn check_roles(m: &PluginMetadata) -> Result<(), String> {
    use plugin_info::KindRole as R;
    for (i, k) in m.kinds.iter().enumerate() {
        let (want, stamped) = match &k.role {
            R::InfrastructureCluster | R::InfrastructureMachine => {
                (ProviderType::Infrastructure, None)
            }
            R::InfrastructureClusterTemplate(of) => (
                ProviderType::Infrastructure,
                Some((of, "infrastructure-cluster")),
            ),
            R::InfrastructureMachineTemplate(of) => (
                ProviderType::Infrastructure,
                Some((of, "infrastructure-machine")),
            ),
            R::InfrastructureMachinePoolTemplate(_) => (ProviderType::Infrastructure, None),
            R::BootstrapConfig => (ProviderType::Bootstrap, None),
            R::BootstrapConfigTemplate(of) => {
                (ProviderType::Bootstrap, Some((of, "bootstrap-config")))
            }
            R::ControlPlane(cpm) => {
                let field = &cpm.spec_field;
                if cpm.bootstrap_config.group.is_empty() || cpm.bootstrap_config.kind.is_empty() {
                    return Err(format!(
                        "kinds[{i}] ({}): role control-plane must name its Machines' bootstrap config group and kind",
                        k.kind
                    ));
                }
                if field.is_empty() || !field.bytes().all(|b| b.is_ascii_alphanumeric()) {
                    return Err(format!(
                        "kinds[{i}] ({}): role control-plane spec-field {field:?} must be one field name under spec, such as kubeadmConfigSpec",
                        k.kind
                    ));
                }
                (ProviderType::ControlPlane, None)
            }
            R::ControlPlaneTemplate(of) => {
                (ProviderType::ControlPlane, Some((of, "control-plane")))
            }
        };
        if want != m.provider_type {
            return Err(format!(
                "kinds[{i}] ({}): role {} is for {} providers, and this plugin declares provider-type {}",
                k.kind,
                role_name(&k.role),
                provider_type_name(want),
                provider_type_name(m.provider_type)
            ));
        }
        if let Some((of, role)) = stamped {
            let served = m.kinds.iter().find(|o| o.group == k.group && &o.kind == of);
            if served.is_none_or(|o| role_name(&o.role) != role) {
                return Err(format!(
                    "kinds[{i}] ({}): role {} names {of}, which this plugin must serve in group {} with role {role}",
                    k.kind,
                    role_name(&k.role),
                    k.group
                ));
            }
        }
    }
    Ok(())
}

/// A role as the WIT spells it.
pub fn role_name(r: &plugin_info::KindRole) -> &'static str {
    use plugin_info::KindRole as R;
    match r {
        R::InfrastructureCluster => "infrastructure-cluster",
        R::InfrastructureMachine => "infrastructure-machine",
        R::InfrastructureClusterTemplate(_) => "infrastructure-cluster-template",
        R::InfrastructureMachineTemplate(_) => "infrastructure-machine-template",
        R::InfrastructureMachinePoolTemplate(_) => "infrastructure-machine-pool-template",
        R::BootstrapConfig => "bootstrap-config",
        R::BootstrapConfigTemplate(_) => "bootstrap-config-template",
        R::ControlPlane(_) => "control-plane",
        R::ControlPlaneTemplate(_) => "control-plane-template",
    }
}

/// A provider type as the WIT spells it.
pub fn provider_type_name(t: ProviderType) -> &'static str {
    match t {
        ProviderType::Infrastructure => "infrastructure",
        ProviderType::Bootstrap => "bootstrap",
        ProviderType::ControlPlane => "control-plane",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::{ControlPlaneMachines, KindRef, KindRole, ServedKind};

    fn meta(t: ProviderType, kinds: &[(&str, KindRole)]) -> PluginMetadata {
        let crd = |kind: &str| {
            serde_json::json!({"metadata": {"labels": {"cluster.x-k8s.io/v1beta2": "v1beta2"}},
                "spec": {"names": {"kind": kind}}})
            .to_string()
        };
        PluginMetadata {
            name: "p".into(),
            version: "1.0.0".into(),
            provider_type: t,
            contract_version: "v1beta2".into(),
            kinds: kinds
                .iter()
                .map(|(k, r)| ServedKind {
                    group: "g.example.com".into(),
                    version: "v1beta2".into(),
                    kind: k.to_string(),
                    role: r.clone(),
                })
                .collect(),
            crds: kinds.iter().map(|(k, _)| crd(k)).collect(),
        }
    }

    fn cp(kind: &str, field: &str) -> KindRole {
        KindRole::ControlPlane(ControlPlaneMachines {
            bootstrap_config: KindRef {
                group: "bootstrap.cluster.x-k8s.io".into(),
                kind: kind.into(),
            },
            spec_field: field.into(),
        })
    }

    /// The role rules, case by case: `None` passes, `Some(text)` is refused with a message
    /// containing it.
    #[test]
    fn declared_roles_table() {
        use KindRole as R;
        use ProviderType as T;
        let cases: Vec<(&str, PluginMetadata, Option<&str>)> = vec![
            (
                "infrastructure kinds and their template",
                meta(
                    T::Infrastructure,
                    &[
                        ("XCluster", R::InfrastructureCluster),
                        ("XMachine", R::InfrastructureMachine),
                        (
                            "XMachineTemplate",
                            R::InfrastructureMachineTemplate("XMachine".into()),
                        ),
                    ],
                ),
                None,
            ),
            (
                "a role is not read from the name",
                meta(
                    T::Infrastructure,
                    &[
                        ("Pool", R::InfrastructureMachine),
                        ("Blueprint", R::InfrastructureMachineTemplate("Pool".into())),
                    ],
                ),
                None,
            ),
            (
                "bootstrap role on an infrastructure plugin",
                meta(T::Infrastructure, &[("XConfig", R::BootstrapConfig)]),
                Some(
                    "role bootstrap-config is for bootstrap providers, and this plugin declares provider-type infrastructure",
                ),
            ),
            (
                "control-plane role on a bootstrap plugin",
                meta(
                    T::Bootstrap,
                    &[("Y", cp("KubeadmConfig", "kubeadmConfigSpec"))],
                ),
                Some("is for control-plane providers"),
            ),
            (
                "template of a kind not served",
                meta(
                    T::Infrastructure,
                    &[(
                        "XMachineTemplate",
                        R::InfrastructureMachineTemplate("XMachine".into()),
                    )],
                ),
                Some(
                    "names XMachine, which this plugin must serve in group g.example.com with role infrastructure-machine",
                ),
            ),
            (
                "template of a kind with another role",
                meta(
                    T::Infrastructure,
                    &[
                        ("XCluster", R::InfrastructureCluster),
                        (
                            "XMachineTemplate",
                            R::InfrastructureMachineTemplate("XCluster".into()),
                        ),
                    ],
                ),
                Some("with role infrastructure-machine"),
            ),
            (
                "bootstrap config template",
                meta(
                    T::Bootstrap,
                    &[
                        ("KubeadmConfig", R::BootstrapConfig),
                        (
                            "KubeadmConfigTemplate",
                            R::BootstrapConfigTemplate("KubeadmConfig".into()),
                        ),
                    ],
                ),
                None,
            ),
            (
                "control plane with its machines' bootstrap",
                meta(
                    T::ControlPlane,
                    &[
                        (
                            "KubeadmControlPlane",
                            cp("KubeadmConfig", "kubeadmConfigSpec"),
                        ),
                        (
                            "KubeadmControlPlaneTemplate",
                            R::ControlPlaneTemplate("KubeadmControlPlane".into()),
                        ),
                    ],
                ),
                None,
            ),
            (
                "control plane without a bootstrap kind",
                meta(T::ControlPlane, &[("Z", cp("", "spec"))]),
                Some("must name its Machines' bootstrap config group and kind"),
            ),
            (
                "control plane spec field that is a path",
                meta(T::ControlPlane, &[("Z", cp("KubeadmConfig", "a/b"))]),
                Some("spec-field \"a/b\" must be one field name under spec"),
            ),
        ];
        for (name, m, want) in cases {
            let got = validate_metadata(&m);
            match (want, got) {
                (None, Ok(())) => {}
                (Some(text), Err(e)) => assert!(e.contains(text), "{name}: {e}"),
                (want, got) => panic!("{name}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn plugin_versions_are_semantic_versions() {
        for ok in ["0.1.0", "1.0.0-v2", "0.1.1-trap", "2.3.4+build.5"] {
            assert!(semver::Version::parse(ok).is_ok(), "{ok}");
        }
        // The old hand-written check let these through.
        for bad in ["1x.2y.3z", "1.2", "01.2.3", "1.2.3.4"] {
            assert!(semver::Version::parse(bad).is_err(), "{bad}");
        }
    }
}
