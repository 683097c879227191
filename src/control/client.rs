//! A minimal HTTP/1.1 client over a unix socket, for `vhost-iocost ctl` and the tests.
//!
//! Why hand-written rather than hyper's client: every ctl call is one small request and
//! one small response, sent sequentially; with `Connection: close` the response ends at
//! EOF, so the whole protocol we need is a request line, four headers, and a status line
//! plus optional chunked decoding on the way back (about 80 lines). hyper-util's client
//! would add a tokio runtime and a connector to the CLI for no functional gain.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// A response: status code, headers (names lower-cased) and body.
#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> Result<serde_json::Value, String> {
        serde_json::from_str(&self.body)
            .map_err(|e| format!("bad JSON from the daemon ({e}): {}", self.body))
    }

    /// The `error` message of an error body, or the raw body.
    pub fn error_message(&self) -> String {
        self.json()
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("HTTP {}: {}", self.status, self.body.trim()))
    }
}

/// Send one request and read the whole response.
pub fn request(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> io::Result<Response> {
    let mut s = UnixStream::connect(socket).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot connect to the control socket {}: {e}",
                socket.display()
            ),
        )
    })?;
    // Adding, growing or removing a volume may take minutes (allocating, draining).
    let patience = if method == "GET" { 30 } else { 600 };
    s.set_read_timeout(Some(Duration::from_secs(patience)))?;
    let body = body.unwrap_or("");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_response(&raw)
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("bad HTTP response: {msg}"),
    )
}

fn parse_response(raw: &[u8]) -> io::Result<Response> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|_| bad("headers not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(status_line))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    if chunked {
        body = dechunk(&body)?;
    }
    Ok(Response {
        status,
        headers,
        body: String::from_utf8(body).map_err(|_| bad("body not UTF-8"))?,
    })
}

fn dechunk(mut data: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| bad("truncated chunk size"))?;
        let size_text = std::str::from_utf8(&data[..eol]).map_err(|_| bad("chunk size"))?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| bad("chunk size"))?;
        data = &data[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size + 2 {
            return Err(bad("truncated chunk"));
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// Percent-encode a name for a URL path segment.
pub fn encode_segment(name: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked_responses() {
        let r = parse_response(b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}").unwrap();
        assert_eq!(r.status, 404);
        assert_eq!(r.body, "{}");
        assert_eq!(r.header("content-length"), Some("2"));
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.body, "abcde");
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
    }
}
