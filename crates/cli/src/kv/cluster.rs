//! `kairos kv cluster`: a whole cluster on this machine, kept serving while members come and go.
//!
//! It starts N `kairos kv serve` members, on loopback or on the lane's testbed, waits until every
//! member answers and one leads, prints where to connect, and then supervises: a member that
//! exits (a crash, `kill -9`) is said to have exited and started again on its own data directory,
//! where it finds its log and catches up from the leader, while the others go on serving (the
//! point of a replicated store). Only Ctrl-C stops the cluster. The data lives in `--data` (by
//! default a directory of the user's state named after the port), kept on every path so a
//! cluster started again finds its data; a temporary directory, removed at the end, only with
//! `--temp`.
//!
//! Policy apart from mechanism: [`Restarts`] decides when an exited member starts again (at
//! once, then later and later, and never after too many exits in a short time, so a member that
//! cannot run does not spin); the loop in [`cluster`] only watches and starts processes.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use clap::Args;
use kairos_sys::child::OwnedChild;

use super::{ClientArgs, LaneArgs, RaftArgs};
use crate::exit;

#[derive(Args)]
pub(super) struct ClusterArgs {
    /// Members, 1-7 (odd numbers tolerate the most failures per member).
    #[arg(long, value_name = "N", default_value_t = 3)]
    nodes: u64,
    /// Member 1's client port; member i listens on PORT + i - 1, and its Raft socket on
    /// PORT + 1000 + i - 1.
    #[arg(long, value_name = "PORT", default_value_t = 6380)]
    port: u16,
    /// Where the members' logs live (a directory per member), kept when the cluster stops so
    /// that the next start finds its data. Default: kairos/kv-cluster-PORT in
    /// $XDG_STATE_HOME (else ~/.local/state).
    #[arg(long, value_name = "DIR", conflicts_with = "temp")]
    data: Option<PathBuf>,
    /// Keep the logs in a new temporary directory, removed when the cluster stops (the data
    /// is then lost).
    #[arg(long)]
    temp: bool,
    /// Leave a member that exits down rather than start it again.
    #[arg(long)]
    no_restart: bool,
    /// Put each member on a host of the lane's testbed (network namespaces on a bridge, a
    /// strict-priority lane class at every egress; needs root) with Raft marked as lane traffic,
    /// instead of loopback. Member i listens on 10.212.0.i:PORT; the command prints how to
    /// reach it.
    #[arg(long)]
    testbed: bool,
    /// Run on the express lane (implies --testbed): a lane controller and a node in every host,
    /// and each member's Raft messages and heartbeats on tunnels of its own.
    #[arg(long)]
    lane: bool,
    #[command(flatten)]
    clients: ClientArgs,
    #[command(flatten)]
    lane_args: LaneArgs,
    #[command(flatten)]
    raft: RaftArgs,
}

/// When a member that exited starts again: at once the first time, then after a delay that
/// doubles with each exit within [`Restarts::WINDOW`], and not at all once [`Restarts::MOST`]
/// exits fall in that window (a member that cannot run, say its log is damaged, would
/// otherwise be started forever).
#[derive(Debug, Default)]
struct Restarts {
    exits: VecDeque<Instant>,
}

impl Restarts {
    const WINDOW: Duration = Duration::from_secs(60);
    const MOST: usize = 5;

    /// Notes an exit at `now`: how long to wait before starting the member again, or `None`
    /// to leave it down.
    fn exited(&mut self, now: Instant) -> Option<Duration> {
        while self.exits.front().is_some_and(|&t| now.duration_since(t) > Self::WINDOW) {
            self.exits.pop_front();
        }
        self.exits.push_back(now);
        let recent = self.exits.len();
        if recent >= Self::MOST {
            return None;
        }
        Some(if recent == 1 { Duration::ZERO } else { Duration::from_secs(1 << (recent - 2)) })
    }
}

/// One member under supervision.
struct Slot {
    id: u64,
    child: Option<OwnedChild>,
    /// When to start it again, while it is down and may be.
    start_at: Option<Instant>,
    restarts: Restarts,
}

/// Where the cluster's data lives unless `--data` says: the user's state directory, one
/// directory per client port (two clusters on different ports do not share logs).
fn default_data_dir(port: u16) -> Result<PathBuf> {
    let state = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(home) => PathBuf::from(home).join(".local/state"),
            None => {
                return Err(exit::usage(
                    "neither XDG_STATE_HOME nor HOME is set: give --data DIR (or --temp)",
                ));
            }
        },
    };
    Ok(state.join("kairos").join(format!("kv-cluster-{port}")))
}

/// The file in a cluster's data directory that says how many members it was made with.
const SHAPE_FILE: &str = "cluster";

/// Refuses a data directory made for another number of members (its members' logs name a
/// membership the new ones would not share), and records the number in a new one.
fn check_shape(data: &Path, nodes: u64) -> Result<()> {
    let file = data.join(SHAPE_FILE);
    let want = format!("members {nodes}\n");
    match std::fs::read_to_string(&file) {
        Ok(had) if had == want => Ok(()),
        Ok(had) => Err(exit::usage(format!(
            "{} holds a cluster of {} (its file '{SHAPE_FILE}' says so): give --nodes to match, or another --data for a new cluster",
            data.display(),
            match had.trim().strip_prefix("members ") {
                Some(n) => format!("{n} members"),
                None => format!("unknown shape ('{}')", had.trim()),
            }
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::write(&file, want).with_context(|| format!("cannot write {}", file.display()))
        }
        Err(e) => Err(e).with_context(|| format!("cannot read {}", file.display())),
    }
}

/// The cluster's secret in its data directory, made (32 random bytes, readable by this user
/// alone) when it has none: every member is given it, so their datagrams are sealed.
fn cluster_secret_file(data: &Path) -> Result<PathBuf> {
    let path = data.join("secret");
    if !path.exists() {
        kairos_services::seal::write_new_secret(&path)
            .with_context(|| format!("cannot write the cluster's secret to {}", path.display()))?;
    }
    Ok(path)
}

/// Refuses ports another program holds, before any member starts (a member that failed to
/// bind would otherwise exit while the others elect).
fn check_ports_free(ports: &[(u64, u16, u16)]) -> Result<()> {
    for &(i, client, raft) in ports {
        let busy = |what: &str, port: u16| {
            exit::usage(format!(
                "port {port} (member {i}'s {what} port) is in use by another program: pick another --port"
            ))
        };
        TcpListener::bind((Ipv4Addr::LOCALHOST, client)).map_err(|_| busy("client", client))?;
        UdpSocket::bind((Ipv4Addr::LOCALHOST, raft)).map_err(|_| busy("Raft", raft))?;
    }
    Ok(())
}

/// What member `host:port` says in INFO's replication section, as the default user (with
/// `password` when it needs one), if it answers.
fn replication_info(host: &str, port: u16, password: Option<&[u8]>) -> Option<String> {
    use kairos_kv::resp::client::Connection;
    let addr = SocketAddr::new(host.parse().ok()?, port);
    let mut connection = Connection::connect(addr, Duration::from_millis(500)).ok()?;
    if let Some(password) = password {
        connection.call(&[b"AUTH", password]).ok().filter(|r| r.is_ok())?;
    }
    connection.info("replication").ok()
}

/// Runs `kairos kv cluster`: checks the flags (a bad one is a usage error, before anything
/// starts), starts the members and supervises them until Ctrl-C; the exit code.
pub(super) fn cluster(a: &ClusterArgs) -> Result<i32> {
    a.raft.check()?;
    // Read and checked here, so that a bad file is one error, not one per member.
    a.clients.acl()?;
    let password = a.clients.password()?;
    if a.clients.users_file.is_some() && password.is_none() {
        return Err(exit::usage(
            "--users-file needs --requirepass-file here: the cluster asks its members INFO as the default user",
        ));
    }
    if !(1..=7).contains(&a.nodes) {
        return Err(exit::usage(format!("--nodes {} is out of range: 1 to 7", a.nodes)));
    }
    if u32::from(a.port) + 1000 + a.nodes as u32 > 65_535 || a.port < 1024 {
        return Err(exit::usage(format!(
            "--port {} leaves no room for the members' ports: 1024 to {}",
            a.port,
            65_535 - 1000 - a.nodes
        )));
    }
    let on_testbed = a.testbed || a.lane;
    if a.lane {
        // Checked before anything is made.
        a.lane_args.config(PathBuf::new(), a.nodes as usize)?;
    }
    if on_testbed {
        let flag = if a.lane { "--lane" } else { "--testbed" };
        if !kairos_sys::user::is_root() {
            return Err(exit::usage(format!(
                "{flag} makes network namespaces, which needs root: run as root or drop {flag}"
            )));
        }
        if a.nodes < 2 {
            return Err(exit::usage(format!("{flag} needs at least 2 members")));
        }
    }
    let (data, _remove) = if a.temp {
        let dir = std::env::temp_dir().join(format!("kairos-kv-{}", std::process::id()));
        let undo = dir.clone();
        let registration = kairos_sys::cleanup::register(format!("directory {}", dir.display()), move || {
            let _ = std::fs::remove_dir_all(&undo);
        });
        (dir.clone(), Some(RemoveOnDrop { dir, _registration: registration }))
    } else {
        (a.data.clone().map_or_else(|| default_data_dir(a.port), Ok)?, None)
    };
    std::fs::create_dir_all(&data).with_context(|| format!("cannot create {}", data.display()))?;
    check_shape(&data, a.nodes)?;
    let secret_file = cluster_secret_file(&data)?;
    if !on_testbed {
        let ports: Vec<_> =
            (1..=a.nodes).map(|i| (i, a.port + i as u16 - 1, a.port + 1000 + i as u16 - 1)).collect();
        check_ports_free(&ports)?;
    }
    let exe = std::env::current_exe().context("cannot find the kairos executable")?;
    let testbed = if on_testbed {
        let config =
            kairos_io::lane_testbed::LaneTestbedConfig { hosts: a.nodes as usize, ..Default::default() };
        Some(kairos_io::lane_testbed::LaneTestbed::create(config).context("cannot make the lane testbed")?)
    } else {
        None
    };
    // On the testbed every member has its own address and the same ports; on loopback one
    // address and a port each.
    let address = |i: u64| match &testbed {
        Some(bed) => (bed.hosts()[(i - 1) as usize].address.to_string(), a.port as u64, a.port as u64 + 1000),
        None => ("127.0.0.1".to_string(), a.port as u64 + i - 1, a.port as u64 + 1000 + i - 1),
    };
    // On the lane, a controller and a node in every host; member i is h(i-1)'s application.
    let lane = match (&testbed, a.lane) {
        (Some(bed), true) => {
            Some(kairos_launch::lane::start(bed, &data.join("lane"), 0).context("cannot bring the lane up")?)
        }
        _ => None,
    };
    let peers: Vec<String> = (1..=a.nodes)
        .map(|i| match &lane {
            Some(_) => format!("{i}={}", kairos_launch::lane::host_name((i - 1) as usize)),
            None => {
                let (host, _, raft) = address(i);
                format!("{i}={host}:{raft}")
            }
        })
        .collect();
    let member_dir = |i: u64| data.join(format!("member{i}"));
    let start_member = |i: u64| -> Result<OwnedChild> {
        let (host, client, _) = address(i);
        let mut command = match &testbed {
            Some(bed) => bed.host_command((i - 1) as usize, &exe.to_string_lossy())?,
            None => Command::new(&exe),
        };
        command
            .args(["kv", "serve", "--id", &i.to_string(), "--peers", &peers.join(",")])
            .arg(format!("--listen={host}:{client}"))
            .arg(format!("--data={}", member_dir(i).display()))
            .arg(format!("--secret-file={}", secret_file.display()))
            .args(a.raft.to_flags())
            .args(a.clients.to_flags())
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        match &lane {
            Some(up) => {
                command.arg(format!("--lane-node={}", up.node_dir((i - 1) as usize).display()));
                command.args(a.lane_args.to_flags());
            }
            None if testbed.is_some() => {
                command.arg("--lane-class");
            }
            None => {}
        }
        OwnedChild::spawn_named(&mut command, format!("kv member {i}")).context("cannot start a member")
    };
    let mut slots = Vec::new();
    for i in 1..=a.nodes {
        slots.push(Slot {
            id: i,
            child: Some(start_member(i)?),
            start_at: None,
            restarts: Restarts::default(),
        });
    }
    // Members are asked from the first host's namespace on the testbed.
    let ask = |i: u64| {
        let (host, client, _) = address(i);
        let ask = || match replication_info(&host, client as u16, password.as_deref()) {
            Some(info) => (true, kairos_kv::resp::client::leader_from_info(&info)),
            None => (false, None),
        };
        match &testbed {
            Some(bed) => bed.in_host(0, ask).unwrap_or((false, None)),
            None => ask(),
        }
    };
    // The banner only once every member answers and one leads: a member that cannot start is
    // an error before it.
    let start = Instant::now();
    let mut answered = vec![false; a.nodes as usize];
    let leader = loop {
        let mut leader = None;
        for (slot, seen) in slots.iter_mut().zip(answered.iter_mut()) {
            if let Some(status) = slot.child.as_mut().map(OwnedChild::try_wait).transpose()?.flatten() {
                let (_, client, raft) = address(slot.id);
                anyhow::bail!(
                    "member {} exited ({status}) before the cluster was up (is port {client} or {raft} taken?)",
                    slot.id
                );
            }
            let (up, leads) = ask(slot.id);
            *seen |= up;
            leader = leader.or(leads);
        }
        if let (true, Some(l)) = (answered.iter().all(|&s| s), leader) {
            break l;
        }
        if start.elapsed() > Duration::from_secs(10) {
            anyhow::bail!(
                "the cluster was not up after 10 s (members answering: {answered:?}, leader: {leader:?})"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let kept = if a.temp {
        "a temporary directory, removed when the cluster stops".to_string()
    } else {
        "kept when it stops".to_string()
    };
    match &testbed {
        Some(bed) => {
            match &lane {
                Some(_) => println!(
                    "kairos kv cluster: {} members on the express lane (a lane node in each host; each member's heartbeats and Raft on a tunnel every {} us, {} bytes), logs in {} ({kept})",
                    a.nodes,
                    a.raft.period_us(true),
                    a.lane_args.lane_packet_bytes,
                    data.display()
                ),
                None => println!(
                    "kairos kv cluster: {} members on the lane testbed (Raft in the lane class), logs in {} ({kept})",
                    a.nodes,
                    data.display()
                ),
            }
            for i in 1..=a.nodes {
                let (host, client, raft) = address(i);
                let how = match &lane {
                    Some(_) => {
                        format!("raft on the lane from {}", kairos_launch::lane::host_name((i - 1) as usize))
                    }
                    None => format!("raft on udp {host}:{raft}"),
                };
                println!(
                    "  member {i}: ip netns exec {} redis-cli -h {host} -p {client}   ({how})",
                    bed.hosts()[0].namespace
                );
            }
        }
        None => {
            println!(
                "kairos kv cluster: {} members on 127.0.0.1, logs in {} ({kept})",
                a.nodes,
                data.display()
            );
            for i in 1..=a.nodes {
                let (_, client, raft) = address(i);
                println!("  member {i}: redis-cli -p {client}   (raft on udp {raft})");
            }
        }
    }
    let after_exit = if a.no_restart { "left down (--no-restart)" } else { "started again on its log" };
    println!(
        "leader: member {leader} (after {} ms); any member takes any command; a member that exits is {after_exit}. Ctrl-C stops the cluster.",
        start.elapsed().as_millis()
    );
    loop {
        let now = Instant::now();
        for slot in &mut slots {
            let exited = match slot.child.as_mut() {
                Some(child) => child.try_wait()?,
                None => None,
            };
            if let Some(status) = exited {
                slot.child = None;
                let dir = member_dir(slot.id);
                let next = if a.no_restart { None } else { slot.restarts.exited(now) };
                match next {
                    _ if a.no_restart => {
                        println!("member {} exited ({status}); left down (--no-restart)", slot.id)
                    }
                    None => println!(
                        "member {} exited ({status}), {} times within {} s: left down (its log is in {})",
                        slot.id,
                        Restarts::MOST,
                        Restarts::WINDOW.as_secs(),
                        dir.display()
                    ),
                    Some(delay) if delay.is_zero() => {
                        println!(
                            "member {} exited ({status}); starting it again on {}",
                            slot.id,
                            dir.display()
                        )
                    }
                    Some(delay) => println!(
                        "member {} exited ({status}); starting it again on {} in {} s",
                        slot.id,
                        dir.display(),
                        delay.as_secs()
                    ),
                }
                slot.start_at = next.map(|d| now + d);
            }
            if slot.start_at.is_some_and(|at| now >= at) {
                slot.start_at = None;
                match start_member(slot.id) {
                    Ok(child) => {
                        println!("member {} started again (pid {})", slot.id, child.id());
                        slot.child = Some(child);
                    }
                    Err(e) => {
                        let next = slot.restarts.exited(now);
                        println!(
                            "member {} could not start again ({e:#}); {}",
                            slot.id,
                            match next {
                                Some(d) => format!("trying again in {} s", d.as_secs().max(1)),
                                None => "left down".to_string(),
                            }
                        );
                        slot.start_at = next.map(|d| now + d.max(Duration::from_secs(1)));
                    }
                }
            }
        }
        if slots.iter().all(|s| s.child.is_none() && s.start_at.is_none()) {
            anyhow::bail!("every member is down; stopping");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The cluster's own temporary directory, removed on every path out: by the drop on a return
/// or an error, by the registered undo on a signal.
struct RemoveOnDrop {
    dir: PathBuf,
    _registration: kairos_sys::cleanup::Registration,
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_starts_again_at_once_then_later_and_not_after_too_many_exits() {
        let mut r = Restarts::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(r.exited(t0), Some(Duration::ZERO));
        assert_eq!(r.exited(t0 + s(1)), Some(s(1)));
        assert_eq!(r.exited(t0 + s(3)), Some(s(2)));
        assert_eq!(r.exited(t0 + s(6)), Some(s(4)));
        assert_eq!(r.exited(t0 + s(11)), None, "five exits within a minute");
    }

    #[test]
    fn exits_a_minute_apart_start_the_member_again_at_once_each_time() {
        let mut r = Restarts::default();
        let t0 = Instant::now();
        for k in 0..10 {
            assert_eq!(r.exited(t0 + Duration::from_secs(61 * k)), Some(Duration::ZERO));
        }
    }

    #[test]
    fn a_data_directory_keeps_its_number_of_members() {
        let dir = std::env::temp_dir().join(format!("kairos-kv-shape-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        check_shape(&dir, 3).unwrap();
        check_shape(&dir, 3).unwrap();
        let e = check_shape(&dir, 5).unwrap_err().to_string();
        assert!(e.contains("holds a cluster of 3 members") && e.contains("--nodes"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_port_another_program_holds_is_refused_by_name() {
        let held = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = held.local_addr().unwrap().port();
        let e = check_ports_free(&[(2, port, 0)]).unwrap_err().to_string();
        assert!(e.contains(&format!("port {port} (member 2's client port) is in use")), "{e}");
    }
}
