//! An express lane up on the lane testbed, for services to run on: the testbed calibrated, a
//! controller in h0 with the topology the calibration measured, and a node in every host, all
//! in this process (each started from a thread inside its host's namespace, so its sockets
//! stay there). Applications in any namespace join a node by its directory.
//!
//! The nodes sleep between packets and releases and never spin ([`ReceiveMode::SleepOnly`]),
//! and are not pinned: a service's members share the machine's cores with them, and a loop per
//! host spinning before each release of a 25 us tunnel would take most of a core each.
//! Stopped on drop: nodes first, then the controller.

use std::collections::HashMap;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kairos_io::lane_testbed::{LaneTestbed, LaneTestbedError, host_address};
use kairos_lane::node::agent::{self, LaneTransport, NodeConfig, NodeError, NodeReport, RunningNode};
use kairos_lane::node::chunk::Schema;
use kairos_lane::node::lane::ReceiveMode;
use kairos_lane::service::auth::AuthError;
use kairos_lane::service::{ControllerService, RunningService, Secret, ServiceConfig, ServiceError};
use kairos_lane::testbed::TestbedTopologyError;
use kairos_sys::clock::realtime_ns;

/// The lane's port in every host.
const LANE_PORT: u16 = 7_500;
/// Datagrams of the calibration (about 20 us each here).
const CALIBRATION_SAMPLES: u64 = 2_000;
/// How long the nodes may take to reach the controller.
const CONNECT: Duration = Duration::from_secs(10);

/// Why the lane did not come up ([`start`]).
#[derive(Debug, thiserror::Error)]
pub enum LaneUpError {
    /// The directory for the controller's journal and the nodes could not be made.
    #[error("cannot create {}: {source}", .path.display())]
    Dir {
        /// The directory asked for.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// The testbed could not be calibrated.
    #[error("the lane testbed's calibration: {0}")]
    Calibration(LaneTestbedError),
    /// The calibration's figures make no lane topology.
    #[error("the lane's topology: {0}")]
    Topology(#[from] TestbedTopologyError),
    /// The run's secret was refused.
    #[error("the lane's secret: {0}")]
    Secret(#[from] AuthError),
    /// A host's namespace could not be entered.
    #[error("cannot enter h{host}: {source}")]
    Host {
        /// The host's index.
        host: usize,
        /// The testbed's error.
        source: LaneTestbedError,
    },
    /// The controller did not start.
    #[error("the lane controller: {0}")]
    Controller(#[from] ServiceError),
    /// A node did not start.
    #[error("the node of h{host}: {source}")]
    Node {
        /// The node's host index.
        host: usize,
        /// The node's error.
        source: NodeError,
    },
    /// The nodes did not all reach the controller in time.
    #[error("the lane's nodes did not reach the controller within {0:?}")]
    Connect(Duration),
}

/// The running lane; see the module docs.
pub struct LaneUp {
    nodes: Vec<RunningNode>,
    dirs: Vec<PathBuf>,
    _controller: RunningService,
}

impl std::fmt::Debug for LaneUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaneUp").field("dirs", &self.dirs).finish_non_exhaustive()
    }
}

fn lane_addr(host: usize) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(host_address(host), LANE_PORT))
}

/// The topology name of testbed host `i`.
pub fn host_name(i: usize) -> String {
    format!("h{i}")
}

/// Brings the lane up on every host of `testbed`; the controller's journal and the nodes'
/// directories go under `dir`. The nodes' loops run at `SCHED_FIFO` `fifo_priority` (0: a
/// normal thread): above their applications' where those are realtime, so a release is not
/// late behind them.
pub fn start(testbed: &LaneTestbed, dir: &Path, fifo_priority: i32) -> Result<LaneUp, LaneUpError> {
    std::fs::create_dir_all(dir).map_err(|source| LaneUpError::Dir { path: dir.to_path_buf(), source })?;
    let calibration = testbed.calibrate(0, 1, CALIBRATION_SAMPLES).map_err(LaneUpError::Calibration)?;
    let topology = kairos_lane::testbed::topology(&testbed.topology(&calibration))?;
    // A secret of this run's: the nodes are this process's, nobody else needs it.
    let secret = Secret::new(format!("kairos lane {} {}", std::process::id(), realtime_ns()).into_bytes())?;
    let controller = testbed
        .in_host(0, || {
            ControllerService::start(ServiceConfig {
                topology,
                grace: 0,
                listen: SocketAddr::V4(SocketAddrV4::new(host_address(0), 0)),
                metrics: None,
                state: dir.join("controller"),
                secret: secret.clone(),
            })
            .and_then(ControllerService::spawn)
        })
        .map_err(|source| LaneUpError::Host { host: 0, source })??;
    let hosts = testbed.hosts().len();
    let peers: HashMap<String, SocketAddr> = (0..hosts).map(|h| (host_name(h), lane_addr(h))).collect();
    let mut nodes = Vec::with_capacity(hosts);
    let mut dirs = Vec::with_capacity(hosts);
    for host in 0..hosts {
        let node_dir = dir.join(format!("node-{}", host_name(host)));
        let config = NodeConfig {
            controller: controller.local_addr(),
            host: host_name(host),
            secret: secret.clone(),
            dir: node_dir.clone(),
            lane_bind: lane_addr(host),
            peers: peers.clone(),
            core: None,
            fifo_priority,
            receive: ReceiveMode::SleepOnly,
            schema: Schema::Hd6,
            report_every: Duration::from_secs(1),
            transport: LaneTransport::Udp,
        };
        let node = testbed
            .in_host(host, || agent::start(config))
            .map_err(|source| LaneUpError::Host { host, source })?
            .map_err(|source| LaneUpError::Node { host, source })?;
        nodes.push(node);
        dirs.push(node_dir);
    }
    let deadline = Instant::now() + CONNECT;
    while !nodes.iter().all(RunningNode::is_connected) {
        if Instant::now() > deadline {
            return Err(LaneUpError::Connect(CONNECT));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(LaneUp { nodes, dirs, _controller: controller })
}

impl LaneUp {
    /// The directory of host `i`'s node (where its applications' socket is).
    pub fn node_dir(&self, i: usize) -> &Path {
        &self.dirs[i]
    }

    /// Stops the nodes, then the controller; returns what each node did.
    pub fn stop(mut self) -> Vec<NodeReport> {
        self.nodes.drain(..).map(RunningNode::stop).collect()
    }
}
