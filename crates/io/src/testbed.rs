//! A two-namespace testbed: a source namespace and a forwarder namespace joined by a veth pair,
//! with addresses on a private range used only inside them. Namespaces are removed on drop, after
//! a panic (drop runs while unwinding), and on SIGINT, SIGTERM or SIGHUP (the testbed registers
//! their removal with [`kairos_sys::cleanup`], whose one signal thread undoes every registered
//! change and exits with 128 + the signal). Ones left by a killed run (SIGKILL) are named after
//! their process id and removed by the next run. Every `ip` command runs as a
//! [`kairos_sys::child::OwnedChild`], so a signal in the middle of one ends it too.
//!
//! Needs root (CAP_NET_ADMIN and `ip` from iproute2); without it, [`Testbed::create`] says so.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::process::Command;
use std::time::Duration;

use kairos_sys::child;
use kairos_sys::cleanup::{self, Registration};

/// Why a testbed could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    /// The process is not root; making namespaces needs `CAP_NET_ADMIN`.
    #[error(
        "the UDP backend needs network namespaces, which need root (CAP_NET_ADMIN): run as root, or use --backend memory"
    )]
    NotRoot,
    /// An `ip` or `tc` command ran and failed.
    #[error("`{command}` failed: {stderr}")]
    Command {
        /// The command line, program first.
        command: String,
        /// What it wrote to standard error, trimmed.
        stderr: String,
    },
    /// A command could not be run, or a socket call in a namespace failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// The source namespace's address (on the veth end there).
pub const SOURCE_IP: Ipv4Addr = Ipv4Addr::new(10, 211, 0, 1);
/// The forwarder namespace's address (on its veth end, with [`ForwarderSide::Kernel`]).
pub const FORWARDER_IP: Ipv4Addr = Ipv4Addr::new(10, 211, 0, 2);

/// Two network namespaces joined by a veth pair; removed on drop.
#[derive(Debug)]
pub struct Testbed {
    /// The source namespace's name (`kairos-src-<n>-<pid>`).
    pub source_ns: String,
    /// The forwarder namespace's name (`kairos-fwd-<n>-<pid>`).
    pub forwarder_ns: String,
    /// The veth end in the source namespace.
    pub source_dev: String,
    /// The veth end in the forwarder namespace.
    pub forwarder_dev: String,
    /// The namespaces' removal, should a signal end the process first.
    removal: Option<Registration>,
}

/// How the forwarder's end of the veth is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwarderSide {
    /// With [`FORWARDER_IP`]: the forwarder uses kernel sockets.
    Kernel,
    /// Up but without an address, and the source side holds a permanent neighbour entry for
    /// [`FORWARDER_IP`] at the end's own hardware address: for a forwarder that takes frames off
    /// the interface itself (`af_packet`). The namespace's stack still routes each frame (finds
    /// no route, and allocates and frees a route entry through RCU for it).
    Bare,
    /// As [`Self::Bare`], but the neighbour entry names [`UNCLAIMED_MAC`], an address the end
    /// does not carry: frames arrive as another host's, which the namespace's stack drops at
    /// its first check, and only the packet sockets, which take every frame, see them. The
    /// interface is the user-space forwarder's, as a NIC is DPDK's. On `Bare`, at 62.5 kpps,
    /// the stack's route entries made 62,500 RCU callbacks a second, and the grace-period
    /// kthread preempted a forwarder polling the end's core about 160 times a second; none here.
    Unclaimed,
}

/// The hardware address the source sends to on a [`ForwarderSide::Unclaimed`] end: locally
/// administered, unicast, and carried by no interface of the testbed.
pub const UNCLAIMED_MAC: [u8; 6] = [0x02, 0x6b, 0x61, 0x69, 0x72, 0x6f];

/// How long an iproute2 tool may take: each answers in milliseconds, and a busy machine
/// creating namespaces has taken a few seconds.
const TOOL_LIMIT: Duration = Duration::from_secs(30);

/// Runs `program` (an iproute2 tool: `ip`, `tc`) with `args` as an owned child, within
/// [`TOOL_LIMIT`], and returns its standard output; a failure is the command and its standard
/// error.
pub(crate) fn tool(program: &str, args: &[&str]) -> Result<String, TestbedError> {
    let out = child::output_within(Command::new(program).args(args), TOOL_LIMIT).map_err(|source| {
        let what = if source.kind() == std::io::ErrorKind::TimedOut {
            format!("`{program} {}` did not answer", args.join(" "))
        } else {
            format!("cannot run `{program}` (install iproute2)")
        };
        TestbedError::Io { what, source }
    })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(TestbedError::Command {
            command: format!("{program} {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

pub(crate) fn ip(args: &[&str]) -> Result<(), TestbedError> {
    tool("ip", args).map(drop)
}

pub(crate) fn remove_namespaces(names: &[String]) {
    for name in names {
        let _ = child::output_within(Command::new("ip").args(["netns", "del", name]), TOOL_LIMIT);
    }
}

/// Removes the namespaces of earlier runs whose process is gone: those `owner` reads a process
/// id from (and `None` for every name it does not recognise as its own kind).
pub(crate) fn remove_stale_namespaces(owner: impl Fn(&str) -> Option<u32>) {
    let Ok(out) = child::output_within(Command::new("ip").args(["netns", "list"]), TOOL_LIMIT) else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(pid) = owner(name) else { continue };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            remove_namespaces(&[name.to_string()]);
        }
    }
}

/// The process id a namespace of this testbed is named after (`kairos-<side>-<n>-<pid>`).
fn owner_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("kairos-")?;
    rest.rsplit('-').next()?.parse().ok()
}

impl Testbed {
    /// Creates the two namespaces and the veth pair between them.
    pub fn create() -> Result<Self, TestbedError> {
        Self::create_with(ForwarderSide::Kernel)
    }

    /// Creates the two namespaces and the veth pair, the forwarder's end set up as `side` says.
    pub fn create_with(side: ForwarderSide) -> Result<Self, TestbedError> {
        if !kairos_sys::user::is_root() {
            return Err(TestbedError::NotRoot);
        }
        remove_stale_namespaces(owner_of);
        let pid = std::process::id();
        // Several testbeds may live in one process (tests run in parallel): number them. The
        // process id stays last in namespace names, where `remove_stale` reads it.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 1000;
        let (source_ns, forwarder_ns) = (format!("kairos-src-{n}-{pid}"), format!("kairos-fwd-{n}-{pid}"));
        // Made under a hold, so a signal is handled either before the first namespace exists
        // or after the removal of both is registered. Registered before creation, so a failure
        // half-way is cleaned up by drop.
        let _hold = cleanup::hold_off();
        let names = [source_ns.clone(), forwarder_ns.clone()];
        let removal = cleanup::register(format!("network namespaces {}", names.join(", ")), move || {
            remove_namespaces(&names)
        });
        let bed = Testbed {
            source_ns,
            forwarder_ns,
            // Interface names hold at most 15 bytes: 2 + 7 (pid) + 1 + 3.
            source_dev: format!("ks{pid}x{n}"),
            forwarder_dev: format!("kf{pid}x{n}"),
            removal: Some(removal),
        };
        let (src, fwd) = (&bed.source_ns, &bed.forwarder_ns);
        let (veth_src, veth_fwd) = (&bed.source_dev, &bed.forwarder_dev);
        ip(&["netns", "add", src])?;
        ip(&["netns", "add", fwd])?;
        ip(&["link", "add", veth_src, "netns", src, "type", "veth", "peer", "name", veth_fwd, "netns", fwd])?;
        ip(&["-n", src, "addr", "add", &format!("{SOURCE_IP}/30"), "dev", veth_src])?;
        if side == ForwarderSide::Kernel {
            ip(&["-n", fwd, "addr", "add", &format!("{FORWARDER_IP}/30"), "dev", veth_fwd])?;
        }
        for (ns, dev) in [(src, veth_src), (fwd, veth_fwd)] {
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        // The hardware address the source sends to the forwarder at, when not through ARP.
        let next_hop = match side {
            ForwarderSide::Kernel => None,
            ForwarderSide::Bare => Some(link_address(fwd, veth_fwd)?),
            ForwarderSide::Unclaimed => Some(UNCLAIMED_MAC.map(|b| format!("{b:02x}")).join(":")),
        };
        if let Some(mac) = next_hop {
            ip(&[
                "-n",
                src,
                "neigh",
                "add",
                &FORWARDER_IP.to_string(),
                "lladdr",
                mac.trim(),
                "dev",
                veth_src,
                "nud",
                "permanent",
            ])?;
        }
        Ok(bed)
    }

    /// A UDP socket bound to `port` on the source side.
    pub fn source_socket(&self, port: u16) -> Result<UdpSocket, TestbedError> {
        socket_in(&self.source_ns, SocketAddrV4::new(SOURCE_IP, port))
    }

    /// A UDP socket bound to `port` on the forwarder side.
    pub fn forwarder_socket(&self, port: u16) -> Result<UdpSocket, TestbedError> {
        socket_in(&self.forwarder_ns, SocketAddrV4::new(FORWARDER_IP, port))
    }

    /// The hardware address of the source's veth end.
    pub fn source_mac(&self) -> Result<[u8; 6], TestbedError> {
        mac_of(&self.source_ns, &self.source_dev)
    }

    /// The hardware address of the forwarder's veth end.
    pub fn forwarder_mac(&self) -> Result<[u8; 6], TestbedError> {
        mac_of(&self.forwarder_ns, &self.forwarder_dev)
    }

    /// Runs `f` on a helper thread inside the source namespace and returns what it returns:
    /// sockets and rings made there stay there, whichever thread uses them later.
    pub fn in_source<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, TestbedError> {
        run_in_namespace(&self.source_ns, f)
    }

    /// Runs `f` on a helper thread inside the forwarder namespace (see [`Self::in_source`]).
    pub fn in_forwarder<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, TestbedError> {
        run_in_namespace(&self.forwarder_ns, f)
    }

    /// The address of UDP port `port` in the source namespace.
    pub fn source_addr(port: u16) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(SOURCE_IP, port))
    }

    /// The address of UDP port `port` in the forwarder namespace.
    pub fn forwarder_addr(port: u16) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(FORWARDER_IP, port))
    }
}

/// The hardware address of `dev` in namespace `ns`, from `ip -o link show`.
fn link_address(ns: &str, dev: &str) -> Result<String, TestbedError> {
    let out = child::output(Command::new("ip").args(["-n", ns, "-o", "link", "show", dev]))
        .map_err(|source| TestbedError::Io { what: "cannot run `ip` (install iproute2)".into(), source })?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().skip_while(|w| *w != "link/ether").nth(1).map(str::to_string).ok_or_else(|| {
        TestbedError::Command {
            command: format!("ip -n {ns} -o link show {dev}"),
            stderr: format!("no link/ether address in: {}", text.trim()),
        }
    })
}

fn mac_of(ns: &str, dev: &str) -> Result<[u8; 6], TestbedError> {
    let text = link_address(ns, dev)?;
    crate::af_packet::parse_mac(text.trim()).ok_or_else(|| TestbedError::Command {
        command: format!("ip -n {ns} -o link show {dev}"),
        stderr: format!("not a hardware address: {text}"),
    })
}

impl Drop for Testbed {
    fn drop(&mut self) {
        // Withdrawn and removed under one hold: a signal now is handled once both are gone.
        let _hold = cleanup::hold_off();
        drop(self.removal.take());
        remove_namespaces(&[self.source_ns.clone(), self.forwarder_ns.clone()]);
    }
}

/// Creates a socket inside namespace `ns`: a helper thread enters the namespace (the calling
/// thread's own namespace is left alone), binds, and hands the socket back; a socket stays in
/// the namespace it was made in, whichever thread uses it.
pub(crate) fn socket_in(ns: &str, addr: SocketAddrV4) -> Result<UdpSocket, TestbedError> {
    run_in_namespace(ns, || {
        UdpSocket::bind(addr)
            .map_err(|source| TestbedError::Io { what: format!("bind {addr} in {ns}"), source })
    })?
}

/// Runs `work` on a helper thread that has entered network namespace `ns` (the calling thread's
/// own namespace is left alone) and returns what it returned; a panic in `work` goes on in the
/// caller. Sockets it makes stay in `ns`.
pub(crate) fn run_in_namespace<T: Send>(
    ns: &str,
    work: impl FnOnce() -> T + Send,
) -> Result<T, TestbedError> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = std::fs::File::open(&path)
                .map_err(|source| TestbedError::Io { what: format!("open {path}"), source })?;
            kairos_sys::netns::enter_network_namespace(&file)
                .map_err(|source| TestbedError::Io { what: format!("setns {ns}"), source })?;
            Ok(work())
        })
        .join()
        // A panic in `work` is the caller's, with its message.
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}
