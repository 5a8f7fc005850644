//! The member's Prometheus endpoint (`--metrics ADDR`): its counters and gauges in the text
//! exposition format, served on the member's own loop.
//!
//! What it says: commands taken by kind, the time from a replicated command's arrival to its
//! answer (a histogram), Raft's term, commit and applied index and the leader, each follower's
//! lag behind the leader's log (on the leader), clients connected and refused by reason, and
//! datagrams in, out and refused by reason. It carries no data of the store, so, as the lane
//! controller's, it asks for no password; what a reader can make the member hold is bounded:
//! at most [`MAX_READERS`] connections (a new one closes the oldest, so idle connections
//! cannot keep a scraper out for long), [`MAX_REQUEST`] bytes of a request, each closed after
//! [`READER_DEADLINE_NS`] or once answered. The answer (a few kilobytes) is written without
//! waiting: a reader whose socket cannot take it at once loses it and may ask again.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};

/// Readers connected at once; one more closes the oldest.
pub const MAX_READERS: usize = 16;
/// The longest request read.
pub const MAX_REQUEST: usize = 4096;
/// How long a reader may take to send its request.
pub const READER_DEADLINE_NS: u64 = 1_000_000_000;

/// The bounds of the latency histogram's buckets, microseconds.
pub const LATENCY_BUCKETS_US: [u64; 12] =
    [50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 50_000, 100_000, 500_000, 1_000_000];

/// A histogram of durations with Prometheus's cumulative buckets.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    /// Counts per bucket of [`LATENCY_BUCKETS_US`] (not cumulative), and past the last.
    counts: [u64; LATENCY_BUCKETS_US.len() + 1],
    sum_ns: u64,
}

impl Histogram {
    /// Notes one duration.
    pub fn record(&mut self, ns: u64) {
        let bucket =
            LATENCY_BUCKETS_US.iter().position(|&b| ns <= b * 1_000).unwrap_or(LATENCY_BUCKETS_US.len());
        self.counts[bucket] += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    /// How many were noted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, bound) in LATENCY_BUCKETS_US.iter().enumerate() {
            cumulative += self.counts[i];
            let _ = writeln!(out, "{name}_bucket{{le=\"{}\"}} {cumulative}", *bound as f64 / 1e6);
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count());
        let _ = writeln!(out, "{name}_sum {}", self.sum_ns as f64 / 1e9);
        let _ = writeln!(out, "{name}_count {}", self.count());
    }
}

/// Everything the endpoint reports, gathered by the member.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// This member.
    pub id: u64,
    /// Raft's term.
    pub term: u64,
    /// The leader known (0: none).
    pub leader: u64,
    /// The highest index known committed.
    pub commit: u64,
    /// The highest index applied.
    pub applied: u64,
    /// On the leader: each follower's entries behind the leader's last.
    pub lag: Vec<(u64, u64)>,
    /// Commands taken, by kind.
    pub commands: [(&'static str, u64); 3],
    /// Replicated commands' time from arrival to answer.
    pub latency: Histogram,
    /// Clients connected.
    pub clients: usize,
    /// Clients and commands refused, by reason.
    pub clients_refused: Vec<(&'static str, u64)>,
    /// Raft datagrams received.
    pub datagrams_in: u64,
    /// Raft datagrams sent.
    pub datagrams_out: u64,
    /// Datagrams refused by their seal, by reason.
    pub datagrams_refused: Vec<(&'static str, u64)>,
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// One family whose series differ by one label: `rows` are the label's values and the figures.
fn labelled<L: std::fmt::Display, V: std::fmt::Display>(
    out: &mut String,
    (name, kind, help): (&str, &str, &str),
    member: u64,
    label: &str,
    rows: impl IntoIterator<Item = (L, V)>,
) {
    family(out, name, kind, help);
    for (value, n) in rows {
        let _ = writeln!(out, "{name}{{member=\"{member}\",{label}=\"{value}\"}} {n}");
    }
}

/// The text exposition of `f`.
pub fn render(f: &Figures) -> String {
    let mut out = String::new();
    let member = f.id;
    let counter = |name, help| (name, "counter", help);
    labelled(
        &mut out,
        counter("kairos_kv_commands_total", "Commands taken, by kind."),
        member,
        "kind",
        f.commands,
    );
    f.latency.render(
        "kairos_kv_command_duration_seconds",
        "Time from a replicated command's arrival to its answer.",
        &mut out,
    );
    for (name, help, value) in [
        ("kairos_kv_raft_term", "Raft's current term.", f.term),
        ("kairos_kv_raft_leader", "The leader this member knows (0: none).", f.leader),
        ("kairos_kv_raft_commit_index", "The highest log index known committed.", f.commit),
        ("kairos_kv_raft_applied_index", "The highest log index applied here.", f.applied),
        ("kairos_kv_clients_connected", "Clients connected.", f.clients as u64),
    ] {
        family(&mut out, name, "gauge", help);
        let _ = writeln!(out, "{name}{{member=\"{member}\"}} {value}");
    }
    let lag = ("kairos_kv_raft_follower_lag_entries", "gauge", "On the leader: entries each follower lacks.");
    labelled(&mut out, lag, member, "follower", f.lag.iter().copied());
    let refused = counter("kairos_kv_clients_refused_total", "Clients and commands refused, by reason.");
    labelled(&mut out, refused, member, "reason", f.clients_refused.iter().copied());
    let datagrams = counter("kairos_kv_datagrams_total", "Raft datagrams, by direction.");
    labelled(&mut out, datagrams, member, "direction", [("in", f.datagrams_in), ("out", f.datagrams_out)]);
    let sealed = counter("kairos_kv_datagrams_refused_total", "Datagrams refused by their seal, by reason.");
    labelled(&mut out, sealed, member, "reason", f.datagrams_refused.iter().copied());
    out
}

/// A reader connected to the endpoint.
#[derive(Debug)]
struct Reader {
    stream: TcpStream,
    request: Vec<u8>,
    since_ns: u64,
}

/// The endpoint's socket and its readers.
#[derive(Debug)]
pub struct MetricsServer {
    listener: TcpListener,
    readers: Vec<Reader>,
}

impl MetricsServer {
    /// Listens on `addr`.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(Self { listener, readers: Vec::new() })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The listening socket.
    pub fn listener(&self) -> &TcpListener {
        &self.listener
    }

    /// Whether `fd` is the listener or a reader's.
    pub fn owns(&self, fd: RawFd) -> bool {
        fd == self.listener.as_raw_fd() || self.readers.iter().any(|r| r.stream.as_raw_fd() == fd)
    }

    /// Takes waiting connections (past [`MAX_READERS`], the oldest reader is closed); returns
    /// the new readers' sockets, to be waited on.
    pub fn accept(&mut self, now_ns: u64) -> Vec<&TcpStream> {
        let mut new = 0;
        while let Ok((stream, _)) = self.listener.accept() {
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            if self.readers.len() >= MAX_READERS {
                // Closing its socket takes it out of the epoll set.
                self.readers.remove(0);
                new = new.min(self.readers.len());
            }
            self.readers.push(Reader { stream, request: Vec::new(), since_ns: now_ns });
            new += 1;
        }
        let new = new.min(self.readers.len());
        self.readers[self.readers.len() - new..].iter().map(|r| &r.stream).collect()
    }

    /// Reads what reader `fd` sent and answers a whole request with `text()` (only
    /// `GET /metrics` and `GET /`); drops readers answered, gone, or past their deadline.
    pub fn serve(&mut self, fd: Option<RawFd>, now_ns: u64, text: impl FnOnce() -> String) {
        let mut text = Some(text);
        self.readers.retain_mut(|r| {
            if now_ns.saturating_sub(r.since_ns) > READER_DEADLINE_NS {
                return false;
            }
            if Some(r.stream.as_raw_fd()) != fd {
                return true;
            }
            let mut buf = [0u8; 1024];
            loop {
                match r.stream.read(&mut buf) {
                    Ok(0) => return false,
                    Ok(n) => r.request.extend_from_slice(&buf[..n.min(MAX_REQUEST - r.request.len().min(MAX_REQUEST))]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => return false,
                }
                if r.request.len() >= MAX_REQUEST {
                    break;
                }
            }
            let whole = r.request.windows(4).any(|w| w == b"\r\n\r\n");
            if !whole && r.request.len() < MAX_REQUEST {
                return true;
            }
            let found = r.request.starts_with(b"GET /metrics ") || r.request.starts_with(b"GET / ");
            let (status, body) = match (found, text.take()) {
                (true, Some(text)) => ("200 OK", text()),
                _ => ("404 Not Found", "only GET /metrics is served here\n".to_string()),
            };
            let answer = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = r.stream.write_all(answer.as_bytes());
            false
        });
    }

    /// The readers' sockets.
    pub fn readers(&self) -> impl Iterator<Item = &TcpStream> {
        self.readers.iter().map(|r| &r.stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_renders_cumulative_buckets() {
        let mut h = Histogram::default();
        for us in [10, 60, 60, 700, 3_000_000] {
            h.record(us * 1_000);
        }
        let mut out = String::new();
        h.render("x", "help", &mut out);
        assert!(out.contains("x_bucket{le=\"0.00005\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.0001\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.001\"} 4\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"1\"} 4\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 5\n") && out.contains("x_count 5\n"), "{out}");
    }

    #[test]
    fn the_text_names_every_family_once_with_its_type() {
        let f = Figures {
            id: 2,
            lag: vec![(1, 0), (3, 7)],
            commands: [("write", 5), ("read", 4), ("local", 1)],
            clients_refused: vec![("maxclients", 1)],
            datagrams_refused: vec![("forged", 3)],
            ..Figures::default()
        };
        let text = render(&f);
        assert!(text.contains("kairos_kv_commands_total{member=\"2\",kind=\"write\"} 5\n"));
        assert!(text.contains("kairos_kv_raft_follower_lag_entries{member=\"2\",follower=\"3\"} 7\n"));
        assert!(text.contains("kairos_kv_datagrams_refused_total{member=\"2\",reason=\"forged\"} 3\n"));
        for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
            let name = line.split_whitespace().nth(2).unwrap();
            assert_eq!(text.matches(&format!("# TYPE {name} ")).count(), 1, "{name}");
        }
    }
}
