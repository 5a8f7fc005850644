//! The programs the experiments measure Kairos against or beside, each started, driven and
//! stopped by the lab on every path:
//!
//! - [`testpmd`]: `dpdk-testpmd` forwarding on the same veth as Kairos's forwarder;
//! - [`cyclictest`]: `cyclictest` watching the realtime core during an RCU row;
//! - [`udp`]: the lane latency experiment's rows that are not the lane: `sockperf` against
//!   `sockperf server` ([`udp::sockperf`]), and the plain UDP rows (blocking, busy-poll,
//!   priority only: [`udp::baseline`]), which start no program but stand for what a user's own
//!   program does with plain sockets, so they are kept with the peers, not with the experiment
//!   that names them;
//! - [`process`]: what handling another program takes, in one place for every peer and
//!   experiment: a program found on `PATH`, an owned child started pinned or with its output
//!   in a file, its output's last line for an error, a wait until a server has bound its port,
//!   a directory removed with its files.
//!
//! Not here yet: the peers still inside the experiment that runs them, because they use its
//! configuration and helpers: kv bench's Redis and etcd (`experiments::kv_bench::systems`), and
//! the RCU experiment's crossbeam-epoch row.

pub mod cyclictest;
pub mod process;
pub mod testpmd;
pub mod udp;
