//! A CSI client channel on smol: hyper 1's HTTP/2 client over a unix
//! socket, as a tower service the generated tonic clients take.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use smol_hyper::rt::{FuturesIo, SmolTimer};
use volplane_proto::endpoint::{self, EndpointError};

/// Why a connection could not be made.
#[derive(Debug)]
pub enum ConnectError {
    /// The endpoint is not one volplane can dial.
    Endpoint(EndpointError),
    /// The socket could not be connected.
    Io(std::io::Error),
    /// The HTTP/2 handshake failed.
    Http(hyper::Error),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Endpoint(e) => write!(f, "{e}"),
            ConnectError::Io(e) => write!(f, "connect: {e}"),
            ConnectError::Http(e) => write!(f, "HTTP/2 handshake: {e}"),
        }
    }
}

impl std::error::Error for ConnectError {}

/// An HTTP/2 connection to a CSI endpoint; pass it to a generated client's
/// `with_origin(channel, Uri::from_static("http://localhost"))`. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Channel {
    tx: hyper::client::conn::http2::SendRequest<tonic::body::Body>,
}

/// hyper's executor for the connection task: smol's global executor.
#[derive(Clone, Copy, Debug)]
struct GlobalSpawn;

impl<F> hyper::rt::Executor<F> for GlobalSpawn
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, f: F) {
        smol::spawn(f).detach();
    }
}

/// Connects to `unix:///path/csi.sock`.
pub async fn connect(endpoint: &str) -> Result<Channel, ConnectError> {
    let path = endpoint::socket_path(endpoint).map_err(ConnectError::Endpoint)?;
    let stream = smol::net::unix::UnixStream::connect(&path)
        .await
        .map_err(ConnectError::Io)?;
    let (tx, conn) = hyper::client::conn::http2::Builder::new(GlobalSpawn)
        .timer(SmolTimer::new())
        .handshake(FuturesIo::new(stream))
        .await
        .map_err(ConnectError::Http)?;
    smol::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("client connection ended: {e}");
        }
    })
    .detach();
    Ok(Channel { tx })
}

impl tower_service::Service<http::Request<tonic::body::Body>> for Channel {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.tx.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.tx.send_request(req))
    }
}
