//! The tags CAPA writes and finds its resources by (`api/v1beta2/tags.go`): what makes every
//! step idempotent, since the plugin keeps no state between calls.

use crate::client::Params;

/// `sigs.k8s.io/cluster-api-provider-aws/cluster/<cluster>`: `owned` on everything made for it.
pub fn owned_key(cluster: &str) -> String {
    format!("sigs.k8s.io/cluster-api-provider-aws/cluster/{cluster}")
}

pub const ROLE: &str = "sigs.k8s.io/cluster-api-provider-aws/role";

/// Roles, as CAPA names them.
pub const COMMON: &str = "common";
pub const PUBLIC: &str = "public";
pub const PRIVATE: &str = "private";
pub const APISERVER: &str = "apiserver";
pub const CONTROL_PLANE: &str = "control-plane";
pub const NODE: &str = "node";

/// The tags of a resource made for `cluster` in `role`, named `name`, plus the user's
/// `additionalTags`.
pub fn build(
    cluster: &str,
    role: &str,
    name: &str,
    additional: &[(String, String)],
) -> Vec<(String, String)> {
    let mut t: Vec<(String, String)> = additional
        .iter()
        .filter(|(k, _)| k != "Name" && *k != owned_key(cluster) && k != ROLE)
        .cloned()
        .collect();
    t.push(("Name".into(), name.into()));
    t.push((owned_key(cluster), "owned".into()));
    t.push((ROLE.into(), role.into()));
    t
}

/// Filters for what `cluster` owns in `role`.
pub fn owned_filter(p: Params, cluster: &str, role: Option<&str>) -> Params {
    let p = p.filter(&format!("tag:{}", owned_key(cluster)), &["owned"]);
    match role {
        Some(r) => p.filter(&format!("tag:{ROLE}"), &[r]),
        None => p,
    }
}
