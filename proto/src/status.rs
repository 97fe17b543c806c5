//! The codes and messages of the answers tonic gives before any service
//! sees a request, made into what a gRPC caller expects and can act on:
//!
//! - a request message larger than the limit is RESOURCE_EXHAUSTED (gRPC's
//!   convention, and grpc-go's), not tonic's OUT_OF_RANGE, and the message
//!   names the method and both sizes;
//! - a method or service the server does not have is UNIMPLEMENTED with a
//!   message naming it, not an empty one.
//!
//! [`Answers`] wraps the whole server (every service on the socket); it
//! looks only at the headers of trailers-only answers, which is how tonic
//! gives both.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{HeaderValue, Request, Response};
use tonic::Code;
use tonic::codegen::Service;

use crate::connections::Requests;

const TOO_LARGE: &str = "Error, decoded message length too large: found ";

/// A server whose early answers carry the codes and messages above.
#[derive(Debug, Clone)]
pub struct Answers<S> {
    inner: S,
    /// The connection's request count, when the server knows it per
    /// connection; else it is looked for in each request's extensions.
    requests: Option<Requests>,
}

impl<S> Answers<S> {
    /// `inner` with its early answers fixed.
    pub fn new(inner: S) -> Answers<S> {
        Answers {
            inner,
            requests: None,
        }
    }

    /// `inner` serving one connection, whose requests it counts.
    pub fn for_connection(inner: S, requests: Requests) -> Answers<S> {
        Answers {
            inner,
            requests: Some(requests),
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, R> Service<Request<B>> for Answers<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<R>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let method = request.uri().path().to_string();
        // The connection is busy until the answer is ready.
        let in_flight = self
            .requests
            .as_ref()
            .or_else(|| request.extensions().get::<Requests>())
            .map(Requests::start);
        let answer = self.inner.call(request);
        Box::pin(async move {
            let mut response = answer.await?;
            drop(in_flight);
            fix(&method, response.headers_mut());
            Ok(response)
        })
    }
}

/// Rewrites the status headers of a trailers-only answer to `method`.
pub fn fix(method: &str, headers: &mut http::HeaderMap) {
    let code = headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map(Code::from_i32);
    let message = headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .map(percent_decode);
    let (code, text) = match (code, message) {
        (Some(Code::OutOfRange), Some(m)) if m.starts_with(TOO_LARGE) => {
            (Code::ResourceExhausted, too_large(method, &m))
        }
        (Some(Code::Unimplemented), None) => (
            Code::Unimplemented,
            format!("unknown method {method}: this server does not serve it"),
        ),
        (Some(Code::Unimplemented), Some(m)) if m.is_empty() => (
            Code::Unimplemented,
            format!("unknown method {method}: this server does not serve it"),
        ),
        _ => return,
    };
    headers.insert("grpc-status", HeaderValue::from(code as i32));
    if let Ok(v) = HeaderValue::from_str(&percent_encode(&text)) {
        headers.insert("grpc-message", v);
    }
}

/// "the request to M is N bytes, over the limit of L bytes" from tonic's
/// "…: found N bytes, the limit is: L bytes".
fn too_large(method: &str, tonic: &str) -> String {
    let numbers: Vec<&str> = tonic
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .collect();
    match numbers.as_slice() {
        [found, limit] => format!(
            "the request to {method} is {found} bytes, over the limit of {limit} bytes: \
             send a smaller request"
        ),
        _ => format!("the request to {method} is too large: {tonic}"),
    }
}

/// gRPC's percent-encoding of grpc-message: bytes outside printable ASCII,
/// and '%', as %XX.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: tonic::Status, method: &str) -> tonic::Status {
        let mut headers = status.into_http::<()>().into_parts().0.headers;
        fix(method, &mut headers);
        tonic::Status::from_header_map(&headers).expect("a status")
    }

    #[test]
    fn an_oversized_request_is_resource_exhausted_naming_the_sizes() {
        let tonic = tonic::Status::out_of_range(
            "Error, decoded message length too large: found 5242885 bytes, the limit is: 4194304 bytes",
        );
        let s = answered(tonic, "/csi.v1.Controller/CreateVolume");
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert_eq!(
            s.message(),
            "the request to /csi.v1.Controller/CreateVolume is 5242885 bytes, over the limit of \
             4194304 bytes: send a smaller request"
        );
    }

    #[test]
    fn an_unknown_method_is_named() {
        let s = answered(tonic::Status::unimplemented(""), "/csi.v1.Nope/Call");
        assert_eq!(s.code(), Code::Unimplemented);
        assert_eq!(
            s.message(),
            "unknown method /csi.v1.Nope/Call: this server does not serve it"
        );
    }

    #[test]
    fn other_answers_are_kept() {
        let s = answered(
            tonic::Status::out_of_range("capacity 5 is past the limit"),
            "/m",
        );
        assert_eq!(s.code(), Code::OutOfRange);
        assert_eq!(s.message(), "capacity 5 is past the limit");
        let s = answered(tonic::Status::unimplemented("no snapshots here"), "/m");
        assert_eq!(s.message(), "no snapshots here");
    }

    #[test]
    fn messages_survive_percent_encoding() {
        let text = "100% über";
        assert_eq!(percent_decode(&percent_encode(text)), text);
    }
}
