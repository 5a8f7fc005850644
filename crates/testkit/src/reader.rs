//! Readers that hand out their bytes the way a socket may: a few at a time, so that a parser
//! of a stream is tested on every split of its input, not only on whole messages.

use std::io::{self, Read};

/// A reader of `bytes` that hands out at most `step` of them a call (at least one while any
/// are left, when `step` is above zero), then end of stream.
#[derive(Debug, Clone)]
pub struct Trickle<'a> {
    bytes: &'a [u8],
    step: usize,
}

impl<'a> Trickle<'a> {
    /// `bytes`, `step` at a time.
    pub fn new(bytes: &'a [u8], step: usize) -> Self {
        Self { bytes, step }
    }
}

impl Read for Trickle<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.step.min(self.bytes.len()).min(out.len());
        out[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}
