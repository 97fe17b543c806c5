//! Arbitrary client bytes through the `:authority` rewriter that sits in
//! front of h2: it never panics, and however the bytes are split into reads
//! it hands h2 the same stream, and it never holds more than its bounds
//! (one frame of input and one header block), whatever the header list
//! size limit.
#![no_main]
use libfuzzer_sys::fuzz_target;
use volplane_proto::authority::AuthorityFix;
use volplane_proto::limits::MAX_FRAME;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fuzz_target!(|data: &[u8]| {
    let Some((&[split, limit], rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    // From 64 bytes to 16 KiB: small limits are reached by short inputs.
    let header_list = 64u32 << (limit % 9);
    let bound = 2 * (4 * header_list as usize + 9) + MAX_FRAME + 9;
    let mut wire = Vec::new();
    if split & 1 == 0 {
        wire.extend_from_slice(PREFACE);
    }
    wire.extend_from_slice(rest);
    let mut whole = AuthorityFix::new(header_list);
    whole.feed(&wire);
    whole.finish();
    let mut pieces = AuthorityFix::new(header_list);
    for chunk in wire.chunks(usize::from(split >> 1).max(1)) {
        pieces.feed(chunk);
        assert!(pieces.held() <= bound, "holds {} > {bound}", pieces.held());
    }
    pieces.finish();
    assert_eq!(whole.ready(), pieces.ready());
});
