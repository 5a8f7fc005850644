//! What a peer of the latency experiment measured, message by message: plain data, with no
//! dependency, so the fuzz target of the sockperf log reader compiles the reader's source and
//! this file alone (`fuzz/fuzz_targets/sockperf_log.rs`).

/// One message's journey; CLOCK_REALTIME ns (kairos_sys::clock::realtime_ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// The message's sequence number, from 0 in the order sent.
    pub seq: u64,
    /// The sender's stamp, read just before its send call.
    pub sent_ns: u64,
    /// When the receiving program had it: a clock read right after its receive call returned.
    pub received_ns: u64,
    /// The kernel's software receive stamp (SO_TIMESTAMPING), where the receiver had one.
    pub kernel_ns: Option<u64>,
}

/// What one peer measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRun {
    /// The messages that arrived, each once, in arrival order.
    pub samples: Vec<Sample>,
    /// Messages sent; `sent - samples.len()` were lost.
    pub sent: u64,
}
