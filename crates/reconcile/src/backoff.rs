//! Retry delays after failed plugin calls, per object: exponential from 1 s, doubling per
//! consecutive failure, capped at 5 minutes, with "equal jitter" (a uniform pick in the upper
//! half of the step), so objects that failed together do not retry together.
//!
//! Hand-written because the cap must hold after jitter: backon's and kube-runtime's jittered
//! backoffs add the jitter on top of the capped delay, so their largest delay is twice the cap.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// The first delay.
pub const BASE: Duration = Duration::from_secs(1);
/// No delay is longer.
pub const CAP: Duration = Duration::from_secs(300);

/// The un-jittered delay after `failures` consecutive failures (1 for the first).
pub fn step(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    BASE.saturating_mul(1 << doublings).min(CAP)
}

/// `step(failures)` jittered into its upper half: in `[step/2, step]`, never above [`CAP`].
pub fn delay(failures: u32) -> Duration {
    let s = step(failures);
    let half = s / 2;
    half + half.mul_f64(rand::random::<f64>())
}

/// Consecutive failures per object key, forgotten on success and on deletion.
#[derive(Debug, Default)]
pub struct Failures(Mutex<HashMap<String, u32>>);

impl Failures {
    /// Counts one more failure of `key`; returns the count.
    pub fn record(&self, key: &str) -> u32 {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// Forgets `key`: it succeeded, or it is gone.
    pub fn forget(&self, key: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }

    /// How many objects have failures on record.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no object has failures on record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_double_from_one_second_and_the_cap_bites() {
        let s = |n| step(n).as_secs();
        let table = [
            (0, 1),
            (1, 1),
            (2, 2),
            (3, 4),
            (8, 128),
            (9, 256),
            (10, 300),
            (40, 300),
        ];
        for (failures, want) in table {
            assert_eq!(s(failures), want, "after {failures} failures");
        }
    }

    #[test]
    fn jitter_stays_in_the_upper_half_and_under_the_cap() {
        for failures in [1, 2, 5, 9, 10, 100] {
            for _ in 0..200 {
                let d = delay(failures);
                assert!(
                    d >= step(failures) / 2 && d <= step(failures),
                    "{failures}: {d:?}"
                );
                assert!(d <= CAP);
            }
        }
    }

    #[test]
    fn failures_count_per_key_and_are_forgotten() {
        let f = Failures::default();
        assert_eq!(f.record("a"), 1);
        assert_eq!(f.record("a"), 2);
        assert_eq!(f.record("b"), 1);
        f.forget("a");
        assert_eq!(f.record("a"), 1);
        f.forget("a");
        f.forget("b");
        assert!(f.is_empty());
    }
}
