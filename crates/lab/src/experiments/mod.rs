//! The experiments, each behind the harness ([`crate::harness`]):
//! - [`rcu_latency`]: the source's Table 1 (realtime lateness under RCU callback storms) for each
//!   reclamation policy, with crossbeam-epoch as a peer.
//! - [`forward`]: the source's forwarding experiment (trace, token-bucket source, forwarder with
//!   a FIB, age receiver) and `sweep`, its grid of figures.
//! - [`aoi_model`]: age of information of one queue, simulated beside the closed forms.
//! - [`lane_latency`]: the express lane's one-way latency on the testbed beside UDP sockets,
//!   QJump-style priority and sockperf, idle and under a flood (the source's Table 2).
//! - [`lane_tightness`]: how tight the express lane's latency and jitter bounds are on a
//!   fat-tree, by simulation.
//! - [`rtu_deadlines`]: the real-time upcalls' deadlines against utilisation (the source's
//!   Fig. 5), with and without background load.
//! - [`rtu_partition`]: six UDP streams' bandwidth as RTUs and as threads (the source's Fig. 7).
//! - [`rtu_sched_deadline`]: the deadline experiment's set under Linux `SCHED_DEADLINE`.
//! - [`rtu_switches`]: context switches per unit of work, RMDP against a thread per handler
//!   with priority-inheritance locks.
//! - [`rtu_throughput`]: a UDP receiver as an RTU against a plain loop, with and without load.
//! - [`rcu_grace`]: grace-period latency, offline readers, and stall detection.
//! - [`dispatch`]: flow-affinity dispatch while workers come and go: flows moved per steering
//!   policy, load skew, latency and a load step on a virtual clock, what a moved flow's state
//!   costs (`dispatch::cold`), and the dispatcher on real threads (`dispatch::threads`).
//! - [`kv_check`]: the replicated key-value store's histories under faults, judged by the
//!   linearizability checker, with the checker's self-test.
//! - [`kv_bench`]: the replicated store's latency, throughput and failover beside Redis, Redis
//!   with `WAIT`, and etcd, in one run.
//! - [`fd_detect`]: the failure detector's detection time after a process is killed, a link
//!   cut and an application hung, beside phi accrual and SWIM in the same run; [`fd_accuracy`]:
//!   its mistakes against the threshold, idle and under load, each set against the stall
//!   watch; both run on `kairos_launch::fd_group`'s member processes.

pub mod aoi_model;
pub mod dispatch;
pub mod fd_accuracy;
pub mod fd_detect;
pub mod forward;
pub mod kv_bench;
pub mod kv_check;
pub mod lane_latency;
pub mod lane_police;
pub mod lane_tightness;
pub mod rcu_grace;
pub mod rcu_latency;
pub mod rtu_deadlines;
pub mod rtu_partition;
pub mod rtu_sched_deadline;
pub mod rtu_switches;
pub mod rtu_throughput;
