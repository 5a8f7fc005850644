//! `cargo fuzz run lane_control`: bytes a stranger or a broken node sends the lane controller
//! (and an application its node).
//! They are cut into frames as the server cuts them; each frame is tried as a handshake
//! (`Hello`), as a sealed body (its tag must fail: the fuzzer does not know the key), and as a
//! node's message, which goes to the controller's core as if an authenticated node of `h0_0`
//! sent it. Never a panic; every answer goes to a host of the topology; an answer to a node
//! goes to that node; the journal holds exactly the inputs that were not refused (nor a host
//! delay the controller held already).
#![no_main]

use std::sync::LazyLock;

use kairos_fuzz as _;
use kairos_lane::controller::Controller;
use kairos_lane::node::app::AppToNode;
use kairos_lane::service::auth::{Role, Secret, Session};
use kairos_lane::service::core::Core;
use kairos_lane::service::journal::{Header, Journal};
use kairos_lane::service::wire::{FrameReader, Hello, ToController, ToNode};
use kairos_te::{Allocation, Topology};
use libfuzzer_sys::fuzz_target;

static TOPOLOGY: LazyLock<Topology> = LazyLock::new(|| {
    Topology::from_toml(include_str!("../../examples/lane/leaf-spine.toml"), "leaf-spine.toml")
        .expect("the example topology loads")
});

const NODE: &str = "h0_0";

/// The run's journal directory, removed however the run ends.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&step, bytes)) = data.split_first() else { return };
    // In memory where there is a tmpfs: the journal syncs every input.
    let base =
        if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm".into() } else { std::env::temp_dir() };
    let scratch = Scratch(base.join(format!("kairos-fuzz-lane-control-{}", std::process::id())));
    let dir = &scratch.0;
    let _ = std::fs::remove_dir_all(dir);
    let header = Header::new(&TOPOLOGY, 1_000_000, 0);
    let opened = Journal::open(dir, &header).expect("a fresh journal opens");
    let controller = Controller::new(Allocation::new(TOPOLOGY.clone()), 1_000_000);
    let mut core = Core::replay(controller, opened.journal, 0, &[]).expect("nothing to replay");
    let secret = Secret::new(vec![7; 32]).unwrap();
    let mut session = Session::new(&secret, &[1; 32], &[2; 32], Role::Controller);
    let mut reader = FrameReader::new();
    let mut accepted = 0usize;
    let mut now = 0u64;
    for piece in bytes.chunks(usize::from(step).max(1)) {
        reader.push(piece);
        loop {
            let body = match reader.next_frame() {
                Ok(Some(body)) => body.to_vec(),
                Ok(None) => break,
                Err(_) => return,
            };
            let _ = serde_json::from_slice::<Hello>(&body);
            // What an application tells its node comes in the same frames.
            let _ = serde_json::from_slice::<AppToNode>(&body);
            assert!(session.open(&body).is_err(), "a tag the fuzzer could not know was accepted");
            let Ok(input) = serde_json::from_slice::<ToController>(&body) else { continue };
            now += 1_000_000;
            let unjournaled = |core: &Core| {
                core.counters.refused_frames.values().sum::<u64>() + core.counters.host_delays_held
            };
            let before = unjournaled(&core);
            let out = core.handle(NODE, input, now).expect("the journal is writable");
            if unjournaled(&core) == before {
                accepted += 1;
            }
            for o in &out {
                assert!(core.host(&o.host).is_some(), "an answer to '{}', not a host", o.host);
                if matches!(
                    o.message,
                    ToNode::Granted { .. } | ToNode::Refused { .. } | ToNode::HostDelayKnown { .. }
                ) {
                    assert_eq!(o.host, NODE, "an answer goes to the node that asked");
                }
            }
        }
    }
    let replayed = Journal::open(dir, &header).expect("the journal reopens").records;
    assert_eq!(replayed.len(), accepted, "the journal holds the inputs that reached the controller");
});
