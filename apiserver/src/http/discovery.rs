//! Discovery documents, legacy and aggregated (`apidiscovery.k8s.io/v2`), and `/version`.

use crate::registry::{Registry, ResourceType};
use serde_json::{Value, json};

/// Why a Kubernetes version cannot be presented.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a Kubernetes release version such as v1.30.4 (v, major, minor, patch)")]
pub struct KubernetesVersionError(pub String);

/// The Kubernetes version a server presents at `/version`: the one a workload control plane
/// was started for, or capw's own API level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesVersion {
    major: u32,
    minor: u32,
    git_version: String,
}

impl KubernetesVersion {
    /// `vMAJOR.MINOR.PATCH`, optionally with a pre-release or build suffix (`v1.31.0-rc.1`).
    pub fn parse(v: &str) -> Result<KubernetesVersion, KubernetesVersionError> {
        let bad = || KubernetesVersionError(v.to_string());
        let rest = v.strip_prefix('v').ok_or_else(bad)?;
        let core = rest.split(['-', '+']).next().unwrap_or_default();
        let mut parts = core.split('.').map(|p| p.parse::<u32>());
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(Ok(major)), Some(Ok(minor)), Some(Ok(_)), None)
                if v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "v.-+".contains(c)) =>
            {
                Ok(KubernetesVersion {
                    major,
                    minor,
                    git_version: v.to_string(),
                })
            }
            _ => Err(bad()),
        }
    }
}

impl Default for KubernetesVersion {
    fn default() -> Self {
        KubernetesVersion {
            major: 1,
            minor: 33,
            git_version: "v1.33.0-capw".into(),
        }
    }
}

pub fn version(v: &KubernetesVersion) -> Value {
    json!({
        "major": v.major.to_string(),
        "minor": v.minor.to_string(),
        "gitVersion": v.git_version,
        "gitCommit": env!("CARGO_PKG_VERSION"),
        "gitTreeState": "clean",
        "buildDate": "2026-11-01T00:00:00Z",
        "goVersion": "none (capw-apiserver is written in Rust)",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_doc(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

pub fn groups(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .iter()
        .map(|(g, vs)| group_doc(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group(reg: &Registry, name: &str) -> Option<Value> {
    let (g, vs) = reg.groups().into_iter().find(|(g, _)| g == name)?;
    let mut doc = group_doc(&g, &vs);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

fn resource_doc(rt: &ResourceType) -> Vec<Value> {
    let mut main = json!({
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": rt.verbs(),
    });
    if !rt.short_names.is_empty() {
        main["shortNames"] = json!(rt.short_names);
    }
    let categories = if rt.categories.is_empty() && rt.is_custom() {
        vec![]
    } else {
        rt.categories.clone()
    };
    if !categories.is_empty() {
        main["categories"] = json!(categories);
    }
    let mut out = vec![main];
    if rt.status_subresource {
        out.push(json!({
            "name": format!("{}/status", rt.plural),
            "singularName": "",
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    if rt.scale.is_some() {
        out.push(json!({
            "name": format!("{}/scale", rt.plural),
            "singularName": "",
            "namespaced": rt.namespaced,
            "group": "autoscaling",
            "version": "v1",
            "kind": "Scale",
            "verbs": ["get", "patch", "update"],
        }));
    }
    out
}

pub fn resources(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut types = reg.in_group_version(group, version);
    if types.is_empty() {
        return None;
    }
    types.sort_by(|a, b| a.plural.cmp(&b.plural));
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let resources: Vec<Value> = types.iter().flat_map(|t| resource_doc(t)).collect();
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// The media type of aggregated discovery (`apidiscovery.k8s.io/v2`).
pub const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether the client asks for aggregated discovery (kubectl ≥ 1.26 and kube-rs
/// `run_aggregated` put it first in `Accept`).
pub fn wants_aggregated(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|m| {
            let params: Vec<&str> = m.split(';').map(str::trim).collect();
            params.first() == Some(&"application/json")
                && ["g=apidiscovery.k8s.io", "v=v2", "as=APIGroupDiscoveryList"]
                    .iter()
                    .all(|p| params.contains(p))
        })
    })
}

fn aggregated_resource(rt: &ResourceType) -> Value {
    let kind = |k: &str, g: &str, v: &str| json!({"group": g, "version": v, "kind": k});
    let mut r = json!({
        "resource": rt.plural,
        "responseKind": kind(&rt.kind, &rt.group, &rt.version),
        "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": rt.singular,
        "verbs": rt.verbs(),
    });
    if !rt.short_names.is_empty() {
        r["shortNames"] = json!(rt.short_names);
    }
    if !rt.categories.is_empty() {
        r["categories"] = json!(rt.categories);
    }
    let mut subs = vec![];
    if rt.status_subresource {
        subs.push(
            json!({"subresource": "status", "responseKind": kind(&rt.kind, &rt.group, &rt.version),
                         "verbs": ["get", "patch", "update"]}),
        );
    }
    if rt.scale.is_some() {
        subs.push(
            json!({"subresource": "scale", "responseKind": kind("Scale", "autoscaling", "v1"),
                         "verbs": ["get", "patch", "update"]}),
        );
    }
    if !subs.is_empty() {
        r["subresources"] = json!(subs);
    }
    r
}

fn aggregated_group(reg: &Registry, name: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| {
            let mut types = reg.in_group_version(name, v);
            types.sort_by(|a, b| a.plural.cmp(&b.plural));
            let resources: Vec<Value> = types.iter().map(|t| aggregated_resource(t)).collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    let mut metadata = json!({"creationTimestamp": null});
    if !name.is_empty() {
        metadata["name"] = json!(name);
    }
    json!({"metadata": metadata, "versions": versions})
}

/// `/api` (`core`) or `/apis` (every group) as an `APIGroupDiscoveryList`.
pub fn aggregated(reg: &Registry, core: bool) -> Value {
    let items: Vec<Value> = if core {
        vec![aggregated_group(reg, "", &["v1".to_string()])]
    } else {
        reg.groups()
            .iter()
            .map(|(g, vs)| aggregated_group(reg, g, vs))
            .collect()
    };
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
           "metadata": {}, "items": items})
}
