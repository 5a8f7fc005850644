//! A client's session with its member: transactions (MULTI, EXEC, DISCARD, WATCH, UNWATCH),
//! the selected database, RESET, HELLO, CLIENT, blocking pops, and the leader's expiry
//! proposals.
//!
//! A transaction is queued here and proposed at EXEC as one log entry
//! ([`WriteOp::Transaction`]), so it applies whole on every member with nothing between its
//! commands. WATCH is a read (it waits for the read index like GET, so it sees this client's
//! earlier writes) whose answer is the keys' versions; EXEC carries them, and the entry applies
//! only if none changed.
//!
//! A blocking pop is proposed like any write. If the store finds nothing, the client waits in
//! the store ([`crate::kv::blocked`]), which serves it when a write gives one of its keys data;
//! this member answers it when that entry applies here. At its timeout (or CLIENT UNBLOCK, or
//! when its connection closes) this member proposes [`WriteOp::Unblock`], which answers the
//! timeout unless the pop was served first. The client's later requests wait behind it, as on
//! Redis.

use super::Member;
use super::conn::Blocking;
use crate::kv::Reply;
use crate::kv::blocked;
use crate::kv::cmd::{self, Handler, Spec, args};
use crate::kv::command::{Command, ReadOp, WriteOp, unknown_command, unknown_subcommand, wrong_arity};
use crate::kv::store::DATABASES;
use crate::replica::Ticket;
use kairos_sys::clock::{monotonic_ns, realtime_ns};

/// Commands that run at once even inside MULTI.
const NOT_QUEUED: &[&str] = &["exec", "discard", "multi", "watch", "quit", "reset"];
/// Member commands a transaction may hold: answered by the store where the entry applies
/// (PING, ECHO, TIME, SELECT) or by this member when the entry comes back (the rest).
const IN_TRANSACTION: &[&str] =
    &["ping", "echo", "time", "select", "config", "info", "command", "lastsave", "role"];
/// Those the store answers itself.
const STORE_ANSWERS: &[&str] = &["ping", "echo", "time", "select"];

/// How often the leader looks for expired keys to remove, and how many per database a time.
pub const EXPIRY_PERIOD_NS: u64 = 100_000_000;
const EXPIRY_BATCH: usize = 256;

impl Member {
    /// Queues `args` in the connection's transaction if it is in one; returns whether it did
    /// (or answered an error for it).
    /// `spec` is the command's entry in the table, looked up once by the caller.
    pub(super) fn queue_in_multi(&mut self, client: u64, args: &[Vec<u8>], spec: Option<&Spec>) -> bool {
        let Some(conn) = self.conns.get_mut(&client) else { return true };
        if conn.multi.is_none() {
            return false;
        }
        let name = spec.map_or("", |s| s.name);
        if NOT_QUEUED.contains(&name) {
            return false;
        }
        let refusal = match spec {
            None => Some(unknown_command(&args[0], &args[1..])),
            Some(spec) if !spec.arity_fits(args.len()) => Some(wrong_arity(spec.name)),
            Some(spec) if matches!(spec.handler, Handler::Local) && !IN_TRANSACTION.contains(&spec.name) => {
                Some(Reply::Error("ERR Command not allowed inside a transaction".into()))
            }
            Some(_) => None,
        };
        if let Some(error) = refusal {
            conn.multi_failed = true;
            conn.answer(&error);
            return true;
        }
        if name == "select" {
            match args::db_index(&args[1]) {
                // The database of the commands queued after it, and the connection's if EXEC
                // runs (as on Redis).
                Ok(db) => conn.multi_db = db,
                Err(e) => {
                    conn.multi_failed = true;
                    conn.answer(&e);
                    return true;
                }
            }
        }
        let db = conn.multi_db;
        if let Some(queue) = conn.multi.as_mut() {
            queue.push((db, args.to_vec()));
        }
        conn.answer(&Reply::Simple("QUEUED"));
        true
    }

    /// Answers the session's own commands; returns whether `args` was one.
    /// `name` is the command's name in the table (empty when it is not there).
    pub(super) fn session_command(&mut self, client: u64, args: &[Vec<u8>], name: &str) -> bool {
        let Some(conn) = self.conns.get_mut(&client) else { return true };
        let reply = match (name, args.len()) {
            ("multi", 1) if conn.multi.is_some() => Reply::Error("ERR MULTI calls can not be nested".into()),
            ("multi", 1) => {
                conn.multi = Some(Vec::new());
                conn.multi_db = conn.db;
                conn.multi_failed = false;
                Reply::Ok
            }
            ("discard", 1) if conn.multi.is_none() => Reply::Error("ERR DISCARD without MULTI".into()),
            ("discard", 1) => {
                conn.multi = None;
                conn.watched.clear();
                Reply::Ok
            }
            ("exec", 1) => {
                let Some(commands) = conn.multi.take() else {
                    conn.answer(&Reply::Error("ERR EXEC without MULTI".into()));
                    return true;
                };
                let watched = std::mem::take(&mut conn.watched);
                if std::mem::take(&mut conn.multi_failed) {
                    conn.answer(&Reply::Error(
                        "EXECABORT Transaction discarded because of previous errors.".into(),
                    ));
                    return true;
                }
                conn.db = conn.multi_db;
                let seq = conn.await_answer();
                let locals: Vec<(usize, Vec<Vec<u8>>)> = commands
                    .iter()
                    .enumerate()
                    .filter(|(_, (_, words))| {
                        cmd::lookup(&words[0]).is_some_and(|s| {
                            matches!(s.handler, Handler::Local) && !STORE_ANSWERS.contains(&s.name)
                        })
                    })
                    .map(|(i, (_, words))| (i, words.clone()))
                    .collect();
                if !locals.is_empty() {
                    conn.exec_locals.push((seq, locals));
                }
                conn.hold(seq, Command::Write(WriteOp::Transaction { commands, watched }));
                self.release(client);
                return true;
            }
            ("watch", n) if n >= 2 && conn.multi.is_some() => {
                Reply::Error("ERR WATCH inside MULTI is not allowed".into())
            }
            ("watch", n) if n >= 2 => {
                let seq = conn.await_answer();
                conn.watch_slot(seq, conn.db, args[1..].to_vec());
                conn.hold(seq, Command::Read(ReadOp { db: conn.db, args: args.to_vec() }));
                self.release(client);
                return true;
            }
            ("unwatch", 1) => {
                conn.watched.clear();
                Reply::Ok
            }
            ("select", 2) => match args::db_index(&args[1]) {
                Ok(db) => {
                    conn.db = db;
                    Reply::Ok
                }
                Err(e) => e,
            },
            ("reset", 1) => {
                conn.multi = None;
                conn.multi_failed = false;
                conn.watched.clear();
                conn.db = 0;
                conn.resp3 = false;
                conn.name = None;
                if !self.config.acl.default_needs_password() {
                    conn.user = Some("default".into());
                }
                Reply::Simple("RESET")
            }
            ("hello", _) => return self.hello(client, args),
            ("client", n) if n >= 2 => self.client_command(client, args),
            _ => return false,
        };
        if let Some(conn) = self.conns.get_mut(&client) {
            conn.answer(&reply);
        }
        true
    }

    /// `HELLO [protover [AUTH user pass] [SETNAME name]]`: RESP2 or RESP3 from then on.
    fn hello(&mut self, client: u64, args: &[Vec<u8>]) -> bool {
        let mut reply = None;
        let mut resp3 = None;
        if let Some(version) = args.get(1) {
            match args::parse_i64(version) {
                Some(v @ (2 | 3)) => resp3 = Some(v == 3),
                Some(_) => reply = Some(Reply::Error("NOPROTO unsupported protocol version".into())),
                _ => {
                    reply =
                        Some(Reply::Error("ERR Protocol version is not an integer or out of range".into()))
                }
            }
        }
        let mut i = 2;
        let mut name = None;
        while reply.is_none() && i < args.len() {
            if args::is(&args[i], "auth") && i + 2 < args.len() {
                let auth = self.auth(client, &args[i + 1..i + 3]);
                if auth != Reply::Ok {
                    reply = Some(auth);
                }
                i += 3;
            } else if args::is(&args[i], "setname") && i + 1 < args.len() {
                name = Some(args[i + 1].clone());
                i += 2;
            } else {
                reply = Some(Reply::Error(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(&args[i])
                )));
            }
        }
        let role = if self.replica.leader() == self.config.id { "master" } else { "replica" };
        let Some(conn) = self.conns.get_mut(&client) else { return true };
        if reply.is_none() && conn.user.is_none() {
            reply = Some(Reply::Error(super::acl::NOAUTH.into()));
        }
        if let Some(reply) = reply {
            conn.answer(&reply);
            return true;
        }
        if name.is_some() {
            conn.name = name;
        }
        if let Some(resp3) = resp3 {
            conn.resp3 = resp3;
        }
        let bulk = |s: &str| Reply::Bulk(s.as_bytes().to_vec());
        conn.answer(&Reply::Map(vec![
            (bulk("server"), bulk("redis")),
            (bulk("version"), bulk("7.0.15")),
            (bulk("proto"), Reply::Integer(if conn.resp3 { 3 } else { 2 })),
            (bulk("id"), Reply::Integer(client as i64)),
            (bulk("mode"), bulk("standalone")),
            (bulk("role"), bulk(role)),
            (bulk("modules"), Reply::Array(Vec::new())),
        ]));
        true
    }

    /// CLIENT ID | SETNAME | GETNAME | LIST | INFO | KILL | NO-EVICT | NO-TOUCH | REPLY ON.
    fn client_command(&mut self, client: u64, args: &[Vec<u8>]) -> Reply {
        let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        let describe = |conn: &super::conn::Conn| {
            let addr = conn.stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
            let laddr = conn.stream.local_addr().map(|a| a.to_string()).unwrap_or_default();
            format!(
                "id={} addr={addr} laddr={laddr} fd=0 name={} age=0 idle=0 flags={} db={} sub=0 psub=0 ssub=0 multi={} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=client user={} redir=-1 resp=2\n",
                conn.client,
                String::from_utf8_lossy(conn.name.as_deref().unwrap_or_default()),
                if conn.multi.is_some() { "x" } else { "N" },
                conn.db,
                conn.multi.as_ref().map_or(-1, |q| q.len() as i64),
                conn.user.as_deref().unwrap_or(""),
            )
        };
        match (sub.as_str(), args.len()) {
            ("id", 2) => Reply::Integer(client as i64),
            ("setname", 3) => {
                if args[2].iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
                    return Reply::Error(
                        "ERR Client names cannot contain spaces, newlines or special characters.".into(),
                    );
                }
                if let Some(conn) = self.conns.get_mut(&client) {
                    conn.name = (!args[2].is_empty()).then(|| args[2].clone());
                }
                Reply::Ok
            }
            ("getname", 2) => {
                self.conns.get(&client).and_then(|c| c.name.clone()).map_or(Reply::Nil, Reply::Bulk)
            }
            ("list", _) => Reply::Bulk(self.conns.values().map(describe).collect::<String>().into_bytes()),
            ("info", 2) => {
                Reply::Bulk(self.conns.get(&client).map(describe).unwrap_or_default().into_bytes())
            }
            ("kill", n) if n >= 3 => {
                let targets: Vec<u64> = if n == 3 {
                    let addr = String::from_utf8_lossy(&args[2]).into_owned();
                    let found: Vec<u64> = self
                        .conns
                        .values()
                        .filter(|c| c.stream.peer_addr().is_ok_and(|a| a.to_string() == addr))
                        .map(|c| c.client)
                        .collect();
                    if found.is_empty() {
                        return Reply::Error("ERR No such client".into());
                    }
                    found
                } else if n == 4 && args::is(&args[2], "id") {
                    let Some(id) = args::parse_i64(&args[3]) else {
                        return Reply::Error("ERR client-id should be greater than 0".into());
                    };
                    self.conns.keys().copied().filter(|&c| c as i64 == id).collect()
                } else {
                    return Reply::Error("ERR syntax error".into());
                };
                for id in &targets {
                    if let Some(conn) = self.conns.get_mut(id) {
                        if *id == client {
                            conn.answer_and_close(&Reply::Ok);
                        } else {
                            conn.dead = true;
                        }
                    }
                }
                // The old form (an address) answers OK, the filter form how many it closed.
                if n == 3 { Reply::Ok } else { Reply::Integer(targets.len() as i64) }
            }
            ("unblock", 3 | 4) => {
                let with_error = args.get(3).is_some_and(|w| args::is(w, "error"));
                if args.len() == 4 && !with_error && !args::is(&args[3], "timeout") {
                    return Reply::Error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR".into());
                }
                let Some(id) = args::parse_i64(&args[2]) else { return args::not_integer() };
                let Some(conn) = self.conns.values_mut().find(|c| c.client as i64 == id) else {
                    return Reply::Integer(0);
                };
                let Some(b) = conn.blocking.iter_mut().find(|b| b.waiting) else { return Reply::Integer(0) };
                // The store answers it: with its pop's answer if a write served it first.
                b.waiting = false;
                let (client, seq, args) = (conn.client, b.seq, b.args.clone());
                self.unblock(client, seq, args, with_error);
                Reply::Integer(1)
            }
            ("no-evict" | "no-touch", 3) | ("reply", 3) => Reply::Ok,
            ("help", 2) => Reply::Array(
                [
                    "CLIENT <subcommand>",
                    "ID",
                    "SETNAME <name>",
                    "GETNAME",
                    "LIST",
                    "INFO",
                    "KILL <addr> | ID <id>",
                ]
                .iter()
                .map(|s| Reply::Bulk(s.as_bytes().to_vec()))
                .collect(),
            ),
            ("id" | "setname" | "getname" | "info" | "kill" | "no-evict" | "no-touch" | "reply", _) => {
                wrong_arity(&format!("client|{sub}"))
            }
            _ => unknown_subcommand(&args[1], "CLIENT"),
        }
    }

    /// An applied EXEC's answer with the member's commands in it answered here, in their
    /// places (the store left them).
    pub(super) fn answer_exec_locals(&mut self, ticket: Ticket, reply: Reply) -> Reply {
        let Some(conn) = self.conns.get_mut(&ticket.client) else { return reply };
        let Some(at) = conn.exec_locals.iter().position(|(seq, _)| *seq == ticket.seq) else { return reply };
        let (_, locals) = conn.exec_locals.swap_remove(at);
        let Reply::Array(mut items) = reply else { return reply };
        for (i, words) in locals {
            let name = cmd::lookup(&words[0]).map_or("", |s| s.name);
            if let Some(item) = items.get_mut(i) {
                *item = self.answer_local(&crate::kv::LocalOp { name, args: words });
            }
        }
        Reply::Array(items)
    }

    /// Registers a blocking command held at slot `seq`, so its "nothing yet" is waited out.
    pub(super) fn note_blocking(&mut self, client: u64, seq: u64, words: Vec<Vec<u8>>) {
        let Some(shape) = blocked::shape(&words) else { return };
        let Some(seconds) = words
            .get(shape.timeout_at)
            .and_then(|t| args::parse_f64(t))
            .filter(|s| *s >= 0.0 && s.is_finite())
        else {
            return; // The store answers the bad timeout.
        };
        // Saturating: a timeout of centuries is "never" in effect, not a wrap to the past.
        let deadline_ns = (seconds > 0.0).then(|| monotonic_ns().saturating_add((seconds * 1e9) as u64));
        if let Some(conn) = self.conns.get_mut(&client) {
            conn.blocking.push(Blocking { seq, args: words, deadline_ns, waiting: false });
        }
    }

    /// Proposes that request `seq` of `client`, the blocking pop `args`, stop waiting; its
    /// answer comes back as the request's (the pop's own if a write served it first). For a
    /// connection already gone the answer goes nowhere; the unblock still frees the store.
    pub(super) fn unblock(&mut self, client: u64, seq: u64, args: Vec<Vec<u8>>, error: bool) {
        let completed_below = self.conns.get(&client).map_or(seq, |c| c.completed_below().min(seq));
        self.replica.submit_write(Ticket { client, seq }, completed_below, WriteOp::Unblock { args, error });
    }

    /// The store found nothing for a blocking command: its client waits.
    pub(super) fn would_block(&mut self, ticket: Ticket) {
        let Some(conn) = self.conns.get_mut(&ticket.client) else { return };
        match conn.blocking.iter_mut().find(|b| b.seq == ticket.seq) {
            Some(b) => {
                b.waiting = true;
                self.blocked.insert(ticket.client);
            }
            None => {
                // Not a pop this member waits out (note_blocking saw no timeout in its words,
                // so the store should have refused it): answered now, and the store told to
                // forget it (the unblock's own answer finds the slot filled: any words do).
                conn.complete(ticket.seq, &Reply::NilArray);
                self.unblock(ticket.client, ticket.seq, vec![b"blpop".to_vec()], false);
            }
        }
    }

    /// Blocked clients whose timeout passed stop waiting (the store answers them). Returns the
    /// earliest timeout still ahead.
    pub(super) fn wake_blocked(&mut self, now_ns: u64) -> Option<u64> {
        // Only the clients that wait are looked at (and no clock is read when none does).
        if self.blocked.is_empty() {
            return None;
        }
        let mut next = None::<u64>;
        let mut expired = Vec::new();
        let conns = &mut self.conns;
        self.blocked.retain(|id| conns.get(id).is_some_and(|c| c.blocking.iter().any(|b| b.waiting)));
        for id in &self.blocked {
            let Some(conn) = self.conns.get_mut(id) else { continue };
            for b in conn.blocking.iter_mut().filter(|b| b.waiting) {
                match b.deadline_ns {
                    Some(d) if d <= now_ns => {
                        b.waiting = false;
                        expired.push((conn.client, b.seq, b.args.clone()));
                    }
                    Some(d) => next = Some(next.map_or(d, |n| n.min(d))),
                    None => {}
                }
            }
        }
        for (client, seq, args) in expired {
            self.unblock(client, seq, args, false);
        }
        next
    }

    /// Tells the store that this member's earlier runs are over: their clients' blocking
    /// pops, if any still wait there, are dropped before they take an element for no one.
    pub(super) fn drop_earlier_waiters(&mut self) {
        // The member's own client (as its expiry proposals'): no connection has it.
        self.expiry_seq += 1;
        let (client, seq) = (self.client_base, self.expiry_seq);
        self.replica.submit_write(Ticket { client, seq }, seq, WriteOp::DropWaiters { below: client });
    }

    /// On the leader, every [`EXPIRY_PERIOD_NS`]: proposes the removal of keys whose expiry
    /// passed (reads never show them; this frees their memory on every member).
    pub(super) fn propose_expiry(&mut self, now_ns: u64) {
        if now_ns < self.next_expiry_ns || self.replica.leader() != self.config.id {
            return;
        }
        self.next_expiry_ns = now_ns + EXPIRY_PERIOD_NS;
        let now_ms = realtime_ns() / 1_000_000;
        for db in 0..DATABASES as u8 {
            let keys = self.replica.store().expired_keys(db, now_ms, EXPIRY_BATCH);
            if keys.is_empty() {
                continue;
            }
            self.expiry_seq += 1;
            let seq = self.expiry_seq;
            // The member's own client id (no connection has it: theirs start above it), new at
            // each start, so a restarted leader's proposals are not taken for old ones.
            let client = self.client_base;
            self.replica.submit_write(Ticket { client, seq }, seq, WriteOp::Expire { db, keys });
        }
    }
}
