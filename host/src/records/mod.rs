//! The driver's durable state as records in an embedded transactional
//! store (redb: copy-on-write B-trees, checksummed): one record per
//! volume, snapshot, operation…, so a persist writes what changed, not the
//! whole state. The driver issues one persist at a time, and every request
//! that arrived meanwhile is in the next one: one commit covers them all.
//!
//! A commit is made durable by one frame in an intent log and one
//! `fdatasync` (the `log` module); the B-tree takes the log's commits in one
//! transaction of its own when the log is full and when the store opens,
//! then the log starts over. A crash mid-commit leaves the commits before
//! it: a torn frame ends the log, and redb keeps its previous root until
//! the new one is durable and checks the new one's checksum at open.

mod log;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use volplane_core::driver::RecordError;
use volplane_core::driver::state::{Change, DROPPED_TABLES, TABLES};

use crate::{HostError, Result};

/// What [`RecordStore::read`] hands each record to: `(table, key, bytes)`;
/// an error stops the reading.
pub type Visit<'a> =
    dyn FnMut(&'static str, &str, &[u8]) -> std::result::Result<(), RecordError> + 'a;

/// redb's page cache. The driver holds its whole state in memory and
/// reads the store only at start, so the cache serves only the pages a
/// commit rewrites (the paths from the root to the changed records): 1 MiB
/// keeps the upper levels of every table (about 300 KiB of branch pages
/// at 100,000 volumes) and a commit's writes, where the default (1 GiB)
/// kept a copy of the whole store, as much again as the state itself. A
/// leaf it does not hold is one read from the kernel's page cache.
const CACHE_BYTES: usize = 1 << 20;

/// The table holding the number of the last log frame the B-tree took
/// (not one of the driver's: [`RecordStore::read`] never hands it out).
const LOG_TABLE: &str = "log";
const APPLIED: &str = "applied";

/// The record store of one driver process.
#[derive(Debug)]
pub struct RecordStore {
    db: Database,
    path: PathBuf,
    written: Mutex<Written>,
}

/// What is written to the log and not yet to the B-tree.
#[derive(Debug)]
struct Written {
    log: log::Log,
    /// Each record's latest bytes (`None`: removed) among the log's frames.
    pending: BTreeMap<(&'static str, String), Option<Vec<u8>>>,
    /// A log write failed: the next commit goes to the B-tree, with the
    /// log, so that frame is never read.
    failed: bool,
}

fn table(name: &'static str) -> TableDefinition<'static, &'static str, &'static [u8]> {
    TableDefinition::new(name)
}

impl RecordStore {
    /// Opens the store at `path` (and its intent log beside it, `*.journal`),
    /// creating them (and their directory) if missing; commits the log
    /// left by the last process holds are applied first.
    pub fn open(path: &Path) -> Result<RecordStore> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| HostError::io("create state directory", dir, e))?;
        }
        let db = undamaged("open", path, || {
            Database::builder()
                .set_cache_size(CACHE_BYTES)
                .create(path)
                .map_err(|e| failed("open", path, e))
        })?;
        undamaged("open", path, || drop_tables(&db, path))?;
        let applied = undamaged("read", path, || applied(&db, path))?;
        let log_path = path.with_extension("journal");
        let (commits, last) = log::recover(&log_path, applied)?;
        if !commits.is_empty() {
            let mut pending = BTreeMap::new();
            for changes in &commits {
                remember(&mut pending, changes);
            }
            undamaged("write", path, || write_tree(&db, path, &pending, last))?;
        }
        let log = log::Log::start(&log_path, last + 1)?;
        Ok(RecordStore {
            db,
            path: path.to_path_buf(),
            written: Mutex::new(Written {
                log,
                pending: BTreeMap::new(),
                failed: false,
            }),
        })
    }

    /// Where it lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Hands every record to `each` as `(table, key, bytes)`, one at a
    /// time; stops at the first error `each` returns. A damaged store
    /// (redb panics on some damage) is an error, never a crash.
    pub fn read(&self, each: &mut Visit<'_>) -> Result<()> {
        {
            let mut written = self.lock();
            if !written.pending.is_empty() {
                self.apply_log(&mut written, &[])?;
            }
        }
        undamaged("read", &self.path, || self.read_all(each))
    }

    /// Every record: `(table, key, bytes)`, gathered (for tests; the driver
    /// reads them one at a time with [`RecordStore::read`]).
    #[cfg(test)]
    pub fn load(&self) -> Result<Vec<(&'static str, String, Vec<u8>)>> {
        let mut out = Vec::new();
        self.read(&mut |t, k, v| {
            out.push((t, k.to_string(), v.to_vec()));
            Ok(())
        })?;
        Ok(out)
    }

    fn read_all(&self, each: &mut Visit<'_>) -> Result<()> {
        let read = self
            .db
            .begin_read()
            .map_err(|e| failed("read", &self.path, e))?;
        for name in TABLES {
            let t = match read.open_table(table(name)) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => continue,
                Err(e) => return Err(failed("read", &self.path, e)),
            };
            for row in t.iter().map_err(|e| failed("read", &self.path, e))? {
                let (k, v) = row.map_err(|e| failed("read", &self.path, e))?;
                each(name, k.value(), v.value()).map_err(|e| failed("read", &self.path, e))?;
            }
        }
        Ok(())
    }

    /// Writes `changes` durably before it returns: all of them or, on
    /// error, none — one log frame, or (when the log is full, or its last
    /// write failed) one transaction of the B-tree with the log's commits.
    pub fn commit(&self, changes: &[Change]) -> Result<()> {
        if let Some(c) = changes.iter().find(|c| !TABLES.contains(&c.table)) {
            let reason = format!("a record for table {:?}, not one of {TABLES:?}", c.table);
            return Err(failed("write", &self.path, reason));
        }
        let mut written = self.lock();
        if written.failed || !written.log.fits(changes) {
            return self.apply_log(&mut written, changes);
        }
        match written.log.append(changes) {
            Ok(()) => {
                remember(&mut written.pending, changes);
                Ok(())
            }
            Err(e) => {
                written.failed = true;
                Err(e)
            }
        }
    }

    /// The log's commits and then `changes` written to the B-tree in one
    /// durable transaction, which records the log's last frame number as
    /// taken; then the log starts over.
    fn apply_log(&self, written: &mut Written, changes: &[Change]) -> Result<()> {
        let mut all = std::mem::take(&mut written.pending);
        remember(&mut all, changes);
        let last = written.log.last();
        match undamaged("write", &self.path, || {
            write_tree(&self.db, &self.path, &all, last)
        }) {
            Ok(()) => {
                written.log.restart();
                written.failed = false;
                Ok(())
            }
            Err(e) => {
                // None of `changes` is written; the log's commits stay
                // pending (they are durable in the log).
                for c in changes {
                    all.remove(&(c.table, c.key.clone()));
                }
                written.pending = all;
                Err(e)
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Written> {
        self.written.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `changes` over `pending`: each record's latest bytes.
fn remember(pending: &mut BTreeMap<(&'static str, String), Option<Vec<u8>>>, changes: &[Change]) {
    for c in changes {
        pending.insert((c.table, c.key.clone()), c.value.clone());
    }
}

/// The number of the last log frame the B-tree took (0: none).
fn applied(db: &Database, path: &Path) -> Result<u64> {
    let read = db.begin_read().map_err(|e| failed("read", path, e))?;
    let t = match read.open_table(table(LOG_TABLE)) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
        Err(e) => return Err(failed("read", path, e)),
    };
    let Some(v) = t.get(APPLIED).map_err(|e| failed("read", path, e))? else {
        return Ok(0);
    };
    let bytes: [u8; 8] = v
        .value()
        .try_into()
        .map_err(|_| failed("read", path, "the log's mark is not 8 bytes"))?;
    Ok(u64::from_le_bytes(bytes))
}

/// Writes `records` and the log's mark `last` in one durable transaction.
fn write_tree(
    db: &Database,
    path: &Path,
    records: &BTreeMap<(&'static str, String), Option<Vec<u8>>>,
    last: u64,
) -> Result<()> {
    let txn = db.begin_write().map_err(|e| failed("write", path, e))?;
    {
        let mut open: BTreeMap<&'static str, redb::Table<'_, &'static str, &'static [u8]>> =
            BTreeMap::new();
        for ((name, key), value) in records {
            let t = match open.entry(name) {
                std::collections::btree_map::Entry::Occupied(t) => t.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => v.insert(
                    txn.open_table(table(name))
                        .map_err(|e| failed("write", path, e))?,
                ),
            };
            match value {
                Some(v) => t.insert(key.as_str(), v.as_slice()).map(|_| ()),
                None => t.remove(key.as_str()).map(|_| ()),
            }
            .map_err(|e| failed("write", path, e))?;
        }
        let mut mark = txn
            .open_table(table(LOG_TABLE))
            .map_err(|e| failed("write", path, e))?;
        mark.insert(APPLIED, last.to_le_bytes().as_slice())
            .map_err(|e| failed("write", path, e))?;
    }
    txn.commit().map_err(|e| failed("commit", path, e))
}

/// Deletes the tables an earlier volplane wrote that this one rebuilds
/// instead ([`DROPPED_TABLES`]), once: their pages are freed.
fn drop_tables(db: &Database, path: &Path) -> Result<()> {
    let txn = db.begin_write().map_err(|e| failed("write", path, e))?;
    let mut dropped = false;
    for name in DROPPED_TABLES {
        dropped |= txn
            .delete_table(table(name))
            .map_err(|e| failed("write", path, e))?;
    }
    if dropped {
        txn.commit().map_err(|e| failed("commit", path, e))
    } else {
        txn.abort().map_err(|e| failed("write", path, e))
    }
}

/// Runs `f`, a redb call: redb panics on some damage, and that is an
/// error naming the store, never a crash.
fn undamaged<T>(op: &'static str, path: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(failed(
            op,
            path,
            "the store is damaged (a page fails its check)",
        ))
    })
}

fn failed(op: &'static str, path: &Path, e: impl std::fmt::Display) -> HostError {
    HostError::io(op, path, std::io::Error::other(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use volplane_core::driver::state::DriverState;

    fn put(table: &'static str, key: &str, value: &str) -> Change {
        Change {
            table,
            key: key.into(),
            value: Some(value.as_bytes().to_vec()),
        }
    }

    #[test]
    fn records_are_written_removed_and_read_back_across_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/driver.redb");
        let store = RecordStore::open(&path).unwrap();
        assert!(store.load().unwrap().is_empty());
        store
            .commit(&[
                put("volumes", "vol-1", "one"),
                put("volumes", "vol-2", "two"),
                put("meta", "next_op", "7"),
            ])
            .unwrap();
        store
            .commit(&[Change {
                table: "volumes",
                key: "vol-1".into(),
                value: None,
            }])
            .unwrap();
        drop(store);
        let store = RecordStore::open(&path).unwrap();
        assert_eq!(
            store.load().unwrap(),
            [
                ("volumes", "vol-2".to_string(), b"two".to_vec()),
                ("meta", "next_op".to_string(), b"7".to_vec()),
            ]
        );
    }

    /// The name index an earlier volplane stored as a table of its own is
    /// dropped at open (its pages freed) and rebuilt from the volumes.
    #[test]
    fn an_earlier_name_table_is_dropped_and_the_index_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let store = RecordStore::open(&path).unwrap();
        let volume = r#"{"name":"pvc-1","volume":{"volume_id":"vol-1","capacity_bytes":1,"volume_context":{},"accessible_topology":[]},"capabilities":[],"parameters":{}}"#;
        // As an earlier volplane wrote them: straight into the B-tree.
        let records = [
            put("names", "pvc-1", "\"vol-1\""),
            put("names", "stale", "\"vol-9\""),
            put("volumes", "vol-1", volume),
        ];
        let mut earlier = BTreeMap::new();
        remember(&mut earlier, &records);
        write_tree(&store.db, &path, &earlier, 0).unwrap();
        drop(store);
        let store = RecordStore::open(&path).unwrap();
        let records = store.load().unwrap();
        assert!(records.iter().all(|(t, _, _)| *t == "volumes"));
        let state = DriverState::from_records(
            records
                .iter()
                .map(|(t, k, v)| (*t, k.as_str(), v.as_slice())),
        )
        .unwrap();
        assert_eq!(
            state.volumes.names().collect::<Vec<_>>(),
            [("pvc-1", "vol-1")]
        );
        let read = store.db.begin_read().unwrap();
        assert!(matches!(
            read.open_table(table("names")),
            Err(redb::TableError::TableDoesNotExist(_))
        ));
    }

    /// The records of the store at `at`, opened as a new process would:
    /// key to bytes.
    fn reopened(at: &Path) -> BTreeMap<String, Vec<u8>> {
        let store = RecordStore::open(at).unwrap();
        store
            .load()
            .unwrap()
            .into_iter()
            .map(|(_, k, v)| (k, v))
            .collect()
    }

    /// A copy of the store's files taken at any moment is what a crash
    /// leaves: it holds exactly the commits made before it, whether they
    /// were still in the log or already in the B-tree, across the log
    /// filling and starting over; a frame torn at the end is not read.
    #[test]
    fn a_crash_at_any_commit_keeps_exactly_the_commits_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let store = RecordStore::open(&path).unwrap();
        let crash = |n: usize| {
            let at = dir.path().join(format!("crash-{n}"));
            std::fs::create_dir(&at).unwrap();
            for f in ["s.redb", "s.journal"] {
                std::fs::copy(dir.path().join(f), at.join(f)).unwrap();
            }
            at.join("s.redb")
        };
        // What the records must be after `n` commits: commit i writes
        // `vol-{i % 7}` = i and removes `vol-{(i + 3) % 7}`.
        let expected = |n: usize| {
            let mut records = BTreeMap::new();
            for i in 0..n {
                records.insert(format!("vol-{}", i % 7), i.to_string().into_bytes());
                records.remove(&format!("vol-{}", (i + 3) % 7));
            }
            records
        };
        let frames = (log::LOG_BYTES / 4096) as usize;
        let mut crashes = Vec::new();
        for i in 0..frames + 40 {
            let removed = Change {
                table: "volumes",
                key: format!("vol-{}", (i + 3) % 7),
                value: None,
            };
            store
                .commit(&[
                    put("volumes", &format!("vol-{}", i % 7), &i.to_string()),
                    removed,
                ])
                .unwrap();
            if [1, 5, frames - 1, frames, frames + 1, frames + 39].contains(&(i + 1)) {
                crashes.push((i + 1, crash(i + 1)));
            }
        }
        for (n, at) in crashes {
            assert_eq!(reopened(&at), expected(n), "after {n} commits");
        }
        // The last frame torn: the commit before it is what is left.
        let at = crash(0);
        let log_path = at.with_extension("journal");
        let mut log = std::fs::read(&log_path).unwrap();
        // (Commit `frames` went to the B-tree: the log starts over after it.)
        log[38 * 4096 + 30] ^= 0xff;
        std::fs::write(&log_path, &log).unwrap();
        assert_eq!(reopened(&at), expected(frames + 39));
        // A record for a table that is not the driver's is refused before
        // anything is written.
        let e = store
            .commit(&[put("names", "a", "b")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"names\""), "{e}");
    }

    /// A store cut short or garbled (disk damage, not a crash: a crash
    /// mid-commit leaves the previous commit) is refused with an error
    /// that names it, never a panic.
    #[test]
    fn a_truncated_or_garbled_store_is_refused_not_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let store = RecordStore::open(&path).unwrap();
        for i in 0..50 {
            let c = put(
                "volumes",
                &format!("vol-{i}"),
                &format!("\"{}\"", "v".repeat(300)),
            );
            store.commit(&[c]).unwrap();
        }
        drop(store);
        let bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        let mut garbled = bytes.clone();
        for b in &mut garbled[n - 4096..] {
            *b ^= 0x5a;
        }
        std::fs::write(&path, &garbled).unwrap();
        let refused = RecordStore::open(&path).and_then(|s| s.load());
        let e = refused.expect_err("a garbled store is refused").to_string();
        assert!(e.contains("s.redb"), "{e}");
        std::fs::write(&path, &bytes[..n - 4096]).unwrap();
        let e = RecordStore::open(&path)
            .and_then(|s| s.load())
            .expect_err("a truncated store is refused")
            .to_string();
        assert!(e.contains("truncated"), "{e}");
    }
}
