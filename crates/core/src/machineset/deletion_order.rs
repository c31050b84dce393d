//! Which Machines a MachineSet deletes first on scale-down (`capi-lifecycle.md` §2.5, v1.11's
//! `machineset_deletion_order.go`): Machines already deleting, then those annotated
//! `delete-machine`, then unhealthy ones (no nodeRef, `NodeHealthy=False` or
//! `HealthCheckSucceeded=False`), then by `deletion.order`. Ties go by name.

use capw_api::common::names::DELETE_MACHINE_ANNOTATION;
use capw_api::contract::conditions::types;
use capw_api::machine::Machine;
use kube::ResourceExt;

pub const RANDOM: &str = "Random";
pub const NEWEST: &str = "Newest";
pub const OLDEST: &str = "Oldest";

const MUST_DELETE: f64 = 100.0;
const SHOULD_DELETE: f64 = 75.0;
const BETTER_DELETE: f64 = 50.0;
const COULD_DELETE: f64 = 20.0;
/// Ten days: the age at which the Oldest score is about 63% of the way to 50.
const AGE_SCALE_SECONDS: f64 = 864_000.0;

fn condition_false(m: &Machine, type_: &str) -> bool {
    m.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "False")
    })
}

/// Upstream's "unhealthy" for deletion: no Node yet, or a False health condition (Unknown is
/// not unhealthy).
pub fn is_unhealthy(m: &Machine) -> bool {
    m.status
        .as_ref()
        .and_then(|s| s.node_ref.as_ref())
        .is_none()
        || condition_false(m, types::NODE_HEALTHY)
        || condition_false(m, types::HEALTH_CHECK_SUCCEEDED)
}

fn oldest_score(m: &Machine, now: i64) -> f64 {
    let Some(created) = m.metadata.creation_timestamp.as_ref() else {
        return 0.0;
    };
    let age = (now - created.0.as_second()) as f64;
    if age <= 0.0 {
        return 0.0;
    }
    BETTER_DELETE * (1.0 - (-age / AGE_SCALE_SECONDS).exp())
}

fn priority(m: &Machine, order: &str, now: i64) -> f64 {
    if m.metadata.deletion_timestamp.is_some() {
        return MUST_DELETE;
    }
    if m.annotations().contains_key(DELETE_MACHINE_ANNOTATION) {
        return SHOULD_DELETE;
    }
    if is_unhealthy(m) {
        return BETTER_DELETE;
    }
    match order {
        OLDEST => oldest_score(m, now),
        NEWEST => BETTER_DELETE - oldest_score(m, now),
        _ => COULD_DELETE,
    }
}

/// The first `n` Machines to delete, in order, at time `now` (Unix seconds).
pub fn victims<'a>(
    machines: &'a [&'a Machine],
    n: usize,
    order: &str,
    now: i64,
) -> Vec<&'a Machine> {
    let mut ranked: Vec<(f64, String, &Machine)> = machines
        .iter()
        .map(|m| (priority(m, order, now), m.name_any(), *m))
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    ranked.into_iter().take(n).map(|(_, _, m)| m).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000;

    fn machine(name: &str, age_s: i64, node: bool, extra: serde_json::Value) -> Machine {
        let created = jiff::Timestamp::from_second(NOW - age_s)
            .unwrap()
            .to_string();
        let mut v = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"clusterName": "c", "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": name}},
            "status": {},
        });
        if node {
            v["status"]["nodeRef"] = json!({"name": name});
        }
        json_merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn json_merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    json_merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn names(ms: &[Machine], n: usize, order: &str) -> Vec<String> {
        let refs: Vec<&Machine> = ms.iter().collect();
        victims(&refs, n, order, NOW)
            .iter()
            .map(|m| m.name_any())
            .collect()
    }

    /// Upstream's `machineset_deletion_order_test.go` cases, for each order.
    #[test]
    fn deletion_priority_table() {
        let healthy = |n: &str, age| machine(n, age, true, json!({}));
        let ms = vec![healthy("b", 100), healthy("a", 10_000_000), healthy("c", 5)];
        // Random is name order among equally healthy Machines.
        assert_eq!(names(&ms, 2, RANDOM), ["a", "b"]);
        assert_eq!(names(&ms, 1, OLDEST), ["a"]);
        assert_eq!(names(&ms, 1, NEWEST), ["c"]);
        // The annotation outranks unhealthy; deleting outranks both.
        let ms = vec![
            healthy("a", 100),
            machine("b", 100, false, json!({})),
            machine(
                "c",
                100,
                true,
                json!({"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: "yes"}}}),
            ),
            machine(
                "d",
                100,
                true,
                json!({"metadata": {"deletionTimestamp": "2020-01-01T00:00:00Z"}}),
            ),
        ];
        for order in [RANDOM, NEWEST, OLDEST] {
            assert_eq!(names(&ms, 3, order), ["d", "c", "b"], "{order}");
        }
        // NodeHealthy=False and HealthCheckSucceeded=False are unhealthy; Unknown is not.
        let cond = |t: &str, s: &str| json!({"status": {"conditions": [{"type": t, "status": s, "lastTransitionTime": "", "reason": "", "message": ""}]}});
        let ms = vec![
            healthy("a", 100),
            machine("b", 100, true, cond("NodeHealthy", "Unknown")),
            machine("c", 100, true, cond("HealthCheckSucceeded", "False")),
            machine("d", 100, true, cond("NodeHealthy", "False")),
        ];
        assert_eq!(names(&ms, 2, RANDOM), ["c", "d"]);
        // Newest: a brand-new healthy Machine ties with unhealthy ones; the name decides.
        let ms = vec![machine("b", 100, false, json!({})), healthy("a", 0)];
        assert_eq!(names(&ms, 2, NEWEST), ["a", "b"]);
    }
}
