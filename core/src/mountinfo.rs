//! A parser for `/proc/self/mountinfo`, pure so that it can be fuzzed and
//! used by the core to reconcile what it recorded with what is mounted.

use serde::{Deserialize, Serialize};

/// One line of mountinfo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct MountEntry {
    /// The mount's id.
    pub mount_id: u32,
    /// Its parent's id.
    pub parent_id: u32,
    /// The device's major number.
    pub major: u32,
    /// The device's minor number.
    pub minor: u32,
    /// The path inside the source filesystem that is mounted (`/` for a whole
    /// filesystem, a sub-directory for a bind mount of a directory).
    pub root: String,
    /// Where it is mounted (octal escapes decoded).
    pub mount_point: String,
    /// Per-mount options.
    pub options: String,
    /// The filesystem type.
    pub fs_type: String,
    /// The mount source (octal escapes decoded).
    pub source: String,
    /// Per-superblock options.
    pub super_options: String,
}

impl MountEntry {
    /// True when the per-mount options include `ro`.
    pub fn read_only(&self) -> bool {
        self.options.split(',').any(|o| o == "ro")
    }
}

/// Why a mountinfo line could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Hash)]
#[error("mountinfo line {line}: {reason}")]
pub struct ParseError {
    /// The line (1-based).
    pub line: usize,
    /// What is wrong with it.
    pub reason: LineError,
}

/// What is wrong with one mountinfo line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Hash)]
pub enum LineError {
    /// No field is `-`.
    #[error("missing the \" - \" separator")]
    NoSeparator,
    /// Fewer than the six fields that come before `-`.
    #[error("expected at least 6 fields before \"-\", found {0}")]
    FewFields(usize),
    /// The filesystem type, source or super options are missing.
    #[error("expected fstype, source and super options after \"-\"")]
    NoFilesystem,
    /// A numeric field (`field` names it) is not a number.
    #[error("{field} {value:?} is not a number")]
    NotANumber {
        /// Which field: mount id, parent id, major or minor.
        field: &'static str,
        /// What it holds.
        value: String,
    },
    /// The device field is not `MAJOR:MINOR`.
    #[error("device {0:?} is not MAJOR:MINOR")]
    NotADevice(String),
}

/// Parses the whole text of a mountinfo file. Empty lines are skipped.
pub fn parse(text: &str) -> Result<Vec<MountEntry>, ParseError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            parse_line(l).map_err(|reason| ParseError {
                line: i + 1,
                reason,
            })
        })
        .collect()
}

/// Parses one line: `ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER`.
pub fn parse_line(line: &str) -> Result<MountEntry, LineError> {
    let fields: Vec<&str> = line.split(' ').filter(|f| !f.is_empty()).collect();
    let sep = fields
        .iter()
        .position(|f| *f == "-")
        .ok_or(LineError::NoSeparator)?;
    if sep < 6 {
        return Err(LineError::FewFields(sep));
    }
    if fields.len() < sep + 3 {
        return Err(LineError::NoFilesystem);
    }
    let number = |s: &str, field: &'static str| {
        s.parse::<u32>().map_err(|_| LineError::NotANumber {
            field,
            value: s.to_string(),
        })
    };
    let (major, minor) = fields[2]
        .split_once(':')
        .ok_or_else(|| LineError::NotADevice(fields[2].to_string()))?;
    Ok(MountEntry {
        mount_id: number(fields[0], "mount id")?,
        parent_id: number(fields[1], "parent id")?,
        major: number(major, "major")?,
        minor: number(minor, "minor")?,
        root: unescape(fields[3]),
        mount_point: unescape(fields[4]),
        options: fields[5].to_string(),
        fs_type: fields[sep + 1].to_string(),
        source: unescape(fields[sep + 2]),
        super_options: fields.get(sep + 3).unwrap_or(&"").to_string(),
    })
}

/// Undoes the kernel's octal escaping of space, tab, newline and backslash.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                let v = (oct[0] - b'0') as u32 * 64
                    + (oct[1] - b'0') as u32 * 8
                    + (oct[2] - b'0') as u32;
                if let Ok(byte) = u8::try_from(v) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The entry mounted last at `point` (the one that is visible), if any.
pub fn find_mount<'a>(entries: &'a [MountEntry], point: &str) -> Option<&'a MountEntry> {
    entries.iter().rev().find(|e| e.mount_point == point)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro
36 22 7:3 / /var/lib/kubelet/plugins/kubernetes.io/csi/x/abc/globalmount rw,relatime shared:2 - ext4 /dev/loop3 rw
37 22 7:3 / /var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv/mount ro,relatime shared:2 - ext4 /dev/loop3 rw
38 22 0:5 /data/dir\\040with\\040space /mnt/a\\134b rw - tmpfs tmpfs rw
";

    #[test]
    fn parses_mounts_with_optional_fields_and_escapes() {
        let e = parse(SAMPLE).unwrap();
        assert_eq!(e.len(), 4);
        assert_eq!(e[1].source, "/dev/loop3");
        assert_eq!((e[1].major, e[1].minor), (7, 3));
        assert!(e[2].read_only());
        assert!(!e[1].read_only());
        assert_eq!(e[3].root, "/data/dir with space");
        assert_eq!(e[3].mount_point, "/mnt/a\\b");
        assert_eq!(find_mount(&e, "/").unwrap().fs_type, "ext4");
    }

    #[test]
    fn malformed_lines_are_errors_not_panics() {
        for bad in [
            "",
            "1 2 3",
            "1 2 3:4 / / rw shared:1",
            "x 2 3:4 / / rw - a b c",
            "1 2 34 / / rw - a b c",
            "1 2 3:4 / / rw -",
        ] {
            if bad.is_empty() {
                assert_eq!(parse(bad).unwrap(), vec![]);
            } else {
                assert!(parse_line(bad).is_err(), "{bad:?} should not parse");
            }
        }
        assert_eq!(unescape("\\"), "\\");
        assert_eq!(unescape("a\\04"), "a\\04");
        assert_eq!(unescape("\\777"), "\\777");
    }
}
