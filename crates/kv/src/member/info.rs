//! The commands a member answers by itself: PING, ECHO, INFO, CONFIG GET, COMMAND, CLIENT
//! SETNAME/GETNAME, SELECT. INFO's replication section names the leader and the members, and
//! says how reads are served.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use super::MemberStats;
use super::conn::Conn;
use super::watch::{WatchConfig, WatchStats};
use crate::kv::{LocalOp, Reply};
use crate::replica::{ReadMode, ReplicaStats, Sync};

/// What INFO reports, gathered by the member.
#[derive(Debug, Clone)]
pub struct Facts {
    /// This member.
    pub id: u64,
    /// The leader it knows (0: none).
    pub leader: u64,
    /// The current term.
    pub term: u64,
    /// Highest log index applied.
    pub applied: u64,
    /// The voters.
    pub voters: Vec<u64>,
    /// Every member's Raft address.
    pub peers: BTreeMap<u64, super::PeerAddr>,
    /// How reads are served.
    pub read_mode: ReadMode,
    /// Whether the log is synced.
    pub sync: Sync,
    /// One tick of Raft's clock.
    pub tick: Duration,
    /// Live keys.
    pub keys: usize,
    /// Connected clients.
    pub clients: usize,
    /// Seconds since start.
    pub uptime_s: u64,
    /// The member's counters.
    pub stats: MemberStats,
    /// The replica's counters.
    pub replica: ReplicaStats,
    /// Where clients connect.
    pub listen: SocketAddr,
    /// The lane tunnels' name and the link's counts, on the lane.
    pub lane: Option<(String, kairos_services::lane_link::LaneLinkStats)>,
    /// The most clients served at once.
    pub max_clients: usize,
    /// The failure detector's settings, counters and the members it suspects, when on.
    pub watch: Option<(WatchConfig, WatchStats, Vec<u64>)>,
}

/// The text of INFO (all sections, or the one named).
pub fn info_text(f: &Facts, section: Option<&[u8]>) -> String {
    let want = |name: &str| {
        section.is_none_or(|s| s.eq_ignore_ascii_case(name.as_bytes()) || s.eq_ignore_ascii_case(b"all"))
    };
    let mut out = String::new();
    if want("server") {
        let _ = write!(
            out,
            "# Server\r\nredis_version:7.0.15\r\nkairos_version:{}\r\nredis_mode:kairos-raft\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\nraft_tick_us:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            std::process::id(),
            f.listen.port(),
            f.uptime_s,
            f.tick.as_micros()
        );
    }
    if want("clients") {
        let _ = write!(out, "# Clients\r\nconnected_clients:{}\r\n\r\n", f.clients);
    }
    if want("replication") {
        let role = if f.leader == f.id { "master" } else { "slave" };
        let _ = write!(
            out,
            "# Replication\r\nrole:{role}\r\nraft_member_id:{}\r\nraft_leader_id:{}\r\nraft_term:{}\r\nraft_applied_index:{}\r\nraft_members:{}\r\nread_mode:{}\r\nfsync:{}\r\n",
            f.id,
            f.leader,
            f.term,
            f.applied,
            f.voters.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(","),
            match f.read_mode {
                ReadMode::ReadIndex => "linearizable (read index)",
                ReadMode::Stale => "stale (local state, not linearizable)",
            },
            match f.sync {
                Sync::Always => "always",
                Sync::Never => "never",
            }
        );
        for (id, addr) in &f.peers {
            let _ = write!(out, "member{id}:raft={addr},voter={}\r\n", f.voters.contains(id));
        }
        match &f.watch {
            Some((config, stats, suspected)) => {
                let _ = write!(
                    out,
                    "fd_period_us:{}\r\nfd_lambda_us:{}\r\nfd_fanout:{}\r\nfd_suspected:{}\r\nfd_heartbeats_in:{}\r\nfd_heartbeats_out:{}\r\nfd_suspicions:{}\r\nfd_leader_suspicions:{}\r\nfd_campaigns:{}\r\nfd_late_wakes:{}\r\nfd_leader_gap_max_us:{}\r\nfd_leader_gaps_over_timeout:{}\r\nfd_probes:{}\r\nfd_probes_refused:{}\r\n",
                    config.period_ns / 1_000,
                    config.lambda_ns / 1_000,
                    config.fanout,
                    suspected.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(","),
                    stats.heartbeats_in,
                    stats.heartbeats_out,
                    stats.suspicions,
                    stats.leader_suspicions,
                    stats.campaigns,
                    stats.late_wakes,
                    stats.leader_gap_max_ns / 1_000,
                    stats.leader_gaps_over_timeout,
                    stats.probes,
                    stats.probes_refused
                );
            }
            None => out.push_str("fd:off\r\n"),
        }
        if let Some((tunnel, l)) = &f.lane {
            let _ = write!(
                out,
                "lane_tunnel:{tunnel}\r\nlane_packets_out:{}\r\nlane_fragments_out:{}\r\nlane_fragments_in:{}\r\nlane_not_ours:{}\r\nlane_queue_dropped:{}\r\nlane_too_large:{}\r\nlane_node_errors:{}\r\nlane_beats_replaced:{}\r\nlane_outbox_refused:{}\r\nlane_malformed:{}\r\nlane_grant_changes:{}\r\nlane_tunnels_lost:{}\r\nlane_receiver_changes:{}\r\nlane_timed_messages:{}\r\nlane_mean_release_wait_us:{:.1}\r\nlane_mean_wire_us:{:.1}\r\nlane_mean_inbox_wait_us:{:.1}\r\n",
                l.packets_out,
                l.fragments_out,
                l.fragments_in,
                l.not_ours,
                l.queue_dropped,
                l.too_large,
                l.node_errors,
                l.beats_replaced,
                l.outbox_refused,
                l.malformed,
                l.grant_changes,
                l.tunnels_lost,
                l.receiver_changes,
                l.timed,
                mean_us(l.release_wait_ns, l.timed),
                mean_us(l.wire_ns, l.timed),
                mean_us(l.inbox_wait_ns, l.timed)
            );
        }
        out.push_str("\r\n");
    }
    if want("stats") {
        let s = &f.stats;
        let r = &f.replica;
        let _ = write!(
            out,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nraft_datagrams_in:{}\r\nraft_datagrams_out:{}\r\nraft_malformed:{}\r\nraft_refused_strangers:{}\r\nraft_refused_forged:{}\r\nraft_refused_replayed:{}\r\nraft_refused_address:{}\r\nacl_access_denied_auth:{}\r\nacl_access_denied_cmd:{}\r\nacl_access_denied_noauth:{}\r\nrejected_connections:{}\r\nclient_query_buffer_limit_disconnections:{}\r\nclient_output_buffer_limit_disconnections:{}\r\nclient_protocol_errors:{}\r\nraft_late_periods:{}\r\nraft_proposals:{}\r\nraft_proposal_retries:{}\r\nraft_read_rounds:{}\r\nraft_read_retries:{}\r\nraft_compactions:{}\r\nraft_snapshots_installed:{}\r\nraft_lease_reads:{}\r\nraft_appends_held:{}\r\n\r\n",
            s.connections,
            s.commands,
            s.datagrams_in,
            s.datagrams_out,
            s.malformed,
            s.refused_strangers,
            s.refused_forged,
            s.refused_replayed,
            s.refused_address,
            s.denied_auth,
            s.denied_command,
            s.denied_noauth,
            s.rejected_connections,
            s.query_limit_closes,
            s.output_limit_closes,
            s.protocol_errors,
            s.late_periods,
            r.proposals,
            r.proposal_retries,
            r.read_rounds,
            r.read_retries,
            r.compactions,
            r.snapshots_installed,
            r.lease_reads,
            r.appends_held
        );
    }
    if want("keyspace") {
        let _ = write!(out, "# Keyspace\r\n");
        if f.keys > 0 {
            let _ = write!(out, "db0:keys={},expires=0,avg_ttl=0\r\n", f.keys);
        }
    }
    out
}

/// CONFIG GET: what redis-benchmark and redis-cli ask, answered as a Redis with persistence
/// off would (the log is the store's persistence).
fn config_get(parameter: &[u8], facts: &Facts) -> Reply {
    let known: [(&str, String); 9] = [
        ("save", String::new()),
        ("appendonly", "no".into()),
        ("databases", "1".into()),
        ("maxmemory", "0".into()),
        ("timeout", "0".into()),
        ("maxclients", facts.max_clients.to_string()),
        // The parser's bulk limit, but the query buffer's ends a request first.
        ("proto-max-bulk-len", crate::resp::MAX_BULK_LEN.min(super::conn::MAX_INPUT).to_string()),
        ("client-query-buffer-limit", super::conn::MAX_INPUT.to_string()),
        ("client-output-buffer-limit", format!("normal {0} {0} 0", super::conn::MAX_OUTPUT)),
    ];
    let pattern = String::from_utf8_lossy(parameter).to_ascii_lowercase();
    let mut items = Vec::new();
    for (name, value) in &known {
        if pattern == "*" || pattern == *name {
            items.push(Reply::Bulk(name.as_bytes().to_vec()));
            items.push(Reply::Bulk(value.as_bytes().to_vec()));
        }
    }
    Reply::Array(items)
}

/// Answers a local command.
pub fn local(op: &LocalOp, conn: &mut Conn, facts: &Facts) -> Reply {
    match op {
        LocalOp::Ping(None) => Reply::Simple("PONG"),
        LocalOp::Ping(Some(m)) | LocalOp::Echo(m) => Reply::Bulk(m.clone()),
        LocalOp::Info(section) => Reply::Bulk(info_text(facts, section.as_deref()).into_bytes()),
        LocalOp::ConfigGet(p) => config_get(p, facts),
        // redis-cli asks COMMAND DOCS for its hints: none is a valid answer.
        LocalOp::Command => Reply::Array(Vec::new()),
        LocalOp::ClientSetName(name) => {
            conn.name = (!name.is_empty()).then(|| name.clone());
            Reply::Ok
        }
        LocalOp::ClientGetName => conn.name.clone().map_or(Reply::Nil, Reply::Bulk),
        LocalOp::Select => Reply::Ok,
        LocalOp::Quit => Reply::Ok,
    }
}

/// A sum of nanoseconds over `n`, in microseconds (0 for none).
fn mean_us(sum_ns: u64, n: u64) -> f64 {
    if n == 0 { 0.0 } else { sum_ns as f64 / n as f64 / 1e3 }
}
