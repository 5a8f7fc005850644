//! The commands a member answers by itself: PING, ECHO, INFO, CONFIG, COMMAND, TIME, and
//! the server commands that have nothing to do here (SAVE, FUNCTION FLUSH, ...). INFO's replication section names the leader and the members, and
//! says how reads are served.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use super::MemberStats;
use super::watch::{WatchConfig, WatchStats};
use crate::kv::cmd::{self, args::glob_match};
use crate::kv::command::{unknown_subcommand, wrong_arity};
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
    /// Live keys in database 0.
    pub keys: usize,
    /// Per database that has keys: its number, live keys, keys with an expiry.
    pub keyspace: Vec<(usize, usize, usize)>,
    /// Per command: calls, and calls refused (not permitted, bad arity).
    pub command_stats: BTreeMap<&'static str, [u64; 2]>,
    /// Connected clients.
    pub clients: usize,
    /// Clients waiting in a blocking pop.
    pub blocked_clients: usize,
    /// Blocking pops waiting in the store, of every member's clients.
    pub blocked_in_store: usize,
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
pub fn info_text(f: &Facts, sections: &[&[u8]]) -> String {
    // As Redis: no section or `default` is every section but the per-command ones; `all` and
    // `everything` include those.
    let want = |name: &str| {
        let extra = name == "commandstats";
        if sections.is_empty() {
            return !extra;
        }
        sections.iter().any(|s| {
            s.eq_ignore_ascii_case(name.as_bytes())
                || s.eq_ignore_ascii_case(b"all")
                || s.eq_ignore_ascii_case(b"everything")
                || (s.eq_ignore_ascii_case(b"default") && !extra)
        })
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
        let _ = write!(
            out,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:{}\r\nkairos_blocked_in_store:{}\r\n\r\n",
            f.clients, f.max_clients, f.blocked_clients, f.blocked_in_store
        );
    }
    if want("memory") {
        let (rss, _, _) = process_usage();
        let _ = write!(
            out,
            "# Memory\r\nused_memory:{rss}\r\nused_memory_rss:{rss}\r\nused_memory_human:{:.2}M\r\n\r\n",
            rss as f64 / (1 << 20) as f64
        );
    }
    if want("cpu") {
        let (_, user, sys) = process_usage();
        let _ = write!(
            out,
            "# CPU\r\nused_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\nused_cpu_sys_children:0.000000\r\nused_cpu_user_children:0.000000\r\n\r\n"
        );
    }
    if want("commandstats") {
        out.push_str("# Commandstats\r\n");
        for (name, [calls, rejected]) in &f.command_stats {
            let _ = write!(
                out,
                "cmdstat_{name}:calls={calls},usec=0,usec_per_call=0.00,rejected_calls={rejected},failed_calls=0\r\n"
            );
        }
        out.push_str("\r\n");
    }
    if want("replication") {
        let role = if f.leader == f.id { "master" } else { "slave" };
        let _ = write!(
            out,
            "# Replication\r\nrole:{role}\r\nmaster_repl_offset:{}\r\nraft_member_id:{}\r\nraft_leader_id:{}\r\nraft_term:{}\r\nraft_applied_index:{}\r\nraft_members:{}\r\nread_mode:{}\r\nfsync:{}\r\n",
            f.applied,
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
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nraft_datagrams_in:{}\r\nraft_datagrams_out:{}\r\nraft_malformed:{}\r\nraft_refused_strangers:{}\r\nraft_refused_forged:{}\r\nraft_refused_replayed:{}\r\nraft_refused_address:{}\r\nacl_access_denied_auth:{}\r\nacl_access_denied_cmd:{}\r\nacl_access_denied_noauth:{}\r\nrejected_connections:{}\r\nclient_query_buffer_limit_disconnections:{}\r\nclient_output_buffer_limit_disconnections:{}\r\nclient_protocol_errors:{}\r\nraft_late_periods:{}\r\nbusy_poll_hits:{}\r\nraft_proposals:{}\r\nraft_proposal_retries:{}\r\nraft_read_rounds:{}\r\nraft_read_retries:{}\r\nraft_compactions:{}\r\nraft_snapshots_installed:{}\r\nraft_lease_reads:{}\r\nraft_appends_held:{}\r\n\r\n",
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
            s.busy_poll_hits,
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
        for (db, keys, expires) in &f.keyspace {
            let _ = write!(out, "db{db}:keys={keys},expires={expires},avg_ttl=0\r\n");
        }
    }
    out
}

/// CONFIG's parameters at this member: those that exist here with their values, Redis 7.0's
/// names. Setting one changes what CONFIG GET answers; the encoding thresholds also change
/// what OBJECT ENCODING reports (never the data, nor another member's answer). Parameters
/// of Redis's persistence, memory and replication are accepted and reported: the log is
/// this store's persistence and Raft its replication.
#[derive(Debug, Clone)]
pub struct Settings {
    values: BTreeMap<&'static str, String>,
}

/// Old names Redis 7 still takes, and the parameter each means.
const ALIASES: &[(&str, &str)] = &[
    ("hash-max-ziplist-entries", "hash-max-listpack-entries"),
    ("hash-max-ziplist-value", "hash-max-listpack-value"),
    ("zset-max-ziplist-entries", "zset-max-listpack-entries"),
    ("zset-max-ziplist-value", "zset-max-listpack-value"),
    ("list-max-ziplist-size", "list-max-listpack-size"),
    ("slave-read-only", "replica-read-only"),
    ("slave-serve-stale-data", "replica-serve-stale-data"),
    ("lua-time-limit", "busy-reply-threshold"),
];

impl Default for Settings {
    fn default() -> Self {
        let values = [
            ("save", ""),
            ("appendonly", "no"),
            ("appendfsync", "everysec"),
            ("databases", "16"),
            ("maxmemory", "0"),
            ("maxmemory-policy", "noeviction"),
            ("timeout", "0"),
            ("hz", "10"),
            ("hash-max-listpack-entries", "128"),
            ("hash-max-listpack-value", "64"),
            ("set-max-intset-entries", "512"),
            ("zset-max-listpack-entries", "128"),
            ("zset-max-listpack-value", "64"),
            ("list-max-listpack-size", "-2"),
            ("list-compress-depth", "0"),
            ("busy-reply-threshold", "5000"),
            ("min-replicas-to-write", "0"),
            ("replica-read-only", "yes"),
            ("replica-serve-stale-data", "yes"),
            ("rdb-key-save-delay", "0"),
            ("notify-keyspace-events", ""),
            ("slowlog-log-slower-than", "10000"),
            ("latency-tracking", "yes"),
            ("lazyfree-lazy-user-del", "no"),
            ("lazyfree-lazy-user-flush", "no"),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.to_string()))
        .collect();
        Settings { values }
    }
}

impl Settings {
    /// No parameters, with no allocation: what stands in while a member's settings are lent.
    pub const fn empty() -> Self {
        Settings { values: BTreeMap::new() }
    }

    fn canonical(name: &str) -> &str {
        ALIASES.iter().find(|(alias, _)| *alias == name).map_or(name, |(_, real)| real)
    }

    /// CONFIG SET name value [name value ...]: all or none.
    fn set(&mut self, pairs: &[Vec<u8>]) -> Reply {
        use crate::kv::cmd::keys::THRESHOLDS;
        use std::sync::atomic::Ordering::Relaxed;
        if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
            return Reply::Error("ERR wrong number of arguments for 'config|set' command".into());
        }
        let mut checked = Vec::new();
        for pair in pairs.chunks_exact(2) {
            let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
            let value = String::from_utf8_lossy(&pair[1]).into_owned();
            let fixed = [
                "maxclients",
                "proto-max-bulk-len",
                "client-query-buffer-limit",
                "client-output-buffer-limit",
            ];
            let Some(key) = self.values.keys().find(|k| **k == Self::canonical(&name)).copied() else {
                let why = if fixed.contains(&name.as_str()) {
                    "fixed by the member's command line"
                } else {
                    "unknown here"
                };
                return Reply::Error(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
                ));
            };
            let numeric = !matches!(
                key,
                "save" | "appendonly" | "appendfsync" | "maxmemory-policy" | "notify-keyspace-events"
            ) && !key.starts_with("replica-")
                && !key.starts_with("lazyfree-")
                && key != "latency-tracking";
            if numeric
                && value.parse::<i64>().is_err()
                && !(key == "maxmemory" && parse_memory(&value).is_some())
            {
                return Reply::Error(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - argument couldn't be parsed into an integer"
                ));
            }
            checked.push((key, value));
        }
        for (key, value) in checked {
            let n = value.parse::<usize>().unwrap_or(0);
            match key {
                "hash-max-listpack-entries" => THRESHOLDS.hash_entries.store(n, Relaxed),
                "hash-max-listpack-value" => THRESHOLDS.hash_value.store(n, Relaxed),
                "set-max-intset-entries" => THRESHOLDS.set_intset_entries.store(n, Relaxed),
                "zset-max-listpack-entries" => THRESHOLDS.zset_entries.store(n, Relaxed),
                "zset-max-listpack-value" => THRESHOLDS.zset_value.store(n, Relaxed),
                _ => {}
            }
            self.values.insert(key, value);
        }
        Reply::Ok
    }

    /// CONFIG GET pattern [pattern ...]: name, value pairs.
    fn get(&self, patterns: &[Vec<u8>], facts: &Facts) -> Reply {
        let fixed = [
            ("maxclients", facts.max_clients.to_string()),
            // The parser's bulk limit, but the query buffer's ends a request first.
            ("proto-max-bulk-len", crate::resp::MAX_BULK_LEN.min(super::conn::MAX_INPUT).to_string()),
            ("client-query-buffer-limit", super::conn::MAX_INPUT.to_string()),
            ("client-output-buffer-limit", format!("normal {0} {0} 0", super::conn::MAX_OUTPUT)),
        ];
        let all = self.values.iter().map(|(k, v)| (*k, v.clone())).chain(fixed);
        let mut items = Vec::new();
        for (name, value) in all {
            let hit = patterns.iter().any(|p| {
                let p = p.to_ascii_lowercase();
                glob_match(&p, name.as_bytes(), true)
                    || ALIASES.iter().any(|(alias, real)| *real == name && p == alias.as_bytes())
            });
            if hit {
                let shown = patterns
                    .iter()
                    .map(|p| p.to_ascii_lowercase())
                    .find_map(|p| {
                        ALIASES.iter().find(|(a, r)| *r == name && p == a.as_bytes()).map(|(a, _)| *a)
                    })
                    .unwrap_or(name);
                items.push(Reply::Bulk(shown.as_bytes().to_vec()));
                items.push(Reply::Bulk(value.into_bytes()));
            }
        }
        Reply::Array(items)
    }
}

fn parse_memory(text: &str) -> Option<u64> {
    let lower = text.to_ascii_lowercase();
    let (digits, unit) = lower.split_at(lower.find(|c: char| !c.is_ascii_digit()).unwrap_or(lower.len()));
    let n: u64 = digits.parse().ok()?;
    let scale = match unit {
        "" | "b" => 1,
        "k" | "kb" => 1 << 10,
        "m" | "mb" => 1 << 20,
        "g" | "gb" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

/// COMMAND [COUNT | LIST | INFO name... | DOCS [name...] | GETKEYS words...].
fn command(args: &[Vec<u8>]) -> Reply {
    let describe = |spec: &cmd::Spec| {
        let (first, last, step) = spec.keys;
        Reply::Array(vec![
            bulk(spec.name),
            Reply::Integer(i64::from(spec.arity)),
            Reply::Array(spec.flags.iter().map(|f| Reply::Simple(f)).collect()),
            Reply::Integer(i64::from(first)),
            Reply::Integer(i64::from(last)),
            Reply::Integer(i64::from(step)),
            Reply::Array(Vec::new()),
            Reply::Array(Vec::new()),
            Reply::Array(Vec::new()),
            Reply::Array(Vec::new()),
        ])
    };
    let sub = args.get(1).map(|s| s.to_ascii_lowercase());
    match sub.as_deref() {
        None => Reply::Array(cmd::all().map(describe).collect()),
        Some(b"count") => Reply::Integer(cmd::all().count() as i64),
        Some(b"list") => Reply::Array(cmd::all().map(|s| bulk(s.name)).collect()),
        Some(b"info") => Reply::Array(
            args[2..].iter().map(|name| cmd::lookup(name).map_or(Reply::NilArray, describe)).collect(),
        ),
        // redis-cli asks COMMAND DOCS for its hints: none is a valid answer.
        Some(b"docs") => Reply::Array(Vec::new()),
        Some(b"getkeys") if args.len() > 2 => match cmd::lookup(&args[2]) {
            Some(spec) if spec.arity_fits(args.len() - 2) => {
                let keys = spec.key_positions(args.len() - 2);
                if keys.is_empty() {
                    return Reply::Error("ERR The command has no key arguments".into());
                }
                Reply::Array(keys.into_iter().map(|i| Reply::Bulk(args[2 + i].clone())).collect())
            }
            Some(_) => Reply::Error("ERR Invalid number of arguments specified for command".into()),
            None => Reply::Error("ERR Invalid command specified".into()),
        },
        Some(_) => unknown_subcommand(&args[1], "COMMAND"),
    }
}

/// Answers a local command (those of the session itself, MULTI and the like, are answered in
/// `member::session`).
/// `facts` gathers what INFO reports (a pass over the keys): called only by the commands that
/// report something of it.
pub fn local(op: &LocalOp, facts: &dyn Fn() -> Facts, settings: &mut Settings) -> Reply {
    let args = &op.args;
    let sub = args.get(1).map(|s| String::from_utf8_lossy(s).to_ascii_lowercase()).unwrap_or_default();
    match (op.name, args.len()) {
        ("ping", 1) => Reply::Simple("PONG"),
        ("ping", 2) | ("echo", 2) => Reply::Bulk(args[1].clone()),
        ("ping", _) => wrong_arity("ping"),
        ("info", _) => {
            let sections: Vec<&[u8]> = args[1..].iter().map(Vec::as_slice).collect();
            Reply::Bulk(info_text(&facts(), &sections).into_bytes())
        }
        ("config", _) => match sub.as_str() {
            "get" if args.len() >= 3 => settings.get(&args[2..], &facts()),
            "get" => wrong_arity("config|get"),
            "set" => settings.set(&args[2..]),
            "resetstat" => Reply::Ok,
            "rewrite" => Reply::Error("ERR The server is running without a config file".into()),
            _ => unknown_subcommand(&args[1], "CONFIG"),
        },
        ("command", _) => command(args),
        ("time", 1) => {
            let us = kairos_sys::clock::realtime_ns() / 1_000;
            Reply::Array(vec![
                Reply::Bulk((us / 1_000_000).to_string().into_bytes()),
                Reply::Bulk((us % 1_000_000).to_string().into_bytes()),
            ])
        }
        // No scripts and no functions exist here: flushing them is done at once.
        ("function" | "script", 2 | 3) if sub == "flush" => Reply::Ok,
        ("function" | "script", _) => Reply::Error(format!(
            "ERR {} is not supported: this store runs no scripts",
            op.name.to_ascii_uppercase()
        )),
        // A member is stopped by what started it (its supervisor, Ctrl-C), not by a client.
        ("shutdown", _) => {
            Reply::Error("ERR SHUTDOWN is not taken from clients: stop the member with its supervisor".into())
        }
        ("debug", _) => Reply::Error("ERR DEBUG is not supported by this store".into()),
        ("memory", _) if sub == "usage" => Reply::Nil,
        ("memory", _) => Reply::Error("ERR MEMORY is not supported by this store".into()),
        ("lastsave", 1) => Reply::Integer((kairos_sys::clock::realtime_ns() / 1_000_000_000) as i64),
        // The log is on disk as writes commit: a save has nothing left to do.
        ("save", _) | ("bgrewriteaof", _) | ("readonly", _) | ("readwrite", _) => Reply::Ok,
        ("bgsave", _) => Reply::Simple("Background saving started"),
        // Every acknowledged write is on a majority of the members already.
        ("wait", 3) => Reply::Integer(facts().voters.len().saturating_sub(1) as i64),
        ("role", 1) => {
            let facts = facts();
            let role = if facts.leader == facts.id { "master" } else { "slave" };
            Reply::Array(vec![bulk(role)])
        }
        ("acl", _) => Reply::Error(format!(
            "ERR ACL {} is not supported: users come from --users-file",
            sub.to_ascii_uppercase()
        )),
        (name, _) => wrong_arity(name),
    }
}

/// This process's resident bytes and its user and system CPU seconds (from /proc; zeros
/// where it cannot be read).
fn process_usage() -> (u64, f64, f64) {
    let page = kairos_sys::memory::page_size() as u64;
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .map_or(0, |pages| pages * page);
    // Fields 14 and 15 of /proc/self/stat, after the command's parenthesis: clock ticks.
    let ticks = std::fs::read_to_string("/proc/self/stat").ok().and_then(|s| {
        let rest = s.rsplit_once(')')?.1.to_string();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        Some((fields.get(11)?.parse::<u64>().ok()?, fields.get(12)?.parse::<u64>().ok()?))
    });
    let hz = kairos_sys::proc::clock_ticks_per_second() as f64;
    let (user, sys) = ticks.map_or((0.0, 0.0), |(u, s)| (u as f64 / hz, s as f64 / hz));
    (rss, user, sys)
}

/// A sum of nanoseconds over `n`, in microseconds (0 for none).
fn mean_us(sum_ns: u64, n: u64) -> f64 {
    if n == 0 { 0.0 } else { sum_ns as f64 / n as f64 / 1e3 }
}
