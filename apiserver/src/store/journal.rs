//! The write-ahead journal: what makes a write durable. Each committed batch is one write and
//! one `fdatasync` of a plain file, as etcd's WAL; redb receives the journal's events later, many
//! in one transaction (a checkpoint), as etcd's backend commits its batches.
//!
//! A redb commit of one small row costs about 110 µs of CPU on this kind of machine (page
//! allocation, copy-on-write of the B-tree path, checksums) on top of its `fdatasync`; the
//! journal's append is the `fdatasync` and a memcpy (`docs/benchmarks.md`, "The journal").
//!
//! The journal is two files that take turns, so that a checkpoint runs on its own thread while
//! writes go on: when one file has had its share, writes move to the other, and the events of
//! the full one go to redb in the background. A file is written over only once redb has its
//! events; a write that needs it sooner waits for that checkpoint.
//!
//! A record is `len: u32 LE, crc32: u32 LE, rv: u64 LE, row: len bytes`, the CRC over the
//! revision and the row, the row being `disk`'s log row. Each lap of a file starts at offset 0,
//! over the previous lap. Replay reads each file from offset 0 while the records are whole,
//! their CRCs match and their revisions follow one another: a torn record fails its CRC, and a
//! stale record of an earlier lap has an older revision, so it ends the run. The two runs, past
//! redb's newest revision, must then continue each other. Hand-written because no well-kept
//! crate offers a checkpointed WAL of this shape.

use super::{Event, StoreError, disk};
use redb::Database;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The two files, in the data directory.
const FILES: [&str; 2] = ["capw.journal", "capw.journal.1"];
/// Events a file takes before writes move to the other one and its events go to redb.
const CHECKPOINT_EVENTS: usize = 1024;
/// Bytes a file takes before the same, whatever the count: large objects checkpoint sooner.
const CHECKPOINT_BYTES: u64 = 8 << 20;
const HEADER: usize = 16;

struct Segment {
    file: File,
    path: PathBuf,
}

/// The events of the file writes just left, on their way to redb.
struct Flush {
    events: Arc<Vec<Arc<Event>>>,
    /// The checkpoint's thread; `None` when it could not start or failed, so the next turn
    /// commits the events itself.
    thread: Option<JoinHandle<Result<(), StoreError>>>,
}

/// The journal's files and the events they hold that redb does not have yet.
pub(super) struct Journal {
    db: Arc<Database>,
    retention: u64,
    segments: [Segment; 2],
    /// The file being written, and where its next record goes.
    active: usize,
    tail: u64,
    /// Durable in the active file, not yet in redb (in revision order).
    pending: Vec<Arc<Event>>,
    /// The other file's events, while redb does not have them for sure.
    flushing: Option<Flush>,
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

/// The records of both files past revision `after`, in revision order. They must continue
/// `after` without a gap: a gap means the files are from different times, and the writes past
/// it cannot be applied.
fn chain(files: &[Vec<u8>], after: u64) -> Result<Vec<(u64, &[u8])>, String> {
    let mut runs: Vec<_> = files
        .iter()
        .map(|b| records(b, after))
        .filter(|r| !r.is_empty())
        .collect();
    runs.sort_by_key(|r| r[0].0);
    let found: Vec<_> = runs.into_iter().flatten().collect();
    for (expect, &(rv, _)) in (after + 1..).zip(&found) {
        if rv == expect {
            continue;
        }
        return Err(if expect == after + 1 {
            format!(
                "the journal continues at revision {rv} but the database ends at {after}: the \
                 database file is older than the journal (restore the data directory's files \
                 together)"
            )
        } else {
            format!(
                "the journal's files skip from revision {} to {rv}: one file is older than the \
                 other (restore the data directory's files together)",
                expect - 1
            )
        });
    }
    Ok(found)
}

impl Segment {
    fn open(path: PathBuf) -> Result<(Self, Vec<u8>), StoreError> {
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
        Ok((Segment { file, path }, bytes))
    }

    /// Truncates the file, all of it being in redb: an empty journal is what an older capw,
    /// which reads only redb, expects to find.
    fn empty(&self) -> Result<(), StoreError> {
        self.file
            .set_len(0)
            .and_then(|()| self.file.sync_all())
            .map_err(|e| io_err(&self.path, "truncate", e))
    }
}

impl Journal {
    /// Opens the journal's files in `dir`, applies what they hold past the checkpoint (`st.rv`)
    /// to `st` and checkpoints it into `db`, so the journal starts empty.
    pub(super) fn open(
        dir: &Path,
        db: Database,
        st: &mut super::State,
        retention: u64,
    ) -> Result<Self, StoreError> {
        let (first, a) = Segment::open(dir.join(FILES[0]))?;
        let (second, b) = Segment::open(dir.join(FILES[1]))?;
        let files = [a, b];
        let found =
            chain(&files, st.rv).map_err(|e| StoreError::Corrupt(dir.display().to_string(), e))?;
        let mut replayed = Vec::with_capacity(found.len());
        for (rv, row) in found {
            replayed.push(disk::replay(st, rv, row)?);
        }
        if !replayed.is_empty() {
            disk::commit(&db, &replayed, retention)?;
        }
        let segments = [first, second];
        for (segment, bytes) in segments.iter().zip(&files) {
            if !bytes.is_empty() {
                segment.empty()?;
            }
        }
        Ok(Journal {
            db: Arc::new(db),
            retention,
            segments,
            active: 0,
            tail: 0,
            pending: Vec::new(),
            flushing: None,
            durable_rv: st.rv,
        })
    }

    pub(super) fn durable_rv(&self) -> u64 {
        self.durable_rv
    }

    /// Makes `batch` durable: one write and one `fdatasync`. When the file has had its share,
    /// the next batch goes to the other file.
    pub(super) fn append(&mut self, batch: &[Arc<Event>]) -> Result<(), StoreError> {
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
        let segment = &self.segments[self.active];
        segment
            .file
            .write_all_at(&buf, self.tail)
            .map_err(|e| io_err(&segment.path, "write", e))?;
        segment
            .file
            .sync_data()
            .map_err(|e| io_err(&segment.path, "fdatasync", e))?;
        self.tail += buf.len() as u64;
        self.pending.extend(batch.iter().cloned());
        if let Some(last) = batch.last() {
            self.durable_rv = last.rv;
        }
        if self.pending.len() >= CHECKPOINT_EVENTS || self.tail >= CHECKPOINT_BYTES {
            // The batch is durable whatever redb says: a turn that cannot happen yet is tried
            // again after the next batch, and the active file keeps growing meanwhile.
            if let Err(e) = self.turn() {
                tracing::warn!("checkpoint of the journal into the database: {e}");
            }
        }
        Ok(())
    }

    /// Moves writes to the other file and sends the active file's events to redb on a thread
    /// of their own. The other file is written over only once redb has its events, so this
    /// first waits for that checkpoint.
    fn turn(&mut self) -> Result<(), StoreError> {
        self.finish()?;
        let events = Arc::new(std::mem::take(&mut self.pending));
        let (db, retention, batch) = (self.db.clone(), self.retention, events.clone());
        let thread = std::thread::Builder::new()
            .name("capw-checkpoint".into())
            .spawn(move || disk::commit(&db, &batch, retention))
            .inspect_err(|e| {
                tracing::warn!("starting a checkpoint thread: {e}; the next turn commits it")
            })
            .ok();
        self.flushing = Some(Flush { events, thread });
        self.active ^= 1;
        self.tail = 0;
        Ok(())
    }

    /// Waits until redb has the other file's events, committing them here if their thread
    /// failed. On failure they stay, to be tried again.
    fn finish(&mut self) -> Result<(), StoreError> {
        let Some(mut flush) = self.flushing.take() else {
            return Ok(());
        };
        let done = match flush.thread.take().map(JoinHandle::join) {
            Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(e))) => {
                tracing::warn!("checkpoint of the journal into the database: {e}; trying again");
                disk::commit(&self.db, &flush.events, self.retention)
            }
            Some(Err(_)) | None => disk::commit(&self.db, &flush.events, self.retention),
        };
        if done.is_err() {
            self.flushing = Some(flush);
        }
        done
    }

    /// Checkpoints everything and empties both files, for a clean shutdown.
    pub(super) fn close(&mut self) -> Result<(), StoreError> {
        self.finish()?;
        if !self.pending.is_empty() {
            disk::commit(&self.db, &self.pending, self.retention)?;
            self.pending.clear();
        }
        self.tail = 0;
        self.segments.iter().try_for_each(Segment::empty)
    }
}

impl Drop for Journal {
    /// A store dropped without `close` (a test's crash) still lets its checkpoint finish, so
    /// that redb's file is free to open again in this process. Its outcome does not matter:
    /// the journal's files hold the events either way.
    fn drop(&mut self) {
        if let Some(thread) = self.flushing.take().and_then(|f| f.thread) {
            let _ = thread.join();
        }
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

    /// Writes have moved on to the second file while the first one's checkpoint had not landed:
    /// both files replay, in revision order, each past its own stale lap.
    #[test]
    fn the_two_files_replay_as_one_chain_and_a_gap_is_an_error() {
        let first = [record(7, b"g"), record(8, b"h"), record(3, b"stale")].concat();
        let second = [record(5, b"e"), record(6, b"f"), record(1, b"stale")].concat();
        let files = [first, second];
        let rvs = |after| chain(&files, after).map(|c| c.iter().map(|r| r.0).collect::<Vec<_>>());
        assert_eq!(rvs(4), Ok(vec![5, 6, 7, 8]));
        assert_eq!(rvs(6), Ok(vec![7, 8]), "the second file is in redb already");
        assert_eq!(rvs(8), Ok(vec![]));
        let older = rvs(3).unwrap_err();
        assert!(older.contains("database ends at 3"), "{older}");
        let gap = [
            files[0].clone(),
            [record(4, b"d"), record(5, b"e")].concat(),
        ];
        let skip = chain(&gap, 3).unwrap_err();
        assert!(skip.contains("skip from revision 5 to 7"), "{skip}");
    }
}
