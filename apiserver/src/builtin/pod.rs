//! Pods as kube-apiserver stores them: the defaults its Pod strategy and defaulters give, the
//! `Pending` status of a new Pod with its QoS class, the required containers and images, and
//! the spec fields an update may change.
//!
//! Nothing schedules or runs a Pod on the management API, so a Pod created there stays
//! `Pending`; a node agent that runs one reports its status through `/status`, as a kubelet does.

use crate::status::Cause;
use serde_json::{Map, Value, json};

/// Write-time rules of a Pod. `old` is the stored Pod on update.
pub fn on_write(pod: &mut Value, old: Option<&Value>) -> Vec<Cause> {
    default(pod);
    let mut errs = validate(pod);
    match old {
        None => {
            let qos = qos_class(pod);
            pod["status"] = json!({"phase": "Pending", "qosClass": qos});
        }
        Some(old) => errs.extend(validate_update(pod, old)),
    }
    errs
}

fn default(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for (k, v) in [
        ("restartPolicy", json!("Always")),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("securityContext", json!({})),
        ("enableServiceLinks", json!(true)),
    ] {
        spec.entry(k).or_insert(v);
    }
    containers_mut(spec).for_each(default_container);
}

/// Every container and init container of a Pod spec.
fn containers_mut(spec: &mut Map<String, Value>) -> impl Iterator<Item = &mut Map<String, Value>> {
    spec.iter_mut()
        .filter(|(k, _)| matches!(k.as_str(), "initContainers" | "containers"))
        .filter_map(|(_, v)| v.as_array_mut())
        .flatten()
        .filter_map(Value::as_object_mut)
}

fn default_container(c: &mut Map<String, Value>) {
    c.entry("terminationMessagePath")
        .or_insert_with(|| json!("/dev/termination-log"));
    c.entry("terminationMessagePolicy")
        .or_insert_with(|| json!("File"));
    let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
    // kube's defaulter: `Always` for an untagged or `:latest` image, else `IfNotPresent`.
    let tag = image
        .rsplit_once('/')
        .map_or(image, |(_, last)| last)
        .split_once(':')
        .map(|(_, t)| t);
    let policy = if image.contains('@') || !matches!(tag, None | Some("latest")) {
        "IfNotPresent"
    } else {
        "Always"
    };
    c.entry("imagePullPolicy").or_insert_with(|| json!(policy));
}

fn validate(pod: &Value) -> Vec<Cause> {
    let mut errs = vec![];
    let containers = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if containers.is_empty() {
        errs.push(Cause::new(
            "FieldValueRequired",
            "spec.containers",
            "Required value",
        ));
    }
    let mut seen = vec![];
    for (i, c) in containers.iter().enumerate() {
        let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
        if name.is_empty() {
            errs.push(Cause::new(
                "FieldValueRequired",
                format!("spec.containers[{i}].name"),
                "Required value",
            ));
        } else if seen.contains(&name) {
            errs.push(Cause::new(
                "FieldValueDuplicate",
                format!("spec.containers[{i}].name"),
                format!("Duplicate value: {name:?}"),
            ));
        }
        seen.push(name);
        if c.get("image")
            .and_then(Value::as_str)
            .is_none_or(|s| s.trim().is_empty())
        {
            errs.push(Cause::new(
                "FieldValueRequired",
                format!("spec.containers[{i}].image"),
                "Required value",
            ));
        }
    }
    errs
}

/// kube lets an update change only the container images, `activeDeadlineSeconds` and the
/// tolerations (by adding to them); everything else in the spec is fixed at creation.
fn validate_update(pod: &Value, old: &Value) -> Vec<Cause> {
    let comparable = |p: &Value| {
        let mut spec = p
            .get("spec")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for c in containers_mut(&mut spec) {
            c.remove("image");
        }
        spec.remove("activeDeadlineSeconds");
        spec.remove("tolerations");
        spec
    };
    let tolerations = |p: &Value| {
        p.pointer("/spec/tolerations")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (new_t, old_t) = (tolerations(pod), tolerations(old));
    let only_added = new_t.len() >= old_t.len() && new_t[..old_t.len()] == old_t[..];
    if comparable(pod) == comparable(old) && only_added {
        return vec![];
    }
    vec![Cause::new(
        "FieldValueForbidden",
        "spec",
        "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
    )]
}

/// kube's QoS class: `Guaranteed` when every container limits CPU and memory and requests
/// what it limits, `BestEffort` when none requests or limits anything, else `Burstable`.
fn qos_class(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|l| pod.pointer(&format!("/spec/{l}")).and_then(Value::as_array))
        .flatten()
        .collect();
    let res = |c: &Value, kind: &str, r: &str| {
        c.pointer(&format!("/resources/{kind}/{r}"))
            .map(Value::to_string)
    };
    let any = containers.iter().any(|c| {
        ["requests", "limits"].iter().any(|k| {
            c.pointer(&format!("/resources/{k}"))
                .and_then(Value::as_object)
                .is_some_and(|m| m.contains_key("cpu") || m.contains_key("memory"))
        })
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| {
            let limit = res(c, "limits", r);
            // An unset request defaults to the limit.
            limit.is_some() && res(c, "requests", r).is_none_or(|q| Some(q) == limit)
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// The printer's READY column: ready containers of all containers.
pub fn ready_column(pod: &Value) -> String {
    let total = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let ready = statuses(pod)
        .filter(|s| s.get("ready").and_then(Value::as_bool) == Some(true))
        .count();
    format!("{ready}/{total}")
}

/// The printer's STATUS column: `Terminating` while deleted, else the Pod's reason, a
/// container's waiting or terminated reason, or the phase.
pub fn status_column(pod: &Value) -> String {
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        return "Terminating".into();
    }
    let reason = pod
        .pointer("/status/reason")
        .and_then(Value::as_str)
        .or_else(|| {
            statuses(pod).find_map(|s| {
                ["/state/waiting/reason", "/state/terminated/reason"]
                    .iter()
                    .find_map(|p| s.pointer(p).and_then(Value::as_str))
            })
        });
    reason
        .or_else(|| pod.pointer("/status/phase").and_then(Value::as_str))
        .unwrap_or_default()
        .to_string()
}

/// The printer's RESTARTS column: restarts of every container.
pub fn restarts_column(pod: &Value) -> i64 {
    statuses(pod)
        .filter_map(|s| s.get("restartCount").and_then(Value::as_i64))
        .sum()
}

fn statuses(pod: &Value) -> impl Iterator<Item = &Value> {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(containers: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": containers}})
    }

    #[test]
    fn create_defaults_and_reports_pending_with_the_qos_class() {
        let mut p =
            pod(json!([{"name": "a", "image": "nginx:1.27"}, {"name": "b", "image": "busybox"}]));
        assert!(on_write(&mut p, None).is_empty());
        assert_eq!(
            p["status"],
            json!({"phase": "Pending", "qosClass": "BestEffort"})
        );
        assert_eq!(p["spec"]["restartPolicy"], "Always");
        assert_eq!(
            p["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
        assert_eq!(p["spec"]["containers"][1]["imagePullPolicy"], "Always");
        let mut g = pod(json!([{"name": "a", "image": "x:1",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]));
        on_write(&mut g, None);
        assert_eq!(g["status"]["qosClass"], "Guaranteed");
        let mut b =
            pod(json!([{"name": "a", "image": "x:1", "resources": {"requests": {"cpu": "1"}}}]));
        on_write(&mut b, None);
        assert_eq!(b["status"]["qosClass"], "Burstable");
    }

    #[test]
    fn containers_and_images_are_required_and_the_spec_is_fixed() {
        let mut p = pod(json!([{"name": "a"}, {"name": "a", "image": "x"}]));
        let errs: Vec<String> = on_write(&mut p, None)
            .iter()
            .map(|c| format!("{c:?}"))
            .collect();
        assert_eq!(errs.len(), 2, "{errs:?}");
        let mut empty = pod(json!([]));
        assert_eq!(on_write(&mut empty, None).len(), 1);

        let mut old = pod(json!([{"name": "a", "image": "x:1"}]));
        on_write(&mut old, None);
        let mut image = old.clone();
        image["spec"]["containers"][0]["image"] = json!("x:2");
        assert!(on_write(&mut image, Some(&old)).is_empty());
        let mut policy = old.clone();
        policy["spec"]["restartPolicy"] = json!("Never");
        assert_eq!(on_write(&mut policy, Some(&old)).len(), 1);
    }

    #[test]
    fn printer_columns() {
        let p = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2},
                {"name": "b", "ready": false, "restartCount": 1,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        assert_eq!(ready_column(&p), "1/2");
        assert_eq!(status_column(&p), "CrashLoopBackOff");
        assert_eq!(restarts_column(&p), 3);
    }
}
