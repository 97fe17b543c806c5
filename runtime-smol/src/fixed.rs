//! Accepted unix streams whose client bytes pass through
//! [`AuthorityFix`], so that gRPC clients sending a socket path as
//! `:authority` are served (see `volplane_proto::authority`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::io::{AsyncRead, AsyncWrite};
use smol::net::unix::UnixStream;
use volplane_proto::authority::AuthorityFix;
use volplane_proto::connections::Admitted;
use volplane_proto::limits::Limits;

/// A server-side unix stream with the `:authority` fix on what it reads.
#[derive(Debug)]
pub struct FixedStream {
    inner: UnixStream,
    fix: AuthorityFix,
    scratch: Box<[u8]>,
    /// This connection's place among the socket's; freed when it closes.
    place: Admitted,
}

impl FixedStream {
    pub fn new(inner: UnixStream, place: Admitted, limits: &Limits) -> FixedStream {
        FixedStream {
            inner,
            fix: AuthorityFix::new(limits.header_list),
            scratch: vec![0; 16 * 1024].into_boxed_slice(),
            place,
        }
    }
}

impl AsyncRead for FixedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        dst: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.place.closing(cx) {
            return Poll::Ready(Ok(0));
        }
        let (inner, place) = (&mut this.inner, &this.place);
        this.fix.poll_read(cx, dst, &mut this.scratch, |cx, into| {
            Pin::new(&mut *inner).poll_read(cx, into).map_ok(|n| {
                place.read(n);
                n
            })
        })
    }
}

impl AsyncWrite for FixedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }
}
