//! Read-your-writes over a reflector cache: the object as a controller's own last write
//! returned it, until the cache shows a version that write did not supersede.
//!
//! A reconcile is often woken by the watch event of its own previous write (a metadata patch)
//! before the event of the write after it (the status) reaches the cache. Started from that
//! cache, its guarded status write is refused and has to read the object again. The API
//! server's answer to the last write is the newest version this controller knows of; it is
//! used instead of the cache while the cache still shows a version that write replaced.
//! Versions are compared only for equality (they are opaque), so a version the cache shows
//! that this controller did not replace, such as another controller's write, always wins.
//! No crate offers this over kube-runtime's `Store`, hence the small map here.
//!
//! Every core controller keeps one ([`OwnWrites`]). Without it a Cluster or a deployment
//! reconciled again before its last status reached the cache recomputed that status from the
//! older version: at a thousand clusters that was about four requests per cluster (refused
//! writes, their retries, and rewrites that changed only transition times) and a second Event
//! for a transition it had already announced.

use capw_api::cluster::Cluster;
use capw_api::machine::Machine;
use capw_api::machinedeployment::MachineDeployment;
use capw_api::machineset::MachineSet;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

struct Entry<K> {
    /// Versions the written object replaced: the one the reconcile read and those its
    /// earlier writes returned.
    superseded: Vec<String>,
    object: Arc<K>,
}

/// The objects a controller wrote last, by reference, while the cache lags behind them.
pub struct Written<K: Resource<DynamicType = ()>>
where
    ObjectRef<K>: Hash + Eq,
{
    entries: Mutex<HashMap<ObjectRef<K>, Entry<K>>>,
}

impl<K: Resource<DynamicType = ()>> Default for Written<K>
where
    ObjectRef<K>: Hash + Eq,
{
    fn default() -> Self {
        Written {
            entries: Mutex::default(),
        }
    }
}

impl<K> Written<K>
where
    K: Resource<DynamicType = ()> + Clone,
    ObjectRef<K>: Hash + Eq,
{
    /// The newest known version of `cached`: the last written object while the cache still
    /// shows a version that write replaced, else the cached one.
    pub fn newest(&self, cached: Arc<K>) -> Arc<K> {
        self.stand_in(&cached).unwrap_or(cached)
    }

    /// The last written object when `cached` is a version it replaced. Once the cache shows
    /// any other version the entry is dropped.
    pub fn stand_in(&self, cached: &K) -> Option<Arc<K>> {
        let key = ObjectRef::from_obj(cached);
        let mut entries = self.entries.lock().ok()?;
        let entry = entries.get(&key)?;
        let cached_version = cached.meta().resource_version.as_ref();
        if cached_version.is_some_and(|v| entry.superseded.contains(v)) {
            return Some(entry.object.clone());
        }
        entries.remove(&key);
        None
    }

    /// Records what the last of a reconcile's writes returned, and every version it replaced.
    /// The object is trimmed as the cache's are (`capw_reconcile::trim`).
    pub fn record(&self, superseded: Vec<String>, mut object: K) {
        capw_reconcile::trim::for_cache(&mut object);
        if let Ok(mut entries) = self.entries.lock() {
            entries.insert(
                ObjectRef::from_obj(&object),
                Entry {
                    superseded,
                    object: Arc::new(object),
                },
            );
        }
    }

    /// Follows the cache: once it shows a version of the object the last write did not
    /// replace (that write's own, or a newer one), the entry is dropped. Without this an entry
    /// lived until the object's next reconcile, which for a settled Machine never comes.
    pub fn observe(&self, cached: &K) {
        let _ = self.stand_in(cached);
    }

    /// Drops what is known of an object that is going away.
    pub fn forget(&self, obj: &K) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(&ObjectRef::from_obj(obj));
        }
    }

    /// Records what `trail` wrote, if it wrote anything, and empties it.
    pub fn keep(&self, trail: &mut Trail<K>) {
        if let Some(last) = trail.last.take() {
            self.record(std::mem::take(&mut trail.superseded), last);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.len())
    }
}

/// One reconcile's writes of its object, for [`Written::keep`]: the version the next guarded
/// write goes over, the versions replaced so far (the read one first), and what the last write
/// returned.
pub struct Trail<K> {
    version: Option<String>,
    superseded: Vec<String>,
    last: Option<K>,
}

impl<K: Resource> Trail<K> {
    pub fn new(read: &K) -> Self {
        Trail {
            version: read.meta().resource_version.clone(),
            superseded: vec![],
            last: None,
        }
    }

    /// The version the next write is guarded by.
    pub fn version(&self) -> Option<String> {
        self.version.clone()
    }

    /// Notes a write's answer: the version it made replaces the current one.
    pub fn wrote(&mut self, written: K) {
        self.reread(&written);
        self.last = Some(written);
    }

    /// Notes a fresh read after a refused write: its version replaces the current one.
    pub fn reread(&mut self, latest: &K) {
        self.superseded.extend(self.version.take());
        self.version = latest.meta().resource_version.clone();
    }
}

/// The core controllers' own last writes, by kind.
#[derive(Default)]
pub struct OwnWrites {
    pub clusters: Written<Cluster>,
    pub machines: Written<Machine>,
    pub machine_sets: Written<MachineSet>,
    pub machine_deployments: Written<MachineDeployment>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(version: &str, data: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some("a".into());
        c.metadata.namespace = Some("ns".into());
        c.metadata.resource_version = Some(version.into());
        c.data = Some([("k".to_string(), data.to_string())].into());
        c
    }

    /// The written object stands in for every version it replaced; any other version in the
    /// cache (its own, or someone else's) wins and ends the stand-in.
    #[test]
    fn the_last_write_stands_in_for_what_it_replaced() {
        let w = Written::<ConfigMap>::default();
        let cached = Arc::new(cm("1", "read"));
        assert_eq!(
            w.newest(cached.clone()).data,
            cached.data,
            "nothing written"
        );
        w.record(vec!["1".into(), "2".into()], cm("3", "written"));
        for stale in ["1", "2"] {
            let got = w.newest(Arc::new(cm(stale, "stale")));
            assert_eq!(got.metadata.resource_version.as_deref(), Some("3"));
        }
        let other = w.newest(Arc::new(cm("7", "someone else")));
        assert_eq!(other.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(w.len(), 0, "the cache moved on: the entry is gone");
        let again = w.newest(Arc::new(cm("1", "stale")));
        assert_eq!(again.metadata.resource_version.as_deref(), Some("1"));
        w.record(vec!["1".into()], cm("3", "written"));
        w.forget(&cm("3", ""));
        assert_eq!(w.len(), 0);
        w.record(vec!["1".into()], cm("3", "written"));
        w.observe(&cm("1", "stale"));
        assert_eq!(w.len(), 1, "the cache still shows what the write replaced");
        w.observe(&cm("3", "written"));
        assert_eq!(w.len(), 0, "the cache shows the write itself");
    }

    /// A trail guards each write by the version the previous one made, counts every version
    /// it replaced (a re-read after a refusal too), and records only when something was written.
    #[test]
    fn a_trail_records_what_one_reconcile_replaced() {
        let w = Written::<ConfigMap>::default();
        let mut untouched = Trail::new(&cm("1", "read"));
        w.keep(&mut untouched);
        assert_eq!(w.len(), 0, "nothing written, nothing recorded");

        let mut trail = Trail::new(&cm("1", "read"));
        assert_eq!(trail.version().as_deref(), Some("1"));
        trail.wrote(cm("2", "spec"));
        assert_eq!(trail.version().as_deref(), Some("2"));
        trail.reread(&cm("5", "someone else's"));
        assert_eq!(trail.version().as_deref(), Some("5"));
        trail.wrote(cm("6", "status"));
        w.keep(&mut trail);
        for stale in ["1", "2", "5"] {
            let got = w.newest(Arc::new(cm(stale, "stale")));
            assert_eq!(
                got.metadata.resource_version.as_deref(),
                Some("6"),
                "{stale}"
            );
        }
        w.keep(&mut trail);
        assert_eq!(w.len(), 1, "a kept trail is empty");
    }
}
