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
//!   CRDs of core kinds or of the CRD kind itself;
//! - no name of its CRDs (the CRD's own, plural, singular, short names, kind, list kind) is one
//!   another active plugin's CRD in the same group has: kinds are compared by (group, kind), but
//!   the API server serves a CRD by its name, so a kind `KubeadmConfigShadow` with the plural
//!   `kubeadmconfigs` would replace the CRD that serves `KubeadmConfig`.

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
    #[error(
        "crds[{index}]: {field} {value:?} is taken in group {group} by CRD {other_crd} of plugin {other}; a CRD name belongs to one plugin: choose names of your own, or an admin moves the kind with spec.takeOverKinds"
    )]
    CrdNameTaken {
        index: usize,
        field: &'static str,
        value: String,
        group: String,
        other_crd: String,
        other: String,
    },
}

/// The names a CRD takes in its group, with the API server's defaults filled in.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CrdNames {
    pub group: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub kind: String,
    pub list_kind: String,
}

impl CrdNames {
    fn parse(v: &Value) -> CrdNames {
        let s = |p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let kind = s("/spec/names/kind");
        let singular = Some(s("/spec/names/singular"))
            .filter(|x| !x.is_empty())
            .unwrap_or_else(|| kind.to_lowercase());
        let list_kind = Some(s("/spec/names/listKind"))
            .filter(|x| !x.is_empty())
            .unwrap_or_else(|| format!("{kind}List"));
        CrdNames {
            group: s("/spec/group"),
            plural: s("/spec/names/plural"),
            singular,
            short_names: v
                .pointer("/spec/names/shortNames")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            kind,
            list_kind,
        }
    }

    /// The CRD's text parsed for its names, when it is JSON or YAML.
    pub fn of(text: &str) -> Option<CrdNames> {
        let v: Value = serde_json::from_str(text)
            .or_else(|_| serde_yaml::from_str(text))
            .ok()?;
        Some(CrdNames::parse(&v))
    }

    pub fn crd_name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }

    /// Names that address resources (URL path, kubectl), then names of kinds: the API server
    /// refuses a CRD whose name of either sort another CRD of the group has.
    fn resource_names(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("spec.names.plural", self.plural.as_str()),
            ("spec.names.singular", self.singular.as_str()),
        ]
        .into_iter()
        .chain(
            self.short_names
                .iter()
                .map(|n| ("spec.names.shortNames", n.as_str())),
        )
    }

    fn kind_names(&self) -> [(&'static str, &str); 2] {
        [
            ("spec.names.kind", self.kind.as_str()),
            ("spec.names.listKind", self.list_kind.as_str()),
        ]
    }

    /// The first of this CRD's names that `other` has too, if any.
    fn collision(&self, other: &CrdNames) -> Option<(&'static str, String)> {
        if self.group != other.group {
            return None;
        }
        let theirs: Vec<&str> = other.resource_names().map(|(_, n)| n).collect();
        if let Some((field, n)) = self
            .resource_names()
            .find(|(_, n)| !n.is_empty() && theirs.contains(n))
        {
            return Some((field, n.to_string()));
        }
        let theirs = other.kind_names().map(|(_, n)| n);
        self.kind_names()
            .into_iter()
            .find(|(_, n)| !n.is_empty() && theirs.contains(n))
            .map(|(field, n)| (field, n.to_string()))
    }
}

/// What an active (or loading) plugin holds: its kinds and its CRDs' names.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Claim {
    pub plugin: String,
    pub kinds: Vec<(String, String)>,
    pub crds: Vec<CrdNames>,
}

impl Claim {
    pub fn of(plugin: &str, m: &PluginMetadata) -> Claim {
        Claim {
            plugin: plugin.to_string(),
            kinds: m
                .kinds
                .iter()
                .map(|k| (k.group.clone(), k.kind.clone()))
                .collect(),
            crds: m.crds.iter().filter_map(|t| CrdNames::of(t)).collect(),
        }
    }
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

/// The CRD's `(group, kind)` and its names, once it is one for a declared kind.
fn crd_check(
    index: usize,
    text: &str,
    m: &PluginMetadata,
) -> Result<((String, String), CrdNames), TrustError> {
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
    Ok(((group.to_string(), kind.to_string()), CrdNames::parse(&v)))
}

/// Checks `m` for the WasmProvider `admin_name`. `others` are what the other active plugins
/// hold; `take_over` the kinds (`Kind.group`) the admin moved to this plugin.
pub fn check(
    admin_name: &str,
    m: &PluginMetadata,
    others: &[Claim],
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
        if let Some(other) = others.iter().find(|o| {
            !moved
                && o.plugin != admin_name
                && o.kinds.iter().any(|(g, kk)| *g == k.group && *kk == k.kind)
        }) {
            return Err(TrustError::KindTaken {
                kind: k.kind.clone(),
                group: k.group.clone(),
                other: other.plugin.clone(),
            });
        }
    }
    let mut seen = vec![];
    for (i, text) in m.crds.iter().enumerate() {
        let (gk, names) = crd_check(i, text, m)?;
        if seen.contains(&gk) {
            return Err(TrustError::Crd {
                index: i,
                why: format!("is a second CRD for {}.{}", gk.1, gk.0),
            });
        }
        seen.push(gk);
        let moved = take_over.contains(&format!("{}.{}", names.kind, names.group));
        for o in others.iter().filter(|o| o.plugin != admin_name && !moved) {
            // A CRD of a kind the admin moved here may keep the names it had.
            for theirs in o
                .crds
                .iter()
                .filter(|c| !take_over.contains(&format!("{}.{}", c.kind, c.group)))
            {
                if let Some((field, value)) = names.collision(theirs) {
                    return Err(TrustError::CrdNameTaken {
                        index: i,
                        field,
                        value,
                        group: names.group.clone(),
                        other_crd: theirs.crd_name(),
                        other: o.plugin.clone(),
                    });
                }
            }
        }
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
            TrustError::CrdNameTaken { .. } => "CrdNameTaken",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::ServedKind;

    fn crd(group: &str, kind: &str, plural: &str) -> String {
        serde_json::json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {"group": group, "names": {"kind": kind, "plural": plural}, "versions": [{"name": "v1beta2"}]}})
        .to_string()
    }

    /// A role that fits the type: these tests are about groups, names and CRDs.
    fn role_of(t: ProviderType) -> crate::plugin::KindRole {
        use crate::plugin::{ControlPlaneMachines, KindRef, KindRole};
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
        let others = vec![Claim::of("docker", &m)];
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

    /// A kind of its own whose CRD takes another plugin's CRD name, or any of its names in the
    /// group, is refused; the same names in another group, or after the admin moved the kind,
    /// are not.
    #[test]
    fn crd_names_are_one_plugins() {
        const BOOT: &str = "bootstrap.cluster.x-k8s.io";
        let honest = meta(
            "bootstrap",
            ProviderType::Bootstrap,
            &[(BOOT, "KubeadmConfig", "kubeadmconfigs")],
        );
        let others = vec![Claim::of("bootstrap", &honest)];
        let with_names = |kind: &str, plural: &str, extra: Value| {
            let mut m = meta("shadow", ProviderType::Bootstrap, &[(BOOT, kind, plural)]);
            let mut v: Value = serde_json::from_str(&m.crds[0]).expect("json");
            if let (Some(names), Some(extra)) = (v.pointer_mut("/spec/names"), extra.as_object()) {
                for (k, x) in extra {
                    names[k] = x.clone();
                }
            }
            m.crds[0] = v.to_string();
            m
        };
        for (kind, plural, extra, field) in [
            (
                "KubeadmConfigShadow",
                "kubeadmconfigs",
                serde_json::json!({}),
                "spec.names.plural",
            ),
            (
                "Shadow",
                "shadows",
                serde_json::json!({"singular": "kubeadmconfig"}),
                "spec.names.singular",
            ),
            (
                "Shadow",
                "shadows",
                serde_json::json!({"shortNames": ["kubeadmconfigs"]}),
                "spec.names.shortNames",
            ),
            (
                "Shadow",
                "shadows",
                serde_json::json!({"listKind": "KubeadmConfigList"}),
                "spec.names.listKind",
            ),
        ] {
            let e = check("shadow", &with_names(kind, plural, extra), &others, &[]).unwrap_err();
            assert_eq!(e.reason(), "CrdNameTaken", "{e}");
            assert!(e.to_string().contains(field), "{e}");
            assert!(
                e.to_string()
                    .contains("kubeadmconfigs.bootstrap.cluster.x-k8s.io"),
                "{e}"
            );
        }
        let elsewhere = meta(
            "shadow",
            ProviderType::Bootstrap,
            &[("example.com", "KubeadmConfig", "kubeadmconfigs")],
        );
        assert_eq!(check("shadow", &elsewhere, &others, &[]), Ok(()));
        let moved = ["KubeadmConfig.bootstrap.cluster.x-k8s.io".to_string()];
        let mut heir = honest.clone();
        heir.name = "heir".into();
        assert_eq!(check("heir", &heir, &others, &moved), Ok(()));
    }
}
