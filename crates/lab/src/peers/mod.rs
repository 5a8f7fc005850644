//! The programs the experiments measure Kairos against or beside, each started, driven and
//! stopped by the lab on every path:
//!
//! - [`testpmd`]: `dpdk-testpmd` forwarding on the same veth as Kairos's forwarder;
//! - [`cyclictest`]: `cyclictest` watching the realtime core during an RCU row;
//! - [`kv`]: the stores kv bench measures the replicated store against, Redis ([`kv::redis`]:
//!   standalone, with a replica, with its AOF fsynced) and etcd ([`kv::etcd`]), and the server
//!   processes they share with the bench's own Kairos members ([`kv::Member`]);
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
//! Not here: the RCU experiment's crossbeam-epoch row (`experiments::rcu_latency::peer`). It
//! starts no program: it is the experiment's own workload (its route, storm and drop counter,
//! `rcu_latency::workload`) and realtime reader and row harness (`rcu_latency::run`) with
//! crossbeam-epoch in place of Kairos's RCU, whose epoch calls already live apart in
//! `kairos_rcu::peer`; taken out, it would have to reach back into those internals.

pub mod cyclictest;
pub mod kv;
pub mod process;
pub mod testpmd;
pub mod udp;
