//! Just enough HTTP/1.1 for the appliance and its client: one request per
//! connection (`Connection: close`), bodies sized by `Content-Length`,
//! JSON in and out. Sizes are bounded: a peer cannot make either side
//! hold more than [`MOST_BYTES`].

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The most a request or answer may hold: head and body.
pub const MOST_BYTES: usize = 1 << 20;

/// A request or an answer, as read off the wire.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Message {
    /// `GET /v1/volumes/x` for a request; `404` for an answer.
    pub start: String,
    /// Headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Message {
    /// The first header named `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one message from `stream`.
pub fn read(stream: &mut TcpStream) -> std::io::Result<Message> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let mut reader = BufReader::new(stream.take(MOST_BYTES as u64));
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut message = Message {
        start: line.trim_end().to_string(),
        ..Message::default()
    };
    if message.start.is_empty() {
        return Err(bad("empty message"));
    }
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(bad("the headers did not end"));
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (name, value) = l
            .split_once(':')
            .ok_or_else(|| bad("a header without a colon"))?;
        message
            .headers
            .push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let length: usize = match message.header("content-length") {
        Some(n) => n
            .parse()
            .map_err(|_| bad("a Content-Length that is not a number"))?,
        None => 0,
    };
    if length > MOST_BYTES {
        return Err(bad("a body over the limit"));
    }
    message.body = vec![0; length];
    reader.read_exact(&mut message.body)?;
    Ok(message)
}

/// Writes one message (`start` is the request or status line).
pub fn write(
    stream: &mut TcpStream,
    start: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut out = format!(
        "{start}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    stream.write_all(&bytes)?;
    stream.flush()
}

/// Sends `method path` with `body` to `address` and reads the answer:
/// its status code and body.
pub fn call(
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
    timeout: Duration,
) -> std::io::Result<(u16, Vec<u8>)> {
    let addr = std::net::ToSocketAddrs::to_socket_addrs(address)?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("{address} resolves to nothing")))?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut all = headers.to_vec();
    all.push(("Host", address.to_string()));
    all.push(("Content-Type", "application/json".to_string()));
    write(
        &mut stream,
        &format!("{method} {path} HTTP/1.1"),
        &all,
        body,
    )?;
    let answer = read(&mut stream)?;
    let code = answer
        .start
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("a status line {:?}", answer.start)))?;
    Ok((code, answer.body))
}
