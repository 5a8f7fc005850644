//! Encoding: messages packed into a caller's buffer chunk by chunk, each chunk sealed with its
//! CRC as it is written and the header last, without allocating.

use super::schema::header_crc;
use super::{EncodeError, FIRST, HEADER_BYTES, HEADER_COVERED, Header, LAST, MAGIC, VERSION};

/// Packs messages into a caller's buffer: the header's room is kept at the front and written
/// by [`Encoder::finish`]; each [`Encoder::push`] writes a message's chunks or nothing.
#[derive(Debug)]
pub struct Encoder<'b> {
    header: Header,
    buf: &'b mut [u8],
    chunks: usize,
    max_chunks: usize,
}

impl<'b> Encoder<'b> {
    /// An encoder filling `buf` (whose length is the payload budget) with a packet of `header`.
    pub fn new(header: Header, buf: &'b mut [u8]) -> Result<Self, EncodeError> {
        if buf.len() < HEADER_BYTES {
            return Err(EncodeError::BufferTooSmall { len: buf.len(), needed: HEADER_BYTES });
        }
        let max_chunks = header.schema.max_chunks(buf.len());
        Ok(Encoder { header, buf, chunks: 0, max_chunks })
    }

    /// Chunks written so far.
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// Chunks the buffer still has room for.
    pub fn chunks_left(&self) -> usize {
        self.max_chunks - self.chunks
    }

    /// The longest message [`Encoder::push`] accepts now (an empty one needs a chunk left).
    pub fn room(&self) -> usize {
        self.chunks_left() * self.header.schema.message_bytes_per_chunk()
    }

    /// Appends `message` as its chunks; when it does not fit, writes nothing and refuses it.
    pub fn push(&mut self, message: &[u8]) -> Result<(), EncodeError> {
        let schema = self.header.schema;
        let per_chunk = schema.message_bytes_per_chunk();
        let needed = schema.chunks_for(message.len());
        if needed > self.chunks_left() {
            return Err(EncodeError::MessageTooLarge {
                len: message.len(),
                chunks_left: self.chunks_left(),
                room: self.room(),
            });
        }
        for index in 0..needed {
            let piece = message.get(index * per_chunk..).unwrap_or_default();
            let piece = piece.get(..per_chunk).unwrap_or(piece);
            let mut control = piece.len() as u8;
            if index == 0 {
                control |= FIRST;
            }
            if index + 1 == needed {
                control |= LAST;
            }
            let start = schema.packet_bytes(self.chunks);
            let chunk = &mut self.buf[start..start + schema.chunk_bytes()];
            chunk[0] = control;
            chunk[1..1 + piece.len()].copy_from_slice(piece);
            chunk[1 + piece.len()..schema.data_bytes()].fill(0);
            schema.seal_chunk(chunk)?;
            self.chunks += 1;
        }
        Ok(())
    }

    /// Writes the header and returns the packet's length: the packet is `buf[..length]`.
    pub fn finish(self) -> usize {
        let header = &mut self.buf[..HEADER_BYTES];
        header[0..2].copy_from_slice(&MAGIC);
        header[2] = VERSION;
        header[3] = self.header.schema.wire_id();
        header[4..8].copy_from_slice(&self.header.tunnel.to_le_bytes());
        header[8..16].copy_from_slice(&self.header.seq.to_le_bytes());
        header[16..24].copy_from_slice(&self.header.sent_ns.to_le_bytes());
        // `max_chunks` caps the count at MAX_CHUNKS, so it fits 16 bits.
        header[24..26].copy_from_slice(&(self.chunks as u16).to_le_bytes());
        let crc = header_crc(&header[..HEADER_COVERED]);
        header[HEADER_COVERED..].copy_from_slice(&crc.to_le_bytes());
        self.header.schema.packet_bytes(self.chunks)
    }
}

/// Encodes `messages`, in order, into `buf` and returns the packet's length; refuses the first
/// message that does not fit (what `buf` then holds is not a packet).
pub fn encode<M: AsRef<[u8]>>(
    header: Header,
    messages: impl IntoIterator<Item = M>,
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    let mut encoder = Encoder::new(header, buf)?;
    for message in messages {
        encoder.push(message.as_ref())?;
    }
    Ok(encoder.finish())
}
