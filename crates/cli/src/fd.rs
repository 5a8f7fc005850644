//! `kairos fd`: the failure detector from the command line: one member of a group
//! (`fd member`), and the experiments that measure it (`fd detect`, `fd accuracy`). Flags only
//! parse here: the experiments' `plan` checks each against its limits before anything starts.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand, ValueEnum};
use kairos_fd::member::{self, MemberConfig};
use kairos_fd::table::bytes_for;
use kairos_fd::{AliveTable, TableHeader};
use kairos_io::bridge::{attach_words, create_words};
use kairos_lab::experiments::fd_accuracy::{self, AccuracyConfig, Load};
use kairos_lab::experiments::fd_detect::{self, DetectConfig, Failure, recommended_threshold_us};
use kairos_launch::fd_group::{Network, default_app_bump_us};
use kairos_services::lane_link::LaneLinkConfig;
use kairos_services::peer::PeerAddr;

use crate::exit;

/// `kairos fd`'s subcommands.
#[derive(Args)]
#[command(about = "The failure detector: a group's members, its detection time and its accuracy")]
pub struct FdArgs {
    #[command(subcommand)]
    command: FdCommand,
}

#[derive(Subcommand)]
enum FdCommand {
    /// One member of a group: heartbeats over UDP or the express lane, the alive table in
    /// shared memory.
    ///
    /// Every period the member sends a heartbeat, with its application's liveness counter, to
    /// every other member (on the lane, one packet to all through its host's lane node, with
    /// --lane-node); the alive table in /dev/shm lets applications read the verdicts
    /// without a system call. A demonstration application bumps the counter. Runs until SIGINT
    /// or SIGTERM, or for --run-for-ms.
    Member(MemberArgs),
    /// Detection time after a kill, a cut link and a hung application, beside phi and SWIM.
    ///
    /// A group of members (on the lane's testbed as root, loopback otherwise) fails one member
    /// per trial: SIGKILL of its process, its link down (testbed only), its application
    /// stopping; detection is timed to the first and to every member for Kairos's detector,
    /// phi accrual and SWIM in the same run. --quick: 20 trials per failure (2 for the
    /// detectors that take seconds), about 4 minutes.
    Detect(DetectArgs),
    /// Mistakes of a group where nothing fails, per threshold and load, against stalls.
    ///
    /// Query accuracy, mistake rate and mistake duration for thresholds from 5 us to 5 ms and
    /// the peers, idle, under stress-ng and (on the testbed) an iperf3 flood; every mistake is
    /// set against a stall watch. --quick: 20 s per load, about a minute and a half.
    Accuracy(AccuracyArgs),
}

#[derive(Args)]
struct MemberArgs {
    /// This member's id, one of --members.
    #[arg(long)]
    id: u64,
    /// Every member's address, this one's included, comma-separated: ID=HOST:PORT (UDP), or
    /// ID=LANE-HOST (e.g. 1=h0) with --lane-node.
    #[arg(long, value_delimiter = ',', required = true)]
    members: Vec<String>,
    /// Run on the express lane: the directory of this host's lane node (`kairos lane node
    /// --dir`); the member asks it for a tunnel to the other members' lane hosts, with the
    /// heartbeat period as the tunnel's.
    #[arg(long, value_name = "DIR")]
    lane_node: Option<PathBuf>,
    /// On the lane, the tunnel's packet, bytes, up to 1472: the heartbeats for every other
    /// member, and SWIM's datagrams in the rest.
    #[arg(long, value_name = "BYTES", default_value_t = 512)]
    lane_packet_bytes: u64,
    /// The heartbeat period T, microseconds, 10-1000000.
    #[arg(long, value_name = "US", default_value_t = 100)]
    period_us: u64,
    /// The threshold Lambda, microseconds: a member is suspected when no heartbeat with a new
    /// counter came within T + Lambda (default: 200, or 1000 on the lane).
    #[arg(long, value_name = "US")]
    threshold_us: Option<u64>,
    /// More thresholds to record suspicions with (not published), microseconds.
    #[arg(long, value_name = "US", value_delimiter = ',')]
    sweep_us: Vec<u64>,
    /// Also run the peers (phi accrual, SWIM) on the same heartbeats and socket.
    #[arg(long)]
    peers: bool,
    /// The sockets' type-of-service byte (184: the lane's class on the testbed).
    #[arg(long)]
    tos: Option<u8>,
    /// The core of the loop and the application.
    #[arg(long)]
    core: Option<usize>,
    /// The loop's SCHED_FIFO priority, 1-98 (0: none; needs root).
    #[arg(long, default_value_t = 0)]
    fifo: i32,
    /// The demonstration application's bump period, microseconds (0: no application; default:
    /// a third of the period).
    #[arg(long, value_name = "US")]
    app_bump_us: Option<u64>,
    /// This start's incarnation, larger than any earlier start's (default: the wall clock in ns).
    #[arg(long)]
    incarnation: Option<u64>,
    /// Run this long, then write --report and exit, milliseconds.
    #[arg(long, value_name = "MS")]
    run_for_ms: Option<u64>,
    /// Count suspicions from this CLOCK_MONOTONIC time, ns (the experiments' window).
    #[arg(long, value_name = "NS", default_value_t = 0, hide = true)]
    measure_from_ns: u64,
    /// ... until this CLOCK_MONOTONIC time, ns (default: to the end of the run).
    #[arg(long, value_name = "NS", hide = true)]
    measure_until_ns: Option<u64>,
    /// The alive table's file: made (and removed at the end) when missing, taken over when
    /// there (default: /dev/shm/kairos-fd-ID).
    #[arg(long, value_name = "PATH")]
    table: Option<PathBuf>,
    /// Where to write what the member saw (JSON) when it ends after --run-for-ms.
    #[arg(long, value_name = "PATH")]
    report: Option<PathBuf>,
    /// Seeds SWIM's random choices.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Trace the interrupt handlers run on the loop's core (--core), so that a pass long in
    /// them is told from the member's own work in its held stretches. Needs root and tracefs;
    /// each handler traced costs about half a microsecond more.
    #[arg(long)]
    interrupt_clock: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum NetworkArg {
    /// Processes on loopback (any user).
    Loopback,
    /// One network namespace per member on the lane's testbed (root).
    Namespaces,
    /// The testbed with the lane up: heartbeats on each member's lane tunnel, through its
    /// host's node, one packet a period to all (root).
    Lane,
}

impl From<NetworkArg> for Network {
    fn from(n: NetworkArg) -> Self {
        match n {
            NetworkArg::Loopback => Network::Loopback,
            NetworkArg::Namespaces => Network::Namespaces,
            NetworkArg::Lane => Network::Lane,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
#[value(rename_all = "snake_case")]
enum FailureArg {
    /// SIGKILL of the member's process.
    Kill,
    /// Its host's link down (root).
    LinkDown,
    /// Its application stops bumping the counter.
    AppHang,
}

#[derive(Clone, Copy, ValueEnum)]
enum LoadArg {
    /// Nothing else running.
    Idle,
    /// stress-ng on every core.
    Stress,
    /// An iperf3 UDP flood between two hosts of the testbed (root).
    Flood,
}

/// The flags both experiments take.
#[derive(Args)]
struct GroupArgs {
    #[command(flatten)]
    common: crate::Common,
    /// Members of the group (default: 3 for detect, a member per core for accuracy).
    #[arg(long, value_name = "N")]
    members: Option<usize>,
    /// The heartbeat period T, microseconds.
    #[arg(long, value_name = "US", default_value_t = 100)]
    period_us: u64,
    /// Where the members run (default: namespaces as root, loopback otherwise).
    #[arg(long, value_enum)]
    network: Option<NetworkArg>,
    /// The first member's UDP port (on loopback member i takes PORT + i - 1).
    #[arg(long, value_name = "PORT")]
    base_port: Option<u16>,
    /// The member loops' SCHED_FIFO priority, 1-98 (0: none; asked only as root).
    #[arg(long, default_value_t = 70)]
    fifo: i32,
    /// Do not pin the members (by default member i runs on core i modulo the cores).
    #[arg(long)]
    no_pin: bool,
    /// The demonstration application's bump period, microseconds (default: a third of the
    /// period on loopback, the period on the testbed, where a third would saturate two cores).
    #[arg(long, value_name = "US")]
    app_bump_us: Option<u64>,
}

#[derive(Args)]
struct DetectArgs {
    #[command(flatten)]
    group: GroupArgs,
    /// Kairos's threshold Lambda, microseconds (default: the recommended one, 200, or 1000
    /// with --network lane).
    #[arg(long, value_name = "US")]
    threshold_us: Option<u64>,
    /// Trials per failure for the fast detectors (default: 20 with --quick, else 100).
    #[arg(long, value_name = "N")]
    trials: Option<usize>,
    /// Trials per failure for the detectors that take seconds (default: 2 with --quick, else 10).
    #[arg(long, value_name = "N")]
    slow_trials: Option<usize>,
    /// The failures (comma-separated; default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    failures: Vec<FailureArg>,
    /// How long the group must stay settled before each failure, milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 100)]
    settle_ms: u64,
}

#[derive(Args)]
struct AccuracyArgs {
    #[command(flatten)]
    group: GroupArgs,
    /// The thresholds Lambda, microseconds, comma-separated (default: 5 us to 5 ms).
    #[arg(long, value_name = "US", value_delimiter = ',')]
    thresholds_us: Vec<u64>,
    /// The threshold the table is published with, microseconds (default: the recommended one,
    /// 200, or 1000 with --network lane).
    #[arg(long, value_name = "US")]
    threshold_us: Option<u64>,
    /// Seconds per load, 1-86400 (default: 20 with --quick, else 600).
    #[arg(long)]
    seconds: Option<f64>,
    /// The loads (comma-separated; default: idle, stress, and flood on the testbed).
    #[arg(long, value_enum, value_delimiter = ',')]
    loads: Vec<LoadArg>,
    /// The stall watch's period, microseconds (it sees every stall longer than this).
    #[arg(long, value_name = "US", default_value_t = 200)]
    stall_period_us: u64,
    /// The members trace the interrupt handlers run on their loops' cores (see `kairos fd
    /// member --help`): a diagnosis of their long passes, which the tracing itself lengthens.
    #[arg(long)]
    interrupt_clock: bool,
}

/// Runs `kairos fd ...`; the exit code on success.
pub fn run(args: &FdArgs) -> Result<i32> {
    match &args.command {
        FdCommand::Member(a) => member(a),
        FdCommand::Detect(a) => {
            let exe = std::env::current_exe().context("cannot find the kairos executable")?;
            let g = &a.group;
            let mut config = DetectConfig::preset(g.common.quick, exe);
            config.members = g.members.unwrap_or(config.members);
            config.period_us = g.period_us;
            config.network = g.network.map_or(config.network, Network::from);
            config.threshold_us = a.threshold_us.unwrap_or(recommended_threshold_us(config.network));
            config.trials = a.trials.unwrap_or(config.trials);
            config.slow_trials = a.slow_trials.unwrap_or(config.slow_trials);
            if !a.failures.is_empty() {
                config.failures = a
                    .failures
                    .iter()
                    .map(|f| match f {
                        FailureArg::Kill => Failure::Kill,
                        FailureArg::LinkDown => Failure::LinkDown,
                        FailureArg::AppHang => Failure::AppHang,
                    })
                    .collect();
            }
            config.base_port = g.base_port.unwrap_or(config.base_port);
            config.fifo_priority = g.fifo;
            config.pin = !g.no_pin;
            config.settle_ms = a.settle_ms;
            config.app_bump_us = g.app_bump_us.unwrap_or(default_app_bump_us(config.network, g.period_us));
            crate::experiment(&g.common, &config, fd_detect::report)
        }
        FdCommand::Accuracy(a) => {
            let exe = std::env::current_exe().context("cannot find the kairos executable")?;
            let g = &a.group;
            let mut config = AccuracyConfig::preset(g.common.quick, exe);
            config.members = g.members.unwrap_or(config.members);
            config.period_us = g.period_us;
            if !a.thresholds_us.is_empty() {
                config.thresholds_us = a.thresholds_us.clone();
            }
            config.seconds = a.seconds.unwrap_or(config.seconds);
            config.network = g.network.map_or(config.network, Network::from);
            config.recommended_us = a.threshold_us.unwrap_or(recommended_threshold_us(config.network));
            if !a.loads.is_empty() {
                config.loads = a
                    .loads
                    .iter()
                    .map(|l| match l {
                        LoadArg::Idle => Load::Idle,
                        LoadArg::Stress => Load::Stress,
                        LoadArg::Flood => Load::Flood,
                    })
                    .collect();
            } else if config.network == Network::Loopback {
                config.loads.retain(|l| *l != Load::Flood);
            }
            config.base_port = g.base_port.unwrap_or(config.base_port);
            config.fifo_priority = g.fifo;
            config.pin = !g.no_pin;
            config.stall_period_us = a.stall_period_us;
            config.time_interrupts = a.interrupt_clock;
            config.app_bump_us = g.app_bump_us.unwrap_or(default_app_bump_us(config.network, g.period_us));
            crate::experiment(&g.common, &config, fd_accuracy::report)
        }
    }
}

fn parse_members(members: &[String]) -> Result<BTreeMap<u64, PeerAddr>> {
    let mut out = BTreeMap::new();
    for m in members {
        let (id, addr) = m.split_once('=').ok_or_else(|| {
            exit::usage(format!(
                "--members entry '{m}' is not ID=HOST:PORT or ID=LANE-HOST (e.g. 1=127.0.0.1:17400 or 1=h0)"
            ))
        })?;
        let id: u64 = id.parse().ok().filter(|&i| i > 0).ok_or_else(|| {
            exit::usage(format!("--members entry '{m}': the id must be a whole number from 1"))
        })?;
        let addr: PeerAddr = addr.parse().map_err(|e| exit::usage(format!("--members entry '{m}': {e}")))?;
        if out.insert(id, addr).is_some() {
            return Err(exit::usage(format!("--members names member {id} twice")));
        }
    }
    Ok(out)
}

fn member(a: &MemberArgs) -> Result<i32> {
    let members = parse_members(&a.members)?;
    if !members.contains_key(&a.id) {
        return Err(exit::usage(format!(
            "--id {} is not among --members ({:?})",
            a.id,
            members.keys().collect::<Vec<_>>()
        )));
    }
    if !(2..=kairos_fd::table::MAX_ROWS).contains(&members.len()) {
        return Err(exit::usage(format!("--members names {} members: a group has 2 to 256", members.len())));
    }
    let network = if a.lane_node.is_some() { Network::Lane } else { Network::Loopback };
    let threshold_us = a.threshold_us.unwrap_or(recommended_threshold_us(network));
    if !(10..=1_000_000).contains(&a.period_us) || threshold_us > 10_000_000 {
        return Err(exit::usage(format!(
            "--period-us {} (10 to 1000000) or --threshold-us {} (0 to 10000000) is out of range",
            a.period_us, threshold_us
        )));
    }
    let lane_hosts = members.values().filter(|p| p.lane_host().is_some()).count();
    let lane = match &a.lane_node {
        Some(dir) => {
            if lane_hosts != members.len() {
                return Err(exit::usage(
                    "--lane-node needs every --members entry to be a lane host (ID=h0)".to_string(),
                ));
            }
            let link = LaneLinkConfig {
                node_dir: dir.clone(),
                period: std::time::Duration::from_micros(a.period_us),
                packet_bytes: a.lane_packet_bytes,
            };
            link.check(members.len()).map_err(|e| exit::usage(format!("--lane-packet-bytes: {e}")))?;
            Some(link)
        }
        None if lane_hosts > 0 => {
            return Err(exit::usage(
                "--members names lane hosts: give --lane-node DIR (this host's lane node), or HOST:PORT for each"
                    .to_string(),
            ));
        }
        None => None,
    };
    let incarnation = a.incarnation.unwrap_or_else(kairos_sys::clock::realtime_ns);
    let config = MemberConfig {
        id: a.id,
        members,
        lane,
        period_ns: a.period_us * 1_000,
        threshold_ns: threshold_us * 1_000,
        sweep_thresholds_ns: a.sweep_us.iter().map(|t| t * 1_000).collect(),
        peers: a.peers,
        type_of_service: a.tos,
        core: a.core,
        fifo_priority: a.fifo,
        app_bump_ns: match a.app_bump_us {
            Some(0) => None,
            Some(us) => Some(us * 1_000),
            None => Some(a.period_us * 1_000 / 3),
        },
        incarnation,
        run_for_ns: a.run_for_ms.map(|ms| ms * 1_000_000),
        measure_from_ns: a.measure_from_ns,
        measure_until_ns: a.measure_until_ns,
        seed: a.seed,
        time_interrupts: a.interrupt_clock,
    };
    let others = config.others();
    let path = match &a.table {
        Some(p) => p.clone(),
        None => kairos_sys::shm::shm_path(&format!("kairos-fd-{}", a.id))?,
    };
    let bytes = bytes_for(others.len());
    let words = if path.exists() {
        attach_words(&path, bytes..=1 << 24).with_context(|| format!("the alive table {}", path.display()))?
    } else {
        create_words(&path, bytes).with_context(|| format!("the alive table {}", path.display()))?
    };
    // Made here: removed at the end, and on SIGINT/SIGTERM (which end the process at once).
    let _removal = words.owner().unlinks_on_drop().then(|| {
        let p = path.clone();
        kairos_sys::cleanup::register(format!("alive table {}", path.display()), move || {
            let _ = std::fs::remove_file(&p);
        })
    });
    let header = TableHeader {
        period_ns: config.period_ns,
        threshold_ns: config.threshold_ns,
        member: config.id,
        incarnation,
    };
    let table = AliveTable::init(Arc::new(words), &header, &others).context("the alive table")?;
    eprintln!(
        "kairos fd member {}: heartbeats every {} us to {} members{}, Lambda {} us; alive table in {}",
        a.id,
        a.period_us,
        others.len(),
        if config.lane.is_some() { " on the lane" } else { "" },
        threshold_us,
        path.display()
    );
    let report = member::run(&config, &table, &AtomicBool::new(false))?;
    if let Some(path) = &a.report {
        let json = serde_json::to_vec(&report)?;
        kairos_sys::fs::write_atomic(path, &json)?;
    }
    Ok(exit::OK)
}
