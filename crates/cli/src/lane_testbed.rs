//! `kairos lane testbed`: the express lane's testbed network ([`kairos_io::lane_testbed`]) from
//! the command line: make it, calibrate it, write the lane's topology of it, print what was made,
//! then hold it for nodes to run in or take it down. The testbed's figures become a
//! `kairos_lane` topology here, the one place both crates meet (`io` is a layer below `lane`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;
use kairos_io::lane_testbed::{
    BRIDGE, BULK_ASSURED_BPS, BULK_CLASS, Calibration, HOST_DEVICE, JITTER_PERCENTILE, LANE_BRIDGE,
    LANE_CLASS, LANE_DEVICE, LANE_TOS, LINK_CLASS, LaneTestbed, LaneTestbedConfig, MAX_CALIBRATION_SAMPLES,
    MAX_HOSTS, MAX_QUEUE_LIMIT, MAX_RATE_BPS, MIN_HOSTS, MIN_RATE_BPS, MTU_BYTES, TestbedTopology,
    lane_address, transmission_ns,
};

use crate::exit::{self, usage};

#[derive(Args)]
pub struct TestbedArgs {
    /// Hosts, 2-16: network namespaces kairos-<pid>-h0 onward (10.212.0.1/24 onward), on a
    /// bridge in kairos-<pid>-sw. Required.
    #[arg(long)]
    hosts: usize,
    /// The rate every veth is shaped to (HTB), Mbit/s, 1-100000.
    #[arg(long, default_value_t = 1000)]
    rate_mbps: u64,
    /// The lane class's queue at every egress, packets, 1-100000; the topology's queue_bytes is
    /// this many 1500-byte packets.
    #[arg(long, default_value_t = 64)]
    lane_limit: u32,
    /// The bulk class's queue at every egress, packets, 1-100000.
    #[arg(long, default_value_t = 1000)]
    bulk_limit: u32,
    /// Datagrams the calibration sends from h0 to h1, one at a time, 1000-1000000 (about 20 us
    /// each here).
    #[arg(long, default_value_t = 5000)]
    samples: u64,
    /// Where the topology TOML goes (replaced whole; its directory must exist). Required.
    #[arg(long)]
    write_topology: PathBuf,
    /// Keep the testbed up until Ctrl-C or SIGTERM, which remove it; without it the testbed is
    /// removed once the topology is written.
    #[arg(long)]
    hold: bool,
    /// Give lane traffic a path of its own: a second veth per host (`lane`, 10.213.0.1/24
    /// onward) into a bridge of its own, shaped alike, each end received by a kernel thread
    /// (threaded NAPI) that can be pinned to the lane's core; the calibration and the topology
    /// are then that path's. Lane nodes bind to the lane addresses.
    #[arg(long)]
    lane_path: bool,
}

/// The fewest calibration datagrams: a thousand leave one above the 99.9th percentile.
const MIN_SAMPLES: u64 = 1000;

/// The testbed's configuration from the flags, every flag checked (a usage error names it).
fn config(a: &TestbedArgs) -> Result<LaneTestbedConfig> {
    if !(MIN_HOSTS..=MAX_HOSTS).contains(&a.hosts) {
        return Err(usage(format!("--hosts must be from {MIN_HOSTS} to {MAX_HOSTS}, got {}", a.hosts)));
    }
    let (min_mbps, max_mbps) = (MIN_RATE_BPS / 1_000_000, MAX_RATE_BPS / 1_000_000);
    if !(min_mbps..=max_mbps).contains(&a.rate_mbps) {
        return Err(usage(format!("--rate-mbps must be from {min_mbps} to {max_mbps}, got {}", a.rate_mbps)));
    }
    for (flag, limit) in [("--lane-limit", a.lane_limit), ("--bulk-limit", a.bulk_limit)] {
        if !(1..=MAX_QUEUE_LIMIT).contains(&limit) {
            return Err(usage(format!("{flag} must be from 1 to {MAX_QUEUE_LIMIT} packets, got {limit}")));
        }
    }
    if !(MIN_SAMPLES..=MAX_CALIBRATION_SAMPLES).contains(&a.samples) {
        return Err(usage(format!(
            "--samples must be from {MIN_SAMPLES} to {MAX_CALIBRATION_SAMPLES}, got {}",
            a.samples
        )));
    }
    check_destination(&a.write_topology)?;
    let config = LaneTestbedConfig {
        hosts: a.hosts,
        rate_bps: a.rate_mbps * 1_000_000,
        lane_limit: a.lane_limit,
        bulk_limit: a.bulk_limit,
        lane_path: a.lane_path,
        ..LaneTestbedConfig::default()
    };
    config.check().map_err(|e| usage(e.to_string()))?;
    Ok(config)
}

/// The topology's path must name a file in a directory that exists.
fn check_destination(path: &Path) -> Result<()> {
    let shown = path.display();
    if path.is_dir() {
        return Err(usage(format!("--write-topology {shown}: is a directory, expected a file")));
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(usage(format!("--write-topology {shown}: no directory {}", dir.display())));
    }
    Ok(())
}

/// Runs `kairos lane testbed`.
pub fn run(a: &TestbedArgs) -> Result<i32> {
    let config = config(a)?;
    if !kairos_sys::user::is_root() {
        return Err(kairos_io::LaneTestbedError::NotRoot.into());
    }
    crate::log(&format!("making {} hosts on a bridge, shaped to {} Mbit/s", a.hosts, a.rate_mbps));
    let bed = LaneTestbed::create(config)?;
    crate::log(&format!("calibrating h0 -> h1 with {} datagrams", a.samples));
    let calibration = bed.calibrate(0, 1, a.samples)?;
    let plain = bed.topology(&calibration);
    let topology = kairos_lane::testbed::topology(&plain).map_err(anyhow::Error::msg)?;
    let text = format!("{}{}", header(&bed, &calibration), topology.to_toml());
    kairos_sys::fs::write_atomic(&a.write_topology, text.as_bytes())?;
    out!("{}", summary(&bed, &calibration, &plain, &a.write_topology));
    if a.hold {
        let first = &bed.hosts()[0].namespace;
        outln!(
            "holding the testbed until Ctrl-C or SIGTERM, which remove it; run a command in a host with `ip netns exec {first} COMMAND`"
        );
        // The signal handler removes the namespaces and exits with 128 + the signal.
        loop {
            std::thread::park();
        }
    }
    drop(bed);
    outln!("testbed removed (--hold keeps it up)");
    Ok(exit::OK)
}

fn us(ns: u64) -> String {
    format!("{:.2} us", ns as f64 / 1e3)
}

fn mbps(bps: u64) -> String {
    format!("{} Mbit/s", bps as f64 / 1e6)
}

/// The calibration's figures on one line.
fn figures(c: &Calibration) -> String {
    format!(
        "min {}, p50 {}, p99 {}, p99.9 {}, max {} ({} lost)",
        us(c.min_ns),
        us(c.p50_ns),
        us(c.p99_ns),
        us(c.p999_ns),
        us(c.max_ns),
        c.lost
    )
}

/// The comment the topology file starts with: where its figures come from, and what they do
/// not promise.
fn header(bed: &LaneTestbed, c: &Calibration) -> String {
    let config = bed.config();
    let hosts = bed.hosts();
    let last = hosts.len() - 1;
    format!(
        "# The express lane's testbed, written by `kairos lane testbed` (process {pid}) from the\n\
         # network it made and measured (removed when the command ended, unless --hold): hosts\n\
         # h0..h{last} (network namespaces {first}..h{last}, {a0}..{alast}/24) on a Linux bridge\n\
         # (namespace {sw}). Every egress is shaped by HTB to {rate}; lane traffic (IP DSCP EF,\n\
         # TOS {tos:#04x}) has a strict-priority class whose pfifo holds {limit} packets:\n\
         # queue_bytes = {limit} x {MTU_BYTES} bytes.\n\
         {path}\
         # Calibration h{from} -> h{to} across the bridge, {n} idle datagrams, kernel receive stamps:\n\
         # {figures}.\n\
         # min_delay_ns is half the minimum (two alike hops) less a {MTU_BYTES}-byte frame's transmission\n\
         # at the link rate ({frame}), at least 0: the lane's model charges every hop the packet's\n\
         # transmission, which a veth does not take (HTB passes a lone packet at once).\n\
         # max_jitter_ns is half of p{JITTER_PERCENTILE} less min_delay_ns.\n\
         # A virtual machine gives no hard bound on delay (its vCPUs are descheduled for\n\
         # milliseconds): p{JITTER_PERCENTILE} is a measured percentile, not a guarantee, and bounds\n\
         # computed from this file hold for the packets within it, not for all.\n",
        pid = std::process::id(),
        first = hosts[0].namespace,
        a0 = hosts[0].address,
        alast = hosts[last].address,
        sw = bed.switch_namespace(),
        rate = mbps(config.rate_bps),
        tos = LANE_TOS,
        limit = config.lane_limit,
        from = c.from,
        to = c.to,
        n = c.samples + c.lost,
        figures = figures(c),
        frame = us(transmission_ns(MTU_BYTES, config.rate_bps)),
        path = if bed.has_lane_path() {
            format!(
                "# Lane traffic has a path of its own: each host's {LANE_DEVICE} ({l0}..{llast}/24) on the\n\
                 # bridge {LANE_BRIDGE}, shaped alike, every end received by a kernel thread of its own\n\
                 # (threaded NAPI); the calibration below is that path's.\n",
                l0 = lane_address(0),
                llast = lane_address(last),
            )
        } else {
            String::new()
        },
    )
}

/// What was made and measured, for a person.
fn summary(bed: &LaneTestbed, c: &Calibration, t: &TestbedTopology, path: &Path) -> String {
    let config = bed.config();
    let rate = mbps(config.rate_bps);
    let mut out = String::new();
    let _ =
        writeln!(out, "lane testbed: {} hosts on a bridge, every egress shaped to {rate}", bed.hosts().len());
    let _ = writeln!(out, "  {:<4}  {:<22}  {:<14}  device", "node", "namespace", "address");
    let ports: Vec<&str> = bed.hosts().iter().map(|h| h.switch_port.as_str()).collect();
    let _ = writeln!(
        out,
        "  {:<4}  {:<22}  {:<14}  {BRIDGE}, ports {}",
        t.switch,
        bed.switch_namespace(),
        "-",
        ports.join(" ")
    );
    for (i, h) in bed.hosts().iter().enumerate() {
        let address = format!("{}/24", h.address);
        let _ = writeln!(out, "  {:<4}  {:<22}  {address:<14}  {HOST_DEVICE}", h.name, h.namespace);
        if bed.has_lane_path() {
            let address = format!("{}/24", lane_address(i));
            let _ = writeln!(out, "  {:<4}  {:<22}  {address:<14}  {LANE_DEVICE} (lane path)", "", "");
        }
    }
    if bed.has_lane_path() {
        let ports: Vec<&str> = bed.hosts().iter().map(|h| h.lane_switch_port.as_str()).collect();
        let threads: Vec<String> = bed.napi_threads().iter().map(|t| t.pid.to_string()).collect();
        let _ = writeln!(
            out,
            "lane path: bridge {LANE_BRIDGE} (ports {}); every end received by its own kernel thread (threaded NAPI), pids {}: kairos doctor --apply --lane-interface {LANE_DEVICE} puts them on the lane core above the nodes (--revert gives them back)",
            ports.join(" "),
            threads.join(" ")
        );
    }
    let _ = writeln!(
        out,
        "classes at every egress (each host's {HOST_DEVICE}, each bridge port), htb root 1: (default {BULK_CLASS}):"
    );
    let _ = writeln!(out, "  {LINK_CLASS:<5} link  rate {rate}");
    let _ = writeln!(
        out,
        "  {LANE_CLASS:<5} lane  prio 0, rate {rate}, pfifo limit {}; u32 filter ip dsfield {LANE_TOS:#04x}/0xfc (DSCP EF)",
        config.lane_limit
    );
    let _ = writeln!(
        out,
        "  {BULK_CLASS:<5} bulk  prio 1, rate {} kbit/s, ceil {rate}, pfifo limit {}; everything else",
        BULK_ASSURED_BPS / 1000,
        config.bulk_limit
    );
    let _ = writeln!(
        out,
        "lane sockets set IP_TOS {LANE_TOS:#04x} (DSCP EF); the socket priority alone would not survive the veth into the switch"
    );
    let _ = writeln!(
        out,
        "calibration h{} -> h{}, {} idle datagrams, kernel receive stamps: {}",
        c.from,
        c.to,
        c.samples + c.lost,
        figures(c)
    );
    let _ = writeln!(
        out,
        "topology written to {}: hosts h0..h{}, switch {}, {} links of {rate}, queue_bytes {}, min_delay {}, max_jitter {} (min_delay: half the minimum less a frame's transmission; p{JITTER_PERCENTILE} split over two hops less it)",
        path.display(),
        t.hosts.len() - 1,
        t.switch,
        2 * t.hosts.len(),
        t.queue_bytes,
        us(t.min_delay_ns),
        us(t.max_jitter_ns)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_destination_must_be_a_file_in_a_directory_that_exists() {
        assert!(check_destination(Path::new("t.toml")).is_ok());
        assert!(check_destination(Path::new("/")).is_err());
        let e = check_destination(Path::new("/no/such/dir/t.toml")).unwrap_err();
        assert_eq!(exit::code_of(&e), exit::USAGE);
        assert!(e.to_string().contains("no directory /no/such/dir"), "{e}");
    }
}
