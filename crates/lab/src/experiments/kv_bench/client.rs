//! Closed-loop clients: each client a connection of its own, sending one request, waiting for
//! its answer and sending the next at once, for a fixed time; every answer's latency (from
//! before the request is written to after its answer is read whole) goes into an HDR
//! histogram, and the answers counted in the window give the throughput.
//!
//! The load generator is one thread per load core, each driving its share of the clients with
//! `ppoll` over their sockets (as redis-benchmark does with its event loop), so its own cost
//! per request is a read, a parse and a write, without a thread switch per request: with 50
//! clients it stays ahead of the servers it measures.
//!
//! The requests, by protocol ([`Wire`]):
//! - RESP (`redis`, `kairos`): `SET key value`, `GET key`;
//! - RESP with WAIT (`redis+wait`): `SET key value` and `WAIT 1 0` written together (one
//!   pipeline, as a client library sends them) on one connection, timed as a pair and
//!   successful when WAIT says one replica has the write; reads are a plain `GET`;
//! - etcd: the gRPC calls `KV/Put` and `KV/Range` (linearizable, etcd's default), one stream
//!   after another on an HTTP/2 connection to the member's client port ([`super::grpc`]).
//!
//! Keys: client `c` cycles through `k:c:0` .. `k:c:99`, so a read point reads keys the write
//! point with the same clients wrote. A failed request (an error answer, a closed connection,
//! or no answer within the timeout) is counted, its connection replaced, and the client goes
//! on; the first failure's text is kept for the report.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::Result;
use kairos_metrics::latency::LatencyRecorder;
use kairos_sys::net::poll::PollSet;
use serde::Serialize;

use super::grpc::{self, Call, GrpcError, Http2Error};
use kairos_kv::resp::client::{Reply, parse_reply, write_request};

/// Keys each client cycles through.
pub const KEYS_PER_CLIENT: usize = 100;

/// How a system is spoken to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// RESP: SET and GET.
    Resp,
    /// RESP, each SET followed by `WAIT 1 0`.
    RespWait,
    /// etcd's gRPC API: HTTP/2 and protobuf.
    Etcd,
}

/// What a point measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// SET / put.
    Write,
    /// GET / range.
    Read,
}

impl Op {
    /// Both, in the order a point pair runs them (reads find the keys the writes made).
    pub const ALL: [Op; 2] = [Op::Write, Op::Read];

    /// Its name in the rows.
    pub fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Read => "read",
        }
    }
}

/// Why a request failed. A client counts it, keeps the first one's text for the report, and
/// goes on (on a new connection where the old one failed).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// A RESP server answered something other than success.
    #[error("{request} answered {answer}")]
    Refused {
        /// What was asked: `SET`, `GET`, or `SET + WAIT`.
        request: &'static str,
        /// The answer as parsed (both answers for `SET + WAIT`).
        answer: String,
    },
    /// An etcd call failed, its connection still usable.
    #[error(transparent)]
    Grpc(#[from] GrpcError),
    /// The connection failed: a send or receive, the timeout, or bytes that are no answer.
    #[error("{0}")]
    Connection(io::Error),
}

/// What an answer said: done, or why not.
pub type Outcome = Result<(), RequestError>;

/// A protocol's requests and answers, without the socket.
pub trait Wire: Send {
    /// Appends the request for `op` on `key` (writing `value`) to `out`.
    fn request(&mut self, op: Op, key: &[u8], value: &[u8], out: &mut Vec<u8>);
    /// Takes the answer to the request from the start of `buf`: `None` while incomplete; an
    /// error for bytes that are no answer at all.
    fn answer(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Outcome>>;
    /// Appends what of the request could not be sent with it and can be now, to send while the
    /// answer is incomplete (HTTP/2: a request longer than the server's flow-control window
    /// goes out as the server opens it). Nothing for protocols that send a request whole.
    fn continue_request(&mut self, _out: &mut Vec<u8>) {}
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

struct RespWire {
    wait: bool,
    op: Op,
}

impl Wire for RespWire {
    fn request(&mut self, op: Op, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
        self.op = op;
        match op {
            Op::Write => {
                write_request(out, &[b"SET", key, value]);
                if self.wait {
                    write_request::<&[u8]>(out, &[b"WAIT", b"1", b"0"]);
                }
            }
            Op::Read => write_request(out, &[b"GET", key]),
        }
    }

    fn answer(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Outcome>> {
        let Some((first, used)) = parse_reply(buf).map_err(invalid)? else { return Ok(None) };
        let outcome = match (self.op, self.wait) {
            (Op::Write, true) => {
                let Some((second, more)) = parse_reply(&buf[used..]).map_err(invalid)? else {
                    return Ok(None);
                };
                buf.drain(..used + more);
                match (&first, &second) {
                    (set, Reply::Integer(n)) if set.is_ok() && *n >= 1 => Ok(()),
                    _ => Err(RequestError::Refused {
                        request: "SET + WAIT",
                        answer: format!("{first:?}, {second:?}"),
                    }),
                }
            }
            (Op::Write, false) => {
                buf.drain(..used);
                if first.is_ok() {
                    Ok(())
                } else {
                    Err(RequestError::Refused { request: "SET", answer: format!("{first:?}") })
                }
            }
            (Op::Read, _) => {
                buf.drain(..used);
                if matches!(first, Reply::Bulk(_) | Reply::NullBulk) {
                    Ok(())
                } else {
                    Err(RequestError::Refused { request: "GET", answer: format!("{first:?}") })
                }
            }
        };
        Ok(Some(outcome))
    }
}

struct EtcdWire {
    session: grpc::Session,
}

impl Wire for EtcdWire {
    fn request(&mut self, op: Op, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
        let call = match op {
            Op::Write => Call::Put { key, value },
            Op::Read => Call::Range { key },
        };
        self.session.request(call, out);
    }

    fn answer(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Outcome>> {
        let answer = self.session.answer(buf).map_err(|e| match e {
            Http2Error::GoAway { .. } => io::Error::new(io::ErrorKind::ConnectionAborted, e.to_string()),
            _ => invalid(e),
        })?;
        Ok(answer.map(|outcome| outcome.map_err(RequestError::Grpc)))
    }

    fn continue_request(&mut self, out: &mut Vec<u8>) {
        self.session.continue_request(out);
    }
}

fn wire(protocol: Protocol, addr: SocketAddr) -> Box<dyn Wire> {
    match protocol {
        Protocol::Resp | Protocol::RespWait => {
            Box::new(RespWire { wait: protocol == Protocol::RespWait, op: Op::Read })
        }
        Protocol::Etcd => Box::new(EtcdWire { session: grpc::Session::new(addr) }),
    }
}

/// One client's connection: a socket, its protocol, and the bytes read but not yet taken.
pub struct Conn {
    stream: TcpStream,
    wire: Box<dyn Wire>,
    buf: Vec<u8>,
    out: Vec<u8>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("stream", &self.stream).finish_non_exhaustive()
    }
}

impl Conn {
    /// Connects to `addr` within `timeout`; a blocking read waits at most `timeout` too.
    pub fn connect(protocol: Protocol, addr: SocketAddr, timeout: Duration) -> io::Result<Self> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Self {
            stream,
            wire: wire(protocol, addr),
            buf: Vec::with_capacity(16 * 1024),
            out: Vec::with_capacity(512),
        })
    }

    /// Writes the request for `op`.
    pub fn send(&mut self, op: Op, key: &[u8], value: &[u8]) -> io::Result<()> {
        self.out.clear();
        self.wire.request(op, key, value, &mut self.out);
        self.stream.write_all(&self.out)
    }

    /// Reads what the socket has (blocking until something comes, or the timeout) and returns
    /// the answer if it is whole now.
    pub fn receive(&mut self) -> io::Result<Option<Outcome>> {
        if let Some(outcome) = self.answer()? {
            return Ok(Some(outcome));
        }
        let mut chunk = [0u8; 16 * 1024];
        let n = self.stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection"));
        }
        self.buf.extend_from_slice(&chunk[..n]);
        self.answer()
    }

    /// The answer if the buffer holds it whole; if not, sends what of the request the bytes
    /// taken allow (the server may be waiting for it).
    fn answer(&mut self) -> io::Result<Option<Outcome>> {
        let answer = self.wire.answer(&mut self.buf)?;
        if answer.is_none() {
            self.out.clear();
            self.wire.continue_request(&mut self.out);
            if !self.out.is_empty() {
                self.stream.write_all(&self.out)?;
            }
        }
        Ok(answer)
    }

    /// Does `op` and waits for its answer.
    pub fn execute(&mut self, op: Op, key: &[u8], value: &[u8]) -> Outcome {
        self.send(op, key, value).map_err(RequestError::Connection)?;
        loop {
            match self.receive() {
                Ok(Some(outcome)) => return outcome,
                Ok(None) => {}
                Err(e) => return Err(RequestError::Connection(e)),
            }
        }
    }
}

/// Opens a connection to `addr`; each answer must come within `timeout`.
pub fn connect(protocol: Protocol, addr: SocketAddr, timeout: Duration) -> io::Result<Conn> {
    Conn::connect(protocol, addr, timeout)
}

/// One point: a number of clients doing one kind of request for a fixed time.
#[derive(Debug, Clone)]
pub struct PointSettings {
    /// How to speak.
    pub protocol: Protocol,
    /// Where the clients connect.
    pub addr: SocketAddr,
    /// Clients, each a thread and a connection.
    pub clients: usize,
    /// What they do.
    pub op: Op,
    /// Time before the window, not counted.
    pub warmup: Duration,
    /// The window counted.
    pub window: Duration,
    /// The load generator's cores.
    pub cores: Vec<usize>,
    /// Bytes of each value written.
    pub value_bytes: usize,
    /// How long one answer may take.
    pub timeout: Duration,
}

/// What one point measured.
#[derive(Debug, Clone)]
pub struct PointResult {
    /// Latency of every answer in the window, ns.
    pub latency: LatencyRecorder,
    /// Answers in the window.
    pub ops: u64,
    /// Failed requests (anywhere in the point).
    pub errors: u64,
    /// The first failure's text.
    pub first_error: Option<String>,
    /// The window, seconds.
    pub window_s: f64,
    /// Clients whose thread could not be pinned.
    pub unpinned: usize,
    /// Clients that never connected.
    pub unconnected: usize,
}

impl PointResult {
    /// Answers per second in the window.
    pub fn ops_per_s(&self) -> f64 {
        if self.window_s > 0.0 { self.ops as f64 / self.window_s } else { 0.0 }
    }
}

/// One load thread's tally.
#[derive(Default)]
struct Tally {
    latency: LatencyRecorder,
    ops: u64,
    errors: u64,
    first_error: Option<String>,
    unpinned: usize,
    unconnected: usize,
}

/// Runs one point: one thread per load core, the clients dealt among them, and their tallies
/// merged.
pub fn run_point(settings: &PointSettings) -> Result<PointResult> {
    let threads = settings.cores.len().clamp(1, settings.clients.max(1));
    let barrier = std::sync::Barrier::new(threads);
    let tallies: Vec<Tally> = std::thread::scope(|scope| {
        let barrier = &barrier;
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let clients: Vec<usize> = (t..settings.clients).step_by(threads).collect();
                let core = settings.cores[t % settings.cores.len()];
                scope.spawn(move || load_thread(settings, core, &clients, barrier))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow::anyhow!("a load thread panicked")))
            .collect::<Result<Vec<_>>>()
    })?;
    let mut result = PointResult {
        latency: LatencyRecorder::new(),
        ops: 0,
        errors: 0,
        first_error: None,
        window_s: settings.window.as_secs_f64(),
        unpinned: 0,
        unconnected: 0,
    };
    for t in tallies {
        result.latency.merge(&t.latency);
        result.ops += t.ops;
        result.errors += t.errors;
        result.first_error = result.first_error.or(t.first_error);
        result.unpinned += t.unpinned;
        result.unconnected += t.unconnected;
    }
    Ok(result)
}

/// One client of a load thread.
struct Client {
    number: usize,
    conn: Option<Conn>,
    sent: Instant,
    next_key: usize,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl Client {
    fn send(&mut self, op: Op) -> io::Result<()> {
        self.key.clear();
        write!(&mut self.key, "k:{}:{}", self.number, self.next_key % KEYS_PER_CLIENT)?;
        self.next_key += 1;
        self.sent = Instant::now();
        let conn =
            self.conn.as_mut().ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "not connected"))?;
        conn.send(op, &self.key, &self.value)
    }
}

/// Counts a failed request, replaces the client's connection and sends its next request (the
/// client sits out, unconnected, when that fails too, and is tried again later).
fn restart(tally: &mut Tally, client: &mut Client, why: String, settings: &PointSettings) {
    tally.errors += 1;
    tally.first_error.get_or_insert(why);
    client.conn = Conn::connect(settings.protocol, settings.addr, settings.timeout).ok();
    if client.conn.is_some() && client.send(settings.op).is_err() {
        client.conn = None;
    }
}

fn load_thread(
    settings: &PointSettings,
    core: usize,
    numbers: &[usize],
    barrier: &std::sync::Barrier,
) -> Tally {
    let mut tally = Tally::default();
    if kairos_sys::thread::pin_current_thread(core).is_err() {
        tally.unpinned = numbers.len();
    }
    let mut clients: Vec<Client> = numbers
        .iter()
        .map(|&number| Client {
            number,
            conn: Conn::connect(settings.protocol, settings.addr, settings.timeout).ok(),
            sent: Instant::now(),
            next_key: 0,
            key: Vec::with_capacity(32),
            value: format!("v{number:06}")
                .bytes()
                .chain(std::iter::repeat(b'x'))
                .take(settings.value_bytes)
                .collect(),
        })
        .collect();
    tally.unconnected = clients.iter().filter(|c| c.conn.is_none()).count();
    // Every thread waits here, so all clients start together.
    barrier.wait();
    let start = Instant::now();
    let window_start = start + settings.warmup;
    let end = window_start + settings.window;
    for client in &mut clients {
        if client.conn.is_some() && client.send(settings.op).is_err() {
            restart(&mut tally, client, format!("send to {}", settings.addr), settings);
        }
    }
    let mut ready: Vec<usize> = Vec::with_capacity(clients.len());
    let mut last_retry = start;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        // Clients without a connection try again every 10 ms.
        if now.duration_since(last_retry) > Duration::from_millis(10) {
            last_retry = now;
            for client in clients.iter_mut().filter(|c| c.conn.is_none()) {
                client.conn = Conn::connect(settings.protocol, settings.addr, settings.timeout).ok();
                if client.conn.is_some() && client.send(settings.op).is_err() {
                    client.conn = None;
                }
            }
        }
        let owners: Vec<usize> = (0..clients.len()).filter(|&i| clients[i].conn.is_some()).collect();
        if owners.is_empty() {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        ready.clear();
        {
            let streams = owners.iter().filter_map(|&i| clients[i].conn.as_ref().map(|c| &c.stream));
            let mut set = PollSet::readable(streams);
            match set.wait((end - now).min(Duration::from_millis(10))) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tally.first_error.get_or_insert(format!("ppoll: {e}"));
                    break;
                }
            }
            ready.extend(owners.iter().enumerate().filter(|(n, _)| set.is_readable(*n)).map(|(_, &i)| i));
        }
        for &i in &ready {
            let client = &mut clients[i];
            let Some(conn) = client.conn.as_mut() else { continue };
            match conn.receive() {
                Ok(None) => {}
                Ok(Some(outcome)) => {
                    let answered = Instant::now();
                    match outcome {
                        Ok(()) if answered >= window_start && answered <= end => {
                            tally.latency.record((answered - client.sent).as_nanos() as u64);
                            tally.ops += 1;
                        }
                        Ok(()) => {}
                        Err(why) => {
                            tally.errors += 1;
                            tally.first_error.get_or_insert_with(|| why.to_string());
                        }
                    }
                    if answered < end && client.send(settings.op).is_err() {
                        restart(&mut tally, client, format!("send to {}", settings.addr), settings);
                    }
                }
                Err(e) => {
                    restart(&mut tally, client, format!("receive from {}: {e}", settings.addr), settings)
                }
            }
        }
        // A client whose answer is overdue counts as failed and starts again.
        let now = Instant::now();
        for client in clients.iter_mut().filter(|c| c.conn.is_some()) {
            if now.duration_since(client.sent) > settings.timeout {
                let why = format!("no answer within {} ms", settings.timeout.as_millis());
                restart(&mut tally, client, why, settings);
            }
        }
    }
    tally
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::kv_bench::systems::{Env, Fsync, Running, Setup, Storage, SystemKind};

    /// One etcd member spoken to through [`Conn`], with values past HTTP/2's initial window
    /// both ways (a put longer than the server's window, a range answer longer than a stream's
    /// default one) and enough calls for the connection's window to be given back many times.
    #[test]
    #[ignore = "needs etcd installed"]
    fn etcd_answers_puts_and_ranges_over_grpc() {
        if !crate::peers::process::on_path("etcd") {
            eprintln!("etcd is not installed: nothing to check");
            return;
        }
        let base = std::env::temp_dir().join(format!("kairos-etcd-grpc-{}", std::process::id()));
        std::fs::create_dir_all(base.join("logs")).unwrap();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let env = Env {
            kairos_exe: "kairos".into(),
            kairos_period_us: None,
            kairos_election_ticks: None,
            kairos_fd_lambda_us: None,
            kairos_no_fd: false,
            kairos_busy_poll_us: None,
            server_cores: (0..cores).collect(),
            logs: base.join("logs"),
            tmpfs: base.clone(),
            disk: base.clone(),
        };
        let setup =
            Setup { system: SystemKind::Etcd, members: 1, fsync: Fsync::Never, storage: Storage::Tmpfs };
        let running = Running::start(setup, &env).unwrap();
        let mut conn = connect(Protocol::Etcd, running.client_addr(0), Duration::from_secs(5)).unwrap();
        for i in 0..3_000 {
            let key = format!("k:{}", i % 100);
            conn.execute(Op::Write, key.as_bytes(), b"a sixteen-byte v")
                .unwrap_or_else(|e| panic!("put {i}: {e}"));
            conn.execute(Op::Read, key.as_bytes(), b"").unwrap_or_else(|e| panic!("range {i}: {e}"));
        }
        conn.execute(Op::Read, b"never written", b"").unwrap();
        for len in [65_536, 300_000] {
            let value = vec![b'v'; len];
            conn.execute(Op::Write, b"large", &value).unwrap_or_else(|e| panic!("a put of {len} bytes: {e}"));
            conn.execute(Op::Read, b"large", b"").unwrap_or_else(|e| panic!("a range of {len} bytes: {e}"));
        }
        // etcd refuses an empty key with a status in its trailers; the connection goes on.
        let refused = conn.execute(Op::Write, b"", b"v");
        assert!(matches!(refused, Err(RequestError::Grpc(GrpcError::NoMessage(_)))), "{refused:?}");
        conn.execute(Op::Read, b"large", b"").unwrap();
        drop(running);
        let _ = std::fs::remove_dir_all(&base);
    }
}
