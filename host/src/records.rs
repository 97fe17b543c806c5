//! The driver's durable state as records in an embedded transactional
//! store (redb: copy-on-write B-trees, checksummed, one fsync per commit):
//! one record per volume, snapshot, operation…, so a persist writes what
//! changed, not the whole state. The driver issues one persist at a time,
//! and every request that arrived meanwhile is in the next one: one commit
//! (one fsync) covers them all.
//!
//! A crash mid-commit leaves the last committed transaction: redb keeps
//! the previous root until the new one is durable, and checks the new
//! one's checksum at open.

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use volplane_core::driver::state::{Change, DROPPED_TABLES, TABLES};

use crate::{HostError, Result};

/// What [`RecordStore::read`] hands each record to: `(table, key, bytes)`;
/// an error stops the reading.
pub type Visit<'a> = dyn FnMut(&'static str, &str, &[u8]) -> std::result::Result<(), String> + 'a;

/// redb's page cache. The driver holds its whole state in memory and
/// reads the store only at start, so the cache serves only the pages a
/// commit rewrites (the paths from the root to the changed records): a
/// few MiB keep the upper levels of every table, where the default (1 GiB)
/// kept a copy of the whole store, as much again as the state itself.
const CACHE_BYTES: usize = 4 << 20;

/// The record store of one driver process.
#[derive(Debug)]
pub struct RecordStore {
    db: Database,
    path: PathBuf,
}

fn table(name: &'static str) -> TableDefinition<'static, &'static str, &'static [u8]> {
    TableDefinition::new(name)
}

impl RecordStore {
    /// Opens the store at `path`, creating it (and its directory) if
    /// missing.
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
        let store = RecordStore {
            db,
            path: path.to_path_buf(),
        };
        undamaged("open", path, || store.drop_tables())?;
        Ok(store)
    }

    /// Deletes the tables an earlier volplane wrote that this one rebuilds
    /// instead ([`DROPPED_TABLES`]), once: their pages are freed.
    fn drop_tables(&self) -> Result<()> {
        let txn = self
            .db
            .begin_write()
            .map_err(|e| failed("write", &self.path, e))?;
        let mut dropped = false;
        for name in DROPPED_TABLES {
            dropped |= txn
                .delete_table(table(name))
                .map_err(|e| failed("write", &self.path, e))?;
        }
        if dropped {
            txn.commit().map_err(|e| failed("commit", &self.path, e))
        } else {
            txn.abort().map_err(|e| failed("write", &self.path, e))
        }
    }

    /// Where it lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Hands every record to `each` as `(table, key, bytes)`, one at a
    /// time; stops at the first error `each` returns. A damaged store
    /// (redb panics on some damage) is an error, never a crash.
    pub fn read(&self, each: &mut Visit<'_>) -> Result<()> {
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

    /// Writes `changes` in one transaction, durably (fsync) before it
    /// returns: all of them or, on error, none.
    pub fn commit(&self, changes: &[Change]) -> Result<()> {
        let txn = self
            .db
            .begin_write()
            .map_err(|e| failed("write", &self.path, e))?;
        for c in changes {
            let mut t = txn
                .open_table(table(c.table))
                .map_err(|e| failed("write", &self.path, e))?;
            match &c.value {
                Some(v) => t.insert(c.key.as_str(), v.as_slice()).map(|_| ()),
                None => t.remove(c.key.as_str()).map(|_| ()),
            }
            .map_err(|e| failed("write", &self.path, e))?;
        }
        txn.commit().map_err(|e| failed("commit", &self.path, e))
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
        store
            .commit(&[
                put("names", "pvc-1", "\"vol-1\""),
                put("names", "stale", "\"vol-9\""),
                put("volumes", "vol-1", volume),
            ])
            .unwrap();
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
            state.names.iter().collect::<Vec<_>>(),
            [(&"pvc-1".to_string(), &"vol-1".to_string())]
        );
        let read = store.db.begin_read().unwrap();
        assert!(matches!(
            read.open_table(table("names")),
            Err(redb::TableError::TableDoesNotExist(_))
        ));
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
