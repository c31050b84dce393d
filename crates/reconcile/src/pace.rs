//! Pacing of status writes that only report progress.
//!
//! On the way to a state, a summary's counters (`readyReplicas` 1, 2, 3) and a waiting
//! condition's reason or message (`WaitingForControlPlaneInitialized`, then `VMBooting`)
//! change many times. Under load each change was a write of its own: at a thousand clusters a
//! MachineDeployment's status was written 12 times per cluster against 3 for one cluster
//! alone, because its Machines reached each count at different moments. A change that is only
//! progress is written at most once per period per object, folding the counts in between; a
//! change of anything else (a condition's status, a phase, a flag, an observed generation, a
//! reference) is written at once, since other controllers and `kubectl wait` act on those,
//! and it carries the progress along. Nothing is lost: a held-back status is written by the
//! reconcile the returned wait schedules, or by an earlier one.
//!
//! The per-object period is `governor`'s keyed GCRA limiter with a burst of one.

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use serde::Serialize;
use serde_json::{Map, Value};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// How many checks between two sweeps of the objects whose period has long passed.
const SWEEP_EVERY: u32 = 4096;

/// At most one progress-only status write per object and period.
pub struct Pace {
    limiter: DefaultKeyedRateLimiter<String>,
    clock: DefaultClock,
    checks: AtomicU32,
}

impl Pace {
    /// At most one progress-only write per `period` (at least a millisecond) and object.
    pub fn new(period: Duration) -> Self {
        let quota = Quota::with_period(period.max(Duration::from_millis(1)))
            .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
            .allow_burst(NonZeroU32::MIN);
        Pace {
            limiter: RateLimiter::keyed(quota),
            clock: DefaultClock::default(),
            checks: AtomicU32::new(0),
        }
    }

    /// How long to hold back the write of `after` over `before` for the object `key` (its
    /// UID): `None` to write it now. A write now starts the object's period, except a change of
    /// state written while the period still runs: GCRA keeps the running one, so the next
    /// progress may follow it sooner. `counters` are the keys whose values are counts, at any
    /// depth.
    pub fn hold<S: Serialize>(
        &self,
        key: Option<&str>,
        before: Option<&S>,
        after: &S,
        counters: &[&str],
    ) -> Option<Duration> {
        let key = key?;
        if self
            .checks
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(SWEEP_EVERY)
        {
            self.limiter.retain_recent();
        }
        // The statuses are compared only when the period still runs: otherwise the write
        // goes now either way.
        let not_until = self.limiter.check_key(&key.to_string()).err()?;
        before
            .is_some_and(|b| progress_only(b, after, counters))
            .then(|| not_until.wait_time_from(self.clock.now()))
    }
}

/// Whether `after` differs from `before` at most in counters and in the reason, message and
/// times of conditions whose status stays the same.
fn progress_only<S: Serialize>(before: &S, after: &S, counters: &[&str]) -> bool {
    match (serde_json::to_value(before), serde_json::to_value(after)) {
        (Ok(b), Ok(a)) => state(&b, counters) == state(&a, counters),
        _ => false,
    }
}

/// A status without its progress: counters dropped, conditions as their types and statuses.
fn state(v: &Value, counters: &[&str]) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !counters.contains(&k.as_str()))
                .map(|(k, v)| {
                    let v = if k == "conditions" {
                        condition_states(v)
                    } else {
                        state(v, counters)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(|v| state(v, counters)).collect()),
        other => other.clone(),
    }
}

fn condition_states(v: &Value) -> Value {
    let Value::Array(list) = v else {
        return v.clone();
    };
    Value::Array(
        list.iter()
            .map(|c| {
                let mut m = Map::new();
                for k in ["type", "status"] {
                    if let Some(x) = c.get(k) {
                        m.insert(k.to_string(), x.clone());
                    }
                }
                Value::Object(m)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const COUNTERS: &[&str] = &["replicas", "readyReplicas"];

    fn cond(status: &str, reason: &str) -> Value {
        json!({"type": "Ready", "status": status, "reason": reason, "message": reason})
    }

    #[test]
    fn counts_and_waiting_reasons_are_progress() {
        let b = json!({"replicas": 1, "readyReplicas": 0, "conditions": [cond("False", "A")]});
        let a = json!({"replicas": 3, "readyReplicas": 2, "conditions": [cond("False", "B")]});
        assert!(progress_only(&b, &a, COUNTERS));
    }

    #[test]
    fn a_condition_status_a_phase_or_a_new_field_is_state() {
        let b = json!({"replicas": 1, "phase": "ScalingUp", "conditions": [cond("False", "A")]});
        let flipped =
            json!({"replicas": 1, "phase": "ScalingUp", "conditions": [cond("True", "A")]});
        let phase = json!({"replicas": 1, "phase": "Running", "conditions": [cond("False", "A")]});
        let added = json!({"replicas": 1, "phase": "ScalingUp", "nodeRef": {"name": "n"}, "conditions": [cond("False", "A")]});
        for a in [flipped, phase, added] {
            assert!(!progress_only(&b, &a, COUNTERS), "{a}");
        }
    }

    #[test]
    fn progress_is_held_back_within_the_period_and_state_is_not() {
        let pace = Pace::new(Duration::from_secs(60));
        let b = json!({"replicas": 1, "conditions": [cond("False", "A")]});
        let progress = json!({"replicas": 2, "conditions": [cond("False", "A")]});
        let state = json!({"replicas": 2, "conditions": [cond("True", "A")]});
        // The first write of an object goes at once, and starts its period.
        assert_eq!(
            pace.hold(Some("uid-1"), Some(&b), &progress, COUNTERS),
            None
        );
        let wait = pace.hold(Some("uid-1"), Some(&b), &progress, COUNTERS);
        assert!(
            wait.is_some_and(|w| w > Duration::from_secs(50)),
            "{wait:?}"
        );
        assert_eq!(pace.hold(Some("uid-1"), Some(&b), &state, COUNTERS), None);
        // Another object has its own period; an object with no UID, or no status yet, is
        // never held back.
        assert_eq!(
            pace.hold(Some("uid-2"), Some(&b), &progress, COUNTERS),
            None
        );
        assert_eq!(pace.hold(None, Some(&b), &progress, COUNTERS), None);
        assert_eq!(pace.hold(Some("uid-1"), None, &progress, COUNTERS), None);
    }
}
