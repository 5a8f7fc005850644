//! What a peer of the lane's latency experiment measured, message by message: plain data, as
//! [`crate::sockperf`] reads it from sockperf's log and the experiment's own peers record it.

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
