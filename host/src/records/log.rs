//! The record store's intent log: each commit is one frame written in
//! place into a file of fixed size that was filled with zeros once, and
//! one `fdatasync` — what the bench's durable floor costs, where a commit
//! of the B-tree itself rewrites the path of pages from each root to each
//! changed record, its allocator's state and its header (about 2.4× as
//! long here). The store applies the log to the B-tree when the log is
//! full and at open ([`super::RecordStore`]).
//!
//! A frame starts on a page boundary, so a write torn by a crash damages
//! only the frame being written, never one already acknowledged:
//!
//! ```text
//! magic "VPLG" · sequence u64 · length u32 · CRC-32C u32 · payload (length bytes) · zeros to the page
//! ```
//!
//! The checksum covers the sequence, the length and the payload. Reading
//! starts at the file's beginning and takes frames while each carries the
//! next sequence number after what the B-tree already holds: a frame torn
//! by a crash, the zeros past the last frame, and frames left from before
//! the last time the log was applied (their numbers are lower) all end it.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use volplane_core::driver::state::{Change, TABLES};

use crate::{HostError, Result};

/// The log's size: a commit that does not fit in what is left applies the
/// log first.
pub(super) const LOG_BYTES: u64 = 2 << 20;
const PAGE: u64 = 4096;
const MAGIC: &[u8; 4] = b"VPLG";
const HEADER: usize = 20;

/// See the module documentation.
#[derive(Debug)]
pub(super) struct Log {
    file: File,
    path: PathBuf,
    /// Where the next frame goes.
    end: u64,
    /// The next frame's sequence number.
    next: u64,
    /// The frame being written, kept for its capacity.
    frame: Vec<u8>,
}

/// The frames after `applied` found in the log at `path` (none when there
/// is no log), each a commit's changes, in order; and the last one's
/// sequence number (`applied` when there is none).
pub(super) fn recover(path: &Path, applied: u64) -> Result<(Vec<Vec<Change>>, u64)> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), applied)),
        Err(e) => return Err(HostError::io("read", path, e)),
    };
    let (mut commits, mut last, mut at) = (Vec::new(), applied, 0usize);
    while let Some((seq, payload)) = frame_at(&bytes, at) {
        if seq != last + 1 {
            break;
        }
        let changes = decode(payload).map_err(|reason| {
            HostError::io(
                "read",
                path,
                std::io::Error::other(format!("frame {seq} is damaged: {reason}")),
            )
        })?;
        commits.push(changes);
        last = seq;
        at += frame_bytes(payload.len()) as usize;
    }
    Ok((commits, last))
}

impl Log {
    /// The log at `path`, empty, its next frame numbered `next`: a file of
    /// [`LOG_BYTES`] zeros is made (durably) when there is none of that
    /// size; one that is there is written over from its beginning (what
    /// it holds is already applied: see [`recover`]).
    pub(super) fn start(path: &Path, next: u64) -> Result<Log> {
        let fits = std::fs::metadata(path).is_ok_and(|m| m.len() == LOG_BYTES);
        if !fits {
            zeroed(path)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| HostError::io("open", path, e))?;
        Ok(Log {
            file,
            path: path.to_path_buf(),
            end: 0,
            next,
            frame: Vec::new(),
        })
    }

    /// Whether `changes` fit in what is left of the log.
    pub(super) fn fits(&self, changes: &[Change]) -> bool {
        self.end + frame_bytes(encoded_len(changes)) <= LOG_BYTES
    }

    /// Writes `changes` as the next frame, durably (`fdatasync`) before it
    /// returns. Whether or not it succeeds, the frame's number is used:
    /// after a failure the store applies the log and numbers past it, so a
    /// frame whose write failed but reached the disk is never read.
    pub(super) fn append(&mut self, changes: &[Change]) -> Result<()> {
        let seq = self.next;
        self.next += 1;
        self.frame.clear();
        self.frame.extend_from_slice(MAGIC);
        self.frame.extend_from_slice(&seq.to_le_bytes());
        self.frame.extend_from_slice(&[0; 8]);
        encode(changes, &mut self.frame);
        let len = self.frame.len() - HEADER;
        let len32 = u32::try_from(len).map_err(|_| {
            HostError::io(
                "write",
                &self.path,
                std::io::Error::other("a commit past 4 GiB"),
            )
        })?;
        self.frame[12..16].copy_from_slice(&len32.to_le_bytes());
        let crc = crc32c(crc32c(0, &self.frame[4..16]), &self.frame[HEADER..]);
        self.frame[16..20].copy_from_slice(&crc.to_le_bytes());
        self.file
            .write_all_at(&self.frame, self.end)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| HostError::io("write", &self.path, e))?;
        self.end += frame_bytes(len);
        Ok(())
    }

    /// The last number given to a frame.
    pub(super) fn last(&self) -> u64 {
        self.next - 1
    }

    /// After the store applied every frame: the next one goes at the
    /// beginning again.
    pub(super) fn restart(&mut self) {
        self.end = 0;
    }
}

/// Makes `path` a file of [`LOG_BYTES`] zeros, durably, in place of
/// whatever was there (written beside it, then renamed over it).
fn zeroed(path: &Path) -> Result<()> {
    let fresh = path.with_extension("journal.new");
    let file = File::create(&fresh).map_err(|e| HostError::io("create", &fresh, e))?;
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < LOG_BYTES {
        file.write_all_at(&zeros, at)
            .map_err(|e| HostError::io("write", &fresh, e))?;
        at += zeros.len() as u64;
    }
    file.sync_all()
        .map_err(|e| HostError::io("fsync", &fresh, e))?;
    std::fs::rename(&fresh, path).map_err(|e| HostError::io("rename", path, e))?;
    if let Some(dir) = path.parent() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| HostError::io("fsync", dir, e))?;
    }
    Ok(())
}

/// The frame at `at`, if a whole one with a good checksum is there:
/// `(sequence, payload)`.
fn frame_at(bytes: &[u8], at: usize) -> Option<(u64, &[u8])> {
    let header = bytes.get(at..at.checked_add(HEADER)?)?;
    if &header[..4] != MAGIC {
        return None;
    }
    let seq = u64::from_le_bytes(header[4..12].try_into().ok()?);
    let len = u32::from_le_bytes(header[12..16].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[16..20].try_into().ok()?);
    let start = at + HEADER;
    let payload = bytes.get(start..start.checked_add(len)?)?;
    (crc32c(crc32c(0, &header[4..16]), payload) == crc).then_some((seq, payload))
}

/// The bytes a frame of `payload` bytes takes: whole pages.
fn frame_bytes(payload: usize) -> u64 {
    ((HEADER + payload) as u64).div_ceil(PAGE) * PAGE
}

fn encoded_len(changes: &[Change]) -> usize {
    4 + changes
        .iter()
        .map(|c| {
            1 + c.table.len() + 4 + c.key.len() + 1 + c.value.as_ref().map_or(0, |v| 4 + v.len())
        })
        .sum::<usize>()
}

/// A commit's changes: their count, then each as its table's name, its
/// key, and its bytes (or that it was removed).
fn encode(changes: &[Change], out: &mut Vec<u8>) {
    out.extend_from_slice(&(changes.len() as u32).to_le_bytes());
    for c in changes {
        out.push(c.table.len() as u8);
        out.extend_from_slice(c.table.as_bytes());
        out.extend_from_slice(&(c.key.len() as u32).to_le_bytes());
        out.extend_from_slice(c.key.as_bytes());
        match &c.value {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                out.extend_from_slice(&(v.len() as u32).to_le_bytes());
                out.extend_from_slice(v);
            }
        }
    }
}

fn decode(mut bytes: &[u8]) -> std::result::Result<Vec<Change>, String> {
    let mut take = |n: usize| -> std::result::Result<&[u8], String> {
        if bytes.len() < n {
            return Err("it ends inside a record".into());
        }
        let (head, rest) = bytes.split_at(n);
        bytes = rest;
        Ok(head)
    };
    let u32_at = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("four bytes")) as usize;
    let count = u32_at(take(4)?);
    let mut changes = Vec::with_capacity(count.min(1 << 16));
    for _ in 0..count {
        let name_len = take(1)?[0] as usize;
        let name = take(name_len)?;
        let table = TABLES
            .iter()
            .find(|t| t.as_bytes() == name)
            .ok_or_else(|| format!("it names a table this volplane does not know ({name:?})"))?;
        let key_len = u32_at(take(4)?);
        let key = String::from_utf8(take(key_len)?.to_vec())
            .map_err(|_| "a key is not UTF-8".to_string())?;
        let value = match take(1)?[0] {
            0 => None,
            1 => {
                let len = u32_at(take(4)?);
                Some(take(len)?.to_vec())
            }
            other => return Err(format!("a record's mark is {other}, neither 0 nor 1")),
        };
        changes.push(Change { table, key, value });
    }
    Ok(changes)
}

/// CRC-32C (Castagnoli), continuing from `crc`.
fn crc32c(crc: u32, bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut bit = 0;
            while bit < 8 {
                c = if c & 1 == 1 {
                    (c >> 1) ^ 0x82f6_3b78
                } else {
                    c >> 1
                };
                bit += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    let mut c = !crc;
    for b in bytes {
        c = TABLE[((c ^ u32::from(*b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, value: &str) -> Change {
        Change {
            table: "volumes",
            key: key.into(),
            value: Some(value.as_bytes().to_vec()),
        }
    }

    #[test]
    fn crc32c_is_castagnolis() {
        // The check value of CRC-32C.
        assert_eq!(crc32c(0, b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(crc32c(0, b"1234"), b"56789"), 0xe306_9283);
    }

    #[test]
    fn frames_are_read_back_in_order_up_to_the_first_that_is_not_next() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.log");
        let mut log = Log::start(&path, 8).unwrap();
        let removed = Change {
            table: "meta",
            key: "k".into(),
            value: None,
        };
        log.append(&[put("vol-1", "one"), removed.clone()]).unwrap();
        log.append(&[put("vol-2", &"x".repeat(5000))]).unwrap();
        assert_eq!(log.end, 3 * PAGE, "the second frame took two pages");
        let (commits, last) = recover(&path, 7).unwrap();
        assert_eq!(last, 9);
        assert_eq!(
            commits,
            [
                vec![put("vol-1", "one"), removed],
                vec![put("vol-2", &"x".repeat(5000))]
            ]
        );
        // What the store already holds is not read again: frames before
        // the next one it lacks end the reading (the log starts over
        // whenever the store takes it).
        assert_eq!(recover(&path, 8).unwrap(), (vec![], 8));
        assert_eq!(recover(&path, 9).unwrap(), (vec![], 9));
        // Started over after being applied: the old frames' numbers are
        // lower, so they end the reading after the new one.
        log.restart();
        log.append(&[put("vol-3", "three")]).unwrap();
        assert_eq!(
            recover(&path, 9).unwrap(),
            (vec![vec![put("vol-3", "three")]], 10)
        );
    }

    #[test]
    fn a_torn_frame_ends_the_log_and_a_frame_after_it_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.log");
        let mut log = Log::start(&path, 1).unwrap();
        for i in 0..3 {
            log.append(&[put(&format!("vol-{i}"), "v")]).unwrap();
        }
        let mut bytes = std::fs::read(&path).unwrap();
        // The second frame torn: its payload half written.
        bytes[PAGE as usize + HEADER + 3] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let (commits, last) = recover(&path, 0).unwrap();
        assert_eq!((commits, last), (vec![vec![put("vol-0", "v")]], 1));
        // No log at all: nothing to read.
        assert_eq!(recover(&dir.path().join("none"), 4).unwrap(), (vec![], 4));
    }

    #[test]
    fn a_log_of_another_size_is_made_anew_and_a_damaged_record_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.log");
        std::fs::write(&path, b"short").unwrap();
        let mut log = Log::start(&path, 1).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), LOG_BYTES);
        assert!(log.fits(&[put("a", "b")]));
        assert!(!log.fits(&[put("a", &"b".repeat(LOG_BYTES as usize))]));
        // A frame whose checksum holds but whose table is unknown: written
        // by something else, refused with a reason.
        let mut frame = Vec::new();
        encode(&[put("a", "b")], &mut frame);
        frame[5] = b'X';
        assert!(decode(&frame).unwrap_err().contains("does not know"));
        assert!(decode(&frame[..6]).unwrap_err().contains("ends inside"));
        log.append(&[put("a", "b")]).unwrap();
        assert_eq!(log.last(), 1);
    }
}
