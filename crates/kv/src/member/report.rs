//! What a member says of itself: the facts INFO reports, and the figures of the Prometheus
//! endpoint, whose readers are served on the loop.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use kairos_sys::clock::{monotonic_ns, realtime_ns};

use super::{Member, info, metrics};

impl Member {
    /// The Prometheus endpoint's part of a pass: new readers taken and waited on, a reader's
    /// whole request answered, readers past their deadline dropped.
    pub(super) fn metrics_pass(&mut self, ready: &[RawFd]) -> io::Result<()> {
        let now = monotonic_ns();
        let Some(mut server) = self.metrics.take() else { return Ok(()) };
        let listener = server.listener().as_raw_fd();
        if ready.contains(&listener) {
            for stream in server.accept(now) {
                self.poller.add(stream)?;
            }
        }
        for &fd in ready.iter().filter(|&&fd| fd != listener) {
            server.serve(Some(fd), now, || metrics::render(&self.figures()));
        }
        // Expired readers: closing a socket takes it out of the epoll set.
        server.serve(None, now, String::new);
        self.metrics = Some(server);
        Ok(())
    }

    /// What the Prometheus endpoint reports.
    fn figures(&self) -> metrics::Figures {
        let s = &self.stats;
        metrics::Figures {
            id: self.config.id,
            term: self.replica.term(),
            leader: self.replica.leader(),
            commit: self.replica.commit_index(),
            applied: self.replica.applied(),
            lag: self.replica.follower_lag(),
            commands: [
                ("write", self.command_kinds[0]),
                ("read", self.command_kinds[1]),
                ("local", self.command_kinds[2]),
            ],
            latency: self.latency.clone(),
            clients: self.conns.len(),
            clients_refused: vec![
                ("maxclients", s.rejected_connections),
                ("query_buffer_limit", s.query_limit_closes),
                ("output_buffer_limit", s.output_limit_closes),
                ("protocol_error", s.protocol_errors),
                ("noauth", s.denied_noauth),
                ("wrongpass", s.denied_auth),
                ("noperm", s.denied_command),
            ],
            datagrams_in: s.datagrams_in,
            datagrams_out: s.datagrams_out,
            datagrams_refused: vec![
                ("stranger", s.refused_strangers),
                ("forged", s.refused_forged),
                ("replayed", s.refused_replayed),
                ("address", s.refused_address),
            ],
        }
    }

    pub(super) fn info(&self) -> info::Facts {
        info::Facts {
            id: self.config.id,
            leader: self.replica.leader(),
            term: self.replica.term(),
            applied: self.replica.applied(),
            voters: self.replica.voters(),
            peers: self.config.peers.clone(),
            read_mode: self.config.read_mode,
            sync: self.config.sync,
            tick: self.config.tick,
            keys: self.replica.store().len(realtime_ns() / 1_000_000),
            keyspace: self.replica.store().keyspace(realtime_ns() / 1_000_000),
            command_stats: self.command_stats.clone(),
            clients: self.conns.len(),
            blocked_clients: self
                .blocked
                .iter()
                .filter(|id| self.conns.get(id).is_some_and(|c| c.blocking.iter().any(|b| b.waiting)))
                .count(),
            blocked_in_store: self.replica.store().waiters(),
            uptime_s: (monotonic_ns() - self.started_ns) / 1_000_000_000,
            stats: self.stats,
            replica: self.replica.stats(),
            listen: self.config.listen,
            lane: self.lane.as_ref().map(|l| (l.name().to_string(), l.stats())),
            max_clients: self.config.max_clients,
            watch: self.watch.as_ref().map(|w| (w.config(), w.stats(), w.suspected().collect())),
        }
    }
}
