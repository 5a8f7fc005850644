//! The byte codec shared by everything the services put on a wire or in a file: Raft messages
//! (`kairos_kv::replica::wire`), the store's log entries (`kairos_kv::kv::entry`) and the
//! replica's log file (`kairos_kv::replica::storage`).
//!
//! Integers are LEB128 varints (a `u64` takes 1 to 10 bytes), byte strings are a varint length
//! and the bytes. The [`Reader`] never panics and never allocates more than the input holds: a
//! length is checked against the bytes left before anything is reserved, so a forged length
//! costs an error, not memory.

use thiserror::Error;

/// Why bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The input ended inside a field.
    #[error("truncated: {0} ended early")]
    Truncated(&'static str),
    /// A varint ran past 10 bytes or past 64 bits.
    #[error("malformed varint in {0}")]
    Varint(&'static str),
    /// A field held a value outside its range (an unknown tag, a count too large).
    #[error("invalid {field}: {value}")]
    Invalid {
        /// Which field.
        field: &'static str,
        /// The value found.
        value: u64,
    },
    /// Bytes were left after the last field.
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// Appends `value` as a LEB128 varint.
pub fn put_u64(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends a signed value, zig-zag encoded so small negatives stay short.
pub fn put_i64(out: &mut Vec<u8>, value: i64) {
    put_u64(out, ((value << 1) ^ (value >> 63)) as u64);
}

/// Appends a length-prefixed byte string.
pub fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u64(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Reads fields from a byte slice, front to back.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.bytes.len()
    }

    /// Reads one byte.
    pub fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        let (&first, rest) = self.bytes.split_first().ok_or(DecodeError::Truncated(field))?;
        self.bytes = rest;
        Ok(first)
    }

    /// Reads a LEB128 varint.
    pub fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for i in 0..10 {
            let byte = self.u8(field)?;
            let part = u64::from(byte & 0x7f);
            if i == 9 && part > 1 {
                return Err(DecodeError::Varint(field));
            }
            value |= part << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::Varint(field))
    }

    /// Reads a zig-zag varint.
    pub fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        let raw = self.u64(field)?;
        Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }

    /// Reads a `bool` stored as one byte, 0 or 1.
    pub fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(DecodeError::Invalid { field, value: u64::from(other) }),
        }
    }

    /// Reads a length-prefixed byte string, borrowed from the input.
    pub fn bytes(&mut self, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let len = self.u64(field)?;
        if len > self.bytes.len() as u64 {
            return Err(DecodeError::Truncated(field));
        }
        let (head, rest) = self.bytes.split_at(len as usize);
        self.bytes = rest;
        Ok(head)
    }

    /// Reads a count of items that each take at least `min_item_bytes` bytes, refusing a count
    /// the remaining input cannot hold (so a caller may reserve that many).
    pub fn count(&mut self, field: &'static str, min_item_bytes: usize) -> Result<usize, DecodeError> {
        let count = self.u64(field)?;
        if count.saturating_mul(min_item_bytes.max(1) as u64) > self.bytes.len() as u64 {
            return Err(DecodeError::Invalid { field, value: count });
        }
        Ok(count as usize)
    }

    /// Fails unless every byte was read.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.bytes.is_empty() { Ok(()) } else { Err(DecodeError::Trailing(self.bytes.len())) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn integers_and_bytes_round_trip(a: u64, b: i64, c: Vec<u8>) {
            let mut out = Vec::new();
            put_u64(&mut out, a);
            put_i64(&mut out, b);
            put_bytes(&mut out, &c);
            let mut r = Reader::new(&out);
            prop_assert_eq!(r.u64("a").unwrap(), a);
            prop_assert_eq!(r.i64("b").unwrap(), b);
            prop_assert_eq!(r.bytes("c").unwrap(), &c[..]);
            prop_assert!(r.finish().is_ok());
        }

        #[test]
        fn any_input_decodes_or_errs(bytes: Vec<u8>) {
            let mut r = Reader::new(&bytes);
            let _ = r.u64("x");
            let _ = r.bytes("y");
            let _ = r.count("z", 1);
        }
    }

    #[test]
    fn overlong_varint_and_forged_lengths_are_errors() {
        assert_eq!(Reader::new(&[0xff; 11]).u64("v"), Err(DecodeError::Varint("v")));
        assert_eq!(
            Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]).u64("v"),
            Err(DecodeError::Varint("v"))
        );
        let mut out = Vec::new();
        put_u64(&mut out, u64::MAX);
        assert_eq!(Reader::new(&out).u64("v"), Ok(u64::MAX));
        assert_eq!(Reader::new(&out).bytes("b"), Err(DecodeError::Truncated("b")));
        assert!(Reader::new(&out).count("n", 8).is_err());
    }
}
