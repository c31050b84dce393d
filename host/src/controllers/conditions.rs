//! v1beta2 conditions: setting one keeps its `lastTransitionTime` unless its status changed, so
//! a reconcile that observes nothing new writes nothing.

use crate::api::common::Condition;
use serde_json::Value;

pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

pub fn status_str(ok: bool) -> &'static str {
    if ok { "True" } else { "False" }
}

/// Condition `type_` as it should now read, given the `list` it goes into: the one
/// `lastTransitionTime` rule, kube's, which keeps the time unless the status changed.
pub fn updated(
    list: &[Condition],
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Condition {
    let time = match list.iter().find(|c| c.type_ == type_) {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => now(),
    };
    Condition {
        type_: type_.into(),
        status: status.into(),
        observed_generation: generation,
        last_transition_time: time,
        reason: reason.into(),
        message: message.into(),
    }
}

/// Sets condition `type_` in `list`, keeping its transition time when the status is unchanged.
pub fn set(
    list: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let c = updated(list, type_, status, reason, message, generation);
    match list.iter_mut().find(|c| c.type_ == type_) {
        Some(old) => *old = c,
        None => list.push(c),
    }
}

pub fn is_true(list: &[Condition], type_: &str) -> bool {
    list.iter().any(|c| c.type_ == type_ && c.status == "True")
}

/// The conditions a summary (Cluster `Available`, Machine `Ready`) still waits for: the
/// `required` ones that are not True, and the user's gates (`(type, polarity)`) not at their
/// wanted status.
pub fn not_met<'a>(
    list: &[Condition],
    required: &[&str],
    gates: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) -> Vec<String> {
    let mut missing: Vec<String> = required
        .iter()
        .filter(|t| !is_true(list, t))
        .map(|t| t.to_string())
        .collect();
    for (t, polarity) in gates {
        if is_true(list, t) != (polarity != Some("Negative")) {
            missing.push(t.to_string());
        }
    }
    missing
}

/// A condition of a provider object read through the contract: `status.conditions` for
/// v1beta2 objects, `status.v1beta2.conditions` for v1beta1 ones.
pub fn of_object(obj: &Value, type_: &str) -> Option<Condition> {
    ["/status/conditions", "/status/v1beta2/conditions"]
        .iter()
        .filter_map(|p| obj.pointer(p).and_then(Value::as_array))
        .flatten()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
        .and_then(|c| serde_json::from_value::<Condition>(c.clone()).ok())
        .filter(|c| c.status == "True" || c.status == "False" || c.status == "Unknown")
}

/// Mirrors a provider condition into `list` as `as_type`; without one, uses `fallback`.
pub fn mirror(
    list: &mut Vec<Condition>,
    source: Option<Condition>,
    as_type: &str,
    fallback: (bool, &str, &str),
    generation: Option<i64>,
) {
    match source {
        Some(c) => {
            let reason = if c.reason.is_empty() {
                if c.status == "True" {
                    "Ready"
                } else {
                    "NotReady"
                }
                .to_string()
            } else {
                c.reason
            };
            set(list, as_type, &c.status, &reason, &c.message, generation)
        }
        None => set(
            list,
            as_type,
            status_str(fallback.0),
            fallback.1,
            fallback.2,
            generation,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_survives_an_unchanged_status() {
        let mut l = vec![];
        set(&mut l, "Ready", "False", "A", "", None);
        l[0].last_transition_time = "2020-01-01T00:00:00Z".into();
        set(&mut l, "Ready", "False", "B", "m", None);
        assert_eq!(l[0].last_transition_time, "2020-01-01T00:00:00Z");
        assert_eq!(l[0].reason, "B");
        set(&mut l, "Ready", "True", "B", "m", None);
        assert_ne!(l[0].last_transition_time, "2020-01-01T00:00:00Z");
        assert_eq!(l.len(), 1);
    }

    #[test]
    fn provider_conditions_are_read_from_both_contract_locations() {
        let v2 =
            serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let v1 = serde_json::json!({"status": {"v1beta2": {"conditions": [{"type": "Ready", "status": "False", "reason": "X"}]}}});
        assert_eq!(of_object(&v2, "Ready").unwrap().status, "True");
        assert_eq!(of_object(&v1, "Ready").unwrap().reason, "X");
        assert!(of_object(&v1, "Other").is_none());
    }
}
