//! What a plugin may claim about itself (SECURITY.md, "identity" and "kinds"). `metadata()` is
//! the plugin's own word, so nothing in it is taken as given:
//!
//! - its identity, for every capability, is the WasmProvider's name, which the admin chose; a
//!   metadata name that differs fails validation, so a component cannot pass as another plugin
//!   (and own that plugin's containers) by naming itself after it;
//! - it serves only kinds in provider groups: the three Cluster API provider groups, matching its
//!   provider type, or a group of its own; never core, built-in or capw kinds;
//! - a kind another active plugin serves stays that plugin's;
//! - its CRDs are exactly the CRDs of the kinds it declares, one each, so it cannot replace the
//!   CRDs of core kinds or of the CRD kind itself.

use super::plugin::{PluginMetadata, ProviderType, provider_type_name};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TrustError {
    #[error(
        "metadata name {declared:?} is not the WasmProvider's name {admin:?}: a plugin's identity is the name the admin gave it; rebuild the component with name {admin:?}, or register it under the name it declares"
    )]
    NameMismatch { declared: String, admin: String },
    #[error("kinds: {kind}.{group} is not in a provider group: {why}")]
    ReservedGroup {
        kind: String,
        group: String,
        why: String,
    },
    #[error(
        "kinds: {kind}.{group} is served by plugin {other}; a kind has one plugin. An admin moves it by listing {kind}.{group} in this WasmProvider's spec.takeOverKinds (or deletes WasmProvider {other} first)"
    )]
    KindTaken {
        kind: String,
        group: String,
        other: String,
    },
    #[error("crds[{index}]: {why}")]
    Crd { index: usize, why: String },
}

const CAPI_PROVIDER_GROUPS: [(&str, ProviderType); 3] = [
    (
        "infrastructure.cluster.x-k8s.io",
        ProviderType::Infrastructure,
    ),
    ("bootstrap.cluster.x-k8s.io", ProviderType::Bootstrap),
    ("controlplane.cluster.x-k8s.io", ProviderType::ControlPlane),
];

/// Why a group cannot be served by a plugin of type `t`, if it cannot.
fn group_refusal(group: &str, t: ProviderType) -> Option<String> {
    if let Some((_, want)) = CAPI_PROVIDER_GROUPS.iter().find(|(g, _)| *g == group) {
        return (*want != t).then(|| {
            format!(
                "the group is for {} providers and this plugin is a {} provider",
                provider_type_name(*want),
                provider_type_name(t)
            )
        });
    }
    if group.is_empty() || !group.contains('.') {
        return Some("core and unqualified groups belong to Kubernetes".into());
    }
    let reserved = ["k8s.io", "x-k8s.io", "kubernetes.io", "capw.dev"];
    if let Some(r) = reserved
        .iter()
        .find(|r| group == **r || group.ends_with(&format!(".{r}")))
    {
        return Some(format!(
            "groups under {r} belong to Kubernetes, Cluster API or capw; use {} or a group of your own",
            CAPI_PROVIDER_GROUPS
                .iter()
                .find(|(_, p)| *p == t)
                .map_or("", |(g, _)| g)
        ));
    }
    None
}

fn crd_check(index: usize, text: &str, m: &PluginMetadata) -> Result<(String, String), TrustError> {
    let bad = |why: String| TrustError::Crd { index, why };
    let v: Value = serde_json::from_str(text)
        .or_else(|_| serde_yaml::from_str(text))
        .map_err(|e| bad(format!("is neither JSON nor YAML: {e}")))?;
    if v.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
        return Err(bad("is not a CustomResourceDefinition".into()));
    }
    let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let (group, kind, plural, name) = (
        s("/spec/group"),
        s("/spec/names/kind"),
        s("/spec/names/plural"),
        s("/metadata/name"),
    );
    let Some(declared) = m.kinds.iter().find(|k| k.group == group && k.kind == kind) else {
        return Err(bad(format!(
            "is for {kind}.{group}, which the plugin does not declare in kinds"
        )));
    };
    if name != format!("{plural}.{group}") {
        return Err(bad(format!(
            "metadata.name {name:?} must be {plural}.{group} (spec.names.plural.spec.group)"
        )));
    }
    let versions: Vec<&str> = v
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| vs.iter().filter_map(|x| x["name"].as_str()).collect())
        .unwrap_or_default();
    if !versions.contains(&declared.version.as_str()) {
        return Err(bad(format!(
            "serves versions {versions:?}, not the declared {}",
            declared.version
        )));
    }
    Ok((group.to_string(), kind.to_string()))
}

/// Checks `m` for the WasmProvider `admin_name`. `others` are the other active plugins, each
/// with the `(group, kind)` pairs it serves.
pub fn check(
    admin_name: &str,
    m: &PluginMetadata,
    others: &[(String, Vec<(String, String)>)],
    take_over: &[String],
) -> Result<(), TrustError> {
    if m.name != admin_name {
        return Err(TrustError::NameMismatch {
            declared: m.name.clone(),
            admin: admin_name.to_string(),
        });
    }
    for k in &m.kinds {
        if let Some(why) = group_refusal(&k.group, m.provider_type) {
            return Err(TrustError::ReservedGroup {
                kind: k.kind.clone(),
                group: k.group.clone(),
                why,
            });
        }
        let moved = take_over.contains(&format!("{}.{}", k.kind, k.group));
        if let Some((other, _)) = others.iter().find(|(n, ks)| {
            !moved && n != admin_name && ks.iter().any(|(g, kk)| *g == k.group && *kk == k.kind)
        }) {
            return Err(TrustError::KindTaken {
                kind: k.kind.clone(),
                group: k.group.clone(),
                other: other.clone(),
            });
        }
    }
    let mut seen = vec![];
    for (i, text) in m.crds.iter().enumerate() {
        let gk = crd_check(i, text, m)?;
        if seen.contains(&gk) {
            return Err(TrustError::Crd {
                index: i,
                why: format!("is a second CRD for {}.{}", gk.1, gk.0),
            });
        }
        seen.push(gk);
    }
    if let Some(k) = m
        .kinds
        .iter()
        .find(|k| !seen.iter().any(|(g, kk)| *g == k.group && *kk == k.kind))
    {
        return Err(TrustError::Crd {
            index: m.crds.len(),
            why: format!("the declared kind {}.{} has no CRD", k.kind, k.group),
        });
    }
    Ok(())
}

impl TrustError {
    /// The condition reason naming the rule.
    pub fn reason(&self) -> &'static str {
        match self {
            TrustError::NameMismatch { .. } => "NameMismatch",
            TrustError::ReservedGroup { .. } => "ReservedGroup",
            TrustError::KindTaken { .. } => "KindTaken",
            TrustError::Crd { .. } => "CrdMismatch",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::contract::ServedKind;

    fn crd(group: &str, kind: &str, plural: &str) -> String {
        serde_json::json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {"group": group, "names": {"kind": kind, "plural": plural}, "versions": [{"name": "v1beta2"}]}})
        .to_string()
    }

    /// A role that fits the type: these tests are about groups, names and CRDs.
    fn role_of(t: ProviderType) -> crate::runtime::plugin::KindRole {
        use crate::runtime::plugin::{ControlPlaneMachines, KindRef, KindRole};
        match t {
            ProviderType::Infrastructure => KindRole::InfrastructureMachine,
            ProviderType::Bootstrap => KindRole::BootstrapConfig,
            ProviderType::ControlPlane => KindRole::ControlPlane(ControlPlaneMachines {
                bootstrap_config: KindRef {
                    group: "bootstrap.cluster.x-k8s.io".into(),
                    kind: "KubeadmConfig".into(),
                },
                spec_field: "kubeadmConfigSpec".into(),
            }),
        }
    }

    fn meta(name: &str, t: ProviderType, kinds: &[(&str, &str, &str)]) -> PluginMetadata {
        PluginMetadata {
            name: name.into(),
            version: "0.1.0".into(),
            provider_type: t,
            contract_version: "v1beta2".into(),
            kinds: kinds
                .iter()
                .map(|(g, k, _)| ServedKind {
                    group: g.to_string(),
                    version: "v1beta2".into(),
                    kind: k.to_string(),
                    role: role_of(t),
                })
                .collect(),
            crds: kinds.iter().map(|(g, k, p)| crd(g, k, p)).collect(),
        }
    }

    const INFRA: &str = "infrastructure.cluster.x-k8s.io";

    #[test]
    fn provider_groups_of_the_right_type_and_own_groups_pass() {
        let m = meta(
            "docker",
            ProviderType::Infrastructure,
            &[
                (INFRA, "DockerCluster", "dockerclusters"),
                ("example.com", "Thing", "things"),
            ],
        );
        assert_eq!(check("docker", &m, &[], &[]), Ok(()));
    }

    #[test]
    fn core_builtin_capw_and_wrong_type_groups_are_refused() {
        for (g, k, p, t) in [
            (
                "cluster.x-k8s.io",
                "Machine",
                "machines",
                ProviderType::ControlPlane,
            ),
            (
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                "customresourcedefinitions",
                ProviderType::Infrastructure,
            ),
            ("", "Secret", "secrets", ProviderType::Infrastructure),
            (
                "runtime.capw.dev",
                "WasmProvider",
                "wasmproviders",
                ProviderType::Infrastructure,
            ),
            (
                "controlplane.cluster.x-k8s.io",
                "EvilControlPlane",
                "evilcontrolplanes",
                ProviderType::Infrastructure,
            ),
        ] {
            let m = meta("evil", t, &[(g, k, p)]);
            assert_eq!(
                check("evil", &m, &[], &[]).unwrap_err().reason(),
                "ReservedGroup",
                "{k}.{g}"
            );
        }
    }

    #[test]
    fn names_kinds_and_crds_are_checked() {
        let m = meta(
            "docker",
            ProviderType::Infrastructure,
            &[(INFRA, "DockerMachine", "dockermachines")],
        );
        assert_eq!(
            check("evil", &m, &[], &[]).unwrap_err().reason(),
            "NameMismatch"
        );
        let others = vec![(
            "docker".to_string(),
            vec![(INFRA.to_string(), "DockerMachine".to_string())],
        )];
        let mut thief = m.clone();
        thief.name = "thief".into();
        let e = check("thief", &thief, &others, &[]).unwrap_err();
        assert!(e.to_string().contains("served by plugin docker"), "{e}");
        let taken = ["DockerMachine.infrastructure.cluster.x-k8s.io".to_string()];
        assert_eq!(
            check("thief", &thief, &others, &taken),
            Ok(()),
            "an admin moved the kind"
        );
        assert_eq!(
            check("docker", &m, &others, &[]),
            Ok(()),
            "a new version of the same plugin keeps its kinds"
        );
        let mut sneaky = m.clone();
        sneaky.crds = vec![crd("cluster.x-k8s.io", "Cluster", "clusters")];
        assert_eq!(
            check("docker", &sneaky, &[], &[]).unwrap_err().reason(),
            "CrdMismatch"
        );
    }
}
