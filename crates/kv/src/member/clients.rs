//! The member's clients: connections accepted up to `max_clients`, and each request routed:
//! AUTH and the ACL's verdict first, then transactions and session commands, the member's own
//! commands, and the store's, held in request order and handed to the replica.

use super::conn::Conn;
use super::{Member, acl, info};
use crate::kv::command::typed;
use crate::kv::{Command, Reply, WriteOp};
use crate::kv::{blocked, cmd};
use crate::replica::Ticket;

impl Member {
    pub(super) fn accept(&mut self) {
        while let Ok((mut stream, _)) = self.listener.accept() {
            if self.conns.len() >= self.config.max_clients {
                // Best effort, as Redis: the error if the socket takes it now, then closed.
                let _ = stream.set_nonblocking(true);
                let _ = std::io::Write::write(&mut stream, b"-ERR max number of clients reached\r\n");
                self.stats.rejected_connections += 1;
                continue;
            }
            self.next_client += 1;
            let client = self.client_base + self.next_client;
            if let Ok(mut conn) = Conn::new(stream, client, self.config.tls.clone()) {
                conn.user = self.config.acl.initial_user();
                self.conns.insert(client, conn);
                self.stats.connections += 1;
            }
        }
    }

    /// Reads every client of a pass, then orders them by when their bytes arrived (the
    /// kernel's receive stamps; without one, as at a member's start before the kernel stamps,
    /// or through TLS, oldest connection first). A wait lists the clients that have bytes in no
    /// order to rely on (one blocked client was listed before another that sent first, under
    /// load), and Redis serves two clients that sent one after the other in that order: a
    /// client that blocked first is served first, and a transaction sent before the write that
    /// breaks its WATCH runs before it.
    pub(super) fn read_in_arrival_order(&mut self, ready: Vec<u64>) -> Vec<(u64, u64)> {
        // Each client's place found once, as it is read, not again in every comparison.
        let mut arrived: Vec<(u64, u64)> = ready
            .into_iter()
            .map(|client| {
                let conn = self.conns.get_mut(&client);
                let at = conn.and_then(|conn| {
                    conn.read(&mut self.client_input);
                    conn.arrived_ns
                });
                (at.unwrap_or(0), client)
            })
            .collect();
        arrived.sort_unstable();
        arrived
    }

    /// Takes a client's requests, read by [`Self::read_in_arrival_order`], in turn.
    pub(super) fn serve(&mut self, client: u64) {
        while let Some(conn) = self.conns.get_mut(&client) {
            let Some(args) = conn.next_request() else { break };
            self.stats.commands += 1;
            self.route(client, args);
        }
    }

    fn route(&mut self, client: u64, args: Vec<Vec<u8>>) {
        if args[0].eq_ignore_ascii_case(b"auth") {
            let reply = self.auth(client, &args[1..]);
            if let Some(conn) = self.conns.get_mut(&client) {
                conn.answer(&reply);
            }
            return;
        }
        let spec = cmd::lookup(&args[0]);
        let store = match spec.map(|s| s.handler) {
            Some(cmd::Handler::Write(_) | cmd::Handler::Store) => Some(acl::Category::Write),
            Some(cmd::Handler::Read(_)) => Some(acl::Category::Read),
            _ => None,
        };
        let refusal = self.refusal(client, &args, store);
        if let Some(spec) = spec {
            let counts = self.command_stats.entry(spec.name).or_default();
            counts[usize::from(refusal.is_some() || !spec.arity_fits(args.len()))] += 1;
        }
        if let Some(refusal) = refusal {
            if let Some(conn) = self.conns.get_mut(&client) {
                if conn.multi.is_some() {
                    conn.multi_failed = true;
                }
                conn.answer(&Reply::Error(refusal));
            }
            return;
        }
        self.command_kinds[match store {
            Some(acl::Category::Write) => 0,
            Some(acl::Category::Read) => 1,
            _ => 2,
        }] += 1;
        if self.queue_in_multi(client, &args, spec)
            || self.session_command(client, &args, spec.map_or("", |s| s.name))
        {
            return;
        }
        if args[0].eq_ignore_ascii_case(b"acl")
            && args.get(1).is_some_and(|a| a.eq_ignore_ascii_case(b"whoami"))
        {
            if let Some(conn) = self.conns.get_mut(&client) {
                let user = conn.user.clone().unwrap_or_default();
                conn.answer(&Reply::Bulk(user.into_bytes()));
            }
            return;
        }
        if args[0].eq_ignore_ascii_case(b"kairos.fault") {
            let reply = self.fault_command(&args[1..]);
            if let Some(conn) = self.conns.get_mut(&client) {
                conn.answer(&reply);
            }
            return;
        }
        if args[0].eq_ignore_ascii_case(b"kairos.member") {
            let reply = self.member_command(client, &args[1..]);
            if let (Some(reply), Some(conn)) = (reply, self.conns.get_mut(&client)) {
                conn.answer(&reply);
            }
            return;
        }
        let Some(db) = self.conns.get(&client).map(|c| c.db) else { return };
        match typed(spec, args, db) {
            Err(reply) => {
                if let Some(conn) = self.conns.get_mut(&client) {
                    conn.answer(&reply);
                }
            }
            Ok(Command::Local(op)) => {
                if op.name == "quit" {
                    if let Some(conn) = self.conns.get_mut(&client) {
                        conn.answer_and_close(&Reply::Ok);
                    }
                    return;
                }
                let reply = self.answer_local(&op);
                if let Some(conn) = self.conns.get_mut(&client) {
                    conn.answer(&reply);
                }
            }
            Ok(command) => {
                let Some(conn) = self.conns.get_mut(&client) else { return };
                let seq = conn.await_answer();
                // A blocking pop keeps its words for its unblock (only those: a clone per write
                // would cost every SET).
                let blocking = match &command {
                    Command::Write(WriteOp::Exec { args, .. }) if blocked::is_blocking(&args[0]) => {
                        Some(args.clone())
                    }
                    _ => None,
                };
                conn.hold(seq, command);
                if let Some(words) = blocking {
                    self.note_blocking(client, seq, words);
                }
                self.release(client);
            }
        }
    }

    /// Answers a member command; what INFO reports is gathered only if the command reports it.
    pub(super) fn answer_local(&mut self, op: &crate::kv::LocalOp) -> Reply {
        // The settings are lent out while the member is read for its facts.
        let mut settings = std::mem::replace(&mut self.settings, info::Settings::empty());
        let reply = info::local(op, &|| self.info(), &mut settings);
        self.settings = settings;
        reply
    }

    /// `AUTH [user] password`: the connection becomes the user if the password is its.
    pub(super) fn auth(&mut self, client: u64, args: &[Vec<u8>]) -> Reply {
        let (user, password) = match args {
            [password] if !self.config.acl.default_needs_password() => {
                return Reply::Error(
                    "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?".into(),
                );
            }
            [password] => ("default".to_string(), password),
            [user, password] => (String::from_utf8_lossy(user).into_owned(), password),
            _ => return Reply::Error("ERR syntax error".into()),
        };
        if !self.config.acl.authenticate(&user, password) {
            self.stats.denied_auth += 1;
            return Reply::Error(acl::WRONGPASS.into());
        }
        if let Some(conn) = self.conns.get_mut(&client) {
            conn.user = Some(user);
        }
        Reply::Ok
    }

    /// Why a connection may not run `args` (a store command of category `store`, if one), in
    /// Redis's words: not authenticated (only QUIT and HELLO are), or not permitted.
    fn refusal(&mut self, client: u64, args: &[Vec<u8>], store: Option<acl::Category>) -> Option<String> {
        let conn = self.conns.get(&client)?;
        match &conn.user {
            None if args[0].eq_ignore_ascii_case(b"quit") || args[0].eq_ignore_ascii_case(b"hello") => None,
            None => {
                self.stats.denied_noauth += 1;
                Some(acl::NOAUTH.to_string())
            }
            Some(user) => {
                let category = acl::Category::of(args, store);
                if self.config.acl.permits(user, &args[0], category) {
                    return None;
                }
                self.stats.denied_command += 1;
                Some(acl::noperm(&args[0]))
            }
        }
    }

    /// Hands a connection's held requests to the replica as far as their order allows.
    pub(super) fn release(&mut self, client: u64) {
        let Some(conn) = self.conns.get_mut(&client) else { return };
        while let Some((seq, completed_below, command)) = conn.release() {
            let ticket = Ticket { client, seq };
            match command {
                Command::Write(op) => self.replica.submit_write(ticket, completed_below, op),
                Command::Read(op) => self.replica.submit_read(ticket, op),
                Command::Local(_) => {}
            }
        }
    }
}
