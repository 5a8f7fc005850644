//! The control thread's event loop and its side toward the controller: connecting (and
//! reconnecting with a doubling back-off), reconciling with the controller's list on each
//! welcome, and turning the controller's notices into lane commands and answers to applications.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use kairos_io::bridge;
use kairos_ring::bridge::BridgeLayout;
use kairos_sys::shm::shm_path;
use mio::net::{TcpStream, UnixListener};
use mio::{Events, Interest, Poll, Token};

use super::apps::App;
use super::peer_sends::PeerSends;
use super::{
    CONTROLLER, FIRST_APP, LISTENER, MAX_MESSAGE, NodeConfig, NodeError, OUTBOX_SLOTS, WAKER, io_error,
};
use crate::controller::{HOST_DELAY_REFUSED, Reason};
use crate::node::app::NodeToApp;
use crate::node::lane::LaneCommand;
use crate::node::promise::{self, HostJitter};
use crate::service::auth::Session;
use crate::service::client::{MAX_BACKOFF, MIN_BACKOFF, NodeConnection, Welcome};
use crate::service::wire::{FrameReader, Grant, ToController, ToNode, TunnelSpec, put_sealed};
use crate::te::{HostDelay, TunnelId};

/// A request forwarded to the controller, under the node's number.
pub(super) struct Pending {
    pub(super) app: Token,
    pub(super) app_ref: u64,
    pub(super) spec: TunnelSpec,
}

pub(super) struct Link {
    stream: TcpStream,
    reader: FrameReader,
    session: Session,
}

pub(super) struct Control {
    pub(super) config: NodeConfig,
    pub(super) poll: Poll,
    pub(super) listener: UnixListener,
    pub(super) apps: HashMap<Token, App>,
    pub(super) next_token: usize,
    pub(super) link: Option<Link>,
    retry_at: Instant,
    backoff: Duration,
    connections: u64,
    pub(super) next_ref: u64,
    pub(super) pending: HashMap<u64, Pending>,
    /// Sending tunnel -> the application that owns it.
    pub(super) owners: HashMap<TunnelId, Token>,
    /// Sending tunnel -> what the node promises for it.
    sending: HashMap<TunnelId, Sending>,
    /// What this host adds to the controller's bounds.
    host: HostJitter,
    /// What of it the controller's bounds hold, as it last said (reset on each welcome).
    held: HostDelay,
    /// The send calls to each peer, timed once its node is up (the fan-out share of `host`).
    peer_sends: PeerSends,
    /// Where the node's lines go.
    log: Option<fn(&str)>,
    pub(super) commands: Sender<LaneCommand>,
    reports: Receiver<ToController>,
    /// This node's number in the process, in its bridge files' names (tests run several).
    instance: u64,
    /// Whether the controller's connection is up, for the node's owner.
    pub(super) connected: Arc<AtomicBool>,
}

/// A sending tunnel of this host, as the node promises it.
struct Sending {
    name: String,
    /// The receivers its packets are sent to, one send call each.
    receivers: usize,
    /// The controller's last grant (kept to promise it again when the host's share grows) and
    /// the promise made of it. The log says a promise once: a notice that leaves it as it was
    /// (`BW_EXCEEDED`, or a re-plan elsewhere that did not move this tunnel's bounds) is no news
    /// to the reader.
    last: Option<(Grant, Grant)>,
}

/// Nodes started by this process, numbering their bridge files.
static INSTANCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Control {
    pub(super) fn new(
        config: NodeConfig,
        poll: Poll,
        mut listener: UnixListener,
        commands: Sender<LaneCommand>,
        reports: Receiver<ToController>,
        (host, peer_sends): (HostJitter, PeerSends),
        log: Option<fn(&str)>,
    ) -> Result<Self, NodeError> {
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(io_error("cannot poll the applications' socket"))?;
        Ok(Self {
            config,
            poll,
            listener,
            apps: HashMap::new(),
            next_token: FIRST_APP,
            link: None,
            retry_at: Instant::now(),
            backoff: MIN_BACKOFF,
            connections: 0,
            next_ref: 1,
            pending: HashMap::new(),
            owners: HashMap::new(),
            sending: HashMap::new(),
            host,
            held: HostDelay::default(),
            peer_sends,
            log,
            commands,
            reports,
            instance: INSTANCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            connected: Arc::new(AtomicBool::new(false)),
        })
    }

    pub(super) fn bridge_prefix(&self) -> String {
        format!("kairos-lane-{}-{}-{}-", self.config.host, std::process::id(), self.instance)
    }

    pub(super) fn run(&mut self, stop: &AtomicBool) -> u64 {
        let mut events = Events::with_capacity(64);
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if self.link.is_none() && Instant::now() >= self.retry_at {
                self.connect();
            }
            let _ = self.poll.poll(&mut events, Some(Duration::from_millis(20)));
            for event in events.iter() {
                match event.token() {
                    CONTROLLER => self.read_controller(),
                    LISTENER => self.accept(),
                    WAKER => {}
                    token => self.read_app(token),
                }
            }
            self.time_new_peers();
            while let Ok(report) = self.reports.try_recv() {
                self.send_controller(&report);
            }
            self.flush_apps();
        }
        self.connections
    }

    fn connect(&mut self) {
        let c = &self.config;
        match NodeConnection::connect(c.controller, &c.host, &c.secret, Duration::from_secs(1)) {
            Ok((conn, welcome)) => {
                let (stream, reader, session) = conn.into_parts();
                if stream.set_nonblocking(true).is_err() {
                    return self.lost();
                }
                let mut stream = TcpStream::from_std(stream);
                if self.poll.registry().register(&mut stream, CONTROLLER, Interest::READABLE).is_err() {
                    return self.lost();
                }
                self.link = Some(Link { stream, reader, session });
                self.connected.store(true, std::sync::atomic::Ordering::Relaxed);
                self.backoff = MIN_BACKOFF;
                self.connections += 1;
                self.welcome(welcome);
                // Frames that came with the welcome.
                self.read_controller();
            }
            Err(_) => self.lost(),
        }
    }

    fn lost(&mut self) {
        self.connected.store(false, std::sync::atomic::Ordering::Relaxed);
        if let Some(mut link) = self.link.take() {
            let _ = self.poll.registry().deregister(&mut link.stream);
        }
        // Requests in flight will get no answer on this connection: their applications hear
        // so now (a tunnel granted meanwhile is released when the node reconnects).
        let pending: Vec<Pending> = self.pending.drain().map(|(_, p)| p).collect();
        for p in pending {
            let reason = "the controller's connection was lost before it answered; ask again".to_string();
            self.tell_app(p.app, &NodeToApp::Refused { app_ref: p.app_ref, reason });
        }
        self.retry_at = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    fn welcome(&mut self, welcome: Welcome) {
        // Tunnels the controller no longer holds end for their applications.
        let held: Vec<TunnelId> = welcome.tunnels.iter().map(|t| t.tunnel_id).collect();
        let gone: Vec<TunnelId> = self.owners.keys().copied().filter(|t| !held.contains(t)).collect();
        for t in gone {
            if let Some(app) = self.owners.remove(&t) {
                self.tell_app(app, &NodeToApp::Ended { tunnel_id: t, terminated: true });
            }
        }
        // Tunnels of this host that no application here owns were granted while their answer
        // was lost (or to a node process before this one): nobody can send on them.
        let orphans: Vec<TunnelId> = welcome
            .tunnels
            .iter()
            .filter(|t| t.sender == self.config.host && !self.owners.contains_key(&t.tunnel_id))
            .map(|t| t.tunnel_id)
            .collect();
        let _ = self.commands.send(LaneCommand::Welcome(welcome));
        for tunnel_id in orphans {
            self.send_controller(&ToController::Release { tunnel_id });
        }
        // The controller may have restarted on an empty journal: until it answers, it holds
        // nothing of this host's delay, and requests from here on are granted after it does.
        self.held = HostDelay::default();
        self.send_controller(&self.host.report());
    }

    pub(super) fn send_controller(&mut self, message: &ToController) {
        let Some(link) = self.link.as_mut() else { return };
        let mut out = Vec::new();
        put_sealed(&mut link.session, message, &mut out);
        if write_all_nonblocking(&mut link.stream, &out).is_err() {
            self.lost();
        }
    }

    fn read_controller(&mut self) {
        let mut messages = Vec::new();
        let mut failed = false;
        if let Some(link) = self.link.as_mut() {
            let mut buf = [0u8; 16 << 10];
            loop {
                match link.stream.read(&mut buf) {
                    Ok(0) => {
                        failed = true;
                        break;
                    }
                    Ok(n) => link.reader.push(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            loop {
                match link.reader.next_frame() {
                    Ok(Some(body)) => {
                        match link.session.open(body).ok().and_then(|p| serde_json::from_slice(p).ok()) {
                            Some(m) => messages.push(m),
                            None => {
                                failed = true;
                                break;
                            }
                        }
                    }
                    Ok(None) => break,
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
        }
        for m in messages {
            self.notice(m);
        }
        if failed {
            self.lost();
        }
    }

    /// A notice of the controller: to the lane loop, and to the application it concerns.
    fn notice(&mut self, m: ToNode) {
        match &m {
            ToNode::Granted { app_ref, tunnel_id, grant, send_from_ns, .. } => {
                let Some(p) = self.pending.remove(app_ref) else { return };
                let path = match shm_path(&format!("{}t{tunnel_id}-out", self.bridge_prefix())) {
                    Ok(p) => p,
                    Err(e) => return self.tell_app(p.app, &NodeToApp::Error { reason: e.to_string() }),
                };
                let layout = BridgeLayout::for_messages(OUTBOX_SLOTS, MAX_MESSAGE).expect("a valid layout");
                let outbox = match bridge::create(&path, layout) {
                    Ok(b) => b.into_consumer(),
                    Err(e) => return self.tell_app(p.app, &NodeToApp::Error { reason: e.to_string() }),
                };
                let destinations: Vec<SocketAddr> =
                    p.spec.receivers.iter().filter_map(|r| self.config.peers.get(r).copied()).collect();
                let receivers = destinations.len();
                self.sending.insert(*tunnel_id, Sending { name: p.spec.name.clone(), receivers, last: None });
                let grant = self.promise(*tunnel_id, grant);
                let _ =
                    self.commands.send(LaneCommand::Outbox { tunnel_id: *tunnel_id, outbox, destinations });
                let _ = self.commands.send(LaneCommand::Notice(m.clone()));
                self.owners.insert(*tunnel_id, p.app);
                let answer = NodeToApp::Granted {
                    app_ref: p.app_ref,
                    tunnel_id: *tunnel_id,
                    grant,
                    send_from_ns: *send_from_ns,
                    outbox: path,
                };
                self.tell_app(p.app, &answer);
            }
            ToNode::Refused { app_ref, reason, .. } => {
                if let Some(p) = self.pending.remove(app_ref) {
                    self.tell_app(p.app, &NodeToApp::Refused { app_ref: p.app_ref, reason: reason.clone() });
                } else if let Some(log) = self.log.filter(|_| reason.starts_with(HOST_DELAY_REFUSED)) {
                    // The promises stay widened by the whole of the host's delay.
                    log(reason);
                }
            }
            ToNode::BandwidthChanged { tunnel_id, grant, reason, effective_at_ns } => {
                let _ = self.commands.send(LaneCommand::Notice(m.clone()));
                if let Some(&app) = self.owners.get(tunnel_id) {
                    let grant = self.promise(*tunnel_id, grant);
                    let changed = NodeToApp::Changed {
                        tunnel_id: *tunnel_id,
                        grant,
                        reason: *reason,
                        effective_at_ns: *effective_at_ns,
                    };
                    self.tell_app(app, &changed);
                }
            }
            ToNode::Released { tunnel_id } | ToNode::Terminated { tunnel_id } => {
                let terminated = matches!(m, ToNode::Terminated { .. });
                self.sending.remove(tunnel_id);
                let _ = self.commands.send(LaneCommand::Notice(m.clone()));
                if let Some(app) = self.owners.remove(tunnel_id) {
                    self.tell_app(app, &NodeToApp::Ended { tunnel_id: *tunnel_id, terminated });
                }
            }
            ToNode::Opened { .. } => {
                let _ = self.commands.send(LaneCommand::Notice(m));
            }
            ToNode::HostDelayKnown { core_jitter_ps, per_receiver_ps } => {
                // The changed tunnels' notices came first, so every grant here holds it: each
                // promise is made again without what it now holds (a notice in between had it
                // counted twice: promised wider, never narrower, than the truth).
                let held = HostDelay { core_jitter: *core_jitter_ps, per_receiver: *per_receiver_ps };
                if let Some(log) = self.log.filter(|_| held != self.held) {
                    log(&format!(
                        "the controller's bounds hold this host's delay: its core {:.1} us, {:.1} us a send call",
                        *core_jitter_ps as f64 / 1e6,
                        *per_receiver_ps as f64 / 1e6
                    ));
                }
                self.held = held;
                self.promise_again();
            }
            ToNode::Welcome { .. } | ToNode::Challenge { .. } | ToNode::Rejected { .. } => {}
        }
    }

    /// The grant an application hears for a tunnel of this host: the controller's widened by
    /// what the host adds, said in the log once for each promise (the grant, and every change
    /// of it that moves what is promised).
    fn promise(&mut self, tunnel_id: TunnelId, granted: &Grant) -> Grant {
        let Some(sending) = self.sending.get_mut(&tunnel_id) else { return *granted };
        let promised = promise::promise(granted, sending.receivers, &self.host, self.held);
        let news = sending.last.is_none_or(|(_, said)| said != promised);
        if let Some(log) = self.log.filter(|_| promised != *granted && news) {
            log(&promise::describe(&sending.name, granted, sending.receivers, &self.host, self.held));
        }
        sending.last = Some((*granted, promised));
        promised
    }

    /// Asks again the peers whose nodes were not up; when one is heard and its send calls are
    /// longer than any timed before, the controller is told, and meanwhile every tunnel of this
    /// host is promised again and its application told (`Changed`, reason `HOST`).
    fn time_new_peers(&mut self) {
        if !self.peer_sends.ask_again(Instant::now()) {
            return;
        }
        self.host.send_ns = self.peer_sends.longest_ns();
        self.send_controller(&self.host.report());
        self.promise_again();
    }

    /// Promises every tunnel of this host again from its last grant, telling each application
    /// whose promise moved (`Changed`, reason `HOST`).
    fn promise_again(&mut self) {
        let owned: Vec<(TunnelId, Token)> = self.owners.iter().map(|(&t, &a)| (t, a)).collect();
        for (tunnel_id, app) in owned {
            let Some((granted, said)) = self.sending.get(&tunnel_id).and_then(|s| s.last) else { continue };
            let grant = self.promise(tunnel_id, &granted);
            if grant != said {
                let effective_at_ns = kairos_sys::clock::realtime_ns();
                let changed = NodeToApp::Changed { tunnel_id, grant, reason: Reason::Host, effective_at_ns };
                self.tell_app(app, &changed);
            }
        }
    }
}

/// Writes `bytes` whole to a non-blocking stream (control messages are small: a full socket
/// buffer is a stuck peer, given up on after a second).
fn write_all_nonblocking(stream: &mut TcpStream, mut bytes: &[u8]) -> std::io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(1);
    while !bytes.is_empty() {
        match stream.write(bytes) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                if Instant::now() > deadline {
                    return Err(ErrorKind::TimedOut.into());
                }
                std::thread::yield_now();
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
