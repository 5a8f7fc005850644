//! A reader that stops early (`kairos ... | head -1`) ends the command quietly, as it ends any
//! other program: exit 141 (what a shell reports for SIGPIPE), nothing on stderr, no panic.

use std::io::Read;
use std::process::Stdio;

use kairos_testkit::Guarded;

use crate::KAIROS;

#[test]
fn a_closed_stdout_ends_the_command_with_141_and_no_message() {
    // About 700 KB of TOML: far more than the pipe holds, so the writer meets the closed end.
    let mut child = Guarded::spawn(
        KAIROS
            .command()
            .args(["lane", "generate", "fat-tree", "--k", "14"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let mut first = [0u8; 16];
    child.stdout.take().expect("piped").read_exact(&mut first).expect("some output first");
    // The read end is dropped here: the rest of the output has nowhere to go.
    let out = child.wait_with_output().expect("it ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(&first[..8], b"[[node]]");
    assert_eq!(out.status.code(), Some(141), "stderr: {stderr}");
    assert!(stderr.is_empty(), "nothing on stderr, no panic: {stderr}");
}
