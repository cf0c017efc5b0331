//! A hand-written HTTP/1.1 client on one keep-alive socket, and the Content-Length framing the bare reference server reads requests with.

use std::io::{self, Write as _};
use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// HTTP/1.1 on one keep-alive socket, written and parsed by hand so the
/// generator spends as little of the shared CPU as possible.
pub struct RawHttp {
    addr: SocketAddr,
    stream: TcpStream,
    req: Vec<u8>,
    buf: Vec<u8>,
}

impl RawHttp {
    pub async fn connect(addr: SocketAddr) -> io::Result<RawHttp> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(RawHttp {
            addr,
            stream,
            req: Vec::with_capacity(256),
            buf: Vec::with_capacity(4096),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// One request; the response's status.
    pub async fn post(&mut self, path: &str, body: &str) -> io::Result<u16> {
        self.req.clear();
        write!(
            self.req,
            "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        )?;
        self.stream.write_all(&self.req).await?;
        read_message(&mut self.stream, &mut self.buf)
            .await
            .map(|first| status_of(&first))
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The status of a response's first line ("HTTP/1.1 200 OK"); 0 when it
/// has none.
pub fn status_of(first_line: &[u8]) -> u16 {
    first_line
        .get(9..12)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Where one message's parts lie in the buffer.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    first_line_end: usize,
    body_start: usize,
    body_len: usize,
}

/// The head at the start of `buf`: None until all of it has arrived, an
/// error when it has no Content-Length (the only framing this reader
/// knows).
fn parse_head(buf: &[u8]) -> Option<io::Result<Head>> {
    let end = find(buf, b"\r\n\r\n")?;
    let head = &buf[..end];
    let first_line_end = find(head, b"\r\n").unwrap_or(head.len());
    let mut length = None;
    for line in head[first_line_end..].split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() > 15 && line[..15].eq_ignore_ascii_case(b"content-length:") {
            length = std::str::from_utf8(&line[15..])
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok());
        }
    }
    Some(
        length
            .map(|body_len| Head {
                first_line_end,
                body_start: end + 4,
                body_len,
            })
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a message without content-length",
                )
            }),
    )
}

/// Reads more of the stream into `buf`; the peer closing is an error here,
/// since a whole message is still owed.
async fn fill<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    chunk: &mut [u8],
) -> io::Result<()> {
    let n = stream.read(chunk).await?;
    if n == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    buf.extend_from_slice(&chunk[..n]);
    Ok(())
}

/// Reads one HTTP/1.1 message framed by Content-Length and returns its
/// first line. Bytes past it (a pipelined next message) stay in `buf`.
pub async fn read_message<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut Vec<u8>,
) -> io::Result<Vec<u8>> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(head) = parse_head(buf) {
            let head = head?;
            let total = head.body_start + head.body_len;
            while buf.len() < total {
                fill(stream, buf, &mut chunk).await?;
            }
            let first = buf[..head.first_line_end].to_vec();
            buf.drain(..total);
            return Ok(first);
        }
        fill(stream, buf, &mut chunk).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_comes_from_the_first_line_or_is_zero() {
        assert_eq!(status_of(b"HTTP/1.1 429 Too Many Requests"), 429);
        assert_eq!(status_of(b"HTTP/1.1 20"), 0);
        assert_eq!(status_of(b"POST /v1/check HTTP/1.1"), 0);
    }

    #[test]
    fn a_head_waits_for_its_blank_line_and_needs_content_length() {
        assert!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n").is_none());
        let head = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length:  2 \r\n\r\nok")
            .expect("complete")
            .expect("framed");
        assert_eq!(
            head,
            Head {
                first_line_end: 15,
                body_start: 40,
                body_len: 2
            }
        );
        let unframed =
            parse_head(b"HTTP/1.1 200 OK\r\nx: content-length: 2\r\n\r\n").expect("complete");
        assert_eq!(unframed.unwrap_err().kind(), io::ErrorKind::InvalidData);
    }

    #[tokio::test]
    async fn pipelined_messages_are_read_one_at_a_time() {
        let wire = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabcHTTP/1.1 429 No\r\ncontent-length: 0\r\n\r\n";
        let (mut client, mut server) = tokio::io::duplex(16);
        let writer = tokio::spawn(async move { server.write_all(wire).await });
        let mut buf = Vec::new();
        let first = read_message(&mut client, &mut buf).await.expect("first");
        assert_eq!(status_of(&first), 200);
        let second = read_message(&mut client, &mut buf).await.expect("second");
        assert_eq!(status_of(&second), 429);
        assert!(buf.is_empty());
        writer.await.expect("writer").expect("written");
        let closed = read_message(&mut client, &mut buf).await;
        assert_eq!(closed.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }
}
