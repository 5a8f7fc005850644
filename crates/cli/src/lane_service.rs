//! `kairos lane controller`, `lane request` and `lane release`: the controller service from
//! the command line, and a node's one-shot requests to it (for scripts, tests and a person
//! trying the lane before any node agent runs).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use kairos_lane::service::wire::{ToController, ToNode, TunnelSpec};
use kairos_lane::service::{ControllerService, NodeConnection, Secret, ServiceConfig};
use kairos_te::{MAX_TIME_NS, Topology, ns_to_ps, ps_to_ns};

use crate::exit::{self, usage};

/// The largest secret file read: a secret is a few dozen bytes.
const MAX_SECRET_BYTES: u64 = 4096;
/// The longest grace period accepted, us (one minute).
const MAX_GRACE_US: u64 = 60_000_000;

#[derive(Args)]
pub struct ControllerArgs {
    /// Topology TOML of the network the controller allocates, at most 1 MiB.
    #[arg(long)]
    topology: PathBuf,
    /// Address nodes connect to, e.g. 127.0.0.1:7400.
    #[arg(long)]
    listen: SocketAddr,
    /// Directory of the journal (created if missing); a restart with the same directory and
    /// topology holds the same tunnels.
    #[arg(long)]
    state: PathBuf,
    /// File holding the lane's shared secret (16 to 4096 bytes; e.g. `head -c 32 /dev/urandom`).
    #[arg(long)]
    secret_file: PathBuf,
    /// Address of the Prometheus text endpoint (GET /metrics); none when not given.
    #[arg(long)]
    metrics: Option<SocketAddr>,
    /// Grace period, us: changes that loosen other tunnels' bounds take effect this long after
    /// they are announced (0 to 60,000,000).
    #[arg(long, default_value_t = 1_000)]
    grace_us: u64,
}

/// Who a node is to its controller: every command that speaks for a host takes these.
#[derive(Args)]
pub struct ControllerFlags {
    /// The controller's address.
    #[arg(long)]
    pub controller: SocketAddr,
    /// The topology host this node acts for.
    #[arg(long)]
    pub host: String,
    /// File holding the lane's shared secret (the controller's).
    #[arg(long)]
    pub secret_file: PathBuf,
}

/// Flags every one-shot node command shares.
#[derive(Args)]
pub struct NodeFlags {
    #[command(flatten)]
    who: ControllerFlags,
    /// Seconds to wait for the controller (0.1 to 60).
    #[arg(long, default_value_t = 5.0)]
    timeout: f64,
}

#[derive(Args)]
pub struct RequestArgs {
    #[command(flatten)]
    node: NodeFlags,
    /// The tunnel's name.
    #[arg(long)]
    name: String,
    /// Receiving hosts, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    to: Vec<String>,
    /// Largest packet, bytes (1 to 1 TiB).
    #[arg(long, default_value_t = 64)]
    bytes: u64,
    /// Wanted period, us (up to one hour).
    #[arg(long)]
    period_us: f64,
    /// Strict priority level, 0 (highest) to 7.
    #[arg(long, default_value_t = 0)]
    sublane: u8,
    /// Print the answer as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ReleaseArgs {
    #[command(flatten)]
    node: NodeFlags,
    /// The tunnel to release (its sender must be --host).
    #[arg(long)]
    tunnel: u64,
}

/// The shared secret in the file at `path` (`--secret-file`): at most 4096 bytes, as
/// [`Secret::new`] accepts them; a file that cannot be read or a secret refused is a usage
/// error.
pub(crate) fn secret(path: &std::path::Path) -> Result<Secret> {
    let bytes = kairos_sys::fs::read_bytes(path, MAX_SECRET_BYTES)
        .map_err(|e| usage(format!("--secret-file {e}")))?;
    Secret::new(bytes).map_err(|e| usage(format!("--secret-file {}: {e}", path.display())))
}

/// Serves until a signal ends the process (the journal holds every acknowledged input).
pub fn controller(a: &ControllerArgs) -> Result<i32> {
    if a.grace_us > MAX_GRACE_US {
        return Err(usage(format!(
            "--grace-us must be at most {MAX_GRACE_US} (one minute), got {}",
            a.grace_us
        )));
    }
    let topology = Topology::load(&a.topology).map_err(|e| usage(e.to_string()))?;
    let config = ServiceConfig {
        topology,
        grace: a.grace_us * 1_000_000,
        listen: a.listen,
        metrics: a.metrics,
        state: a.state.clone(),
        secret: secret(&a.secret_file)?,
    };
    let mut service = ControllerService::start(config)?;
    let metrics =
        service.metrics_addr().map(|m| format!(", metrics on http://{m}/metrics")).unwrap_or_default();
    crate::log(&format!(
        "lane controller on {}{metrics}; {} inputs replayed from {}{}",
        service.local_addr(),
        service.replayed(),
        a.state.display(),
        match service.torn_bytes() {
            0 => String::new(),
            n => format!(
                " (a last entry cut short by a crash, {n} bytes, was dropped: it was never acknowledged)"
            ),
        }
    ));
    service.run(&AtomicBool::new(false))?;
    Ok(exit::OK)
}

fn connect(n: &NodeFlags) -> Result<(NodeConnection, Duration)> {
    if !(0.1..=60.0).contains(&n.timeout) {
        return Err(usage(format!("--timeout must be from 0.1 to 60 seconds, got {}", n.timeout)));
    }
    let timeout = Duration::from_secs_f64(n.timeout);
    let who = &n.who;
    let (conn, _) = NodeConnection::connect(who.controller, &who.host, &secret(&who.secret_file)?, timeout)?;
    Ok((conn, timeout))
}

/// Waits for the answer numbered `app_ref` (0: a release's), passing over other notices.
fn answer(
    conn: &mut NodeConnection,
    app_ref: u64,
    release: Option<u64>,
    timeout: Duration,
) -> Result<ToNode> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Some(m) = conn.recv(left)? else {
            anyhow::bail!("the controller did not answer within {timeout:?}");
        };
        match &m {
            ToNode::Granted { app_ref: r, .. } | ToNode::Refused { app_ref: r, .. } if *r == app_ref => {
                return Ok(m);
            }
            ToNode::Released { tunnel_id } if Some(*tunnel_id) == release => return Ok(m),
            ToNode::Rejected { reason, .. } => anyhow::bail!("the controller refused the frame: {reason}"),
            _ => {}
        }
    }
}

/// Asks for one tunnel; exit 3 when refused.
pub fn request(a: &RequestArgs) -> Result<i32> {
    let period_ps =
        ns_to_ps(a.period_us * 1_000.0).filter(|&p| p > 0 && p <= MAX_TIME_NS * 1_000).ok_or_else(|| {
            usage(format!("--period-us must be above 0 and at most one hour, got {}", a.period_us))
        })?;
    let (mut conn, timeout) = connect(&a.node)?;
    let tunnel = TunnelSpec {
        name: a.name.clone(),
        receivers: a.to.clone(),
        packet_bytes: a.bytes,
        period_ps,
        sublane: a.sublane,
    };
    conn.send(&ToController::Request { app_ref: 1, tunnel })?;
    let m = answer(&mut conn, 1, None, timeout)?;
    if a.json {
        outln!("{}", serde_json::to_string(&m)?);
    }
    match m {
        ToNode::Granted { tunnel_id, grant, .. } => {
            if !a.json {
                outln!(
                    "granted tunnel {tunnel_id}: period {:.3} us, latency {:.3} to {:.3} us, {} bytes, sub-lane {}",
                    ps_to_ns(grant.period_ps) / 1e3,
                    ps_to_ns(grant.min_latency_ps) / 1e3,
                    ps_to_ns(grant.min_latency_ps.saturating_add(grant.max_jitter_ps)) / 1e3,
                    grant.packet_bytes,
                    grant.sublane
                );
            }
            Ok(exit::OK)
        }
        ToNode::Refused { reason, .. } => {
            if !a.json {
                outln!("refused: {reason}");
            }
            Ok(exit::REFUSED)
        }
        _ => unreachable!("answer returns a grant or a refusal for a request"),
    }
}

/// Releases one tunnel; exit 3 when refused.
pub fn release(a: &ReleaseArgs) -> Result<i32> {
    let (mut conn, timeout) = connect(&a.node)?;
    conn.send(&ToController::Release { tunnel_id: a.tunnel })?;
    match answer(&mut conn, 0, Some(a.tunnel), timeout)? {
        ToNode::Released { tunnel_id } => {
            outln!("released tunnel {tunnel_id}");
            Ok(exit::OK)
        }
        ToNode::Refused { reason, .. } => {
            outln!("refused: {reason}");
            Ok(exit::REFUSED)
        }
        _ => unreachable!("answer returns a release or a refusal for a release"),
    }
}
