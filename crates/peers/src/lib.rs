//! `kairos-peers`: the formats of the systems Kairos is measured against, spoken and read as its
//! lab needs them.
//!
//! An experiment that puts Kairos beside a peer has to talk to the peer, or read what the peer
//! wrote: that is outside input, so it gets the same care as Kairos's own parsers (bounded
//! buffers, no panic on any bytes, a fuzz target each), and lives here, with the formats, not
//! among the experiments that use them.
//!
//! - [`grpc`]: etcd's gRPC API (`KV/Put`, `KV/Range`) over HTTP/2 without TLS, as a sans-I/O
//!   session: the bytes of a call out, the server's bytes in, an outcome per call. Fuzzed by
//!   `grpc_frames`.
//! - [`http`]: a small HTTP/1.1 client for etcd's JSON gateway (the bench's probes of a member
//!   and of who leads), with a pure response parser.
//! - [`sockperf`]: sockperf's full log read into [`samples`], the per-message records the lane's
//!   latency experiment keeps for every peer. Fuzzed by `sockperf_log`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod grpc;
pub mod http;
pub mod samples;
pub mod sockperf;
