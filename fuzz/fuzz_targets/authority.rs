//! Arbitrary client bytes through the `:authority` rewriter that sits in
//! front of h2: it never panics, and however the bytes are split into reads
//! it hands h2 the same stream.
#![no_main]
use libfuzzer_sys::fuzz_target;
use volplane_proto::authority::AuthorityFix;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let mut wire = Vec::new();
    if split & 1 == 0 {
        wire.extend_from_slice(PREFACE);
    }
    wire.extend_from_slice(rest);
    let mut whole = AuthorityFix::new();
    whole.feed(&wire);
    whole.finish();
    let mut pieces = AuthorityFix::new();
    for chunk in wire.chunks(usize::from(split >> 1).max(1)) {
        pieces.feed(chunk);
    }
    pieces.finish();
    assert_eq!(whole.ready(), pieces.ready());
});
