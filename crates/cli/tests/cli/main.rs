//! The `kairos` command's integration tests: one module per command or concern, all in one test
//! binary.
//!
//! One binary, not one per file: each test binary links the whole of Kairos, so fifteen of them
//! linked it fifteen times. The tests of every module run at once in this one process, so none
//! may claim what another could too: ports come from `kairos_testkit::net` (never handed out
//! twice in a process), scratch paths are directories of their own, no test sets the process's
//! environment or working directory, and a test that counts this process's children counts only
//! those its harness starts ([`kairos_testkit::host::children_in_own_groups`]).
//!
//! What the modules share (running the binary, reading its output, children stopped on every
//! path, waits) is in `kairos-testkit`; what only one module needs stays in it.

use std::process::Output;

use kairos_testkit::Program;

mod dispatch;
mod doctor;
mod fd;
mod forward;
mod kv;
mod kv_bench;
mod kv_cluster;
mod lane;
mod lane_controller;
mod lane_e2e;
mod lane_node;
mod lane_testbed;
mod results_dir;
mod rtu;
mod signals;
mod stdout_closed;

/// The `kairos` binary this build made for its tests.
const KAIROS: Program = Program::new(env!("CARGO_BIN_EXE_kairos"));

/// `kairos ARGS` run to its end (with `CI=1`), its output captured.
fn kairos(args: &[&str]) -> Output {
    KAIROS.output(args)
}
