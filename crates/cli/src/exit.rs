//! How `kairos` ends: one error style and one exit code per kind of outcome, the same for every
//! command, so scripts can tell a refusal from a typo from a failure.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done (for `rtu admit` and `lane plan`: everything admitted) |
//! | 1 | the run failed (an OS refusal, a worker that died, an unwritable file) |
//! | 2 | usage: a flag or input file is wrong; nothing was run (clap's own code for bad flags) |
//! | 3 | refused: the analysis ran and refused some of what was asked (`rtu admit`, `lane plan`) |
//! | 141 | standard output's reader went away (`kairos ... \| head`): nothing more to say, no message |
//!
//! Errors are one line on stderr, `kairos: error: ...`, saying what was wrong and how to fix it.

use std::fmt;

use kairos_lab::harness::InvalidConfig;

/// Exit code of a successful run.
pub(crate) const OK: i32 = 0;
/// Exit code of a run that failed while running.
pub(crate) const FAILED: i32 = 1;
/// Exit code of bad flags or input: nothing ran.
pub(crate) const USAGE: i32 = 2;
/// Exit code of an admission analysis that refused part of the request.
pub(crate) const REFUSED: i32 = 3;

/// Exit code when standard output's reader is gone: what a shell reports for a process ended by
/// `SIGPIPE` (128 + 13), as for any other program cut off by `| head`.
pub(crate) const STDOUT_CLOSED: i32 = 141;

/// Standard output's reader went away; `main` exits with [`STDOUT_CLOSED`] and no message.
#[derive(Debug)]
pub(crate) struct StdoutClosed;

impl fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("standard output was closed")
    }
}

impl std::error::Error for StdoutClosed {}

/// Writes `text` to standard output. A closed pipe is [`StdoutClosed`] (the run then ends
/// through its owners' drops, as any error does) rather than the panic `print!` makes of it.
pub(crate) fn write_out(text: fmt::Arguments<'_>) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_fmt(text).and_then(|()| out.flush()).map_err(|e| {
        if e.kind() == std::io::ErrorKind::BrokenPipe { anyhow::Error::new(StdoutClosed) } else { e.into() }
    })
}

/// A usage error: the flag or file given is wrong, nothing was run. Wrap a message with
/// [`usage`] and return it through `anyhow`; `main` exits with [`USAGE`].
#[derive(Debug)]
pub(crate) struct Usage(pub String);

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// A usage error carrying `message` (exit code [`USAGE`]).
pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(message.into()))
}

/// The exit code for `error`: [`USAGE`] when any error in its chain is a [`Usage`], else
/// [`FAILED`]. A config an experiment refused before starting ([`InvalidConfig`]) is a usage error.
pub(crate) fn code_of(error: &anyhow::Error) -> i32 {
    if error.chain().any(|e| e.is::<StdoutClosed>()) {
        return STDOUT_CLOSED;
    }
    let usage = |e: &(dyn std::error::Error + 'static)| e.is::<Usage>() || e.is::<InvalidConfig>();
    if error.chain().any(usage) { USAGE } else { FAILED }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn usage_errors_keep_their_code_under_context() {
        let e: anyhow::Result<()> = Err(usage("--rate must be positive"));
        let e = e.context("kairos forward").unwrap_err();
        assert_eq!(code_of(&e), USAGE);
        assert_eq!(code_of(&anyhow::anyhow!("socket: permission denied")), FAILED);
        assert_eq!((OK, REFUSED), (0, 3));
    }
}

/// The error and its causes on one line, each cause after a colon unless the text before
/// already says it (many errors put their source in their own message, which the chain would
/// otherwise print twice).
pub fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod one_line_tests {
    use super::one_line;

    /// An error that puts its source in its own message, as many do.
    #[derive(Debug)]
    struct Outer {
        source: std::io::Error,
    }

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot open the node's socket: {}", self.source)
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let error = anyhow::Error::new(Outer { source: io }).context("the lane node in /x");
        assert_eq!(one_line(&error), "the lane node in /x: cannot open the node's socket: no such file");
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(one_line(&plain), "outer: inner");
    }
}
