//! Durable object storage: every object in memory for reads, written through to redb.
//!
//! An object is kept as its canonical JSON bytes ([`Raw`]), not as a decoded tree: the object
//! map, the watch window, the disk rows and LIST and watch responses share one serialization.
//! Readers that need the tree decode it.
//!
//! Each mutation is one record of the write-ahead journal, written and `fdatasync`ed before the
//! writer is answered (the object, or its removal, as of that revision), so an acknowledged write
//! survives `kill -9` and a resourceVersion is never reused. `journal` moves its records into
//! redb's event log in batches, and `disk` folds that log into a checkpoint of the objects.
//! Writes are staged in RV order under one lock (the single writer), then made durable by group
//! commit: whichever writer finds no commit running takes every staged write into one journal
//! write and `fdatasync`, as etcd batches its WAL entries. Only after the commit are the objects
//! visible to readers, the events published to watchers (in commit order) and the writers
//! answered.

mod disk;
mod journal;
mod raw;

pub use raw::{Lifecycle, Raw, form};

use raw::IndexKeys;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use tokio::sync::{Mutex, broadcast, watch};

/// Writes accepted and numbered but not yet durable.
#[derive(Default)]
struct Staging {
    /// Staged events in RV order.
    batch: Vec<Staged>,
    /// The newest staged content per key (`None` = deleted), read by later writers.
    overlay: HashMap<ObjKey, Option<(Arc<Value>, Raw)>>,
    /// The last RV handed out.
    last_rv: u64,
    /// Bumped when a commit fails: writes staged in an older epoch are void.
    epoch: u64,
}

/// A staged event and what the indexes will need of it.
#[derive(Clone)]
struct Staged {
    event: Arc<Event>,
    index: IndexKeys,
}

/// What has been made durable: `(epoch, rv)`.
#[derive(Default, Clone, Copy)]
struct Durable {
    epoch: u64,
    rv: u64,
}

/// Failures of the storage layer; the only errors answered with a 500.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database file could not be opened or created.
    #[error("cannot open the database at {path} (is another capw using this data directory?)")]
    Open {
        /// The database file.
        path: String,
        /// Why redb could not open it.
        #[source]
        source: Box<redb::Error>,
    },
    /// A transaction failed; nothing from it was applied.
    #[error("storage transaction failed: {0}")]
    Txn(String),
    /// A stored row is not valid JSON: the file was damaged outside the server.
    #[error("stored record {0} is corrupt: {1}")]
    Corrupt(String, String),
}

fn txn_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Txn(e.to_string())
}

/// Identifies an object: resource (`group/plural`), namespace ("" when cluster-scoped), name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey {
    /// `group/plural`, or `/plural` for the core group.
    pub gr: Arc<str>,
    /// The namespace; empty when cluster-scoped.
    pub ns: String,
    /// The object's name.
    pub name: String,
}

impl ObjKey {
    /// The key of `name` in `ns` of resource `gr`.
    pub fn new(gr: &str, ns: &str, name: &str) -> Self {
        ObjKey {
            gr: Arc::from(gr),
            ns: ns.to_string(),
            name: name.to_string(),
        }
    }

    /// Whether the object here can own a dependent in namespace `ns`: a cluster-scoped one
    /// can own anything, a namespaced one only what is in its namespace.
    pub fn visible_from(&self, ns: &str) -> bool {
        self.ns.is_empty() || self.ns == ns
    }

    fn db_key(&self) -> String {
        format!("{}\u{0}{}\u{0}{}", self.gr, self.ns, self.name)
    }

    fn from_db_key(k: &str) -> Option<Self> {
        let mut it = k.split('\u{0}');
        Some(ObjKey::new(it.next()?, it.next()?, it.next()?))
    }
}

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// The object was created.
    Added,
    /// The object was changed.
    Modified,
    /// The object was removed.
    Deleted,
}

impl EventType {
    /// The wire form: `ADDED`, `MODIFIED` or `DELETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "ADDED" => EventType::Added,
            "MODIFIED" => EventType::Modified,
            "DELETED" => EventType::Deleted,
            _ => return None,
        })
    }
}

/// One committed change, as watchers see it.
#[derive(Debug)]
pub struct Event {
    /// The resourceVersion of the change.
    pub rv: u64,
    /// What happened.
    pub kind: EventType,
    /// Which object.
    pub key: ObjKey,
    /// The new object; for DELETED the last content stamped with the deletion's RV.
    pub object: Raw,
    /// The object before the change (for selector transitions).
    pub prev: Option<Raw>,
}

/// What a write closure asks the store to do.
pub enum Proposed {
    /// Store this object (RV is stamped by the store).
    Put(Value),
    /// Remove the object; the event carries `final_content` or the current object.
    Delete(Option<Value>),
}

/// What a write did.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// A new object was stored.
    Created(Arc<Value>),
    /// The stored object was replaced.
    Updated(Arc<Value>),
    /// The proposed object equals the stored one: nothing was written and no event was sent.
    Unchanged(Arc<Value>),
    /// The object was removed; this is its last content.
    Deleted(Arc<Value>),
}

impl Outcome {
    /// The object the outcome is about.
    pub fn object(&self) -> &Arc<Value> {
        match self {
            Outcome::Created(o)
            | Outcome::Updated(o)
            | Outcome::Unchanged(o)
            | Outcome::Deleted(o) => o,
        }
    }
}

/// Knobs, mostly for tests and benchmarks.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Events kept for watch resumption (kube-apiserver keeps a comparable window).
    pub retention: usize,
    /// Capacity of the broadcast queue; a watcher that falls this far behind is closed.
    pub watch_queue: usize,
    /// Bytes of redb page cache.
    pub db_cache: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            retention: 10_000,
            watch_queue: 16_384,
            db_cache: 4 << 20,
        }
    }
}

/// One stored object and its index keys.
struct Entry {
    raw: Raw,
    index: IndexKeys,
}

/// The objects of one resource, by `(namespace, name)`.
type Objects = BTreeMap<(String, String), Entry>;

/// A watch start: retained events after the requested RV, the live feed, the current RV.
pub type Subscription = (Vec<Arc<Event>>, broadcast::Receiver<Arc<Event>>, u64);

/// One object of a LIST: its namespace, name and stored form.
pub type Listed = ((String, String), Raw);

#[derive(Default)]
struct State {
    objects: HashMap<Arc<str>, Objects>,
    uids: HashMap<String, ObjKey>,
    dependents: HashMap<String, BTreeSet<ObjKey>>,
    rv: u64,
    /// Events with an RV at or below this are no longer available to watchers.
    compacted: u64,
    log: VecDeque<Arc<Event>>,
}

impl State {
    fn index(&mut self, key: &ObjKey, obj: Option<(&Raw, &IndexKeys)>) {
        let map = self.objects.entry(key.gr.clone()).or_default();
        let k = (key.ns.clone(), key.name.clone());
        if let Some(old) = map.remove(&k) {
            if let Some(u) = &old.index.uid {
                self.uids.remove(&**u);
            }
            for o in &old.index.owners {
                if let Some(set) = self.dependents.get_mut(&**o) {
                    set.remove(key);
                    if set.is_empty() {
                        self.dependents.remove(&**o);
                    }
                }
            }
        }
        if let Some((raw, index)) = obj {
            if let Some(u) = &index.uid {
                self.uids.insert(u.to_string(), key.clone());
            }
            for o in &index.owners {
                self.dependents
                    .entry(o.to_string())
                    .or_default()
                    .insert(key.clone());
            }
            let entry = Entry {
                raw: raw.clone(),
                index: index.clone(),
            };
            map.insert(k, entry);
        }
    }
}

/// Decodes a stored object for a reader that needs the tree.
fn decode(key: &ObjKey, raw: &Raw) -> Result<Value, StoreError> {
    raw.value().map_err(|e| {
        StoreError::Corrupt(format!("{}/{}/{}", key.gr, key.ns, key.name), e.to_string())
    })
}

/// The object store. Cheap to share behind an `Arc`.
pub struct Store {
    /// The files: the journal makes each batch durable, and owns redb, which holds the
    /// checkpoint and the log. Held through each commit: a commit left running by a dropped
    /// writer and the next committer's commit of the same batch then run one after the other,
    /// and neither writes a revision the journal already has.
    disk: RwLock<Option<Arc<std::sync::Mutex<journal::Journal>>>>,
    state: RwLock<State>,
    staging: std::sync::Mutex<Staging>,
    /// Held by the one writer that is committing a batch.
    committer: Mutex<()>,
    durable: std::sync::Mutex<Durable>,
    events: broadcast::Sender<Arc<Event>>,
    rv_tx: watch::Sender<u64>,
    config: StoreConfig,
    persistent: bool,
}

fn set_rv(v: &mut Value, rv: u64) {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

fn same_ignoring_rv(a: &Value, b: &Value) -> bool {
    let (Some(ma), Some(mb)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    if ma.len() != mb.len() {
        return false;
    }
    ma.iter().all(|(k, va)| {
        let Some(vb) = mb.get(k) else { return false };
        if k != "metadata" {
            return va == vb;
        }
        let (Some(x), Some(y)) = (va.as_object(), vb.as_object()) else {
            return va == vb;
        };
        let others = |m: &serde_json::Map<String, Value>| {
            m.keys().filter(|k| *k != "resourceVersion").count()
        };
        others(x) == others(y)
            && x.iter()
                .all(|(k, v)| k == "resourceVersion" || y.get(k) == Some(v))
    })
}

impl Store {
    /// Opens (or creates) the store in `dir`, loading every object and the retained event log.
    pub fn open(dir: Option<&Path>, mut config: StoreConfig) -> Result<Self, StoreError> {
        // The newest event row is where a restart finds the revision counter: always keep one.
        config.retention = config.retention.max(1);
        let (events, _) = broadcast::channel(config.watch_queue);
        let mut state = State::default();
        let disk = match dir {
            None => None,
            Some(dir) => {
                let path = dir.join("capw.redb");
                let open_err = |e: redb::Error| StoreError::Open {
                    path: path.display().to_string(),
                    source: Box::new(e),
                };
                // Every object is in memory and the file is read only at start-up, so redb's page
                // cache (1 GiB by default, filled by every write) is mostly a second copy.
                let db = redb::Builder::new()
                    .set_cache_size(config.db_cache)
                    .create(&path)
                    .map_err(|e| open_err(e.into()))?;
                disk::load(&db, &mut state)?;
                let journal = journal::Journal::open(dir, db, &mut state, config.retention as u64)?;
                disk::trim(&mut state, config.retention);
                Some(Arc::new(std::sync::Mutex::new(journal)))
            }
        };
        let (rv_tx, _) = watch::channel(state.rv);
        let persistent = disk.is_some();
        let staging = Staging {
            last_rv: state.rv,
            ..Default::default()
        };
        let durable = Durable {
            epoch: 0,
            rv: state.rv,
        };
        Ok(Store {
            persistent,
            disk: RwLock::new(disk),
            state: RwLock::new(state),
            staging: std::sync::Mutex::new(staging),
            committer: Mutex::new(()),
            durable: std::sync::Mutex::new(durable),
            events,
            rv_tx,
            config,
        })
    }

    /// Closes the database files, checkpointing the journal: later writes fail with a storage
    /// error. Waits (briefly) until no commit still holds them, so they can be opened again in
    /// this process.
    pub async fn close(&self) {
        let _guard = self.committer.lock().await;
        let disk = self.disk.write().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(disk) = disk {
            for _ in 0..200 {
                if Arc::strong_count(&disk) == 1 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            let closed = tokio::task::spawn_blocking(move || {
                let mut journal = disk.lock().unwrap_or_else(|p| p.into_inner());
                journal.close()
            })
            .await
            .map_err(txn_err)
            .and_then(|closed| closed);
            // The journal still holds every write: the next start replays it.
            if let Err(e) = closed {
                tracing::warn!("closing the store: {e}");
            }
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_state(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The latest committed resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.read().rv
    }

    /// Waits until the store has reached at least `rv`, up to `timeout`.
    pub async fn wait_for_rv(&self, rv: u64, timeout: std::time::Duration) -> bool {
        let mut rx = self.rv_tx.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|cur| *cur >= rv))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The stored form of the object at `key`.
    pub fn get_raw(&self, key: &ObjKey) -> Option<Raw> {
        self.read()
            .objects
            .get(&key.gr)?
            .get(&(key.ns.clone(), key.name.clone()))
            .map(|e| e.raw.clone())
    }

    /// The current object at `key`, decoded. An object that does not decode (the file was
    /// damaged) is logged and treated as absent.
    pub fn get(&self, key: &ObjKey) -> Option<Arc<Value>> {
        let raw = self.get_raw(key)?;
        decode(key, &raw)
            .inspect_err(|e| tracing::error!("{e}"))
            .ok()
            .map(Arc::new)
    }

    /// The stored form of every object of a resource (in one namespace when `ns` is given),
    /// sorted by namespace and name, with the RV the snapshot is consistent with.
    pub fn list_raw(&self, gr: &str, ns: Option<&str>) -> (Vec<Listed>, u64) {
        let st = self.read();
        let entry = |((n, name), e): (&(String, String), &Entry)| {
            ((n.clone(), name.clone()), e.raw.clone())
        };
        let items = match st.objects.get(gr) {
            None => vec![],
            Some(map) => match ns {
                Some(ns) => map
                    .range((ns.to_string(), String::new())..)
                    .take_while(|((n, _), _)| n == ns)
                    .map(entry)
                    .collect(),
                None => map.iter().map(entry).collect(),
            },
        };
        (items, st.rv)
    }

    /// All objects of a resource (in one namespace when `ns` is given), decoded, sorted by
    /// namespace and name, with the RV the snapshot is consistent with.
    pub fn list(&self, gr: &str, ns: Option<&str>) -> (Vec<Arc<Value>>, u64) {
        let (items, rv) = self.list_raw(gr, ns);
        let decoded = items
            .into_iter()
            .filter_map(|((ns, name), raw)| {
                decode(&ObjKey::new(gr, &ns, &name), &raw)
                    .inspect_err(|e| tracing::error!("{e}"))
                    .ok()
            })
            .map(Arc::new)
            .collect();
        (decoded, rv)
    }

    /// Every resource (`group/plural`) that currently holds objects in namespace `ns`.
    pub fn resources_in_namespace(&self, ns: &str) -> Vec<ObjKey> {
        let st = self.read();
        let mut out = vec![];
        for (gr, map) in &st.objects {
            for ((n, name), _) in map
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
            {
                out.push(ObjKey {
                    gr: gr.clone(),
                    ns: n.clone(),
                    name: name.clone(),
                });
            }
        }
        out
    }

    /// The key of the object with this uid.
    pub fn by_uid(&self, uid: &str) -> Option<ObjKey> {
        self.read().uids.get(uid).cloned()
    }

    /// Whether the object at `key` names an owner that is gone or that it cannot see (one in
    /// another namespace): the garbage collector asks on every write, and the owner index
    /// answers without decoding the object. `None` when there is no such object. Admission
    /// requires a uid in every owner reference, so the index holds all of them.
    pub fn has_dead_owner(&self, key: &ObjKey) -> Option<bool> {
        let state = self.read();
        let entry = state
            .objects
            .get(&key.gr)?
            .get(&(key.ns.clone(), key.name.clone()))?;
        Some(entry.index.owners.iter().any(|uid| {
            !state
                .uids
                .get(&**uid)
                .is_some_and(|owner| owner.visible_from(&key.ns))
        }))
    }

    /// Objects whose ownerReferences name `uid`.
    pub fn dependents_of(&self, uid: &str) -> Vec<ObjKey> {
        self.read()
            .dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Every owner uid referenced by some object.
    pub fn referenced_owners(&self) -> Vec<String> {
        self.read().dependents.keys().cloned().collect()
    }

    /// How many objects are stored.
    pub fn object_count(&self) -> usize {
        self.read().objects.values().map(BTreeMap::len).sum()
    }

    /// Subscribes to events after `from_rv`. Returns the retained backlog and a live receiver,
    /// or `Err(oldest)` when `from_rv` is older than the retained window.
    pub fn subscribe(&self, from_rv: u64) -> Result<Subscription, u64> {
        let st = self.read();
        if from_rv < st.compacted {
            return Err(st.compacted);
        }
        let start = st.log.partition_point(|e| e.rv <= from_rv);
        let backlog = st.log.range(start..).cloned().collect();
        Ok((backlog, self.events.subscribe(), st.rv))
    }

    /// A consistent snapshot of a resource plus a receiver for everything after it.
    pub fn snapshot_and_subscribe(
        &self,
        gr: &str,
        ns: Option<&str>,
    ) -> (Vec<Raw>, u64, broadcast::Receiver<Arc<Event>>) {
        let st = self.read();
        let rx = self.events.subscribe();
        let items = match st.objects.get(gr) {
            None => vec![],
            Some(map) => map
                .iter()
                .filter(|((n, _), _)| ns.is_none_or(|ns| ns == n))
                .map(|(_, e)| e.raw.clone())
                .collect(),
        };
        (items, st.rv, rx)
    }

    fn staging(&self) -> std::sync::MutexGuard<'_, Staging> {
        self.staging.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn durable(&self) -> std::sync::MutexGuard<'_, Durable> {
        self.durable.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs one mutation of `key`. `f` sees the current object (including writes staged but
    /// not yet committed) and proposes the new state. Returns once the change is durable and
    /// visible. With `dry_run` nothing is persisted or published.
    pub async fn write<E>(
        &self,
        key: &ObjKey,
        dry_run: bool,
        f: impl FnOnce(Option<&Arc<Value>>) -> Result<Proposed, E>,
    ) -> Result<Outcome, E>
    where
        E: From<StoreError>,
    {
        let (rv, epoch, outcome) = {
            let mut st = self.staging();
            let stored = match st.overlay.get(key) {
                Some(staged) => staged.clone(),
                None => match self.get_raw(key) {
                    Some(raw) => Some((Arc::new(decode(key, &raw)?), raw)),
                    None => None,
                },
            };
            let (current, prev) = stored.unzip();
            let proposed = f(current.as_ref())?;
            let (kind, mut object) = match (proposed, &current) {
                (Proposed::Put(new), Some(cur)) if same_ignoring_rv(&new, cur) => {
                    return Ok(Outcome::Unchanged(cur.clone()));
                }
                (Proposed::Put(new), Some(_)) => (EventType::Modified, new),
                (Proposed::Put(new), None) => (EventType::Added, new),
                (Proposed::Delete(content), Some(cur)) => (
                    EventType::Deleted,
                    content.unwrap_or_else(|| (**cur).clone()),
                ),
                (Proposed::Delete(_), None) => {
                    let msg = format!("delete of absent object {}/{}", key.gr, key.name);
                    return Err(StoreError::Txn(msg).into());
                }
            };
            let wrap = |obj: Arc<Value>| match kind {
                EventType::Added => Outcome::Created(obj),
                EventType::Modified => Outcome::Updated(obj),
                EventType::Deleted => Outcome::Deleted(obj),
            };
            if dry_run {
                return Ok(wrap(Arc::new(object)));
            }
            let rv = st.last_rv + 1;
            set_rv(&mut object, rv);
            let raw = Raw::encode(&object).map_err(txn_err)?;
            let index = IndexKeys::of(&object);
            let object = Arc::new(object);
            let event = Arc::new(Event {
                rv,
                kind,
                key: key.clone(),
                object: raw.clone(),
                prev,
            });
            st.last_rv = rv;
            st.batch.push(Staged { event, index });
            st.overlay.insert(
                key.clone(),
                (kind != EventType::Deleted).then(|| (object.clone(), raw)),
            );
            (rv, st.epoch, wrap(object))
        };
        self.make_durable(rv, epoch).await?;
        Ok(outcome)
    }

    /// Waits until `rv` is committed, committing the staged batch if nobody else is.
    async fn make_durable(&self, rv: u64, epoch: u64) -> Result<(), StoreError> {
        loop {
            let _turn = self.committer.lock().await;
            let done = *self.durable();
            if done.epoch != epoch {
                return Err(StoreError::Txn(
                    "an earlier write in the same commit failed; retry".into(),
                ));
            }
            if done.rv >= rv {
                return Ok(());
            }
            // The batch stays staged until it is published: this future can be dropped at the
            // await below (a client that disconnects cancels its request), and the blocking
            // commit goes on without it. The next committer then commits the same batch again
            // (the rows are the same, so that is idempotent) and publishes it.
            let batch = self.staging().batch.clone();
            if batch.is_empty() {
                continue;
            }
            if let Err(e) = self.persist(&batch).await {
                // Everything staged was computed on top of the failed batch: void it all.
                let mut st = self.staging();
                st.epoch += 1;
                st.batch.clear();
                st.overlay.clear();
                st.last_rv = self.current_rv();
                self.durable().epoch = st.epoch;
                return Err(e);
            }
            self.publish(&batch);
        }
    }

    /// Makes a committed batch visible: memory, watch events, then the staged overlay.
    fn publish(&self, batch: &[Staged]) {
        let last = batch.last().map_or(0, |s| s.event.rv);
        {
            let mut st = self.write_state();
            for Staged { event: ev, index } in batch {
                st.rv = ev.rv;
                st.index(
                    &ev.key,
                    (ev.kind != EventType::Deleted).then_some((&ev.object, index)),
                );
                st.log.push_back(ev.clone());
                // Nobody listening is fine: watchers come and go.
                let _ = self.events.send(ev.clone());
            }
            while st.log.len() > self.config.retention {
                if let Some(old) = st.log.pop_front() {
                    st.compacted = old.rv;
                }
            }
        }
        {
            // Later writers may have staged newer content for the same keys: keep those.
            let mut st = self.staging();
            let published = st.batch.partition_point(|s| s.event.rv <= last);
            st.batch.drain(..published);
            for Staged { event: ev, .. } in batch {
                let applied = (ev.kind != EventType::Deleted).then_some(&ev.object);
                let same = match st.overlay.get(&ev.key) {
                    Some(Some((_, staged))) => applied.is_some_and(|a| a.same_write(staged)),
                    Some(None) => applied.is_none(),
                    None => false,
                };
                if same {
                    st.overlay.remove(&ev.key);
                }
            }
        }
        self.durable().rv = last;
        self.rv_tx.send_replace(last);
    }

    async fn persist(&self, batch: &[Staged]) -> Result<(), StoreError> {
        let disk = self.disk.read().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(disk) = disk else {
            return if self.persistent {
                Err(StoreError::Txn(
                    "the store is closed (server shutting down)".into(),
                ))
            } else {
                Ok(())
            };
        };
        let batch: Vec<Arc<Event>> = batch.iter().map(|s| s.event.clone()).collect();
        tokio::task::spawn_blocking(move || {
            let mut journal = disk.lock().unwrap_or_else(|p| p.into_inner());
            let new = batch.partition_point(|e| e.rv <= journal.durable_rv());
            if new < batch.len() {
                journal.append(&batch[new..])?;
            }
            Ok(())
        })
        .await
        .map_err(txn_err)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug)]
    struct E(#[allow(dead_code)] String);
    impl From<StoreError> for E {
        fn from(e: StoreError) -> Self {
            E(e.to_string())
        }
    }

    fn obj(name: &str, v: i64) -> Value {
        json!({"metadata":{"name":name,"uid":format!("u-{name}")},"spec":{"v":v}})
    }

    #[tokio::test]
    async fn the_owner_index_tells_a_dead_or_unseen_owner_from_a_live_one() {
        let s = Store::open(None, StoreConfig::default()).unwrap();
        let put = |key: ObjKey, o: Value| {
            let s = &s;
            async move {
                s.write::<E>(&key, false, move |_| Ok(Proposed::Put(o)))
                    .await
                    .unwrap();
            }
        };
        let owner = |ns: &str, name: &str| ObjKey::new("/configmaps", ns, name);
        put(owner("a", "live"), obj("live", 1)).await;
        put(owner("b", "elsewhere"), obj("elsewhere", 1)).await;
        put(
            ObjKey::new("/nodes", "", "cluster-wide"),
            obj("cluster-wide", 1),
        )
        .await;
        let refs = |uids: &[&str]| {
            let list: Vec<Value> = uids.iter().map(|u| json!({"uid": u})).collect();
            json!({"metadata": {"name": "d", "uid": "u-d", "ownerReferences": list}})
        };
        let cases: [(&[&str], Option<bool>); 6] = [
            (&[], Some(false)),
            (&["u-live"], Some(false)),
            (&["u-live", "u-cluster-wide"], Some(false)),
            (&["u-live", "u-gone"], Some(true)),
            // An owner in another namespace is one the dependent cannot have.
            (&["u-elsewhere"], Some(true)),
            (&["u-gone"], Some(true)),
        ];
        let dependent = ObjKey::new("/secrets", "a", "d");
        for (uids, want) in cases {
            put(dependent.clone(), refs(uids)).await;
            assert_eq!(s.has_dead_owner(&dependent), want, "{uids:?}");
        }
        assert_eq!(
            s.has_dead_owner(&ObjKey::new("/secrets", "a", "none")),
            None
        );
    }

    #[tokio::test]
    async fn writes_survive_reopen_and_noops_are_free() {
        let dir = tempfile::tempdir().unwrap();
        let key = ObjKey::new("/configmaps", "default", "a");
        {
            let s = Store::open(Some(dir.path()), StoreConfig::default()).unwrap();
            s.write::<E>(&key, false, |_| Ok(Proposed::Put(obj("a", 1))))
                .await
                .unwrap();
            let out = s
                .write::<E>(&key, false, |_| Ok(Proposed::Put(obj("a", 1))))
                .await
                .unwrap();
            assert!(matches!(out, Outcome::Unchanged(_)));
            s.write::<E>(&key, false, |_| Ok(Proposed::Put(obj("a", 2))))
                .await
                .unwrap();
            assert_eq!(s.current_rv(), 2);
        }
        let s = Store::open(Some(dir.path()), StoreConfig::default()).unwrap();
        assert_eq!(s.current_rv(), 2);
        assert_eq!(s.get(&key).unwrap()["metadata"]["resourceVersion"], "2");
        let (backlog, _, _) = s.subscribe(0).unwrap();
        assert_eq!(
            backlog.iter().map(|e| e.kind).collect::<Vec<_>>(),
            vec![EventType::Added, EventType::Modified]
        );
        assert_eq!(s.by_uid("u-a"), Some(key));
    }

    /// A store that is not closed (a crash) has writes only in the journal; across laps of the
    /// journal's two files over checkpoints, reopening replays exactly those past the last
    /// checkpoint. 3100 writes end in the second file's second lap.
    #[tokio::test]
    async fn an_unclosed_store_replays_its_journal_across_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        let journal = || {
            ["capw.journal", "capw.journal.1"]
                .map(|f| std::fs::metadata(dir.path().join(f)).unwrap().len())
        };
        let (memory, rv) = {
            let s = Store::open(Some(dir.path()), StoreConfig::default()).unwrap();
            for i in 0..3100u64 {
                let key = ObjKey::new("/configmaps", "default", &format!("o{}", i % 700));
                s.write::<E>(&key, false, |_| Ok(Proposed::Put(obj("o", i as i64))))
                    .await
                    .unwrap();
            }
            (s.list("/configmaps", None).0, s.current_rv())
        };
        assert!(
            journal().iter().sum::<u64>() > 0,
            "the last writes are only in the journal"
        );
        let s = Store::open(Some(dir.path()), StoreConfig::default()).unwrap();
        assert_eq!(s.current_rv(), rv);
        assert_eq!(s.list("/configmaps", None).0, memory);
        let (backlog, _, _) = s.subscribe(rv - 600).unwrap();
        assert_eq!(
            backlog.len(),
            600,
            "the replayed writes are in the watch window"
        );
        // A write after the replay continues the revisions, and a clean close empties the files.
        let key = ObjKey::new("/configmaps", "default", "after");
        s.write::<E>(&key, false, |_| Ok(Proposed::Put(obj("after", 1))))
            .await
            .unwrap();
        s.close().await;
        assert_eq!(journal(), [0, 0]);
        let s = Store::open(Some(dir.path()), StoreConfig::default()).unwrap();
        assert_eq!(s.current_rv(), rv + 1);
        assert_eq!(
            s.get(&key).unwrap()["metadata"]["resourceVersion"],
            (rv + 1).to_string()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn group_commit_serializes_writers_on_one_key() {
        let dir = tempfile::tempdir().unwrap();
        let s = Arc::new(Store::open(Some(dir.path()), StoreConfig::default()).unwrap());
        let key = ObjKey::new("/configmaps", "default", "counter");
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (s, key) = (s.clone(), key.clone());
                tokio::spawn(async move {
                    s.write::<E>(&key, false, |cur| {
                        let n = cur.map_or(0, |c| c["spec"]["v"].as_i64().unwrap());
                        Ok(Proposed::Put(obj("counter", n + 1)))
                    })
                    .await
                    .unwrap()
                })
            })
            .collect();
        let mut rvs = vec![];
        for t in tasks {
            rvs.push(
                t.await.unwrap().object()["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
        assert_eq!(
            s.get(&key).unwrap()["spec"]["v"],
            64,
            "every writer saw the one before it"
        );
        rvs.sort();
        rvs.dedup();
        assert_eq!(rvs.len(), 64);
        let (backlog, _, _) = s.subscribe(0).unwrap();
        let order: Vec<i64> = backlog
            .iter()
            .map(|e| e.object.value().unwrap()["spec"]["v"].as_i64().unwrap())
            .collect();
        assert_eq!(
            order,
            (1..=64).collect::<Vec<_>>(),
            "events in commit order"
        );
    }

    #[tokio::test]
    async fn a_failed_commit_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(Some(dir.path()), StoreConfig::default()).unwrap();
        let key = ObjKey::new("/configmaps", "default", "a");
        s.write::<E>(&key, false, |_| Ok(Proposed::Put(obj("a", 1))))
            .await
            .unwrap();
        s.close().await;
        assert!(
            s.write::<E>(&key, false, |_| Ok(Proposed::Put(obj("a", 2))))
                .await
                .is_err()
        );
        assert_eq!(s.get(&key).unwrap()["spec"]["v"], 1);
        assert_eq!(s.current_rv(), 1);
        // The next attempt is numbered from the last durable RV, not past the failed one.
        assert!(
            s.write::<E>(&key, false, |cur| {
                assert_eq!(cur.unwrap()["spec"]["v"], 1);
                Ok(Proposed::Put(obj("a", 3)))
            })
            .await
            .is_err()
        );
    }

    #[tokio::test]
    async fn retention_expires_old_watch_starts() {
        let s = Store::open(
            None,
            StoreConfig {
                retention: 3,
                watch_queue: 16,
                ..StoreConfig::default()
            },
        )
        .unwrap();
        for i in 0..6 {
            let key = ObjKey::new("/configmaps", "default", &format!("o{i}"));
            s.write::<E>(&key, false, |_| Ok(Proposed::Put(obj("o", i))))
                .await
                .unwrap();
        }
        assert_eq!(s.subscribe(1).err(), Some(3));
        assert_eq!(s.subscribe(3).unwrap().0.len(), 3);
    }

    /// A writer whose request is dropped mid-commit (its client went away) must not take its
    /// batch with it: what reached the disk is published to readers and watchers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_dropped_mid_commit_is_still_published() {
        let dir = tempfile::tempdir().unwrap();
        let s = Arc::new(Store::open(Some(dir.path()), StoreConfig::default()).unwrap());
        let (_, mut rx, _) = s.subscribe(0).unwrap();
        for i in 0..200 {
            let key = ObjKey::new("/configmaps", "default", &format!("dropped-{i}"));
            let (s2, k2) = (s.clone(), key.clone());
            let dropped = tokio::spawn(async move {
                s2.write::<E>(&k2, false, |_| Ok(Proposed::Put(obj("dropped", i))))
                    .await
            });
            // Cancel it somewhere between staging and answering, as a disconnect does.
            for _ in 0..(i % 7) {
                tokio::task::yield_now().await;
            }
            dropped.abort();
            let _ = dropped.await;
            let other = ObjKey::new("/configmaps", "default", &format!("other-{i}"));
            s.write::<E>(&other, false, |_| Ok(Proposed::Put(obj("other", i))))
                .await
                .unwrap();
            let staged = s.staging().overlay.contains_key(&key);
            assert!(
                !staged,
                "round {i}: a write is visible to writers but not to readers"
            );
        }
        // Every resourceVersion handed out reached the watchers, in order, once.
        let mut seen = vec![];
        while let Ok(ev) = rx.try_recv() {
            seen.push(ev.rv);
        }
        assert_eq!(seen, (1..=s.current_rv()).collect::<Vec<_>>());
        // And the disk holds what memory does.
        let (rv, (mut memory, _)) = (s.current_rv(), s.list("/configmaps", None));
        s.close().await;
        let reopened = Store::open(Some(dir.path()), StoreConfig::default()).unwrap();
        let (mut disk, _) = reopened.list("/configmaps", None);
        assert_eq!(reopened.current_rv(), rv);
        memory.sort_by_key(|o| o["metadata"]["resourceVersion"].to_string());
        disk.sort_by_key(|o| o["metadata"]["resourceVersion"].to_string());
        assert_eq!(memory, disk);
    }
}
