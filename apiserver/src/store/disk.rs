//! The on-disk form: three redb tables and one durable transaction per committed batch.
//!
//! - `events`: the log, one row per write, keyed by resourceVersion, holding the object (and its
//!   predecessor). A commit writes only these rows.
//! - `objects`: a checkpoint, every object as it was at the log's floor. When the log is
//!   compacted, the rows below the new floor are folded into it, oldest first, and dropped.
//! - `meta`: the revision counter, written at each compaction.
//!
//! Loading reads the checkpoint and replays the log over it. Writing each object only into the
//! log, as etcd keeps one revision row per write, makes an ordinary commit touch one B-tree
//! instead of two: the second tree's pages cost a third of a single-write commit on this disk
//! (a direct redb measurement; `docs/benchmarks.md`, "One B-tree per commit"). The format is the
//! one earlier builds wrote: their `objects` table was current, and replaying their log over it
//! ends at the same objects.

use super::{Event, EventType, IndexKeys, ObjKey, Raw, State, StoreError, txn_err};
use bytes::Bytes;
use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, Table, TableDefinition, WriteTransaction,
};
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;

const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Writes a batch of events (log rows) in one durable transaction, compacting the log beyond
/// `retention` now and then.
pub(super) fn commit(
    db: &Database,
    batch: &[Arc<Event>],
    retention: u64,
) -> Result<(), StoreError> {
    let txn = db.begin_write().map_err(txn_err)?;
    {
        let mut events = txn.open_table(EVENTS).map_err(txn_err)?;
        for event in batch {
            let row = log_row(event).map_err(txn_err)?;
            events.insert(event.rv, row.as_slice()).map_err(txn_err)?;
        }
        let (first, last) = (batch[0].rv, batch[batch.len() - 1].rv);
        // The newest event row already records the revision, so the counter row is written only
        // when the log is compacted (when a batch crosses a 1024 boundary): most commits touch
        // one table, and compaction never removes the newest rows (retention >= 1).
        if last / 1024 != (first - 1) / 1024 && last > retention {
            checkpoint(&txn, &mut events, last - retention)?;
            let mut meta = txn.open_table(META).map_err(txn_err)?;
            meta.insert("rv", last).map_err(txn_err)?;
        }
    }
    txn.commit().map_err(txn_err)
}

/// A log row as the checkpoint reads it: which object, and its bytes as stored.
#[derive(serde::Deserialize)]
struct Folded<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    gr: Cow<'a, str>,
    #[serde(borrow)]
    ns: Cow<'a, str>,
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    object: &'a serde_json::value::RawValue,
}

/// Folds the log rows at or below `floor` into the objects table, oldest first, and drops them.
fn checkpoint(
    txn: &WriteTransaction,
    events: &mut Table<u64, &[u8]>,
    floor: u64,
) -> Result<(), StoreError> {
    let mut objects = txn.open_table(OBJECTS).map_err(txn_err)?;
    for row in events.range(..=floor).map_err(txn_err)? {
        let (rv, row) = row.map_err(txn_err)?;
        let row: Folded = serde_json::from_slice(row.value())
            .map_err(|e| StoreError::Corrupt(format!("event {}", rv.value()), e.to_string()))?;
        let key = ObjKey::new(&row.gr, &row.ns, &row.name).db_key();
        if row.kind == EventType::Deleted.as_str() {
            objects.remove(key.as_str()).map_err(txn_err)?;
        } else {
            let object = row.object.get().as_bytes();
            objects.insert(key.as_str(), object).map_err(txn_err)?;
        }
    }
    events.retain_in(..=floor, |_, _| false).map_err(txn_err)
}

/// A log row without its objects.
#[derive(serde::Serialize)]
struct Head<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    gr: &'a str,
    ns: &'a str,
    name: &'a str,
}

/// The log row of `event`, `{"type", "gr", "ns", "name", "prev", "object"}`, around the
/// stored bytes of the object and its predecessor.
pub(super) fn log_row(event: &Event) -> Result<Vec<u8>, serde_json::Error> {
    let mut row = serde_json::to_vec(&Head {
        kind: event.kind.as_str(),
        gr: &event.key.gr,
        ns: &event.key.ns,
        name: &event.key.name,
    })?;
    row.pop();
    row.extend_from_slice(b",\"prev\":");
    match &event.prev {
        Some(prev) => row.extend_from_slice(prev.json()),
        None => row.extend_from_slice(b"null"),
    }
    row.extend_from_slice(b",\"object\":");
    row.extend_from_slice(event.object.json());
    row.push(b'}');
    Ok(row)
}

/// Applies the log row of revision `rv` to `st`: the object's state from then on, and the
/// event in the retained log.
pub(super) fn replay(st: &mut State, rv: u64, row: &[u8]) -> Result<Arc<Event>, StoreError> {
    let corrupt = |e: String| StoreError::Corrupt(format!("event {rv}"), e);
    let row: Value = serde_json::from_slice(row).map_err(|e| corrupt(e.to_string()))?;
    let s = |f: &str| row.get(f).and_then(Value::as_str).unwrap_or_default();
    let kind = EventType::parse(s("type")).ok_or_else(|| corrupt("bad type".into()))?;
    let key = ObjKey::new(s("gr"), s("ns"), s("name"));
    let encode = |v: &Value| Raw::encode(v).map_err(|e| corrupt(e.to_string()));
    let prev = row
        .get("prev")
        .filter(|p| !p.is_null())
        .map(encode)
        .transpose()?;
    let content = row.get("object").unwrap_or(&Value::Null);
    let object = encode(content)?;
    // The object map and the event share the bytes.
    let current = (kind != EventType::Deleted).then(|| (&object, IndexKeys::of(content)));
    st.index(&key, current.as_ref().map(|(raw, index)| (*raw, index)));
    let event = Arc::new(Event {
        rv,
        kind,
        key,
        object,
        prev,
    });
    st.log.push_back(event.clone());
    st.rv = st.rv.max(rv);
    Ok(event)
}

pub(super) fn load(db: &Database, st: &mut State) -> Result<(), StoreError> {
    // Create the tables on first start so later reads never see "table does not exist".
    let mut txn = db.begin_write().map_err(txn_err)?;
    txn.set_durability(Durability::Immediate).map_err(txn_err)?;
    {
        txn.open_table(OBJECTS).map_err(txn_err)?;
        txn.open_table(EVENTS).map_err(txn_err)?;
        txn.open_table(META).map_err(txn_err)?;
    }
    txn.commit().map_err(txn_err)?;
    let read = db.begin_read().map_err(txn_err)?;
    let objects = read.open_table(OBJECTS).map_err(txn_err)?;
    for row in objects.iter().map_err(txn_err)? {
        let (k, v) = row.map_err(txn_err)?;
        let key = ObjKey::from_db_key(k.value())
            .ok_or_else(|| StoreError::Corrupt(k.value().into(), "bad key".into()))?;
        let obj: Value = serde_json::from_slice(v.value())
            .map_err(|e| StoreError::Corrupt(k.value().into(), e.to_string()))?;
        let raw = Raw::from_parts(Bytes::copy_from_slice(v.value()), &obj);
        st.index(&key, Some((&raw, &IndexKeys::of(&obj))));
    }
    let meta = read.open_table(META).map_err(txn_err)?;
    st.rv = meta
        .get("rv")
        .map_err(txn_err)?
        .map(|v| v.value())
        .unwrap_or(0);
    // The log is replayed over the checkpoint: each row is its object's state from then on.
    let events = read.open_table(EVENTS).map_err(txn_err)?;
    let mut first = None;
    for row in events.iter().map_err(txn_err)? {
        let (k, v) = row.map_err(txn_err)?;
        first.get_or_insert(k.value());
        replay(st, k.value(), v.value())?;
    }
    st.compacted = first.map(|f| f.saturating_sub(1)).unwrap_or(st.rv);
    Ok(())
}

/// Applies the configured retention to a freshly loaded log (it may have been written with a
/// larger window).
pub(super) fn trim(st: &mut State, retention: usize) {
    while st.log.len() > retention {
        if let Some(old) = st.log.pop_front() {
            st.compacted = old.rv;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Proposed, Store, StoreConfig};
    use super::*;
    use redb::ReadableTableMetadata;

    fn obj(name: &str, v: u64) -> Value {
        serde_json::json!({"metadata": {"name": name, "uid": format!("u-{name}")}, "spec": {"v": v}})
    }

    fn rows(dir: &std::path::Path) -> (u64, u64) {
        let db = Database::open(dir.join("capw.redb")).unwrap();
        let read = db.begin_read().unwrap();
        let objects = read.open_table(OBJECTS).unwrap().len().unwrap();
        (objects, read.open_table(EVENTS).unwrap().len().unwrap())
    }

    #[tokio::test]
    async fn compaction_folds_the_log_into_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig {
            retention: 10,
            ..StoreConfig::default()
        };
        let s = Store::open(Some(dir.path()), config.clone()).unwrap();
        // Creates, updates, deletes and re-creates of 50 objects, across two compactions.
        for i in 0..2100u64 {
            let name = format!("o{}", i % 50);
            let key = ObjKey::new("/configmaps", "default", &name);
            s.write::<StoreError>(&key, false, |cur| {
                Ok(match cur {
                    Some(_) if i % 7 == 3 => Proposed::Delete(None),
                    _ => Proposed::Put(obj(&name, i)),
                })
            })
            .await
            .unwrap();
        }
        let (before, rv) = s.list("/configmaps", None);
        s.close().await;
        let (objects, events) = rows(dir.path());
        assert!(objects > 0, "nothing was folded into the checkpoint");
        assert!(events < 1024 + 10, "{events} log rows after compaction");
        let reopened = Store::open(Some(dir.path()), config).unwrap();
        let (after, rv_after) = reopened.list("/configmaps", None);
        assert_eq!(rv, 2100, "every write was a change");
        assert_eq!((after, rv_after), (before, rv));
    }

    /// Earlier builds wrote every object into the objects table on each commit: a table that is
    /// newer than the log's oldest rows. Replaying the log over it ends at the same objects.
    #[tokio::test]
    async fn a_current_objects_table_with_an_older_log_loads_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let raw = |v: &Value| Raw::encode(v).unwrap();
        let key = |n: &str| ObjKey::new("/configmaps", "default", n);
        let stamp = |mut v: Value, rv: u64| {
            v["metadata"]["resourceVersion"] = rv.to_string().into();
            v
        };
        let (a1, a2, b3) = (
            stamp(obj("a", 1), 1),
            stamp(obj("a", 2), 2),
            stamp(obj("b", 3), 3),
        );
        let log = [
            (EventType::Added, "a", &a1, None),
            (EventType::Modified, "a", &a2, Some(&a1)),
            (EventType::Added, "b", &b3, None),
            (EventType::Deleted, "b", &b3, Some(&b3)),
        ];
        {
            let db = Database::create(dir.path().join("capw.redb")).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut objects = txn.open_table(OBJECTS).unwrap();
                let a = serde_json::to_vec(&a2).unwrap();
                objects
                    .insert(key("a").db_key().as_str(), a.as_slice())
                    .unwrap();
                let mut events = txn.open_table(EVENTS).unwrap();
                for (rv, (kind, name, object, prev)) in (1..).zip(log) {
                    let event = Event {
                        rv,
                        kind,
                        key: key(name),
                        object: raw(object),
                        prev: prev.map(raw),
                    };
                    events
                        .insert(rv, log_row(&event).unwrap().as_slice())
                        .unwrap();
                }
            }
            txn.commit().unwrap();
        }
        let s = Store::open(Some(dir.path()), StoreConfig::default()).unwrap();
        assert_eq!(s.current_rv(), 4);
        assert_eq!(*s.get(&key("a")).unwrap(), a2);
        assert!(s.get(&key("b")).is_none());
        assert_eq!(s.by_uid("u-a"), Some(key("a")));
        assert_eq!(s.by_uid("u-b"), None);
        assert_eq!(s.subscribe(0).unwrap().0.len(), 4);
    }

    #[test]
    fn log_row_is_the_event_as_load_reads_it() {
        let raw = |v: Value| Raw::encode(&v).unwrap();
        let event = Event {
            rv: 7,
            kind: EventType::Modified,
            key: ObjKey::new("/configmaps", "ns", "a\"b"),
            object: raw(serde_json::json!({"metadata": {"name": "a\"b"}, "data": {"k": "v"}})),
            prev: Some(raw(serde_json::json!({"metadata": {"name": "a\"b"}}))),
        };
        let row: Value = serde_json::from_slice(&log_row(&event).unwrap()).unwrap();
        assert_eq!(
            row,
            serde_json::json!({
                "type": "MODIFIED", "gr": "/configmaps", "ns": "ns", "name": "a\"b",
                "prev": {"metadata": {"name": "a\"b"}},
                "object": {"metadata": {"name": "a\"b"}, "data": {"k": "v"}},
            })
        );
    }
}
