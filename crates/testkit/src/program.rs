//! The binary under test, run as a script runs it, and what its output must be.
//!
//! Cargo tells an integration test where the package's binaries are only at compile time
//! (`env!("CARGO_BIN_EXE_<name>")`, in the test's own crate), so a test names its binary once,
//! as a [`Program`] constant, and runs it through that. Every run gets `CI=1`: progress is
//! then what a script sees (no bar), whatever the terminal.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// The start of every error line `kairos` prints.
const ERROR_PREFIX: &str = "kairos: error: ";

/// A program under test, at the path cargo gave the test.
#[derive(Debug, Clone, Copy)]
pub struct Program {
    path: &'static str,
}

impl Program {
    /// The program at `path` (`env!("CARGO_BIN_EXE_kairos")`).
    pub const fn new(path: &'static str) -> Self {
        Self { path }
    }

    /// Where the program is.
    pub const fn path(&self) -> &'static str {
        self.path
    }

    /// A command that runs the program with `CI=1`, to be given arguments and run.
    pub fn command(&self) -> Command {
        let mut command = Command::new(self.path);
        command.env("CI", "1");
        command
    }

    /// The program run with `args` to its end, its output captured.
    pub fn output<S: AsRef<OsStr>>(&self, args: impl IntoIterator<Item = S>) -> Output {
        self.command().args(args).output().unwrap_or_else(|e| panic!("{} does not run: {e}", self.path))
    }

    /// The program run with `args` to its end: its process id (which what it makes, such as
    /// network namespaces, may be named after) and its output.
    pub fn output_with_pid<S: AsRef<OsStr>>(&self, args: impl IntoIterator<Item = S>) -> (u32, Output) {
        let child = self
            .command()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not run: {e}", self.path));
        (child.id(), child.wait_with_output().expect("the run's output"))
    }
}

/// What a run printed: its standard output and its standard error, as text.
pub fn text(out: &Output) -> (String, String) {
    (stdout(out), stderr(out))
}

/// What a run printed on its standard output, as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What a run printed on its standard error, as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The single `kairos: error:` line of a failed run; panics unless stderr is exactly that line.
#[track_caller]
pub fn one_line_error(out: &Output) -> String {
    let stderr = stderr(out);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected on stderr: {stderr}");
    assert!(lines[0].starts_with(ERROR_PREFIX), "{stderr}");
    lines[0].to_string()
}

/// The line of a usage error: exit code 2 and stderr exactly one `kairos: error:` line.
#[track_caller]
pub fn usage_error(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(2), "a usage error (exit code 2) expected: {}", stderr(out));
    one_line_error(out)
}

/// The one JSON object a successful run printed on stdout; panics if the run failed.
#[track_caller]
pub fn json(out: &Output) -> Value {
    assert!(out.status.success(), "the run failed ({}): {}", out.status, stderr(out));
    serde_json::from_slice(&out.stdout).expect("one JSON object on stdout")
}

/// The JSON file at `path` (a run's `summary.json`, a state file), parsed.
#[track_caller]
pub fn read_json(path: impl AsRef<Path>) -> Value {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}
