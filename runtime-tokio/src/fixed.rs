//! Accepted unix streams whose client bytes pass through
//! [`AuthorityFix`], so that gRPC clients sending a socket path as
//! `:authority` are served (see `volplane_proto::authority`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tonic::transport::server::{Connected, UdsConnectInfo};
use volplane_proto::authority::AuthorityFix;

/// A server-side unix stream with the `:authority` fix on what it reads.
#[derive(Debug)]
pub struct FixedStream {
    inner: UnixStream,
    fix: AuthorityFix,
    scratch: Box<[u8]>,
}

impl FixedStream {
    pub fn new(inner: UnixStream) -> FixedStream {
        FixedStream {
            inner,
            fix: AuthorityFix::new(),
            scratch: vec![0; 16 * 1024].into_boxed_slice(),
        }
    }
}

impl AsyncRead for FixedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let inner = &mut this.inner;
        let read = |cx: &mut Context<'_>, into: &mut [u8]| {
            let mut rb = ReadBuf::new(into);
            Pin::new(&mut *inner)
                .poll_read(cx, &mut rb)
                .map_ok(|()| rb.filled().len())
        };
        let dst = buf.initialize_unfilled();
        match this.fix.poll_read(cx, dst, &mut this.scratch, read) {
            Poll::Ready(Ok(n)) => {
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
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

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl Connected for FixedStream {
    type ConnectInfo = UdsConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// The connections `listener` accepts, each wrapped in [`FixedStream`].
pub fn incoming(listener: UnixListener) -> impl Stream<Item = io::Result<FixedStream>> {
    futures::stream::unfold(listener, |l| async move {
        let next = l.accept().await.map(|(s, _)| FixedStream::new(s));
        Some((next, l))
    })
}
