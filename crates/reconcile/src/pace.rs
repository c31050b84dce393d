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
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

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

/// Holds a progress-only status change back until it has stood for a moment, so the change of
/// state that often follows at once carries it instead of a write of its own.
///
/// A provider reports a waiting reason for a step that is about to end (`VMBooting`, while the
/// in-memory VM registers its Node): at a thousand clusters the next state came 1.2 to 1.5 s
/// later, and the reason cost a write of the provider object and one of its Machine, which
/// mirrors it. [`Pace`] lets the first progress after a quiet period through at once, so it
/// folded none of these. A reason that stands longer than the period is written then, as
/// before. The first-seen times are kept per object in a map, swept of long-gone entries; no
/// keyed debouncer crate keeps state between calls that the caller drives.
pub struct Settle {
    period: Duration,
    since: Mutex<HashMap<String, Instant>>,
}

/// Entries this many periods old belong to objects that were deleted or settled otherwise.
const SETTLE_SWEEP_PERIODS: u32 = 10;

impl Settle {
    /// A progress-only change is written once it has stood for `period`.
    pub fn new(period: Duration) -> Self {
        Settle {
            period,
            since: Mutex::new(HashMap::new()),
        }
    }

    /// How long to hold back the write of `after` over `before` for the object `key` (its UID):
    /// `None` to write it now. Anything but progress (see [`Pace`]) goes at once and ends the
    /// object's wait.
    pub fn hold<S: Serialize>(
        &self,
        key: Option<&str>,
        before: Option<&S>,
        after: &S,
    ) -> Option<Duration> {
        self.hold_at(key, before, after, Instant::now())
    }

    fn hold_at<S: Serialize>(
        &self,
        key: Option<&str>,
        before: Option<&S>,
        after: &S,
        now: Instant,
    ) -> Option<Duration> {
        let key = key?;
        let progress = before.is_some_and(|b| changed_progress_only(b, after));
        let mut since = self.since.lock().unwrap_or_else(PoisonError::into_inner);
        if !progress {
            since.remove(key);
            return None;
        }
        if !since.contains_key(key) && since.len() >= SETTLE_SWEEP_AT {
            let stale = self.period * SETTLE_SWEEP_PERIODS;
            since.retain(|_, t| now.saturating_duration_since(*t) < stale);
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

/// How many waiting objects before a new one sweeps the map.
const SETTLE_SWEEP_AT: usize = 1024;

/// Whether `after` differs from `before` at most in counters and in the reason, message and
/// times of conditions whose status stays the same.
fn progress_only<S: Serialize>(before: &S, after: &S, counters: &[&str]) -> bool {
    match (serde_json::to_value(before), serde_json::to_value(after)) {
        (Ok(b), Ok(a)) => state(&b, counters) == state(&a, counters),
        _ => false,
    }
}

/// Whether `after` differs from `before`, and only in progress.
fn changed_progress_only<S: Serialize>(before: &S, after: &S) -> bool {
    match (serde_json::to_value(before), serde_json::to_value(after)) {
        (Ok(b), Ok(a)) => b != a && state(&b, &[]) == state(&a, &[]),
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
    fn progress_is_written_once_it_has_stood_for_the_period() {
        let settle = Settle::new(Duration::from_secs(2));
        let t0 = Instant::now();
        let b = json!({"conditions": [cond("False", "WaitingForBootstrapData")]});
        let booting = json!({"conditions": [cond("False", "VMBooting")]});
        let ready = json!({"conditions": [cond("True", "Provisioned")]});
        let hold = |before: &Value, after: &Value, at: u64| {
            settle.hold_at(
                Some("uid-1"),
                Some(before),
                after,
                t0 + Duration::from_millis(at),
            )
        };
        // New progress waits the whole period, and then what is left of it.
        assert_eq!(hold(&b, &booting, 0), Some(Duration::from_secs(2)));
        assert_eq!(hold(&b, &booting, 1500), Some(Duration::from_millis(500)));
        // Once it has stood for the period it is written, and a later progress waits anew.
        assert_eq!(hold(&b, &booting, 2000), None);
        assert_eq!(hold(&b, &booting, 2100), Some(Duration::from_secs(2)));
        // A change of state goes at once, carrying the progress, and ends the wait.
        assert_eq!(hold(&b, &ready, 2200), None);
        assert_eq!(hold(&b, &booting, 2300), Some(Duration::from_secs(2)));
        // Nothing changed, no status yet, or no UID: never held.
        assert_eq!(hold(&b, &b, 2400), None);
        assert_eq!(settle.hold_at(Some("uid-2"), None, &booting, t0), None);
        assert_eq!(settle.hold_at(None, Some(&b), &booting, t0), None);
    }

    #[test]
    fn settled_entries_of_gone_objects_are_swept() {
        let settle = Settle::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let b = json!({"conditions": [cond("False", "A")]});
        let a = json!({"conditions": [cond("False", "B")]});
        for i in 0..SETTLE_SWEEP_AT {
            settle.hold_at(Some(&format!("gone-{i}")), Some(&b), &a, t0);
        }
        let later = t0 + Duration::from_secs(60);
        assert!(settle.hold_at(Some("new"), Some(&b), &a, later).is_some());
        let since = settle.since.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(since.len(), 1);
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
