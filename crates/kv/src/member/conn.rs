//! One client connection: bytes in, requests parsed (RESP2 or inline, pipelined), answers out
//! in the order the requests came, whatever order they complete in.
//!
//! Each request takes a slot in the connection's queue: a local command's slot is filled at
//! once, a write's or read's when the replica answers its sequence number. Only the filled
//! slots at the front are written out, so a pipelined GET never overtakes the SET before it.
//! Bounds: at most [`MAX_PENDING`] requests in flight per connection (further input waits in
//! the socket), at most [`MAX_INPUT`] bytes of one unfinished request (the query buffer
//! limit: past it the client is told and closed), and output: while more than
//! [`OUTPUT_BACKPRESSURE`] bytes of answers wait for a client that does not read, its input
//! waits in the socket too, so the answers it can make the member hold are those of the
//! requests already read (up to [`MAX_PENDING`]); past [`MAX_OUTPUT`] (pipelined reads of
//! large values, unread) it is closed, as Redis's client-output-buffer-limit closes one.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use kairos_sys::net::stream_stamps::recv_stamped;
use rustls::{ServerConfig, ServerConnection};

use crate::kv::{Command, Reply, Watched};
use crate::resp::{self, Limits, parse_request_with};

/// Requests in flight on one connection before it stops reading.
pub const MAX_PENDING: usize = 1024;
/// Largest unfinished request kept (Redis's bulk limit is 512 MB; a store on the lane carries
/// small values).
pub const MAX_INPUT: usize = 64 << 20;
/// What a client that has not authenticated may send, as Redis since CVE-2021-32675: a few
/// short arguments (AUTH, HELLO), so a stranger cannot make the member hold 64 MB per
/// connection.
pub const UNAUTHENTICATED: Limits =
    Limits { max_multibulk_len: 10, max_bulk_len: 16 * 1024, max_inline_len: 16 * 1024 };

/// Bytes of answers waiting for a client above which its input is not read.
pub const OUTPUT_BACKPRESSURE: usize = 1 << 20;
/// Bytes of answers waiting for a client above which it is closed.
pub const MAX_OUTPUT: usize = 64 << 20;

/// Why a connection was closed by a limit, for INFO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// An unfinished request past [`MAX_INPUT`] (the query buffer limit).
    Query,
    /// Answers past [`MAX_OUTPUT`].
    Output,
    /// A request Redis's protocol does not allow, or past the parser's limits (a bulk longer
    /// than [`crate::resp::MAX_BULK_LEN`], Redis's proto-max-bulk-len, or more arguments than
    /// [`crate::resp::MAX_MULTIBULK_LEN`]).
    Protocol,
}

#[derive(Debug)]
enum Slot {
    Filled(Vec<u8>),
    /// A request's sequence number and when it was taken (monotonic ns).
    Waiting(u64, u64),
}

/// A client connection.
#[derive(Debug)]
pub struct Conn {
    /// The socket (non-blocking).
    pub stream: TcpStream,
    /// The client's id at this member (unique across restarts).
    pub client: u64,
    /// The name from CLIENT SETNAME.
    pub name: Option<Vec<u8>>,
    /// The user it is authenticated as (`None`: not yet; see [`super::acl`]).
    pub user: Option<String>,
    /// Requests wait in `input` for room (the pending limit or the output backlog), not for
    /// bytes: the loop serves the connection again once there is room, as no event will come.
    parked: bool,
    input: Vec<u8>,
    output: Vec<u8>,
    slots: VecDeque<Slot>,
    next_seq: u64,
    /// Replicated requests not yet handed to the replica, in order (see [`Conn::hold`]).
    held: VecDeque<(u64, Command)>,
    /// Requests handed to the replica and not yet answered, and whether they are writes.
    outstanding: usize,
    outstanding_writes: bool,
    closing: bool,
    /// True when the peer closed or the connection failed: drop it.
    pub dead: bool,
    /// The limit that closed it, if one did (taken once by the member, to count).
    pub limited: Option<Limit>,
    /// TLS's state, on a TLS port: the socket carries its records, and `input` and `output`
    /// hold plaintext.
    tls: Option<Box<ServerConnection>>,
    /// The database SELECT chose.
    pub db: u8,
    /// Whether HELLO 3 chose RESP3.
    pub resp3: bool,
    /// Commands queued since MULTI (with the database each runs in), if in one.
    pub multi: Option<Vec<(u8, Vec<Vec<u8>>)>>,
    /// Whether a command queued since MULTI was refused (EXEC then aborts).
    pub multi_failed: bool,
    /// The database commands queued now run in (the last SELECT queued, else `db`).
    pub multi_db: u8,
    /// The keys WATCH saw, for the next EXEC.
    pub watched: Vec<Watched>,
    /// EXECs in flight that hold member commands (CONFIG, INFO, ...): their slot, and each such
    /// command's place in the transaction with its words. The store leaves those places for
    /// the member to answer when the entry comes back applied.
    pub exec_locals: Vec<(u64, ExecLocals)>,
    /// WATCH requests in flight: their slot and the keys (the answer is versions, turned into
    /// `watched` and +OK here).
    watch_slots: Vec<(u64, u8, Vec<Vec<u8>>)>,
    /// Blocking commands in flight: their slot, their words, and when it times out
    /// (monotonic ns; `None`: never).
    pub blocking: Vec<Blocking>,
    /// When the newest bytes read from the socket arrived (the kernel's receive stamp,
    /// realtime ns; `None` until a read came with one): the member serves the clients of a
    /// pass in this order, which is the order their requests came.
    pub arrived_ns: Option<u64>,
}

/// Member commands inside a transaction: each one's place in it and its words.
pub type ExecLocals = Vec<(usize, Vec<Vec<u8>>)>;

/// A blocking command (BLPOP, BZPOPMIN, ...) of a connection.
#[derive(Debug, Clone)]
pub struct Blocking {
    /// Its slot.
    pub seq: u64,
    /// Its words (an unblock names them: its answer at the timeout follows from them).
    pub args: Vec<Vec<u8>>,
    /// When it gives up (monotonic ns), if it does.
    pub deadline_ns: Option<u64>,
    /// Whether the store found nothing for it: it waits in the store for its keys, and this
    /// member for its timeout.
    pub waiting: bool,
}

impl Conn {
    /// A connection for `stream`, with client id `client`, through TLS when `tls` is given.
    pub fn new(stream: TcpStream, client: u64, tls: Option<Arc<ServerConfig>>) -> io::Result<Self> {
        let tls = match tls {
            Some(config) => Some(Box::new(ServerConnection::new(config).map_err(io::Error::other)?)),
            None => None,
        };
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            client,
            name: None,
            user: None,
            parked: false,
            input: Vec::new(),
            output: Vec::new(),
            slots: VecDeque::new(),
            next_seq: 1,
            held: VecDeque::new(),
            outstanding: 0,
            outstanding_writes: false,
            closing: false,
            dead: false,
            limited: None,
            tls,
            db: 0,
            resp3: false,
            multi: None,
            multi_failed: false,
            multi_db: 0,
            watched: Vec::new(),
            exec_locals: Vec::new(),
            watch_slots: Vec::new(),
            blocking: Vec::new(),
            arrived_ns: None,
        })
    }

    /// Whether the connection takes more requests now.
    pub fn wants_input(&self) -> bool {
        !self.closing
            && !self.dead
            && self.slots.len() < MAX_PENDING
            && self.output.len() <= OUTPUT_BACKPRESSURE
    }

    /// Reads what the socket has through `buf` (the member's, made once, rather than a fresh
    /// 64 KiB buffer zeroed for every read), with the time it arrived (`arrived_ns`; not
    /// through TLS); returns whether anything arrived.
    pub fn read(&mut self, buf: &mut [u8]) -> bool {
        if self.tls.is_some() {
            return self.read_tls();
        }
        let mut got = false;
        while self.wants_input() {
            match recv_stamped(&self.stream, buf) {
                Ok((0, _)) => {
                    self.dead = true;
                    break;
                }
                Ok((n, stamp)) => {
                    self.input.extend_from_slice(&buf[..n]);
                    got = true;
                    if stamp.is_some() {
                        self.arrived_ns = stamp;
                    }
                    if n < buf.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.dead = true;
                    break;
                }
            }
        }
        got
    }

    /// Through TLS: the socket's records into rustls, its plaintext into the input (all of
    /// it, so none waits inside rustls for an event that will not come), and the handshake's
    /// answers written back.
    fn read_tls(&mut self) -> bool {
        let Some(mut tls) = self.tls.take() else { return false };
        let mut got = false;
        while self.wants_input() {
            match tls.read_tls(&mut self.stream) {
                Ok(0) => {
                    self.dead = true;
                    break;
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.dead = true;
                    break;
                }
            }
            match tls.process_new_packets() {
                Ok(state) => {
                    let n = state.plaintext_bytes_to_read();
                    if n > 0 {
                        let start = self.input.len();
                        self.input.resize(start + n, 0);
                        if tls.reader().read_exact(&mut self.input[start..]).is_err() {
                            self.input.truncate(start);
                        }
                        got = true;
                    }
                    if state.peer_has_closed() {
                        self.closing = true;
                    }
                }
                Err(_) => {
                    // Its alert, if the socket takes it; then the connection is closed.
                    let _ = tls.write_tls(&mut self.stream);
                    self.dead = true;
                    break;
                }
            }
        }
        self.tls = Some(tls);
        self.write_tls();
        got
    }

    /// Writes what rustls has for the socket (records, alerts) until it has nothing more or
    /// the socket is full; false when the connection failed.
    fn write_tls(&mut self) -> bool {
        let Some(tls) = self.tls.as_mut() else { return true };
        while tls.wants_write() {
            match tls.write_tls(&mut self.stream) {
                Ok(0) => {
                    self.dead = true;
                    return false;
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.dead = true;
                    return false;
                }
            }
        }
        true
    }

    /// [`Self::flush`] through TLS: plaintext into rustls as far as its bounded buffer takes
    /// it, its records out, until the output is gone or the socket is full.
    fn flush_tls(&mut self) -> bool {
        loop {
            let Some(tls) = self.tls.as_mut() else { return false };
            let mut taken = 0;
            if !self.output.is_empty() {
                match tls.writer().write(&self.output) {
                    Ok(n) => taken = n,
                    Err(_) => {
                        self.dead = true;
                        return false;
                    }
                }
                self.output.drain(..taken);
            }
            if !self.write_tls() {
                return false;
            }
            if self.tls.as_ref().is_some_and(|t| t.wants_write()) {
                return false;
            }
            if self.output.is_empty() || taken == 0 {
                break;
            }
        }
        if self.closing && self.slots.is_empty() {
            if let Some(tls) = self.tls.as_mut() {
                tls.send_close_notify();
            }
            self.write_tls();
            self.dead = true;
        }
        self.output.is_empty()
    }

    /// The next complete request, if any. A protocol error is answered (as Redis does) and the
    /// connection closed after the answers before it.
    pub fn next_request(&mut self) -> Option<Vec<Vec<u8>>> {
        loop {
            if self.input.is_empty() {
                self.parked = false;
                return None;
            }
            if !self.wants_input() {
                self.parked = !self.closing && !self.dead;
                return None;
            }
            let mut args = Vec::new();
            let limits = if self.user.is_some() { Limits::default() } else { UNAUTHENTICATED };
            match parse_request_with(&self.input, &mut args, &limits) {
                Ok(Some(consumed)) => {
                    let owned: Vec<Vec<u8>> = args.into_iter().map(|a| a.into_owned()).collect();
                    self.input.drain(..consumed);
                    if owned.is_empty() {
                        continue;
                    }
                    return Some(owned);
                }
                Ok(None) => {
                    self.parked = false;
                    let most = if self.user.is_some() { MAX_INPUT } else { 64 * 1024 };
                    if self.input.len() > most {
                        self.limited = Some(Limit::Query);
                        self.fail("ERR Protocol error: request larger than the server takes");
                    }
                    return None;
                }
                Err(e) => {
                    self.limited = Some(Limit::Protocol);
                    let mut out = Vec::new();
                    resp::reply::protocol_error(&mut out, &e);
                    self.slots.push_back(Slot::Filled(out));
                    self.closing = true;
                    self.input.clear();
                    return None;
                }
            }
        }
    }

    fn fail(&mut self, error: &str) {
        let mut out = Vec::new();
        resp::reply::error(&mut out, error);
        self.slots.push_back(Slot::Filled(out));
        self.closing = true;
        self.input.clear();
    }

    /// Queues an answer given at once.
    pub fn answer(&mut self, reply: &Reply) {
        let mut out = Vec::new();
        reply.encode_as(&mut out, self.resp3);
        self.slots.push_back(Slot::Filled(out));
    }

    /// Answers, then closes (QUIT).
    pub fn answer_and_close(&mut self, reply: &Reply) {
        self.answer(reply);
        self.closing = true;
    }

    /// Takes a slot for a request the replica will answer; returns its sequence number.
    pub fn await_answer(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.slots.push_back(Slot::Waiting(seq, kairos_sys::clock::monotonic_ns()));
        seq
    }

    /// The lowest sequence number not yet answered (every answer below it was given).
    pub fn completed_below(&self) -> u64 {
        self.slots
            .iter()
            .find_map(|s| match s {
                Slot::Waiting(seq, _) => Some(*seq),
                Slot::Filled(_) => None,
            })
            .unwrap_or(self.next_seq)
    }

    /// Queues a replicated request (a write or a read) that takes slot `seq`.
    ///
    /// A connection's requests take effect in the order sent, as on Redis: a pipelined GET
    /// sees the SET before it and not the one after. Writes of one period are applied in the
    /// order proposed and reads of one round see the same state, so a run of writes, or of
    /// reads, goes to the replica together; a request of the other kind waits until every
    /// request before it is answered.
    pub fn hold(&mut self, seq: u64, command: Command) {
        self.held.push_back((seq, command));
    }

    /// The next held request that may go to the replica now, with the connection's
    /// `completed_below` at that moment.
    pub fn release(&mut self) -> Option<(u64, u64, Command)> {
        // A client blocked in BLPOP waits as on Redis: nothing after it runs before it is
        // answered (from the moment it was sent, not only once the store found nothing).
        let front = self.held.front()?.0;
        if self.blocking.iter().any(|b| b.seq < front) {
            return None;
        }
        let is_write = matches!(self.held.front()?.1, Command::Write(_));
        if self.outstanding > 0 && self.outstanding_writes != is_write {
            return None;
        }
        let completed_below = self.completed_below();
        let (seq, command) = self.held.pop_front()?;
        self.outstanding += 1;
        self.outstanding_writes = is_write;
        Some((seq, completed_below, command))
    }

    /// Marks slot `seq` as a WATCH of `keys` in database `db`.
    pub fn watch_slot(&mut self, seq: u64, db: u8, keys: Vec<Vec<u8>>) {
        self.watch_slots.push((seq, db, keys));
    }

    /// Fills the slot of request `seq`; returns how long the request waited for its answer.
    pub fn complete(&mut self, seq: u64, reply: &Reply) -> Option<u64> {
        if let Some(at) = self.watch_slots.iter().position(|(s, _, _)| *s == seq) {
            let (_, db, keys) = self.watch_slots.swap_remove(at);
            if let Reply::Array(versions) = reply {
                let number = |r: &Reply| if let Reply::Integer(n) = r { *n as u64 } else { 0 };
                let mark = versions.first().map_or(0, number);
                for (key, seen) in keys.into_iter().zip(versions.iter().skip(1)) {
                    self.watched.push(Watched { db, key, seen: number(seen), mark });
                }
                return self.fill(seq, &Reply::Ok);
            }
        }
        self.blocking.retain(|b| b.seq != seq);
        self.fill(seq, reply)
    }

    fn fill(&mut self, seq: u64, reply: &Reply) -> Option<u64> {
        let slot = self.slots.iter_mut().find(|s| matches!(s, Slot::Waiting(n, _) if *n == seq))?;
        self.outstanding = self.outstanding.saturating_sub(1);
        let Slot::Waiting(_, taken) = *slot else { return None };
        let mut out = Vec::new();
        reply.encode_as(&mut out, self.resp3);
        *slot = Slot::Filled(out);
        Some(kairos_sys::clock::monotonic_ns().saturating_sub(taken))
    }

    /// Whether requests wait in the input for room that has come: the loop serves it without
    /// an event.
    pub fn parked_ready(&self) -> bool {
        self.parked && self.wants_input()
    }

    /// Writes the answers that are due, in order; returns whether all output went out. A
    /// client left owing more than [`MAX_OUTPUT`] once the socket took what it would is closed.
    pub fn flush(&mut self) -> bool {
        while let Some(Slot::Filled(_)) = self.slots.front() {
            if let Some(Slot::Filled(bytes)) = self.slots.pop_front() {
                self.output.extend_from_slice(&bytes);
            }
        }
        let done = if self.tls.is_some() { self.flush_tls() } else { self.flush_plain() };
        if self.output.len() > MAX_OUTPUT {
            self.limited = Some(Limit::Output);
            self.dead = true;
            return false;
        }
        done
    }

    fn flush_plain(&mut self) -> bool {
        while !self.output.is_empty() {
            match self.stream.write(&self.output) {
                Ok(0) => {
                    self.dead = true;
                    return false;
                }
                Ok(n) => {
                    self.output.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.dead = true;
                    return false;
                }
            }
        }
        if self.closing && self.slots.is_empty() {
            self.dead = true;
        }
        true
    }

    /// Whether output waits for the socket to drain.
    pub fn has_output(&self) -> bool {
        !self.output.is_empty() || self.tls.as_ref().is_some_and(|t| t.wants_write())
    }
}
