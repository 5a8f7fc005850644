//! The stores `kairos kv bench` measures Kairos's replicated store against, started, probed,
//! killed and stopped by the lab: Redis ([`redis`]: standalone, with a replica, and with its
//! append-only file fsynced) and etcd ([`etcd`]), each a set of server processes on loopback.
//!
//! What their processes share is here, and the bench starts Kairos's own members with it too:
//! a [`Member`] is one server process, how to start it (again) and where its clients reach it,
//! its process an [`kairos_sys::child::OwnedChild`] of this one (ended with its process group on
//! every path out, a signal included), its output appended to a log on the disk; free ports on
//! loopback ([`free_ports`]), handed out once each.
//!
//! Pinning: each server is started from a thread pinned (`sched_setaffinity`) to the servers'
//! cores ([`crate::peers::process::spawn_pinned`]), and a child inherits its parent thread's
//! affinity, so every server process and all of its threads run on those cores only.
//! Stopping is SIGKILL ([`Member::kill`]: nothing a server would finish on SIGTERM matters
//! here: its data is removed), which also spares etcd's leadership hand-over on SIGTERM.

pub mod etcd;
pub mod redis;

use std::ffi::OsString;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kairos_sys::child::OwnedChild;

use crate::peers::process::{last_line, spawn_pinned};

/// How long one answer may take while a system starts or is probed.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// One server process: how to start it again, and where clients reach it.
#[derive(Debug)]
pub struct Member {
    name: String,
    program: PathBuf,
    args: Vec<OsString>,
    log: PathBuf,
    client: SocketAddr,
    child: Option<OwnedChild>,
    /// etcd's member id (from its status), to find the leader by.
    etcd_id: Option<String>,
}

impl Member {
    /// A member named `name` (in errors) that runs `program` with `args`, its output appended to
    /// `log`, its clients served at `client`; not started yet.
    pub fn new(
        name: String,
        program: PathBuf,
        args: Vec<OsString>,
        log: PathBuf,
        client: SocketAddr,
    ) -> Self {
        Self { name, program, args, log, client, child: None, etcd_id: None }
    }

    /// Its name, for errors.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where clients reach it.
    pub fn client(&self) -> SocketAddr {
        self.client
    }

    /// Whether it was started and has not been killed (nor seen exited).
    pub fn is_live(&self) -> bool {
        self.child.is_some()
    }

    /// Its process id, while it is live.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(OwnedChild::id)
    }

    /// etcd's id for it, once a status of its has been read ([`etcd::leader`]).
    pub fn etcd_id(&self) -> Option<&str> {
        self.etcd_id.as_deref()
    }

    /// Starts it from a thread pinned to `cores`, its output appended to its log.
    pub fn start(&mut self, cores: &[usize]) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("cannot open {}", self.log.display()))?;
        let mut command = Command::new(&self.program);
        command.args(&self.args).stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
        self.child = Some(spawn_pinned(&mut command, &self.name, cores)?);
        Ok(())
    }

    /// An error if the member has exited, with its log's last line.
    pub fn check(&mut self) -> Result<()> {
        if let Some(child) = self.child.as_mut()
            && let Some(status) = child.try_wait()?
        {
            self.child = None;
            bail!("{} exited ({status}): {}", self.name, last_line(&self.log));
        }
        Ok(())
    }

    /// SIGKILLs it (a crash: no warning, no hand-over) and reaps it, if it is live.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().with_context(|| format!("cannot kill {}", self.name))?;
        }
        Ok(())
    }
}

/// Free ports on loopback, `tcp` TCP ones and `udp` UDP ones, all different: each is held
/// until all are found, so none is handed out twice.
pub fn free_ports(tcp: usize, udp: usize) -> Result<(Vec<u16>, Vec<u16>)> {
    let listeners: Vec<TcpListener> =
        (0..tcp).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<std::io::Result<_>>()?;
    let sockets: Vec<UdpSocket> =
        (0..udp).map(|_| UdpSocket::bind("127.0.0.1:0")).collect::<std::io::Result<_>>()?;
    let tcp = listeners.iter().map(|l| l.local_addr().map(|a| a.port())).collect::<std::io::Result<_>>()?;
    let udp = sockets.iter().map(|s| s.local_addr().map(|a| a.port())).collect::<std::io::Result<_>>()?;
    Ok((tcp, udp))
}

/// `port` on 127.0.0.1.
pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_all_different() {
        let (tcp, udp) = free_ports(8, 8).unwrap();
        let mut tcp_sorted = tcp.clone();
        tcp_sorted.sort_unstable();
        tcp_sorted.dedup();
        assert_eq!(tcp_sorted.len(), 8);
        assert_eq!(udp.len(), 8);
    }
}
