//! Serving gRPC clients that send a unix socket path as `:authority`.
//!
//! grpc C-core (Python's grpcio, Ruby, PHP …), grpc-java and some kubelet
//! versions (calling a registration socket's GetInfo) send the socket path,
//! or another string that is not a URI authority, in the HTTP/2
//! `:authority` pseudo-header. h2, under tonic and hyper, answers such a
//! request with RST_STREAM(PROTOCOL_ERROR) before any service sees it
//! (hyperium/h2#487, hyperium/tonic#1876). grpc-go servers accept them.
//!
//! [`AuthorityFix`] sits between the socket and h2, on the bytes the client
//! sends. It looks at the connection's first header block: when its
//! `:authority` is one h2 accepts (grpc-go, tonic, most clients), the rest
//! of the connection is handed on untouched, at the cost of that one decode.
//! Otherwise every header block is decoded with its own HPACK decoder
//! (tracking the client's dynamic table) and encoded again as literals that
//! never use h2's dynamic table, with an unparsable `:authority` replaced by
//! `localhost` (what grpc-go's own clients send); other frames pass through
//! unchanged. A gRPC channel keeps one authority for its connection, so the
//! first block decides. It is sans-IO: the runtimes' stream wrappers feed it
//! what they read and hand on what it produced.
//!
//! It holds little: at most one frame of input and one header block
//! ([`MAX_BLOCK`] bytes as sent, the header list size limit as decoded).
//! Whatever is beyond a bound (a frame larger than [`MAX_FRAME`], a block
//! past either bound) is handed to h2 as it came, and the rest of the
//! connection with it: h2 applies its own limits to it and closes the
//! connection with GOAWAY (FRAME_SIZE_ERROR, ENHANCE_YOUR_CALM,
//! COMPRESSION_ERROR), or refuses the request.

use std::io;
use std::task::{Context, Poll};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
use crate::limits::{Limits, MAX_FRAME};
/// The most of one header block held, as sent: four times the header list
/// size limit leaves room for any encoding of a list within the limit
/// (Huffman coding at its worst), and is past what h2 accepts (its
/// CONTINUATION count bound).
const fn max_block(header_list: usize) -> usize {
    4 * header_list + FRAME_HEADER
}
/// What the `:authority` of a request that had an unusable one becomes.
pub const REPLACEMENT: &str = "localhost";

/// A header block being gathered from HEADERS and CONTINUATION frames.
struct Block {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
    /// The frames as they came, to hand on untouched if decoding fails.
    raw: Vec<u8>,
}

/// The client-to-server byte stream of one HTTP/2 connection, rewritten so
/// that h2 accepts any `:authority`. See the module documentation.
pub struct AuthorityFix {
    decoder: loona_hpack::Decoder<'static>,
    /// The header list size limit (HTTP/2's count: name + value + 32).
    header_list: usize,
    preface_left: usize,
    input: Vec<u8>,
    output: Vec<u8>,
    block: Option<Block>,
    /// Set when the first header block needed nothing, or when the stream is
    /// not HTTP/2 as expected: everything is handed on untouched (h2 then
    /// gives a broken client the error it deserves).
    passthrough: bool,
    /// Set once a header block needed its `:authority` replaced: every
    /// block from then on is re-encoded.
    rewriting: bool,
    rewritten: u64,
}

impl std::fmt::Debug for AuthorityFix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthorityFix")
            .field("passthrough", &self.passthrough)
            .field("rewritten", &self.rewritten)
            .finish()
    }
}

impl Default for AuthorityFix {
    fn default() -> Self {
        AuthorityFix::new(Limits::DEFAULT.header_list)
    }
}

/// The most of one header block held, as sent, under the default limits.
pub const MAX_BLOCK: usize = max_block(Limits::DEFAULT.header_list as usize);

fn usable_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// HPACK integer with an `n`-bit prefix whose high bits are `first`.
fn put_int(out: &mut Vec<u8>, first: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// A header as "literal without indexing, new name", strings not Huffman
/// coded: it leaves the receiver's dynamic table as it is.
fn put_literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0x00);
    put_int(out, 0, 7, name.len());
    out.extend_from_slice(name);
    put_int(out, 0, 7, value.len());
    out.extend_from_slice(value);
}

fn frame_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
}

impl AuthorityFix {
    /// A fix for a server whose SETTINGS_MAX_HEADER_LIST_SIZE is
    /// `header_list`.
    pub fn new(header_list: u32) -> AuthorityFix {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(4096);
        AuthorityFix {
            decoder,
            header_list: header_list as usize,
            preface_left: PREFACE.len(),
            input: Vec::new(),
            output: Vec::new(),
            block: None,
            passthrough: false,
            rewriting: false,
            rewritten: 0,
        }
    }

    /// How many requests had their `:authority` replaced.
    pub fn rewritten(&self) -> u64 {
        self.rewritten
    }

    /// Takes bytes the client sent.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.passthrough {
            self.output.extend_from_slice(bytes);
            return;
        }
        self.input.extend_from_slice(bytes);
        self.process();
    }

    /// The client closed its side: whatever is left is handed on as it is.
    pub fn finish(&mut self) {
        if let Some(b) = self.block.take() {
            self.output.extend_from_slice(&b.raw);
        }
        self.output.append(&mut self.input);
    }

    /// How many bytes of the client's it holds that h2 has not been given.
    pub fn held(&self) -> usize {
        self.input.len()
            + self
                .block
                .as_ref()
                .map_or(0, |b| b.raw.len() + b.fragment.len())
    }

    /// Bytes ready for h2.
    pub fn ready(&self) -> &[u8] {
        &self.output
    }

    /// Drops the first `n` ready bytes (h2 took them).
    pub fn consume(&mut self, n: usize) {
        self.output.drain(..n);
    }

    fn give_up(&mut self) {
        self.passthrough = true;
        if let Some(b) = self.block.take() {
            self.output.extend_from_slice(&b.raw);
        }
        self.output.append(&mut self.input);
    }

    fn process(&mut self) {
        if self.preface_left > 0 {
            let seen = PREFACE.len() - self.preface_left;
            let n = self.preface_left.min(self.input.len());
            if self.input[..n] != PREFACE[seen..seen + n] {
                return self.give_up();
            }
            self.output.extend(self.input.drain(..n));
            self.preface_left -= n;
            if self.preface_left > 0 {
                return;
            }
        }
        let mut at = 0;
        while self.input.len() - at >= FRAME_HEADER {
            let h = &self.input[at..at + FRAME_HEADER];
            let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
            if len > MAX_FRAME {
                // h2 closes the connection: FRAME_SIZE_ERROR.
                self.input.drain(..at);
                return self.give_up();
            }
            if self.input.len() - at < FRAME_HEADER + len {
                break;
            }
            let frame = at..at + FRAME_HEADER + len;
            at = frame.end;
            let frame = self.input[frame].to_vec();
            if !self.frame(&frame) {
                self.input.drain(..at);
                return self.give_up();
            }
            if self.passthrough {
                self.input.drain(..at);
                self.output.append(&mut self.input);
                return;
            }
        }
        self.input.drain(..at);
    }

    /// One whole frame; false when it is not what HTTP/2 allows here.
    fn frame(&mut self, frame: &[u8]) -> bool {
        let (kind, flags) = (frame[3], frame[4]);
        let stream = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        let payload = &frame[FRAME_HEADER..];
        match (kind, self.block.as_mut()) {
            (HEADERS, None) => {
                let Some((priority, fragment)) = split_headers(flags, payload) else {
                    return false;
                };
                self.block = Some(Block {
                    stream,
                    end_stream: flags & END_STREAM != 0,
                    priority,
                    fragment: fragment.to_vec(),
                    raw: frame.to_vec(),
                });
            }
            (CONTINUATION, Some(b)) if b.stream == stream => {
                if b.raw.len() + frame.len() > max_block(self.header_list) {
                    // A CONTINUATION flood: h2 sees it as it comes.
                    b.raw.extend_from_slice(frame);
                    return false;
                }
                b.fragment.extend_from_slice(payload);
                b.raw.extend_from_slice(frame);
            }
            (HEADERS | CONTINUATION, _) | (_, Some(_)) => return false,
            _ => {
                self.output.extend_from_slice(frame);
                return true;
            }
        }
        if flags & END_HEADERS != 0 {
            let b = self.block.take().expect("a block is open");
            return self.emit(b);
        }
        true
    }

    /// Decodes a whole header block and hands it on re-encoded.
    fn emit(&mut self, b: Block) -> bool {
        let mut encoded = Vec::with_capacity(b.fragment.len() * 2);
        let mut fixed = false;
        // HTTP/2's count; past the limit nothing more is encoded (an HPACK
        // bomb: small indices to large table entries).
        let mut size = 0usize;
        let limit = self.header_list;
        let decoded = self.decoder.decode_with_cb(&b.fragment, |name, value| {
            size = size.saturating_add(name.len() + value.len() + 32);
            if size > limit {
                return;
            }
            if &*name == b":authority" && !usable_authority(&value) {
                fixed = true;
                put_literal(&mut encoded, &name, REPLACEMENT.as_bytes());
            } else {
                put_literal(&mut encoded, &name, &value);
            }
        });
        if decoded.is_err() || size > limit {
            // h2 refuses the request, or closes the connection.
            self.block = Some(b);
            return false;
        }
        if !fixed && !self.rewriting {
            // The first block needed nothing: neither does the connection.
            self.output.extend_from_slice(&b.raw);
            self.passthrough = true;
            return true;
        }
        self.rewriting = true;
        if fixed {
            self.rewritten += 1;
        }
        let mut first = true;
        let mut rest = &encoded[..];
        loop {
            let room = MAX_FRAME - if first && b.priority.is_some() { 5 } else { 0 };
            let (chunk, tail) = rest.split_at(rest.len().min(room));
            let last = tail.is_empty();
            let mut flags = if last { END_HEADERS } else { 0 };
            if first {
                flags |= if b.end_stream { END_STREAM } else { 0 };
                flags |= if b.priority.is_some() { PRIORITY } else { 0 };
                let extra = if b.priority.is_some() { 5 } else { 0 };
                frame_header(
                    &mut self.output,
                    chunk.len() + extra,
                    HEADERS,
                    flags,
                    b.stream,
                );
                if let Some(p) = b.priority {
                    self.output.extend_from_slice(&p);
                }
            } else {
                frame_header(&mut self.output, chunk.len(), CONTINUATION, flags, b.stream);
            }
            self.output.extend_from_slice(chunk);
            if last {
                return true;
            }
            first = false;
            rest = tail;
        }
    }

    /// For a stream wrapper's `poll_read`: fills `dst` with ready bytes,
    /// reading from the socket with `read` (into `scratch`) while none are.
    pub fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        dst: &mut [u8],
        scratch: &mut [u8],
        mut read: impl FnMut(&mut Context<'_>, &mut [u8]) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        loop {
            if !self.output.is_empty() || dst.is_empty() {
                let n = self.output.len().min(dst.len());
                dst[..n].copy_from_slice(&self.output[..n]);
                self.consume(n);
                return Poll::Ready(Ok(n));
            }
            match read(cx, scratch) {
                Poll::Ready(Ok(0)) => {
                    self.finish();
                    if self.output.is_empty() {
                        return Poll::Ready(Ok(0));
                    }
                }
                Poll::Ready(Ok(n)) => self.feed(&scratch[..n]),
                other => return other,
            }
        }
    }
}

/// The priority fields and the header block fragment of a HEADERS payload,
/// padding removed.
fn split_headers(flags: u8, payload: &[u8]) -> Option<(Option<[u8; 5]>, &[u8])> {
    let mut p = payload;
    let mut pad = 0;
    if flags & PADDED != 0 {
        pad = *p.first()? as usize;
        p = &p[1..];
    }
    let mut priority = None;
    if flags & PRIORITY != 0 {
        priority = Some(p.get(..5)?.try_into().ok()?);
        p = &p[5..];
    }
    let end = p.len().checked_sub(pad)?;
    Some((priority, &p[..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(headers: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut e = loona_hpack::Encoder::new();
        e.encode(headers.iter().copied())
    }

    fn headers_frame(stream: u32, flags: u8, block: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        frame_header(&mut f, block.len(), HEADERS, flags, stream);
        f.extend_from_slice(block);
        f
    }

    /// Decodes what the fix produced as h2 would: frames, then HPACK.
    fn h2_view(bytes: &[u8]) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        assert!(bytes.starts_with(PREFACE));
        let mut d = loona_hpack::Decoder::new();
        let mut at = PREFACE.len();
        let mut blocks = Vec::new();
        let mut frag = Vec::new();
        while at < bytes.len() {
            let len = u32::from_be_bytes([0, bytes[at], bytes[at + 1], bytes[at + 2]]) as usize;
            let (kind, flags) = (bytes[at + 3], bytes[at + 4]);
            let payload = &bytes[at + 9..at + 9 + len];
            if kind == HEADERS || kind == CONTINUATION {
                let (_, f) = if kind == HEADERS {
                    split_headers(flags, payload).unwrap()
                } else {
                    (None, payload)
                };
                frag.extend_from_slice(f);
                if flags & END_HEADERS != 0 {
                    blocks.push(d.decode(&frag).unwrap());
                    frag.clear();
                }
            }
            at += 9 + len;
        }
        blocks
    }

    #[test]
    fn a_socket_path_authority_becomes_localhost_and_the_rest_is_kept() {
        let mut client = loona_hpack::Encoder::new();
        let block = client.encode([
            (&b":method"[..], &b"POST"[..]),
            (b":authority", b"/var/lib/kubelet/plugins/x/csi.sock"),
            (b":path", b"/csi.v1.Identity/Probe"),
            (b"te", b"trailers"),
        ]);
        // The second request refers to the client's dynamic table.
        let again = client.encode([
            (&b":method"[..], &b"POST"[..]),
            (b":authority", b"/var/lib/kubelet/plugins/x/csi.sock"),
            (b":path", b"/csi.v1.Identity/Probe"),
        ]);
        let mut wire = PREFACE.to_vec();
        wire.extend(headers_frame(1, END_HEADERS, &block));
        let mut data = Vec::new();
        frame_header(&mut data, 5, 0x0, END_STREAM, 1);
        data.extend_from_slice(&[0, 0, 0, 0, 0]);
        wire.extend(&data);
        wire.extend(headers_frame(3, END_HEADERS | END_STREAM, &again));
        let mut fix = AuthorityFix::default();
        // Byte by byte: frames split anywhere are reassembled.
        for b in &wire {
            fix.feed(std::slice::from_ref(b));
        }
        let out = fix.ready().to_vec();
        assert_eq!(fix.rewritten(), 2);
        let blocks = h2_view(&out);
        assert_eq!(blocks.len(), 2);
        for b in &blocks {
            assert!(
                b.contains(&(b":authority".to_vec(), b"localhost".to_vec())),
                "{b:?}"
            );
            assert!(b.contains(&(b":path".to_vec(), b"/csi.v1.Identity/Probe".to_vec())));
        }
        assert!(blocks[0].contains(&(b"te".to_vec(), b"trailers".to_vec())));
        assert!(
            out.windows(data.len()).any(|w| w == data),
            "DATA passes untouched"
        );
    }

    #[test]
    fn a_usable_authority_is_kept() {
        let block = encode(&[(b":authority", b"localhost:50051"), (b":path", b"/x")]);
        let mut wire = PREFACE.to_vec();
        wire.extend(headers_frame(1, END_HEADERS | PADDED, &{
            let mut p = vec![3];
            p.extend(&block);
            p.extend([0, 0, 0]);
            p
        }));
        // A later block is not looked at: the first one decided.
        wire.extend(headers_frame(
            3,
            END_HEADERS,
            &encode(&[(b":authority", b"/x.sock")]),
        ));
        let mut fix = AuthorityFix::default();
        fix.feed(&wire[..40]);
        fix.feed(&wire[40..]);
        assert_eq!(fix.rewritten(), 0);
        assert_eq!(
            fix.ready(),
            &wire[..],
            "a connection whose first authority is usable passes untouched"
        );
    }

    #[test]
    fn big_blocks_are_split_into_continuations() {
        let big = vec![b'a'; 40_000];
        let block = encode(&[(b":authority", b"/s.sock"), (b"x-big", &big)]);
        let mut wire = PREFACE.to_vec();
        wire.extend(block_frames(1, &block));
        let mut fix = AuthorityFix::new(64 * 1024);
        fix.feed(&wire);
        let blocks = h2_view(fix.ready());
        assert_eq!(blocks[0][1].1.len(), 40_000);
    }

    #[test]
    fn what_is_not_http2_passes_untouched() {
        let mut fix = AuthorityFix::default();
        fix.feed(b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(fix.ready(), b"GET / HTTP/1.1\r\n\r\n");
        let mut fix = AuthorityFix::default();
        let mut wire = PREFACE.to_vec();
        wire.extend(headers_frame(1, END_HEADERS, &[0xff, 0xff, 0xff, 0xff]));
        fix.feed(&wire);
        assert_eq!(
            fix.ready(),
            &wire[..],
            "a block we cannot decode goes to h2 as it came"
        );
    }

    /// `block` as HEADERS and CONTINUATION frames of at most MAX_FRAME.
    fn block_frames(stream: u32, block: &[u8]) -> Vec<u8> {
        let mut wire = Vec::new();
        for (i, part) in block.chunks(MAX_FRAME).enumerate() {
            let last = (i + 1) * MAX_FRAME >= block.len();
            let kind = if i == 0 { HEADERS } else { CONTINUATION };
            let flags = if last { END_HEADERS } else { 0 };
            frame_header(&mut wire, part.len(), kind, flags, stream);
            wire.extend_from_slice(part);
        }
        wire
    }

    fn continuation(stream: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        frame_header(&mut f, payload.len(), CONTINUATION, flags, stream);
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn a_continuation_flood_is_handed_to_h2_as_it_comes() {
        let block = encode(&[(b":authority", b"/s.sock"), (b":path", b"/x")]);
        let mut wire = PREFACE.to_vec();
        wire.extend(headers_frame(1, 0, &block));
        let mut fix = AuthorityFix::default();
        fix.feed(&wire);
        let mut sent = wire.len();
        let filler = continuation(1, 0, &[0x20; MAX_FRAME]);
        for _ in 0..1000 {
            fix.feed(&filler);
            sent += filler.len();
            assert!(fix.held() <= 2 * MAX_BLOCK, "holds {}", fix.held());
        }
        assert_eq!(fix.held(), 0);
        assert_eq!(fix.ready().len(), sent, "everything went on to h2");
    }

    #[test]
    fn a_frame_larger_than_allowed_goes_to_h2_at_once() {
        let mut wire = PREFACE.to_vec();
        frame_header(&mut wire, 1 << 20, 0x0, 0, 1);
        let mut fix = AuthorityFix::default();
        fix.feed(&wire);
        assert_eq!(fix.held(), 0, "the frame is not waited for");
        assert_eq!(fix.ready(), &wire[..]);
    }

    #[test]
    fn a_header_list_bomb_is_not_expanded() {
        // One 4 KiB value enters the client's table, then ~4,000 one-byte
        // references to it: 16 MB decoded from 8 KiB sent.
        let mut block = Vec::new();
        block.push(0x40); // literal with incremental indexing, new name
        put_int(&mut block, 0, 7, 5);
        block.extend_from_slice(b"x-big");
        put_int(&mut block, 0, 7, 4000);
        block.extend(std::iter::repeat_n(b'a', 4000));
        let mut first = Vec::new();
        put_literal(&mut first, b":authority", b"/s.sock");
        first.extend(block);
        first.extend(std::iter::repeat_n(0x80 | 62, 4000));
        let mut wire = PREFACE.to_vec();
        wire.extend(block_frames(1, &first));
        let mut fix = AuthorityFix::default();
        fix.feed(&wire);
        assert_eq!(fix.rewritten(), 0);
        assert_eq!(fix.ready(), &wire[..], "h2 gets it as sent, and refuses it");
    }
}
