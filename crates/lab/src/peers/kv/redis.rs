//! Redis as `kairos kv bench` runs it ([`Mode`]), its servers [`Member`]s on loopback:
//!
//! - `redis` ([`Mode::Standalone`]): `redis-server --save "" --appendonly no` on a free port,
//!   its own directory;
//! - `redis+wait` ([`Mode::Replicated`]): the same, and a second `redis-server --replicaof` the
//!   first; ready once the primary's `INFO replication` shows the replica online;
//! - `redis-aof+wait` ([`Mode::ReplicatedAof`]): `redis+wait` with `--appendonly yes
//!   --appendfsync always` on both, the data on the disk: the primary answers a SET once it is
//!   in its AOF and fsynced; ready as redis+wait is, and once neither server has an AOF rewrite
//!   under way or scheduled (the replica rewrites its AOF after the first sync).
//!
//! The primary is always the first member and the leader; every server is ready once a write
//! through the primary is answered (with a replica: on the replica too, `WAIT 1`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use kairos_kv::resp::client::{Connection, Reply, info_field};

use super::{Member, PROBE_TIMEOUT, free_ports, loopback};

/// The programs Redis needs, and the Debian package of each.
pub const PROGRAMS: &[(&str, &str)] = &[("redis-server", "redis-server")];

/// How a Redis setup keeps and copies its writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One server, no persistence.
    Standalone,
    /// A primary and replicas, no persistence.
    Replicated,
    /// A primary and replicas, each write fsynced to its append-only file before the answer.
    ReplicatedAof,
}

/// The `count` servers of a setup in `mode` (the first the primary, the others its replicas),
/// each with its own directory under `data`, not started; `log` gives the log of a server from
/// its role (`primary`, `replica`).
pub fn members(mode: Mode, count: usize, data: &Path, log: impl Fn(&str) -> PathBuf) -> Result<Vec<Member>> {
    let aof: &[&str] = if mode == Mode::ReplicatedAof {
        &["--appendonly", "yes", "--appendfsync", "always"]
    } else {
        &["--appendonly", "no"]
    };
    let (ports, _) = free_ports(count, 0)?;
    (0..count)
        .map(|i| {
            let dir = data.join(format!("redis{i}"));
            std::fs::create_dir_all(&dir)?;
            let mut args: Vec<OsString> = ["--port", &ports[i].to_string(), "--bind", "127.0.0.1"]
                .into_iter()
                .chain(["--save", "", "--protected-mode", "no"])
                .chain(aof.iter().copied())
                .chain(["--repl-diskless-sync-delay", "0", "--logfile", ""])
                .map(OsString::from)
                .collect();
            args.push("--dir".into());
            args.push(dir.into_os_string());
            if i > 0 {
                args.extend(["--replicaof", "127.0.0.1", &ports[0].to_string()].map(OsString::from));
            }
            let name = if i == 0 { "redis primary".to_string() } else { format!("redis replica {i}") };
            Ok(Member::new(
                name,
                "redis-server".into(),
                args,
                log(if i == 0 { "primary" } else { "replica" }),
                loopback(ports[i]),
            ))
        })
        .collect()
}

/// One readiness probe of a setup in `mode`: a replica online, no AOF rewrite under way, and a
/// write answered (with a replica: on the replica too).
pub fn probe(mode: Mode, members: &[Member]) -> Result<()> {
    let mut conn = Connection::connect(members[0].client, PROBE_TIMEOUT)?;
    let replicated = mode != Mode::Standalone;
    if replicated {
        let info = conn.info("replication")?;
        let online = info_field(&info, "slave0").is_some_and(|v| v.contains("state=online"));
        if !online {
            bail!("the replica is not online yet");
        }
    }
    if mode == Mode::ReplicatedAof {
        for m in members {
            let info = Connection::connect(m.client, PROBE_TIMEOUT)?.info("persistence")?;
            let busy = ["aof_rewrite_in_progress", "aof_rewrite_scheduled"]
                .iter()
                .any(|field| info_field(&info, field) != Some("0"));
            if busy {
                bail!("{} is rewriting its AOF", m.name);
            }
        }
    }
    if replicated {
        // The replication path works end to end: the write is on the replica.
        let replies = conn.pipeline(&[&[b"SET", b"ready", b"1"], &[b"WAIT", b"1", b"100"]])?;
        if !matches!(replies.as_slice(), [ok, Reply::Integer(1..)] if ok.is_ok()) {
            bail!("SET + WAIT 1 100 answered {replies:?}");
        }
    } else if !conn.call(&[b"SET", b"ready", b"1"])?.is_ok() {
        bail!("SET was not answered OK");
    }
    Ok(())
}
