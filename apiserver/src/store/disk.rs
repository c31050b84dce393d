//! The on-disk form: three redb tables (objects, the event log, the revision counter), one
//! durable transaction per committed batch, and loading everything back at start-up.

use super::{Event, EventType, IndexKeys, ObjKey, Raw, State, StoreError, txn_err};
use bytes::Bytes;
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use serde_json::Value;
use std::sync::Arc;

const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Writes a batch of events (objects, log rows, the RV high-water mark) in one durable
/// transaction, compacting the log beyond `retention` now and then.
pub(super) fn commit(
    db: &Database,
    batch: &[Arc<Event>],
    retention: u64,
) -> Result<(), StoreError> {
    let txn = db.begin_write().map_err(txn_err)?;
    {
        let mut objects = txn.open_table(OBJECTS).map_err(txn_err)?;
        let mut events = txn.open_table(EVENTS).map_err(txn_err)?;
        for event in batch {
            let key = event.key.db_key();
            // The object's stored bytes are its row and part of the log row, as they are.
            let object = event.object.json();
            if event.kind == EventType::Deleted {
                objects.remove(key.as_str()).map_err(txn_err)?;
            } else {
                objects.insert(key.as_str(), &object[..]).map_err(txn_err)?;
            }
            let row = log_row(event).map_err(txn_err)?;
            events.insert(event.rv, row.as_slice()).map_err(txn_err)?;
        }
        let (first, last) = (batch[0].rv, batch[batch.len() - 1].rv);
        // The newest event row already records the revision, so the counter row is written only
        // when the log is compacted (when a batch crosses a 1024 boundary): most commits touch
        // two tables, and compaction never removes the newest rows (retention >= 1).
        if last / 1024 != (first - 1) / 1024 && last > retention {
            let floor = last - retention;
            events.retain_in(..=floor, |_, _| false).map_err(txn_err)?;
            let mut meta = txn.open_table(META).map_err(txn_err)?;
            meta.insert("rv", last).map_err(txn_err)?;
        }
    }
    txn.commit().map_err(txn_err)
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
fn log_row(event: &Event) -> Result<Vec<u8>, serde_json::Error> {
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
    let events = read.open_table(EVENTS).map_err(txn_err)?;
    let mut first = None;
    for row in events.iter().map_err(txn_err)? {
        let (k, v) = row.map_err(txn_err)?;
        let rv = k.value();
        first.get_or_insert(rv);
        let corrupt = |e: String| StoreError::Corrupt(format!("event {rv}"), e);
        let row: Value = serde_json::from_slice(v.value()).map_err(|e| corrupt(e.to_string()))?;
        let s = |f: &str| row.get(f).and_then(Value::as_str).unwrap_or_default();
        let kind = EventType::parse(s("type")).ok_or_else(|| corrupt("bad type".into()))?;
        let key = ObjKey::new(s("gr"), s("ns"), s("name"));
        let encode = |v: &Value| Raw::encode(v).map_err(|e| corrupt(e.to_string()));
        let prev = row
            .get("prev")
            .filter(|p| !p.is_null())
            .map(encode)
            .transpose()?;
        let object = encode(row.get("object").unwrap_or(&Value::Null))?;
        // An event whose object is still current shares the object map's bytes.
        let object = match st
            .objects
            .get(&key.gr)
            .and_then(|m| m.get(&(key.ns.clone(), key.name.clone())))
        {
            Some(e) if e.raw.json() == object.json() => e.raw.clone(),
            _ => object,
        };
        st.log.push_back(Arc::new(Event {
            rv,
            kind,
            key,
            object,
            prev,
        }));
    }
    if let Some(newest) = st.log.back() {
        st.rv = st.rv.max(newest.rv);
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
    use super::*;

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
