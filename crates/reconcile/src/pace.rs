//! Pacing of status writes that only report progress.
//!
//! On the way to a state, a summary's counters (`readyReplicas` 1, 2, 3) and a waiting
//! condition's reason or message (`WaitingForControlPlaneInitialized`, then `VMBooting`)
//! change many times. Under load each change was a write of its own: at a thousand clusters a
//! MachineDeployment's status was written 12 times per cluster against 3 for one cluster
//! alone, because its Machines reached each count at different moments. A change that is only
//! progress waits until it has stood for the period, folding the counts in between; a change
//! of anything else (a condition's status, a phase, a flag, an observed generation, a
//! reference) is written at once, since other controllers and `kubectl wait` act on those,
//! and it carries the progress along. Nothing is lost: a held-back status is written by the
//! reconcile the returned wait schedules, or by an earlier one. Progress so lags by at most
//! the period, and is written at most once per period and object.
//!
//! The wait starts when progress is first seen, not at the last write: a step about to end
//! reports its waiting reason (`VMBooting`, while the in-memory VM registers its Node) a second
//! or so before the change of state that ends it, and a Cluster's worker counts move a few
//! seconds before its `Available` flips. A limiter that lets the first progress after a quiet
//! period through (GCRA with a burst of one, as this was) wrote each of those, then the state.
//! The first-seen times are a map per object, swept of long-gone entries: a rate limiter such
//! as `governor` keeps when the last write was, not when the pending change was first seen.

use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Progress-only status changes, held per object until they have stood for a period.
pub struct Pace {
    period: Duration,
    waits: Mutex<Waits>,
}

/// When each object's pending progress was first seen.
struct Waits {
    since: HashMap<String, Instant>,
    /// The map's size at which a new object sweeps it: twice what a sweep left, so a thousand
    /// clusters' live waits are not scanned on every new one.
    sweep_at: usize,
}

/// Entries this many periods old belong to objects deleted, or settled by a write that
/// happened without asking.
const SWEEP_PERIODS: u32 = 10;

/// How many waiting objects, at least, before a new one sweeps the map.
const SWEEP_AT: usize = 1024;

impl Pace {
    /// A progress-only change is written once it has stood for `period`.
    pub fn new(period: Duration) -> Self {
        Pace {
            period,
            waits: Mutex::new(Waits {
                since: HashMap::new(),
                sweep_at: SWEEP_AT,
            }),
        }
    }

    /// How long to hold back the write of `after` over `before` for the object `key` (its
    /// UID): `None` to write it now. A change of state, or no change, ends the object's wait.
    /// `counters` are the keys whose values are counts, at any depth.
    pub fn hold<S: Serialize>(
        &self,
        key: Option<&str>,
        before: Option<&S>,
        after: &S,
        counters: &[&str],
    ) -> Option<Duration> {
        self.hold_at(key, before, after, counters, Instant::now())
    }

    fn hold_at<S: Serialize>(
        &self,
        key: Option<&str>,
        before: Option<&S>,
        after: &S,
        counters: &[&str],
        now: Instant,
    ) -> Option<Duration> {
        let key = key?;
        let progress = before.is_some_and(|b| progress_only(b, after, counters));
        let mut waits = self.waits.lock().unwrap_or_else(PoisonError::into_inner);
        let Waits { since, sweep_at } = &mut *waits;
        if !progress {
            since.remove(key);
            return None;
        }
        if !since.contains_key(key) && since.len() >= *sweep_at {
            let stale = self.period * SWEEP_PERIODS;
            since.retain(|_, t| now.saturating_duration_since(*t) < stale);
            *sweep_at = (since.len() * 2).max(SWEEP_AT);
        }
        let first = *since.entry(key.to_string()).or_insert(now);
        let stood = now.saturating_duration_since(first);
        if stood >= self.period {
            since.remove(key);
            None
        } else {
            Some(self.period - stood)
        }
    }
}

/// Whether `after` differs from `before`, and at most in counters and in the reason, message
/// and times of conditions whose status stays the same.
fn progress_only<S: Serialize>(before: &S, after: &S, counters: &[&str]) -> bool {
    match (serde_json::to_value(before), serde_json::to_value(after)) {
        (Ok(b), Ok(a)) => b != a && state(&b, counters) == state(&a, counters),
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
        assert!(
            !progress_only(&b, &b, COUNTERS),
            "no change is not progress"
        );
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
    fn progress_is_written_once_it_has_stood_for_the_period() {
        let pace = Pace::new(Duration::from_secs(2));
        let t0 = Instant::now();
        let b = json!({"replicas": 1, "conditions": [cond("False", "WaitingForBootstrapData")]});
        let booting = json!({"replicas": 1, "conditions": [cond("False", "VMBooting")]});
        let counted = json!({"replicas": 2, "conditions": [cond("False", "VMBooting")]});
        let ready = json!({"replicas": 2, "conditions": [cond("True", "Provisioned")]});
        let hold = |after: &Value, at: u64| {
            let at = t0 + Duration::from_millis(at);
            pace.hold_at(Some("uid-1"), Some(&b), after, COUNTERS, at)
        };
        // New progress waits the whole period, later progress what is left of it.
        assert_eq!(hold(&booting, 0), Some(Duration::from_secs(2)));
        assert_eq!(hold(&counted, 1500), Some(Duration::from_millis(500)));
        // Once it has stood for the period it is written, and the next progress waits anew.
        assert_eq!(hold(&counted, 2000), None);
        assert_eq!(hold(&booting, 2100), Some(Duration::from_secs(2)));
        // A change of state goes at once, carrying the progress, and ends the wait.
        assert_eq!(hold(&ready, 2200), None);
        assert_eq!(hold(&booting, 2300), Some(Duration::from_secs(2)));
        // No change ends the wait too.
        assert_eq!(hold(&b, 2400), None);
        assert_eq!(hold(&booting, 2500), Some(Duration::from_secs(2)));
        // Another object waits on its own; no status yet, or no UID: never held.
        let other = pace.hold_at(Some("uid-2"), Some(&b), &booting, COUNTERS, t0);
        assert_eq!(other, Some(Duration::from_secs(2)));
        assert_eq!(
            pace.hold_at(Some("uid-3"), None, &booting, COUNTERS, t0),
            None
        );
        assert_eq!(pace.hold_at(None, Some(&b), &booting, COUNTERS, t0), None);
    }

    #[test]
    fn the_waits_of_gone_objects_are_swept() {
        let pace = Pace::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let b = json!({"conditions": [cond("False", "A")]});
        let a = json!({"conditions": [cond("False", "B")]});
        for i in 0..SWEEP_AT {
            pace.hold_at(Some(&format!("gone-{i}")), Some(&b), &a, &[], t0);
        }
        let later = t0 + Duration::from_secs(60);
        assert!(
            pace.hold_at(Some("new"), Some(&b), &a, &[], later)
                .is_some()
        );
        let waits = pace.waits.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(waits.since.len(), 1);
    }

    /// Live waits survive a sweep, and the next sweep waits until the map has doubled: a new
    /// object does not scan them all again.
    #[test]
    fn a_sweep_that_finds_live_waits_is_not_repeated_at_once() {
        let pace = Pace::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let b = json!({"conditions": [cond("False", "A")]});
        let a = json!({"conditions": [cond("False", "B")]});
        for i in 0..=SWEEP_AT {
            pace.hold_at(Some(&format!("live-{i}")), Some(&b), &a, &[], t0);
        }
        let waits = pace.waits.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(waits.since.len(), SWEEP_AT + 1);
        assert_eq!(waits.sweep_at, 2 * SWEEP_AT);
    }
}
