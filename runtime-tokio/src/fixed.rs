//! Accepted unix streams whose client bytes pass through
//! [`AuthorityFix`], so that gRPC clients sending a socket path as
//! `:authority` are served (see `volplane_proto::authority`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tonic::transport::server::Connected;
use volplane_proto::authority::AuthorityFix;
use volplane_proto::connections::{Admitted, ConnectionTable, Requests, SWEEP_EVERY, peer_process};
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
    /// `inner`, holding `place`, with the fix bounded by `limits`.
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
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.place.closing(cx) {
            return Poll::Ready(Ok(()));
        }
        let (inner, place) = (&mut this.inner, &this.place);
        let read = |cx: &mut Context<'_>, into: &mut [u8]| {
            let mut rb = ReadBuf::new(into);
            Pin::new(&mut *inner).poll_read(cx, &mut rb).map_ok(|()| {
                place.read(rb.filled().len());
                rb.filled().len()
            })
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

/// What tonic puts in each request's extensions: the connection's request
/// count, which `volplane_proto::status::Answers` keeps.
impl Connected for FixedStream {
    type ConnectInfo = Requests;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.place.requests()
    }
}

/// The connections `listener` (on `socket`) accepts, each wrapped in
/// [`FixedStream`] and admitted through one [`ConnectionTable`] (see
/// `volplane_proto::connections`): one it refuses is closed at once.
pub fn incoming(
    listener: UnixListener,
    socket: &std::path::Path,
    limits: &Limits,
) -> impl Stream<Item = io::Result<FixedStream>> {
    let table = ConnectionTable::new(socket, limits);
    let limits = *limits;
    let sweeps = tokio::time::interval(SWEEP_EVERY);
    futures::stream::unfold((listener, sweeps), move |(l, mut sweeps)| {
        let table = table.clone();
        async move {
            loop {
                let accepted = tokio::select! {
                    biased;
                    a = l.accept() => a,
                    _ = sweeps.tick() => {
                        table.sweep();
                        continue;
                    }
                };
                let stream = match accepted {
                    Ok((s, _)) => s,
                    Err(e) => return Some((Err(e), (l, sweeps))),
                };
                let process = peer_process(std::os::fd::AsFd::as_fd(&stream));
                if let Some(place) = table.admit(process) {
                    let stream = FixedStream::new(stream, place, &limits);
                    return Some((Ok(stream), (l, sweeps)));
                }
            }
        }
    })
}
