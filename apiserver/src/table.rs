//! `meta.k8s.io/v1` Table output (what `kubectl get` prints) and PartialObjectMetadata.

use crate::registry::{Column, ResourceType};
use serde_json::{Value, json};

/// Evaluates the JSONPath subset used by printer columns: `.a.b`, `[n]`, `[*]` and
/// `[?(@.type=="Ready")]` filters. Returns every match.
pub fn jsonpath<'a>(v: &'a Value, path: &str) -> Vec<&'a Value> {
    let path = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    let mut cur = vec![v];
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let field = &r[..end];
            cur = cur.into_iter().filter_map(|x| x.get(field)).collect();
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else {
                return vec![];
            };
            let inner = &r[..end];
            rest = &r[end + 1..];
            if inner == "*" {
                cur = cur.into_iter().flat_map(children).collect();
            } else if let Some(filter) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')'))
            {
                cur = cur
                    .into_iter()
                    .flat_map(children)
                    .filter(|x| filter_matches(x, filter))
                    .collect();
            } else if let Ok(i) = inner.parse::<usize>() {
                cur = cur.into_iter().filter_map(|x| x.get(i)).collect();
            } else {
                // `['cluster\.x-k8s\.io/cluster-name']`: dots in a quoted key are escaped.
                let key = inner
                    .trim_matches('\'')
                    .trim_matches('"')
                    .replace("\\.", ".");
                cur = cur.into_iter().filter_map(|x| x.get(&key)).collect();
            }
        } else {
            return vec![];
        }
    }
    cur
}

fn children(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(a) => a.iter().collect(),
        Value::Object(m) => m.values().collect(),
        _ => vec![],
    }
}

fn filter_matches(v: &Value, filter: &str) -> bool {
    let (lhs, neq, rhs) = if let Some((l, r)) = filter.split_once("!=") {
        (l, true, r)
    } else if let Some((l, r)) = filter.split_once("==") {
        (l, false, r)
    } else {
        return !jsonpath(v, filter.trim().trim_start_matches('@')).is_empty();
    };
    let found = jsonpath(v, lhs.trim().trim_start_matches('@'));
    let want = rhs.trim().trim_matches('"').trim_matches('\'');
    let eq = found.first().is_some_and(|f| match f {
        Value::String(s) => s == want,
        Value::Number(n) => n.to_string() == want,
        Value::Bool(b) => b.to_string() == want,
        _ => false,
    });
    eq != neq
}

/// kubectl's short human durations: `5s`, `3m12s`, `4h`, `2d3h`, `120d`.
pub fn human_age(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..120 => format!("{s}s"),
        120..600 => format!("{}m{}s", s / 60, s % 60),
        600..10800 => format!("{}m", s / 60),
        10800..172800 => {
            let (h, m) = (s / 3600, (s % 3600) / 60);
            if h < 8 && m > 0 {
                format!("{h}h{m}m")
            } else {
                format!("{h}h")
            }
        }
        172800..691200 => {
            let (d, h) = (s / 86400, (s % 86400) / 3600);
            if h > 0 {
                format!("{d}d{h}h")
            } else {
                format!("{d}d")
            }
        }
        _ if s < 86400 * 365 * 2 => format!("{}d", s / 86400),
        _ => format!("{}y", s / (86400 * 365)),
    }
}

fn age_of(ts: &str, now: jiff::Timestamp) -> Option<String> {
    let t: jiff::Timestamp = ts.parse().ok()?;
    Some(human_age(now.as_second() - t.as_second()))
}

fn cell(obj: &Value, col: &Column, now: jiff::Timestamp) -> Value {
    match col.json_path.as_str() {
        "#data" => {
            let n = obj
                .get("data")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len())
                + obj
                    .get("binaryData")
                    .and_then(Value::as_object)
                    .map_or(0, |m| m.len());
            return json!(n);
        }
        "#webhooks" => {
            return json!(
                obj.get("webhooks")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len)
            );
        }
        "#involved" => {
            let io = &obj["involvedObject"];
            let kind = io["kind"].as_str().unwrap_or_default().to_lowercase();
            return json!(format!(
                "{kind}/{}",
                io["name"].as_str().unwrap_or_default()
            ));
        }
        "#lastSeen" | "#firstSeen" => {
            let keys: &[&str] = if col.json_path == "#lastSeen" {
                &["/series/lastObservedTime", "/lastTimestamp", "/eventTime"]
            } else {
                &["/firstTimestamp", "/eventTime"]
            };
            let at = keys
                .iter()
                .filter_map(|k| obj.pointer(k).and_then(Value::as_str))
                .find(|t| !t.is_empty())
                .or_else(|| {
                    obj.pointer("/metadata/creationTimestamp")
                        .and_then(Value::as_str)
                });
            return json!(
                at.and_then(|t| age_of(t, now))
                    .unwrap_or_else(|| "<unknown>".into())
            );
        }
        "#source" => {
            let component = obj.pointer("/source/component").and_then(Value::as_str);
            let host = obj.pointer("/source/host").and_then(Value::as_str);
            let controller = obj.get("reportingController").and_then(Value::as_str);
            let text = match (component.or(controller), host) {
                (Some(c), Some(h)) if !h.is_empty() => format!("{c}, {h}"),
                (Some(c), _) => c.to_string(),
                (None, _) => String::new(),
            };
            return json!(text);
        }
        "#count" => {
            let n = obj
                .pointer("/series/count")
                .or_else(|| obj.get("count"))
                .and_then(Value::as_i64)
                .unwrap_or(1);
            return json!(n.to_string());
        }
        "#csrCondition" => {
            // kubectl's: the condition types in order, "Pending" when there are none, and
            // "Issued" once a certificate is there.
            let mut parts: Vec<String> = obj
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| c.get("type").and_then(Value::as_str).map(String::from))
                .collect();
            if parts.is_empty() {
                parts.push("Pending".into());
            }
            if obj.pointer("/status/certificate").is_some() {
                parts.push("Issued".into());
            }
            return json!(parts.join(","));
        }
        "#csrDuration" => {
            return json!(
                obj.pointer("/spec/expirationSeconds")
                    .and_then(Value::as_i64)
                    .map_or_else(|| "<none>".to_string(), human_age)
            );
        }
        "#podReady" => return json!(crate::builtin::ready_column(obj)),
        "#podStatus" => return json!(crate::builtin::status_column(obj)),
        "#restarts" => return json!(crate::builtin::restarts_column(obj)),
        "#ready" => {
            let ready = jsonpath(obj, ".status.conditions[?(@.type==\"Ready\")].status");
            return json!(if ready.first().and_then(|v| v.as_str()) == Some("True") {
                "Ready"
            } else {
                "NotReady"
            });
        }
        _ => {}
    }
    let found = jsonpath(obj, &col.json_path);
    let Some(first) = found.first() else {
        return Value::Null;
    };
    if col.type_ == "date" {
        return first
            .as_str()
            .and_then(|s| age_of(s, now))
            .map(Value::String)
            .unwrap_or(Value::Null);
    }
    if found.len() > 1 {
        let parts: Vec<String> = found
            .iter()
            .map(|v| {
                v.as_str()
                    .map(String::from)
                    .unwrap_or_else(|| v.to_string())
            })
            .collect();
        return json!(parts.join(","));
    }
    match (col.type_.as_str(), first) {
        ("string", Value::String(_))
        | ("integer" | "number", Value::Number(_))
        | ("boolean", Value::Bool(_)) => (*first).clone(),
        ("string", other) => json!(other.to_string()),
        (_, other) => (*other).clone(),
    }
}

/// The metadata-only view of an object.
pub fn partial_metadata(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))})
}

/// How much of the object a Table row carries (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

/// Renders objects as a Table with the type's printer columns after `Name`.
pub fn table(
    rt: &ResourceType,
    items: &[Value],
    list_meta: Value,
    include: IncludeObject,
) -> Value {
    let now = jiff::Timestamp::now();
    // kube's Event printer names its own columns (Name last, at priority 1) and has no Age.
    let own_name = rt.columns.iter().any(|c| c.json_path == ".metadata.name");
    let mut defs = vec![];
    if !own_name {
        defs.push(json!({"name": "Name", "type": "string", "format": "name",
            "description": "Name must be unique within a namespace.", "priority": 0}));
    }
    for c in &rt.columns {
        defs.push(json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority}));
    }
    let has_age = own_name
        || rt
            .columns
            .iter()
            .any(|c| c.json_path == ".metadata.creationTimestamp");
    if !has_age {
        defs.push(json!({"name": "Age", "type": "date", "format": "", "description": "CreationTimestamp", "priority": 0}));
    }
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let mut cells = vec![];
            if !own_name {
                cells.push(o.pointer("/metadata/name").cloned().unwrap_or(Value::Null));
            }
            cells.extend(rt.columns.iter().map(|c| cell(o, c, now)));
            if !has_age {
                let ts = o
                    .pointer("/metadata/creationTimestamp")
                    .and_then(Value::as_str);
                cells.push(
                    ts.and_then(|t| age_of(t, now))
                        .map(Value::String)
                        .unwrap_or(Value::Null),
                );
            }
            let object = match include {
                IncludeObject::None => Value::Null,
                IncludeObject::Metadata => partial_metadata(o),
                IncludeObject::Object => o.clone(),
            };
            json!({"cells": cells, "object": object})
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "columnDefinitions": defs, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonpath_subset() {
        let o = json!({"status":{"conditions":[{"type":"A","status":"False"},{"type":"Ready","status":"True"}]},"spec":{"n":3}});
        assert_eq!(
            jsonpath(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            vec![&json!("True")]
        );
        assert_eq!(
            jsonpath(&o, ".status.conditions[0].type"),
            vec![&json!("A")]
        );
        assert_eq!(jsonpath(&o, "{.spec.n}"), vec![&json!(3)]);
        assert_eq!(jsonpath(&o, ".status.conditions[*].type").len(), 2);
        assert!(jsonpath(&o, ".spec.missing").is_empty());
        let l = json!({"metadata":{"labels":{"cluster.x-k8s.io/cluster-name":"demo"}}});
        assert_eq!(
            jsonpath(&l, ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"),
            vec![&json!("demo")]
        );
    }

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human_age(5), "5s");
        assert_eq!(human_age(192), "3m12s");
        assert_eq!(human_age(4 * 3600), "4h");
        assert_eq!(human_age(3 * 86400 + 3600), "3d1h");
        assert_eq!(human_age(200 * 86400), "200d");
    }
}
