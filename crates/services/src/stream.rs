//! Messages read off a byte stream (a TCP connection), for any protocol whose parser is a pure
//! function of the bytes received so far: the framing loop the store's RESP client and the
//! peers' HTTP client share.

use std::io::{self, Read};

/// A framing loop over a byte stream, for any protocol whose parser is a pure function of
/// the buffer's start (`parse` returns the message and the bytes it took, or `None` while the
/// buffer holds part of one): reads onto `buf` until `parse` has a message and takes its bytes
/// out. The store's RESP client and the peers' HTTP client frame their replies with it. The buffer grows no further
/// than `parse` lets it: a parser must refuse a message past its own limit.
pub fn read_framed<T, E>(
    reader: &mut impl Read,
    buf: &mut Vec<u8>,
    parse: impl Fn(&[u8]) -> Result<Option<(T, usize)>, E>,
) -> io::Result<T>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some((message, used)) =
            parse(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?
        {
            buf.drain(..used);
            return Ok(message);
        }
        let n = reader.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
