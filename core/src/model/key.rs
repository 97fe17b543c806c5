//! What names an object: its kind, namespace and name, as a key every
//! machine's maps are ordered by.
//!
//! Keys are built and compared on every watch event, every write and every
//! lookup, so they are plain values: a name of up to [`Name::INLINE`] bytes
//! (every name the simulator and the benchmarks make, and most a cluster
//! holds) lives inside the key, without an allocation to make it or a
//! pointer to follow to compare it; a longer one is shared behind an `Arc`.

use std::cmp::Ordering;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Kind;

/// An object's namespace or name. Derefs to `str`; ordered bytewise.
#[derive(Clone)]
pub struct Name(Repr);

#[derive(Clone)]
enum Repr {
    /// The first `len` bytes are the name (UTF-8, as it came from a `str`).
    Inline {
        len: u8,
        bytes: [u8; Name::INLINE],
    },
    Heap(Arc<str>),
}

impl Name {
    /// The longest name kept inside the key.
    pub const INLINE: usize = 22;

    /// `s` as a name.
    #[inline]
    pub fn new(s: &str) -> Name {
        if s.len() <= Name::INLINE {
            let mut bytes = [0u8; Name::INLINE];
            bytes[..s.len()].copy_from_slice(s.as_bytes());
            Name(Repr::Inline {
                len: s.len() as u8,
                bytes,
            })
        } else {
            Name(Repr::Heap(s.into()))
        }
    }

    /// The name's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Heap(s) => s.as_bytes(),
        }
    }

    /// The name.
    #[inline]
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Copied from a `str` whole, so always valid UTF-8.
            Repr::Inline { .. } => std::str::from_utf8(self.as_bytes()).unwrap_or_default(),
            Repr::Heap(s) => s,
        }
    }
}

impl std::ops::Deref for Name {
    type Target = str;
    #[inline]
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::borrow::Borrow<str> for Name {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        Name::new(s)
    }
}

impl From<&String> for Name {
    fn from(s: &String) -> Name {
        Name::new(s)
    }
}

impl From<String> for Name {
    fn from(s: String) -> Name {
        Name::new(&s)
    }
}

impl PartialEq for Name {
    #[inline]
    fn eq(&self, other: &Name) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Name {}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Ord for Name {
    /// Two inline names (the usual case) compare as three big-endian words
    /// each, then by length: past its length an inline name is zeros,
    /// which order below any byte, so this is the bytewise order.
    #[inline(always)]
    fn cmp(&self, other: &Name) -> Ordering {
        match (&self.0, &other.0) {
            (Repr::Inline { len: a, bytes: x }, Repr::Inline { len: b, bytes: y }) => {
                words(x).cmp(&words(y)).then(a.cmp(b))
            }
            _ => cmp_bytes(self.as_bytes(), other.as_bytes()),
        }
    }
}

/// An inline name's bytes as three big-endian words (the last padded).
#[inline(always)]
fn words(b: &[u8; Name::INLINE]) -> [u64; 3] {
    let word = |i: usize| {
        let mut w = [0u8; 8];
        let end = (i + 8).min(Name::INLINE);
        w[..end - i].copy_from_slice(&b[i..end]);
        u64::from_be_bytes(w)
    };
    [word(0), word(8), word(16)]
}

impl PartialOrd for Name {
    #[inline]
    fn partial_cmp(&self, other: &Name) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// As the `str` it holds (so a `Name` and a `str` hash alike).
impl std::hash::Hash for Name {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_str().hash(h);
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Name, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(Name::new(&s))
    }
}

/// Identifies an object: kind, namespace ("" for cluster-scoped), name.
/// Ordered by those three, the strings bytewise (as a derived `Ord` would).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ObjectKey {
    /// `kind`.
    pub kind: Kind,
    /// `namespace`.
    pub namespace: Name,
    /// `name`.
    pub name: Name,
}

/// Bytewise order of two short strings, eight bytes at a time, inlined:
/// keys are compared many times per lookup in the B-trees every machine
/// keeps, and most of that time went to calling `memcmp` for names of a
/// dozen bytes.
#[inline]
fn cmp_bytes(a: &[u8], b: &[u8]) -> Ordering {
    let (mut a8, mut b8) = (a.chunks_exact(8), b.chunks_exact(8));
    for (x, y) in (&mut a8).zip(&mut b8) {
        let (x, y) = (
            u64::from_be_bytes(x.try_into().unwrap()),
            u64::from_be_bytes(y.try_into().unwrap()),
        );
        if x != y {
            return x.cmp(&y);
        }
    }
    // The shorter has fewer than eight bytes left: compare them, padded
    // with zeros, with as many of the other's; then the shorter is less.
    let done = a.len().min(b.len()) / 8 * 8;
    let word = |s: &[u8]| {
        let rest = &s[done..s.len().min(done + 8)];
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        u64::from_be_bytes(w)
    };
    word(a).cmp(&word(b)).then(a.len().cmp(&b.len()))
}

impl Ord for ObjectKey {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        self.kind
            .cmp(&other.kind)
            .then_with(|| self.namespace.cmp(&other.namespace))
            .then_with(|| self.name.cmp(&other.name))
    }
}

impl PartialOrd for ObjectKey {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl ObjectKey {
    /// The key of `kind` `namespace`/`name` (`namespace` empty when cluster-scoped).
    #[inline]
    pub fn new(kind: Kind, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            kind,
            namespace: Name::new(namespace),
            name: Name::new(name),
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.kind.as_str(), self.name)
        } else {
            write!(f, "{}/{}/{}", self.kind.as_str(), self.namespace, self.name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;

    quickcheck! {
        /// A name orders, compares and reads back as the `str` it was made
        /// from, inline or not.
        fn names_behave_as_their_strings(a: String, b: String) -> bool {
            let (x, y) = (Name::new(&a), Name::new(&b));
            x.as_str() == a
                && y.as_str() == b
                && (x == y) == (a == b)
                && x.cmp(&y) == a.as_bytes().cmp(b.as_bytes())
        }
    }

    /// The inlined comparison orders strings exactly as bytewise `Ord`
    /// does: prefixes, bytes past the first eight, zero bytes, any length.
    #[test]
    fn keys_order_bytewise() {
        fn agrees(a: Vec<u8>, b: Vec<u8>) -> bool {
            cmp_bytes(&a, &b) == a.cmp(&b) && cmp_bytes(&b, &a) == b.cmp(&a)
        }
        quickcheck::QuickCheck::new()
            .tests(5000)
            .quickcheck(agrees as fn(Vec<u8>, Vec<u8>) -> bool);
        let cases: [&[u8]; 9] = [
            b"",
            b"a",
            b"a\0",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"abcdefgg\xff",
            b"claim-000001",
            b"claim-0000010",
        ];
        for a in cases {
            for b in cases {
                assert!(agrees(a.to_vec(), b.to_vec()), "{a:?} {b:?}");
            }
        }
        let k = |ns: &str, n: &str| ObjectKey::new(Kind::PersistentVolumeClaim, ns, n);
        assert!(k("a", "z") < k("b", "a"), "namespace before name");
        assert!(
            ObjectKey::new(Kind::PersistentVolume, "z", "z") < k("", ""),
            "kind first"
        );
    }

    #[test]
    fn a_name_longer_than_the_inline_room_is_kept_whole() {
        let long = "pvc-6f1c2b9e-8d7a-4c3b-9e2f-0a1b2c3d4e5f";
        let n = Name::new(long);
        assert_eq!(&*n, long);
        assert!(Name::new("pvc-0") < n && n < Name::new("pvc-z"));
        assert_eq!(std::mem::size_of::<Name>(), 24);
    }
}
