//! Which writes a webhook sees: kube's `rules.Matcher` plus the namespace and object selectors.

use super::Attributes;
use crate::registry::ResourceType;
use crate::selector::LabelSelector;
use crate::status::ApiError;
use serde_json::Value;
use std::collections::BTreeMap;

/// The operation of a write, as webhook rules name it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }

    pub(super) fn options_kind(self) -> &'static str {
        match self {
            Operation::Create => "CreateOptions",
            Operation::Update => "UpdateOptions",
            Operation::Delete => "DeleteOptions",
        }
    }
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

fn listed(list: &[String], want: &str) -> bool {
    list.iter().any(|s| s == "*" || s == want)
}

/// kube's resource matching: `*` is every resource but no subresource, `*/*` everything,
/// `pods/*` every subresource of pods, `*/status` the status of everything.
fn resource_listed(list: &[String], plural: &str, sub: &str) -> bool {
    list.iter().any(|r| {
        let (res, rsub) = r.split_once('/').unwrap_or((r.as_str(), ""));
        (res == "*" || res == plural)
            && (rsub == sub || (rsub == "*" && !sub.is_empty()) || r == "*/*")
    })
}

fn rule_matches(rule: &Value, rt: &ResourceType, subresource: &str, op: Operation) -> bool {
    let scope_ok = match rule.get("scope").and_then(Value::as_str).unwrap_or("*") {
        "Cluster" => !rt.namespaced,
        "Namespaced" => rt.namespaced,
        _ => true,
    };
    scope_ok
        && listed(&strings(rule, "operations"), op.as_str())
        && listed(&strings(rule, "apiGroups"), &rt.group)
        && listed(&strings(rule, "apiVersions"), &rt.version)
        && resource_listed(&strings(rule, "resources"), &rt.plural, subresource)
}

/// Whether one of `hook`'s rules names this kind, subresource and operation.
pub(super) fn named(hook: &Value, rt: &ResourceType, subresource: &str, op: Operation) -> bool {
    let rules = hook.get("rules").and_then(Value::as_array);
    rules
        .into_iter()
        .flatten()
        .any(|r| rule_matches(r, rt, subresource, op))
}

fn labels(obj: Option<&Value>) -> BTreeMap<String, String> {
    obj.and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect()
}

fn selector(hook: &Value, key: &str) -> Result<LabelSelector, ApiError> {
    LabelSelector::from_object(hook.get(key)).map_err(|e| {
        ApiError::internal(format!(
            "the webhook's {key} is invalid: {e}; fix it in the webhook configuration"
        ))
    })
}

/// Whether `hook` is called for this write.
pub(super) fn matches(
    hook: &Value,
    at: &Attributes<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
    namespace_labels: Option<&Value>,
) -> Result<bool, ApiError> {
    if !named(hook, at.rt, at.subresource, at.operation) {
        return Ok(false);
    }
    let by_object = selector(hook, "objectSelector")?;
    if !by_object.matches(&labels(object)) && !by_object.matches(&labels(old)) {
        return Ok(false);
    }
    let by_namespace = selector(hook, "namespaceSelector")?;
    // A cluster-scoped object is matched by its own labels if it is a Namespace, and
    // never skipped otherwise; a namespaced one by its namespace's labels.
    let ns_ok = if at.rt.plural == "namespaces" && at.rt.group.is_empty() {
        by_namespace.matches(&labels(object.or(old)))
    } else {
        match namespace_labels {
            Some(l) => {
                let wrapped = serde_json::json!({"metadata": {"labels": l}});
                by_namespace.matches(&labels(Some(&wrapped)))
            }
            None => true,
        }
    };
    Ok(ns_ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    fn at<'a>(
        rt: &'a crate::registry::ResourceType,
        op: Operation,
        sub: &'a str,
    ) -> Attributes<'a> {
        Attributes {
            operation: op,
            rt,
            subresource: sub,
            namespace: "default",
            name: "x",
            user: "u",
            groups: &[],
            dry_run: false,
        }
    }

    /// kube's rule table: operations, groups, versions, resources with subresources, scope,
    /// and both selectors.
    #[test]
    fn rules_and_selectors_choose_the_writes() {
        let reg = Registry::with_builtins();
        let cm = reg.get("", "v1", "configmaps").unwrap();
        let ns = reg.get("", "v1", "namespaces").unwrap();
        let hook = |rule: Value| json!({"rules": [rule]});
        let all = json!({"operations": ["*"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]});
        let obj = json!({"metadata": {"labels": {"team": "a"}}});
        let m = |h: &Value, a: &Attributes<'_>| {
            matches(h, a, Some(&obj), None, Some(&json!({"env": "prod"}))).unwrap()
        };
        assert!(m(&hook(all.clone()), &at(&cm, Operation::Create, "")));
        assert!(
            !m(&hook(all.clone()), &at(&cm, Operation::Update, "status")),
            "a subresource needs its own rule"
        );
        let mut star = all.clone();
        star["resources"] = json!(["*/*"]);
        assert!(m(&hook(star), &at(&cm, Operation::Update, "status")));
        let mut create_only = all.clone();
        create_only["operations"] = json!(["CREATE"]);
        assert!(!m(&hook(create_only), &at(&cm, Operation::Delete, "")));
        let mut cluster_scope = all.clone();
        cluster_scope["scope"] = json!("Cluster");
        assert!(!m(&hook(cluster_scope), &at(&cm, Operation::Create, "")));
        let mut h = hook(all.clone());
        h["objectSelector"] = json!({"matchLabels": {"team": "b"}});
        assert!(!m(&h, &at(&cm, Operation::Create, "")));
        h["objectSelector"] =
            json!({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]});
        assert!(m(&h, &at(&cm, Operation::Create, "")));
        h["namespaceSelector"] =
            json!({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]});
        assert!(!m(&h, &at(&cm, Operation::Create, "")));
        // A Namespace is matched by its own labels.
        let mut nsrule = all;
        nsrule["resources"] = json!(["namespaces"]);
        let mut h = hook(nsrule);
        h["namespaceSelector"] = json!({"matchLabels": {"team": "a"}});
        assert!(matches(&h, &at(&ns, Operation::Create, ""), Some(&obj), None, None).unwrap());
    }
}
