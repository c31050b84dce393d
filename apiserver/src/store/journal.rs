//! The write-ahead journal: what makes a write durable. Each committed batch is one write and
//! one `fdatasync` of a plain file, as etcd's WAL; redb receives the journal's events later, many
//! in one transaction (a checkpoint), as etcd's backend commits its batches.
//!
//! A redb commit of one small row costs about 110 µs of CPU on this kind of machine (page
//! allocation, copy-on-write of the B-tree path, checksums) on top of its `fdatasync`; the
//! journal's append is the `fdatasync` and a memcpy (`docs/benchmarks.md`, "The journal").
//!
//! A record is `len: u32 LE, crc32: u32 LE, rv: u64 LE, row: len bytes`, the CRC over the
//! revision and the row, the row being `disk`'s log row. After each checkpoint the next record
//! is written at offset 0 again, over the previous lap. Replay reads from offset 0 while the
//! records are whole, their CRCs match and their revisions follow one another: a torn record
//! fails its CRC, and a stale record of an earlier lap has a revision at or below the
//! checkpoint's, so it ends the run. Hand-written because no well-kept crate offers a
//! single-file, checkpointed WAL of this shape.

use super::{Event, StoreError, disk};
use redb::Database;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Events kept only in the journal before a checkpoint moves them to redb.
const CHECKPOINT_EVENTS: usize = 1024;
/// Journal bytes before a checkpoint, whatever the count: large objects checkpoint sooner.
const CHECKPOINT_BYTES: u64 = 8 << 20;
const HEADER: usize = 16;

/// The journal file and the events it holds that redb does not have yet.
pub(super) struct Journal {
    file: File,
    path: PathBuf,
    /// Where the next record goes.
    tail: u64,
    /// Durable in the journal, not yet checkpointed into redb (in revision order).
    pending: Vec<Arc<Event>>,
    /// The newest revision that is durable, in the journal or in redb.
    durable_rv: u64,
}

fn io_err(path: &Path, what: &str, e: std::io::Error) -> StoreError {
    StoreError::Txn(format!("journal {}: {what}: {e}", path.display()))
}

fn crc(rv: u64, row: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&rv.to_le_bytes());
    h.update(row);
    h.finalize()
}

/// The records of `bytes` after revision `after`: the run of whole, consecutive records from
/// offset 0, of which those newer than `after`.
fn records(bytes: &[u8], after: u64) -> Vec<(u64, &[u8])> {
    let mut out = Vec::new();
    let (mut at, mut last) = (0usize, None::<u64>);
    while let Some(&h) = bytes
        .get(at..at + HEADER)
        .and_then(|b| <&[u8; HEADER]>::try_from(b).ok())
    {
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let sum = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        let rv = u64::from_le_bytes([h[8], h[9], h[10], h[11], h[12], h[13], h[14], h[15]]);
        let Some(row) = bytes.get(at + HEADER..at + HEADER + len as usize) else {
            break;
        };
        if len == 0 || crc(rv, row) != sum || last.is_some_and(|l| rv != l + 1) {
            break;
        }
        last = Some(rv);
        if rv > after {
            out.push((rv, row));
        }
        at += HEADER + len as usize;
    }
    out
}

impl Journal {
    /// Opens the journal at `path`, applies what it holds past the checkpoint (`st.rv`) to `st`
    /// and checkpoints it into `db`, so the journal starts empty.
    pub(super) fn open(
        path: PathBuf,
        db: &Database,
        st: &mut super::State,
        retention: u64,
    ) -> Result<Self, StoreError> {
        let mut file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            // It holds every Secret written since the last checkpoint.
            .mode(0o600)
            .open(&path)
            .map_err(|e| io_err(&path, "open", e))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| io_err(&path, "read", e))?;
        let found = records(&bytes, st.rv);
        if let Some((first, _)) = found.first()
            && *first != st.rv + 1
        {
            return Err(StoreError::Corrupt(
                path.display().to_string(),
                format!(
                    "the journal continues at revision {first} but the database ends at {}: \
                     the database file is older than the journal (restore both together)",
                    st.rv
                ),
            ));
        }
        let mut replayed = Vec::with_capacity(found.len());
        for (rv, row) in found {
            replayed.push(disk::replay(st, rv, row)?);
        }
        if !replayed.is_empty() {
            disk::commit(db, &replayed, retention)?;
        }
        let journal = Journal {
            file,
            path,
            tail: 0,
            pending: Vec::new(),
            durable_rv: st.rv,
        };
        if !bytes.is_empty() {
            journal.empty()?;
        }
        Ok(journal)
    }

    /// Truncates the file, all of it being in redb: an empty journal is what an older capw,
    /// which reads only redb, expects to find.
    fn empty(&self) -> Result<(), StoreError> {
        self.file
            .set_len(0)
            .and_then(|()| self.file.sync_all())
            .map_err(|e| io_err(&self.path, "truncate", e))
    }

    pub(super) fn durable_rv(&self) -> u64 {
        self.durable_rv
    }

    /// Makes `batch` durable: one write and one `fdatasync`. Returns whether a checkpoint is due.
    pub(super) fn append(&mut self, batch: &[Arc<Event>]) -> Result<bool, StoreError> {
        let mut buf = Vec::new();
        for event in batch {
            let row = disk::log_row(event).map_err(super::txn_err)?;
            let len = u32::try_from(row.len()).map_err(|_| {
                StoreError::Txn(format!("a log row of {} bytes is too large", row.len()))
            })?;
            buf.extend_from_slice(&len.to_le_bytes());
            buf.extend_from_slice(&crc(event.rv, &row).to_le_bytes());
            buf.extend_from_slice(&event.rv.to_le_bytes());
            buf.extend_from_slice(&row);
        }
        self.file
            .write_all_at(&buf, self.tail)
            .map_err(|e| io_err(&self.path, "write", e))?;
        self.file
            .sync_data()
            .map_err(|e| io_err(&self.path, "fdatasync", e))?;
        self.tail += buf.len() as u64;
        self.pending.extend(batch.iter().cloned());
        if let Some(last) = batch.last() {
            self.durable_rv = last.rv;
        }
        Ok(self.pending.len() >= CHECKPOINT_EVENTS || self.tail >= CHECKPOINT_BYTES)
    }

    /// Moves the pending events into redb in one durable transaction; the next record then
    /// goes to offset 0. Until redb's commit returns, the journal still holds them all.
    pub(super) fn checkpoint(&mut self, db: &Database, retention: u64) -> Result<(), StoreError> {
        if !self.pending.is_empty() {
            disk::commit(db, &self.pending, retention)?;
            self.pending.clear();
        }
        self.tail = 0;
        Ok(())
    }

    /// Checkpoints and empties the file, for a clean shutdown.
    pub(super) fn close(&mut self, db: &Database, retention: u64) -> Result<(), StoreError> {
        self.checkpoint(db, retention)?;
        self.empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(rv: u64, row: &[u8]) -> Vec<u8> {
        let mut b = (row.len() as u32).to_le_bytes().to_vec();
        b.extend_from_slice(&crc(rv, row).to_le_bytes());
        b.extend_from_slice(&rv.to_le_bytes());
        b.extend_from_slice(row);
        b
    }

    #[test]
    fn replay_stops_at_a_torn_record_a_stale_lap_and_zeroes() {
        let mut file = [record(5, b"a"), record(6, b"bb"), record(7, b"ccc")].concat();
        let whole = records(&file, 0);
        assert_eq!(whole.iter().map(|r| r.0).collect::<Vec<_>>(), [5, 6, 7]);
        assert_eq!(
            records(&file, 5).len(),
            2,
            "at or below the checkpoint is skipped"
        );
        // A torn last record: its CRC fails.
        let last = file.len() - 1;
        file[last] ^= 0xff;
        assert_eq!(records(&file, 0).len(), 2);
        // A new lap over an old one: the old lap's records do not continue the revisions.
        let lap = [record(9, b"new"), record(3, b"old"), record(4, b"old")].concat();
        assert_eq!(
            records(&lap, 8).iter().map(|r| r.0).collect::<Vec<_>>(),
            [9]
        );
        // Zeroes, a truncated header or a length past the end end the run without a panic.
        assert!(records(&[0u8; 64], 0).is_empty());
        assert!(records(&record(1, b"x")[..10], 0).is_empty());
        let mut long = record(1, b"x");
        long[0] = 200;
        assert!(records(&long, 0).is_empty());
    }
}
