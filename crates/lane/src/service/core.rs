//! What the controller service decides, apart from its sockets: which host may ask what, the
//! journal before the notices, and which nodes each notice goes to. The event loop
//! ([`super::server`]) only carries frames to and from here, so the rules are tested without
//! a network and replay runs through the very code that handled the inputs the first time.
//!
//! A node acts for its own host only: its requests name no sender (it is the node's host), and
//! it may change, release or report on tunnels whose sender is its host. Inputs that break
//! these rules, or name hosts that do not exist, are refused here, counted, and never reach
//! the controller or the journal. Notices go to the nodes concerned: `Granted` and `Refused` to
//! the one that asked, `Opened` to each receiver, `HostDelayKnown` to the host whose delay it
//! is, and `BandwidthChanged`, `Released` and `Terminated` to the sender and every receiver of
//! the tunnel. A host's delay that the controller holds already is answered without the
//! journal (a node reports it after every welcome).

use std::collections::{BTreeMap, HashMap};

use super::journal::{Journal, JournalError, Record};
use super::wire::{Grant, ToController, ToNode, TunnelInfo, TunnelSpec};
use crate::controller::{Controller, Input, Notice};
use crate::te::{HostDelay, MAX_TIME, MAX_TIME_NS, NodeId, NodeKind, Picos, Request, Topology, TunnelId};

/// A message for the node of `host`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The host whose node gets it.
    pub host: String,
    /// The message.
    pub message: ToNode,
}

/// Counters the metrics endpoint shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Requests and changes admitted.
    pub admitted: u64,
    /// Requests, changes, releases and reports refused (by the controller or the rules here).
    pub refused: u64,
    /// Notices sent, by kind.
    pub notices: BTreeMap<&'static str, u64>,
    /// Frames and inputs refused before the controller, by reason.
    pub refused_frames: BTreeMap<&'static str, u64>,
    /// Host delays reported that the controller held already: answered, not journaled.
    pub host_delays_held: u64,
}

impl Counters {
    /// Counts a frame or input refused for `reason`.
    pub fn refuse_frame(&mut self, reason: &'static str) {
        *self.refused_frames.entry(reason).or_default() += 1;
    }
}

/// Where a tunnel's notices go.
#[derive(Debug, Clone)]
struct Route {
    name: String,
    sender: String,
    receivers: Vec<String>,
}

impl Route {
    fn hosts(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.sender).chain(&self.receivers)
    }
}

/// The controller, its journal and its routes.
#[derive(Debug)]
pub struct Core {
    controller: Controller,
    journal: Journal,
    epoch_ns: u64,
    routes: HashMap<TunnelId, Route>,
    /// What the metrics endpoint shows.
    pub counters: Counters,
}

/// An input the journal held that does not replay: the journal and the controller disagree.
#[derive(Debug, thiserror::Error)]
#[error("the journal's input {index} ({at_ps} ps, host {host}) does not replay: {reason}")]
pub struct ReplayError {
    /// The input's position, from 1.
    pub index: usize,
    /// Its time.
    pub at_ps: Picos,
    /// Its host.
    pub host: String,
    /// Why.
    pub reason: String,
}

impl Core {
    /// A core over `controller` appending to `journal`, whose clock counts picoseconds from
    /// `epoch_ns` (wall-clock ns); `records` (the journal's inputs) are replayed first, their
    /// notices dropped (the nodes learn the state when they reconnect).
    pub fn replay(
        controller: Controller,
        journal: Journal,
        epoch_ns: u64,
        records: &[Record],
    ) -> Result<Self, ReplayError> {
        let mut core =
            Self { controller, journal, epoch_ns, routes: HashMap::new(), counters: Counters::default() };
        for (i, r) in records.iter().enumerate() {
            let input = core.translate(&r.host, &r.input).map_err(|(_, reason)| ReplayError {
                index: i + 1,
                at_ps: r.at_ps,
                host: r.host.clone(),
                reason,
            })?;
            let notices = core.controller.handle(input, r.at_ps);
            core.route(&r.host, app_ref(&r.input), notices);
        }
        core.counters = Counters::default();
        Ok(core)
    }

    /// The wall-clock instant (ns) of the controller's time `at`, rounded up so that a node
    /// never acts early.
    pub fn wall_ns(&self, at: Picos) -> u64 {
        self.epoch_ns.saturating_add(at.div_ceil(1_000))
    }

    /// The controller's time (ps since its epoch) at wall-clock `ns`.
    pub fn controller_time(&self, ns: u64) -> Picos {
        ns.saturating_sub(self.epoch_ns).saturating_mul(1_000)
    }

    /// The controller (its allocation, its next deadline).
    pub fn controller(&self) -> &Controller {
        &self.controller
    }

    /// The topology host `name`, if it is one.
    pub fn host(&self, name: &str) -> Option<NodeId> {
        let topo = self.controller.allocation().topology();
        topo.find(name).filter(|&n| topo.node(n).kind == NodeKind::Host)
    }

    /// Every tunnel `host` sends or receives on, as a node learns them when it connects.
    pub fn tunnels_of(&self, host: &str) -> Vec<TunnelInfo> {
        let alloc = self.controller.allocation();
        alloc
            .tunnels()
            .into_iter()
            .filter_map(|t| {
                let route = self.routes.get(&t.id)?;
                route.hosts().any(|h| h == host).then(|| TunnelInfo {
                    tunnel_id: t.id,
                    name: route.name.clone(),
                    sender: route.sender.clone(),
                    receivers: route.receivers.clone(),
                    grant: t.resources.into(),
                })
            })
            .collect()
    }

    /// Handles `input` from the node of `host` at `now`: refused here, or journaled, handled,
    /// and routed. A journal that cannot be written is an error: nothing may be acknowledged
    /// that would not survive a crash.
    pub fn handle(
        &mut self,
        host: &str,
        input: ToController,
        now: Picos,
    ) -> Result<Vec<Outgoing>, JournalError> {
        let request = match self.translate(host, &input) {
            Ok(request) => request,
            Err((why, reason)) => {
                self.counters.refuse_frame(why);
                self.counters.refused += 1;
                let (app_ref, name) = match &input {
                    ToController::Request { app_ref, tunnel }
                    | ToController::Change { app_ref, tunnel, .. } => (*app_ref, tunnel.name.clone()),
                    _ => (0, String::new()),
                };
                let message = ToNode::Refused { app_ref, name, reason };
                self.count_notice(&message);
                return Ok(vec![Outgoing { host: host.to_string(), message }]);
            }
        };
        // The delay the controller holds already (a node reports it after every welcome): an
        // answer, and nothing for the journal to keep.
        if let Input::HostDelay { host: id, delay } = &request
            && self.controller.allocation().host_delay(*id) == *delay
        {
            let message = ToNode::host_delay_known(*delay);
            self.counters.host_delays_held += 1;
            self.count_notice(&message);
            return Ok(vec![Outgoing { host: host.to_string(), message }]);
        }
        self.journal.append(&Record { at_ps: now, host: host.to_string(), input: input.clone() })?;
        let notices = self.controller.handle(request, now);
        Ok(self.route(host, app_ref(&input), notices))
    }

    /// Does the controller's work due by `now`.
    pub fn tick(&mut self, now: Picos) -> Vec<Outgoing> {
        let notices = self.controller.tick(now);
        self.route("", 0, notices)
    }

    /// The controller's input for a node's message, or why it is refused (a counter's name
    /// and a sentence).
    fn translate(&self, host: &str, input: &ToController) -> Result<Input, (&'static str, String)> {
        let sender =
            self.host(host).ok_or(("unknown_host", format!("'{host}' is not a host of the topology")))?;
        let own = |tunnel_id: TunnelId| match self.controller.allocation().tunnel(tunnel_id) {
            None => Err(("unknown_tunnel", format!("no tunnel {tunnel_id}"))),
            Some(t) if t.request.sender != sender => {
                Err(("foreign_tunnel", format!("tunnel {tunnel_id} is not sent by host '{host}'")))
            }
            Some(_) => Ok(tunnel_id),
        };
        Ok(match input {
            ToController::Request { tunnel, .. } => Input::Request(self.request(sender, tunnel)?),
            ToController::Change { tunnel_id, tunnel, .. } => {
                Input::Change { tunnel: own(*tunnel_id)?, request: self.request(sender, tunnel)? }
            }
            ToController::Release { tunnel_id } => Input::Release { tunnel: own(*tunnel_id)? },
            ToController::Usage { tunnel_id, window_ps, packets, max_bytes } => Input::Usage {
                tunnel: own(*tunnel_id)?,
                window: *window_ps,
                packets: *packets,
                max_bytes: *max_bytes,
            },
            ToController::HostDelay { core_jitter_ps, per_receiver_ps } => {
                if (*core_jitter_ps).max(*per_receiver_ps) > MAX_TIME {
                    let reason = format!(
                        "a host's delay is at most {MAX_TIME_NS} ns a figure, got {core_jitter_ps} and {per_receiver_ps} ps"
                    );
                    return Err(("invalid_host_delay", reason));
                }
                Input::HostDelay {
                    host: sender,
                    delay: HostDelay { core_jitter: *core_jitter_ps, per_receiver: *per_receiver_ps },
                }
            }
        })
    }

    fn request(&self, sender: NodeId, spec: &TunnelSpec) -> Result<Request, (&'static str, String)> {
        let receivers = spec
            .receivers
            .iter()
            .map(|r| {
                self.host(r).ok_or(("unknown_host", format!("receiver '{r}' is not a host of the topology")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let request = Request {
            name: spec.name.clone(),
            sender,
            receivers,
            packet_bytes: spec.packet_bytes,
            period: spec.period_ps,
            sublane: spec.sublane,
        };
        // Checked here so that a malformed request is the node's error, not the journal's.
        request
            .validate(self.controller.allocation().topology())
            .map_err(|e| ("invalid_request", e.to_string()))?;
        Ok(request)
    }

    fn names(topo: &Topology, ids: &[NodeId]) -> Vec<String> {
        ids.iter().map(|&n| topo.node(n).name.clone()).collect()
    }

    fn route(&mut self, requester: &str, app_ref: u64, notices: Vec<Notice>) -> Vec<Outgoing> {
        let mut out = Vec::new();
        let to = |out: &mut Vec<Outgoing>, host: &str, message: ToNode| {
            out.push(Outgoing { host: host.to_string(), message });
        };
        for n in notices {
            match n {
                Notice::Granted { name, tunnel, resources, send_from } => {
                    self.counters.admitted += 1;
                    let alloc = self.controller.allocation();
                    let t = alloc.tunnel(tunnel).expect("a granted tunnel is admitted");
                    let topo = alloc.topology();
                    let route = Route {
                        name: name.clone(),
                        sender: topo.node(t.request.sender).name.clone(),
                        receivers: Self::names(topo, &t.request.receivers),
                    };
                    let grant = Grant::from(resources);
                    let send_from_ns = self.wall_ns(send_from);
                    let granted = ToNode::Granted { app_ref, name, tunnel_id: tunnel, grant, send_from_ns };
                    to(&mut out, requester, granted);
                    for r in &route.receivers {
                        let info = TunnelInfo {
                            tunnel_id: tunnel,
                            name: route.name.clone(),
                            sender: route.sender.clone(),
                            receivers: route.receivers.clone(),
                            grant,
                        };
                        to(&mut out, r, ToNode::Opened { tunnel: info, send_from_ns });
                    }
                    self.routes.insert(tunnel, route);
                }
                Notice::Refused { name, reason } => {
                    self.counters.refused += 1;
                    to(&mut out, requester, ToNode::Refused { app_ref, name, reason });
                }
                Notice::BandwidthChanged { tunnel, resources, reason, effective_at } => {
                    let message = ToNode::BandwidthChanged {
                        tunnel_id: tunnel,
                        grant: resources.into(),
                        reason,
                        effective_at_ns: self.wall_ns(effective_at),
                    };
                    for h in self.routes.get(&tunnel).into_iter().flat_map(Route::hosts) {
                        to(&mut out, h, message.clone());
                    }
                }
                Notice::HostDelayKnown { host, delay } => {
                    let name = self.controller.allocation().topology().node(host).name.clone();
                    to(&mut out, &name, ToNode::host_delay_known(delay));
                }
                Notice::Released { tunnel } | Notice::Terminated { tunnel } => {
                    let message = match n {
                        Notice::Released { .. } => ToNode::Released { tunnel_id: tunnel },
                        _ => ToNode::Terminated { tunnel_id: tunnel },
                    };
                    for h in self.routes.remove(&tunnel).iter().flat_map(Route::hosts) {
                        to(&mut out, h, message.clone());
                    }
                }
            }
        }
        for o in &out {
            self.count_notice(&o.message);
        }
        out
    }

    fn count_notice(&mut self, message: &ToNode) {
        *self.counters.notices.entry(kind(message)).or_default() += 1;
    }
}

fn app_ref(input: &ToController) -> u64 {
    match input {
        ToController::Request { app_ref, .. } | ToController::Change { app_ref, .. } => *app_ref,
        _ => 0,
    }
}

/// A message's kind, as its JSON `type` and the metrics label name it.
pub fn kind(message: &ToNode) -> &'static str {
    match message {
        ToNode::Challenge { .. } => "challenge",
        ToNode::Welcome { .. } => "welcome",
        ToNode::Granted { .. } => "granted",
        ToNode::Refused { .. } => "refused",
        ToNode::Opened { .. } => "opened",
        ToNode::BandwidthChanged { .. } => "bandwidth_changed",
        ToNode::Released { .. } => "released",
        ToNode::Terminated { .. } => "terminated",
        ToNode::HostDelayKnown { .. } => "host_delay_known",
        ToNode::Rejected { .. } => "rejected",
    }
}
