//! Which changes of a provider object wake its driver: a change of
//! [`relevance::metadata_for_driver`], as kube's `predicate_filter` decides, except for the echo
//! of the driver's own spec write.
//!
//! A plugin that returns a spec change (a `providerID`, a kubeadm discovery) has answered for
//! the object as it will be once the write lands. The write moves the generation by one, and
//! without this its watch event would call the plugin once more with what it just answered.
//! So just before the write, [`Wakes::expect_own_spec_write`] records as seen the object as it
//! was read with the next generation. It is recorded before the write rather than after,
//! because the write's watch event can arrive before its response.
//!
//! Nothing the plugin has not seen is lost. Only a state equal to the expected one is taken as
//! seen. If another writer's change lands first, its event differs (or, if it moved only the
//! spec, the driver's own write then lands after it and moves the generation again, and that
//! event wakes the driver). If the write fails, the reconcile fails and is retried.
//!
//! Hand-written rather than kube's `predicate_filter` because that filter keeps what it has
//! seen to itself, and the reconcile has to add to it. Entries go when the object goes, and,
//! as kube's, when an object has not been seen for an hour.

use capw_reconcile::relevance;
use kube::ResourceExt;
use kube::api::DynamicObject;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an entry outlives the last event of its object (kube's predicate default).
const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// The last relevant state seen of each object of one kind.
pub(super) struct Wakes {
    own_finalizer: String,
    seen: Mutex<Seen>,
}

struct Seen {
    by_object: HashMap<Key, (u64, Instant)>,
    last_sweep: Instant,
}

/// Namespace, name and uid, as kube's predicate cache keys objects.
type Key = (Option<String>, String, Option<String>);

fn key(o: &DynamicObject) -> Key {
    (
        o.metadata.namespace.clone(),
        o.name_any(),
        o.metadata.uid.clone(),
    )
}

impl Wakes {
    pub(super) fn new(own_finalizer: String) -> Wakes {
        Wakes {
            own_finalizer,
            seen: Mutex::new(Seen {
                by_object: HashMap::new(),
                last_sweep: Instant::now(),
            }),
        }
    }

    fn hash(&self, o: &DynamicObject) -> Option<u64> {
        relevance::metadata_for_driver(o, &self.own_finalizer)
    }

    /// Whether this event of `o` wakes the driver, and records it as seen.
    pub(super) fn wakes(&self, o: &DynamicObject) -> bool {
        let Some(hash) = self.hash(o) else {
            return true;
        };
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if now.duration_since(seen.last_sweep) > FORGET_AFTER {
            seen.by_object
                .retain(|_, (_, at)| now.duration_since(*at) < FORGET_AFTER);
            seen.last_sweep = now;
        }
        let k = key(o);
        if o.metadata.deletion_timestamp.is_some() && o.finalizers().is_empty() {
            seen.by_object.remove(&k);
            return true;
        }
        match seen.by_object.insert(k, (hash, now)) {
            Some((before, _)) => before != hash,
            None => true,
        }
    }

    /// Records as seen `read` as the driver's own spec write, about to be sent, will leave it:
    /// the same but for the generation, one higher.
    pub(super) fn expect_own_spec_write(&self, read: &DynamicObject) {
        let Some(generation) = read.metadata.generation else {
            return;
        };
        let mut expected = DynamicObject {
            types: None,
            metadata: read.metadata.clone(),
            data: serde_json::Value::Null,
        };
        expected.metadata.generation = Some(generation + 1);
        let Some(hash) = self.hash(&expected) else {
            return;
        };
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.by_object.insert(key(read), (hash, Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    const FINALIZER: &str = "inmemorymachine.infrastructure.cluster.x-k8s.io";

    fn object(generation: i64, labels: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "InMemoryMachine",
            "metadata": {"name": "m", "namespace": "default", "uid": "u1",
                         "generation": generation, "labels": labels,
                         "finalizers": [FINALIZER],
                         "annotations": {"capw.dev/plugin-version": "inmemory/1.0.0"}},
            "spec": {},
        }))
        .unwrap()
    }
    use serde_json::Value;

    #[test]
    fn the_echo_of_the_drivers_own_spec_write_does_not_wake_it() {
        let w = Wakes::new(FINALIZER.into());
        let read = object(1, json!({"a": "1"}));
        assert!(w.wakes(&read));
        w.expect_own_spec_write(&read);
        assert!(
            !w.wakes(&object(2, json!({"a": "1"}))),
            "the driver's own write"
        );
        assert!(
            w.wakes(&object(3, json!({"a": "1"}))),
            "a later spec change"
        );
    }

    #[test]
    fn a_change_the_plugin_did_not_see_still_wakes_it() {
        let w = Wakes::new(FINALIZER.into());
        let read = object(1, json!({"a": "1"}));
        assert!(w.wakes(&read));
        w.expect_own_spec_write(&read);
        // Core labelled it before the driver's spec write landed: both events wake it.
        assert!(w.wakes(&object(1, json!({"a": "2"}))), "the label");
        assert!(
            w.wakes(&object(2, json!({"a": "2"}))),
            "the write on top of it"
        );
        // A user's spec edit landed first, as the expected state: the driver's own write
        // moves the generation again after it, and that wakes it.
        let read = object(2, json!({"a": "2"}));
        w.expect_own_spec_write(&read);
        assert!(!w.wakes(&object(3, json!({"a": "2"}))));
        assert!(w.wakes(&object(4, json!({"a": "2"}))));
    }

    #[test]
    fn the_same_state_twice_wakes_once_and_a_deleted_object_is_forgotten() {
        let w = Wakes::new(FINALIZER.into());
        let o = object(1, json!({}));
        assert!(w.wakes(&o));
        assert!(!w.wakes(&o));
        let mut gone = o.clone();
        gone.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-12-05T00:00:00Z")).unwrap());
        gone.metadata.finalizers = None;
        assert!(w.wakes(&gone));
        assert!(w.seen.lock().unwrap().by_object.is_empty());
    }
}
