//! RBAC, evaluated as kube-apiserver's RBAC authorizer does: a request is allowed when a
//! ClusterRoleBinding, or a RoleBinding in the request's namespace, binds the user (by name,
//! group, or ServiceAccount) to a Role or ClusterRole with a rule that covers it. Rules match
//! on verbs, API groups, resources (`resource/subresource`, `*`, `*/subresource`),
//! resourceNames, and non-resource URLs (`/path`, `/prefix/*`). `system:masters` may do
//! everything, as kube's built-in superuser group. Not evaluated: ClusterRole aggregation
//! (`aggregationRule`), which kube's controller resolves into the rules.

use crate::store::{ObjKey, Store};
use serde_json::Value;

/// The group kube-apiserver lets do everything before any rule is read.
pub const MASTERS: &str = "system:masters";
const ROLES: &str = "rbac.authorization.k8s.io/roles";
const CLUSTER_ROLES: &str = "rbac.authorization.k8s.io/clusterroles";
const BINDINGS: &str = "rbac.authorization.k8s.io/rolebindings";
const CLUSTER_BINDINGS: &str = "rbac.authorization.k8s.io/clusterrolebindings";

/// What a request asks to do, as kube's authorizer attributes name it.
#[derive(Debug, Clone, Default)]
pub struct Attributes {
    /// The user's name.
    pub user: String,
    /// The user's groups.
    pub groups: Vec<String>,
    /// kube's verb: get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: String,
    /// The API group (empty for the core group).
    pub group: String,
    /// The resource (plural).
    pub resource: String,
    /// The subresource, or empty.
    pub subresource: String,
    /// The namespace, or empty at the cluster scope.
    pub namespace: String,
    /// The object's name, or empty for a collection.
    pub name: String,
    /// For a non-resource request (`/metrics`, `/healthz`): its path; `None` for resources.
    pub path: Option<String>,
}

impl Attributes {
    /// kube's wording of a refusal: `User "u" cannot list resource "clusters" in API group
    /// "cluster.x-k8s.io" in the namespace "ns"`.
    pub fn forbidden_message(&self) -> String {
        if let Some(path) = &self.path {
            return format!(
                "User \"{}\" cannot {} path \"{path}\"",
                self.user, self.verb
            );
        }
        let resource = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        let scope = if self.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{}\"", self.namespace)
        };
        format!(
            "User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
            self.user, self.verb, self.group
        )
    }
}

/// Whether the stored RBAC objects allow `a`.
pub fn allows(store: &Store, a: &Attributes) -> bool {
    if a.groups.iter().any(|g| g == MASTERS) {
        return true;
    }
    let (cluster_bindings, _) = store.list(CLUSTER_BINDINGS, None);
    if cluster_bindings
        .iter()
        .any(|b| binds(b, "", a) && role_allows(store, b, "", a))
    {
        return true;
    }
    if a.namespace.is_empty() || a.path.is_some() {
        return false;
    }
    let (bindings, _) = store.list(BINDINGS, Some(&a.namespace));
    bindings
        .iter()
        .any(|b| binds(b, &a.namespace, a) && role_allows(store, b, &a.namespace, a))
}

fn str_of<'v>(v: &'v Value, key: &str) -> &'v str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// Whether a binding in `binding_ns` ("" for a ClusterRoleBinding) names the requester.
fn binds(binding: &Value, binding_ns: &str, a: &Attributes) -> bool {
    let Some(subjects) = binding.get("subjects").and_then(Value::as_array) else {
        return false;
    };
    subjects.iter().any(|s| {
        let name = str_of(s, "name");
        match str_of(s, "kind") {
            "User" => name == a.user,
            "Group" => a.groups.iter().any(|g| g == name),
            "ServiceAccount" => {
                let ns = match str_of(s, "namespace") {
                    "" => binding_ns,
                    ns => ns,
                };
                a.user == format!("system:serviceaccount:{ns}:{name}")
            }
            _ => false,
        }
    })
}

fn role_allows(store: &Store, binding: &Value, binding_ns: &str, a: &Attributes) -> bool {
    let Some(role_ref) = binding.get("roleRef") else {
        return false;
    };
    let name = str_of(role_ref, "name");
    let role = match str_of(role_ref, "kind") {
        "ClusterRole" => store.get(&ObjKey::new(CLUSTER_ROLES, "", name)),
        "Role" if !binding_ns.is_empty() => store.get(&ObjKey::new(ROLES, binding_ns, name)),
        _ => None,
    };
    role.as_ref()
        .and_then(|r| r.get("rules"))
        .and_then(Value::as_array)
        .is_some_and(|rules| rules.iter().any(|r| rule_allows(r, a)))
}

fn list<'v>(rule: &'v Value, key: &str) -> Vec<&'v str> {
    rule.get(key)
        .and_then(Value::as_array)
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// kube's `RuleAllows`.
pub fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    let verbs = list(rule, "verbs");
    if !verbs.iter().any(|v| *v == "*" || *v == a.verb) {
        return false;
    }
    if let Some(path) = &a.path {
        return list(rule, "nonResourceURLs").iter().any(|u| {
            *u == "*"
                || *u == path
                || u.strip_suffix('*')
                    .is_some_and(|prefix| path.starts_with(prefix))
        });
    }
    if !list(rule, "apiGroups")
        .iter()
        .any(|g| *g == "*" || *g == a.group)
    {
        return false;
    }
    let combined = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let resources = list(rule, "resources");
    let resource_ok = resources.iter().any(|r| {
        *r == "*"
            || *r == combined
            || (!a.subresource.is_empty() && r.strip_prefix("*/") == Some(a.subresource.as_str()))
    });
    if !resource_ok {
        return false;
    }
    let names = list(rule, "resourceNames");
    names.is_empty() || (!a.name.is_empty() && names.contains(&a.name.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes {
            user: "alice".into(),
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: "team-a".into(),
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn rules_match_as_kube_matches_them() {
        let g = "cluster.x-k8s.io";
        let rule = json!({"apiGroups": [g], "resources": ["clusters", "machines/status"], "verbs": ["get", "list"]});
        let cases = [
            (attrs("list", g, "clusters", "", ""), true),
            (attrs("delete", g, "clusters", "", "c"), false),
            (attrs("list", "", "clusters", "", ""), false),
            (attrs("get", g, "clusters", "status", "c"), false),
            (attrs("get", g, "machines", "status", "m"), true),
            (attrs("get", g, "machines", "", "m"), false),
        ];
        for (a, want) in cases {
            assert_eq!(rule_allows(&rule, &a), want, "{a:?}");
        }
        let wild = json!({"apiGroups": ["*"], "resources": ["*/scale"], "verbs": ["*"]});
        assert!(rule_allows(
            &wild,
            &attrs("patch", "apps", "deployments", "scale", "d")
        ));
        assert!(!rule_allows(
            &wild,
            &attrs("patch", "apps", "deployments", "", "d")
        ));
        let named = json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["one"], "verbs": ["get", "list"]});
        assert!(rule_allows(
            &named,
            &attrs("get", "", "configmaps", "", "one")
        ));
        assert!(!rule_allows(
            &named,
            &attrs("get", "", "configmaps", "", "two")
        ));
        // A list has no name, so a rule limited to names never allows it.
        assert!(!rule_allows(
            &named,
            &attrs("list", "", "configmaps", "", "")
        ));
        let urls = json!({"nonResourceURLs": ["/metrics", "/debug/*"], "verbs": ["get"]});
        let path = |p: &str| Attributes {
            verb: "get".into(),
            path: Some(p.into()),
            ..Default::default()
        };
        assert!(rule_allows(&urls, &path("/metrics")));
        assert!(rule_allows(&urls, &path("/debug/pprof")));
        assert!(!rule_allows(&urls, &path("/healthz")));
    }

    #[test]
    fn refusals_are_worded_as_kube_words_them() {
        let mut a = attrs("list", "cluster.x-k8s.io", "clusters", "", "");
        a.namespace = "team-b".into();
        assert_eq!(
            a.forbidden_message(),
            "User \"alice\" cannot list resource \"clusters\" in API group \"cluster.x-k8s.io\" in the namespace \"team-b\""
        );
        a.namespace.clear();
        a.verb = "create".into();
        a.group.clear();
        a.resource = "namespaces".into();
        assert_eq!(
            a.forbidden_message(),
            "User \"alice\" cannot create resource \"namespaces\" in API group \"\" at the cluster scope"
        );
    }
}
