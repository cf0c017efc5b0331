//! The socket a direct connection's gateway side writes to and reads from without waiting: plain TCP, or TCP under a TLS session held beside it.
//!
//! Callers write their frames from their own tasks and a reader task takes
//! the answers (`client`), both with `try_` calls on the TCP socket. Under
//! TLS the session sits between them: plaintext goes into it and records
//! come out to the socket as it takes them, and records read are opened
//! into plaintext, each under a short lock held across no await.

use std::io::{self, ErrorKind, Read, Write};

use bytes::BytesMut;
use parking_lot::Mutex;
use rustls::ClientConnection;
use tokio::net::TcpStream;

pub(super) enum Socket {
    Plain(TcpStream),
    Tls {
        tcp: TcpStream,
        /// Boxed: a session is over a kilobyte, and the socket is made once
        /// per connection.
        session: Box<Mutex<ClientConnection>>,
    },
}

/// The TCP socket as `std::io`, never waiting (WouldBlock instead).
struct NoWait<'a>(&'a TcpStream);

impl Read for NoWait<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for NoWait<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes the session's records to the socket until it takes no more.
fn send_records(session: &mut ClientConnection, tcp: &TcpStream) -> io::Result<()> {
    while session.wants_write() {
        match session.write_tls(&mut NoWait(tcp)) {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Socket {
    fn tcp(&self) -> &TcpStream {
        match self {
            Socket::Plain(tcp) | Socket::Tls { tcp, .. } => tcp,
        }
    }

    pub async fn readable(&self) -> io::Result<()> {
        self.tcp().readable().await
    }

    pub async fn writable(&self) -> io::Result<()> {
        self.tcp().writable().await
    }

    /// Takes what it can of `buf` without waiting: bytes on the socket,
    /// or (TLS) sealed into the session, whose records then go out as far
    /// as the socket takes them. An empty `buf` only sends records left.
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Plain(tcp) => tcp.try_write(buf),
            Socket::Tls { tcp, session } => {
                let mut session = session.lock();
                let n = session.writer().write(buf)?;
                send_records(&mut session, tcp)?;
                Ok(n)
            }
        }
    }

    /// Whether sealed records wait for the socket (never, in plaintext).
    pub fn has_unsent(&self) -> bool {
        match self {
            Socket::Plain(_) => false,
            Socket::Tls { session, .. } => session.lock().wants_write(),
        }
    }

    /// Appends what has arrived to `buf` without waiting: the count, 0 at
    /// the end of the stream, WouldBlock when nothing (or, under TLS, no
    /// plaintext) has.
    pub fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        let (tcp, session) = match self {
            Socket::Plain(tcp) => return tcp.try_read_buf(buf),
            Socket::Tls { tcp, session } => (tcp, session),
        };
        let mut session = session.lock();
        let before = buf.len();
        let mut ended = false;
        let mut chunk = [0u8; 16 * 1024];
        loop {
            // Plaintext out before more records in: the session refuses
            // records while its plaintext buffer is full.
            loop {
                match session.reader().read(&mut chunk) {
                    Ok(0) => {
                        ended = true;
                        break;
                    }
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            if ended {
                break;
            }
            match session.read_tls(&mut NoWait(tcp)) {
                Ok(0) => {
                    ended = true;
                    break;
                }
                Ok(_) => {
                    session
                        .process_new_packets()
                        .map_err(|e| io::Error::new(ErrorKind::InvalidData, e))?;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        // A record read may call for one back (a key update): sent now
        // when the socket takes it, else with the next frame.
        send_records(&mut session, tcp)?;
        match buf.len() - before {
            0 if ended => Ok(0),
            0 => Err(ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }
}
