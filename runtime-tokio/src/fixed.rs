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
use volplane_proto::limits::{ConnectionSlots, Limits, Slot};

/// A server-side unix stream with the `:authority` fix on what it reads.
#[derive(Debug)]
pub struct FixedStream {
    inner: UnixStream,
    fix: AuthorityFix,
    scratch: Box<[u8]>,
    /// This connection's place among the socket's; freed when it closes.
    _slot: Slot,
}

impl FixedStream {
    /// `inner`, holding `slot`, with the fix bounded by `limits`.
    pub fn new(inner: UnixStream, slot: Slot, limits: &Limits) -> FixedStream {
        FixedStream {
            inner,
            fix: AuthorityFix::new(limits.header_list),
            scratch: vec![0; 16 * 1024].into_boxed_slice(),
            _slot: slot,
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

/// The connections `listener` (on `socket`) accepts, each wrapped in
/// [`FixedStream`]; one past `limits.connections` is closed at once.
pub fn incoming(
    listener: UnixListener,
    socket: &std::path::Path,
    limits: &Limits,
) -> impl Stream<Item = io::Result<FixedStream>> {
    let slots = ConnectionSlots::new(limits.connections);
    let (socket, limits) = (socket.to_path_buf(), *limits);
    futures::stream::unfold(listener, move |l| {
        let (slots, socket) = (slots.clone(), socket.clone());
        async move {
            loop {
                let stream = match l.accept().await {
                    Ok((s, _)) => s,
                    Err(e) => return Some((Err(e), l)),
                };
                if let Some(slot) = slots.take(&socket) {
                    return Some((Ok(FixedStream::new(stream, slot, &limits)), l));
                }
            }
        }
    })
}
