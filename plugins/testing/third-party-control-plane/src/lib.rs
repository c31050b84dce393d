//! `third-party-control-plane`: a control plane of another vendor's kind, as a K3s-, RKE2- or
//! Talos-style provider would declare one: `ThirdPartyControlPlane` in a group of its own,
//! with the control-plane role. Its logic is the bundled KubeadmControlPlane's (the same spec
//! shape), under another kind, group and plugin name; `host/tests/security.rs` checks that
//! its Machines are adopted and reach Running, as they would be on upstream Cluster API.

use capw_sdk::*;

struct ThirdParty;

const GROUP: &str = "controlplane.thirdparty.example";
const KIND: &str = "ThirdPartyControlPlane";

/// The bundled control plane's CRD for KubeadmControlPlane, renamed to this kind and group.
fn renamed(crd: &str) -> Option<String> {
    let mut v: Value = serde_json::from_str(crd).ok()?;
    v["metadata"]["name"] = json!(format!("thirdpartycontrolplanes.{GROUP}"));
    v["spec"]["group"] = json!(GROUP);
    v["spec"]["names"] = json!({
        "kind": KIND, "listKind": format!("{KIND}List"),
        "plural": "thirdpartycontrolplanes", "singular": "thirdpartycontrolplane",
        "shortNames": ["tpcp"], "categories": ["cluster-api"],
    });
    Some(v.to_string())
}

impl Provider for ThirdParty {
    fn metadata() -> Metadata {
        let mut m = capw_control_plane::ControlPlane::metadata();
        m.name = "third-party-control-plane".into();
        let role = m
            .kinds
            .iter()
            .find(|k| k.kind == "KubeadmControlPlane")
            .map(|k| k.role.clone());
        let crd = m
            .crds
            .iter()
            .find(|c| c.contains("\"kubeadmcontrolplanes\""))
            .and_then(|c| renamed(c));
        m.kinds = role.map(|r| kind(GROUP, KIND, r)).into_iter().collect();
        m.crds = crd.into_iter().collect();
        m
    }

    fn reconcile_control_plane(ctx: Context) -> Result<ControlPlaneStatus, ProviderError> {
        capw_control_plane::ControlPlane::reconcile_control_plane(ctx)
    }

    fn delete_control_plane(ctx: Context) -> Result<DeleteStatus, ProviderError> {
        capw_control_plane::ControlPlane::delete_control_plane(ctx)
    }
}

capw_sdk::export_provider!(ThirdParty);
