//! What an owner (a MachineSet, a control plane) asked for that the cache does not show yet
//! (kube-controller-manager's "expectations"): Machines it created that are not in the cache,
//! and Machines it deleted that the cache does not show as deleting. They count as done, so a
//! cache that lags behind a busy API server never makes an owner create or delete twice. An
//! expectation the cache has not met within five minutes is dropped (the write was lost; the
//! owner acts on what it sees).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const GIVE_UP: Duration = Duration::from_secs(300);

/// Names with when they were written.
type Written = Vec<(String, Instant)>;

#[derive(Default)]
pub struct Expectations {
    /// `namespace/owner` → (created names, deleted names).
    pending: Mutex<HashMap<String, (Written, Written)>>,
}

impl Expectations {
    fn with<T>(
        &self,
        set: &str,
        f: impl FnOnce(&mut (Vec<(String, Instant)>, Vec<(String, Instant)>)) -> T,
    ) -> T {
        let mut map = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(set.to_string()).or_default();
        let out = f(entry);
        if entry.0.is_empty() && entry.1.is_empty() {
            map.remove(set);
        }
        out
    }

    pub fn created(&self, set: &str, names: &[String]) {
        let now = Instant::now();
        self.with(set, |e| e.0.extend(names.iter().map(|n| (n.clone(), now))));
    }

    pub fn deleted(&self, set: &str, names: &[String]) {
        let now = Instant::now();
        self.with(set, |e| e.1.extend(names.iter().map(|n| (n.clone(), now))));
    }

    /// Created Machines the cache does not show yet (`exists`), and deleted ones it does not
    /// show as deleting (`deleting`); met and stale expectations are forgotten.
    pub fn unmet(
        &self,
        set: &str,
        exists: impl Fn(&str) -> bool,
        deleting: impl Fn(&str) -> bool,
    ) -> (Vec<String>, Vec<String>) {
        self.with(set, |e| {
            e.0.retain(|(n, at)| !exists(n) && at.elapsed() < GIVE_UP);
            e.1.retain(|(n, at)| !deleting(n) && at.elapsed() < GIVE_UP);
            (
                e.0.iter().map(|(n, _)| n.clone()).collect(),
                e.1.iter().map(|(n, _)| n.clone()).collect(),
            )
        })
    }

    pub fn forget(&self, set: &str) {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(set);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmet_until_the_cache_shows_them() {
        let e = Expectations::default();
        e.created("ns/ms", &["a".into(), "b".into()]);
        e.deleted("ns/ms", &["c".into()]);
        let (c, d) = e.unmet("ns/ms", |n| n == "a", |_| false);
        assert_eq!((c, d), (vec!["b".to_string()], vec!["c".to_string()]));
        let (c, d) = e.unmet("ns/ms", |_| true, |_| true);
        assert!(c.is_empty() && d.is_empty());
        assert!(e.pending.lock().unwrap().is_empty());
    }
}
