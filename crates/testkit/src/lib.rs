//! `kairos-testkit`: what the integration tests share.
//!
//! The tests of the `kairos` command and of the crates below it start processes, read what
//! those print, make scratch directories, pick ports, wait for something to come up, and skip
//! what needs root. Each of those was written in the test files that needed it, a copy per
//! file, and the copies drifted: some children were stopped when an assertion failed and others
//! left running, some scratch directories were a test's own and others named after the process
//! alone. Here each is written once, so a fix to a helper is made in one place and reaches
//! every test.
//!
//! - [`program`]: the binary under test run with `CI=1`, and what its output must be (one
//!   error line, one JSON object).
//! - [`scratch`]: directories and files of one test's own, removed on every path.
//! - [`child`]: children stopped and reaped on every path, and their output read line by line
//!   with a time limit.
//! - [`net`]: ports free now and handed to no other test of the process, and connecting to a
//!   program while it comes up.
//! - [`wait`]: checks repeated until they hold, within a limit.
//! - [`reader`]: a reader that hands out a few bytes a call, as a socket may.
//! - [`host`]: root, programs on the PATH, network namespaces and this process's children.
//! - `resp` (feature `resp`): a Redis client connected to a store member as it comes up.
//!
//! A dev-dependency only, never published: nothing here is for a program's own use.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod child;
pub mod host;
pub mod net;
pub mod program;
pub mod reader;
#[cfg(feature = "resp")]
pub mod resp;
pub mod scratch;
pub mod wait;

pub use child::{Guarded, Lines};
pub use host::{is_root, on_path, skip_if_root, skip_unless_root};
pub use net::{free_block, free_tcp_port, free_udp_port};
pub use program::{Program, json, one_line_error, read_json, stderr, stdout, text, usage_error};
pub use reader::Trickle;
pub use scratch::{ScratchPath, scratch_dir, scratch_file, scratch_path};
pub use wait::{wait_for, wait_until};
