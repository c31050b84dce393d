//! A cache's objects by the cluster they belong to (`spec.clusterName`, which is immutable).
//!
//! The Cluster, MachineSet and MachineDeployment controllers each read the objects of one
//! cluster per reconcile; scanning the whole cache for them made every reconcile cost as much
//! as the number of clusters, and at a thousand clusters those scans were most of the host's
//! CPU. kube-runtime's `Store` has no indexes (client-go's informers do), so this keeps one.
//! It is fed from the watch stream before the store is (`note`), so an object in the store is
//! always in the index; a lookup skips references the store does not hold (not yet stored, or
//! deleted while the watch was down and never reported).

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

type Key = (String, String);

/// References of a cache's objects by `(namespace, cluster name)`.
pub struct ByCluster<K: Resource<DynamicType = ()>> {
    refs: RwLock<HashMap<Key, HashSet<ObjectRef<K>>>>,
    cluster_of: fn(&K) -> &str,
}

impl<K> ByCluster<K>
where
    K: Resource<DynamicType = ()> + Clone,
{
    pub fn new(cluster_of: fn(&K) -> &str) -> Self {
        ByCluster {
            refs: RwLock::default(),
            cluster_of,
        }
    }

    fn key(&self, o: &K) -> Key {
        (
            o.meta().namespace.clone().unwrap_or_default(),
            (self.cluster_of)(o).to_string(),
        )
    }

    /// Follows one watch event: applied objects are added, deleted ones removed.
    pub fn note(&self, event: &watcher::Event<K>) {
        let mut refs = self.refs.write().unwrap_or_else(|p| p.into_inner());
        match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                refs.entry(self.key(o))
                    .or_default()
                    .insert(ObjectRef::from_obj(o));
            }
            watcher::Event::Delete(o) => {
                let key = self.key(o);
                if let Some(set) = refs.get_mut(&key) {
                    set.remove(&ObjectRef::from_obj(o));
                    if set.is_empty() {
                        refs.remove(&key);
                    }
                }
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }

    /// The objects of cluster `cluster` in `ns` that `store` holds.
    pub fn get(&self, store: &Store<K>, ns: &str, cluster: &str) -> Vec<Arc<K>> {
        let refs = self.refs.read().unwrap_or_else(|p| p.into_inner());
        let Some(set) = refs.get(&(ns.to_string(), cluster.to_string())) else {
            return vec![];
        };
        let mut out: Vec<Arc<K>> = set.iter().filter_map(|r| store.get(r)).collect();
        // A stable order: reconciles (and their logs) do not depend on hashing.
        out.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capw_api::machine::Machine;
    use kube::ResourceExt;
    use kube::runtime::reflector;

    fn machine(name: &str, ns: &str, cluster: &str) -> Machine {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterName": cluster, "bootstrap": {"dataSecretName": "d"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "X", "name": name}}
        }))
        .unwrap()
    }

    /// Lookups give the stored objects of one cluster and namespace; a noted object the
    /// store does not hold is skipped, and a deleted one is gone.
    #[test]
    fn objects_of_one_cluster() {
        let index = ByCluster::<Machine>::new(|m| &m.spec.cluster_name);
        let (store, mut writer) = reflector::store::<Machine>();
        let events = [
            watcher::Event::InitApply(machine("a", "ns", "c1")),
            watcher::Event::InitApply(machine("b", "ns", "c1")),
            watcher::Event::InitApply(machine("c", "ns", "c2")),
            watcher::Event::InitApply(machine("d", "other", "c1")),
        ];
        writer.apply_watcher_event(&watcher::Event::Init);
        for e in &events {
            index.note(e);
            writer.apply_watcher_event(e);
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        index.note(&watcher::Event::Apply(machine("e", "ns", "c1")));
        let names = |v: Vec<Arc<Machine>>| v.iter().map(|m| m.name_any()).collect::<Vec<_>>();
        assert_eq!(names(index.get(&store, "ns", "c1")), ["a", "b"]);
        assert_eq!(names(index.get(&store, "other", "c1")), ["d"]);
        let gone = watcher::Event::Delete(machine("a", "ns", "c1"));
        index.note(&gone);
        writer.apply_watcher_event(&gone);
        assert_eq!(names(index.get(&store, "ns", "c1")), ["b"]);
        assert!(index.get(&store, "ns", "c3").is_empty());
    }
}
