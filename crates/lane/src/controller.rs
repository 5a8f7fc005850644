//! The controller's operations (the source's sections 2.2, 3.2 and 3.3) as a sans-I/O state
//! machine: inputs and the current time go in; notices to endhosts and the next deadline come
//! out. No threads, sockets or clock reads inside, so every behaviour is tested on a virtual
//! clock, and a daemon only has to carry messages and call [`Controller::tick`] at the deadline.
//!
//! Operations:
//! - **Request**: X-OPT finds a tree, the approximate validity check admits it (two-phase
//!   allocation: optimise, then adjust), X-ADJ recomputes every tunnel it affects. The requester
//!   gets `Granted` with the time from which it may send; every tunnel whose bounds changed gets
//!   `BandwidthChanged` (reason `Te`). When some bound got *worse*, the new tunnel may only send
//!   after the grace period, so the old guarantees hold until every affected endhost has been
//!   told; otherwise it may send at once.
//! - **Change**: the new parameters are admitted as a second tunnel beside the old one (both
//!   reserved), and the old one is released when the grace period ends: during it the old
//!   guarantee still holds and the endhost can switch over. A refused change leaves the old
//!   tunnel as it was.
//! - **Release**: the tunnel's packets may still be in flight, so the others' tighter bounds
//!   take effect after the grace period (`BandwidthChanged`, reason `Te`).
//! - **Usage** (a policing report from a node): a tunnel sending larger packets or more often
//!   than granted is told `BandwidthChanged` with reason `BwExceeded` (and is terminated on the
//!   third report); one using under a quarter of its reservation in [`UNUSED_REPORTS`] reports
//!   in a row is re-planned at the period it used in the last (reason `BwUnused`), giving the
//!   room back. One quiet report is not enough: an application that starts, pauses or ends
//!   inside a report's window uses part of it, and would lose its period for that.
//! - **Host delay** (a node's measurement of its own host: its lane core's jitter and its send
//!   calls, [`HostDelay`]): X-ADJ re-runs on every tunnel the host sends and on what they
//!   affect, with the delay before the first link, so every bound the controller announces
//!   holds it. Every tunnel whose bounds moved hears `BandwidthChanged` (reason `Host`): a
//!   wider bound at once (the delay is already there, waiting would not make the old bound
//!   true), a narrower one after the grace period (packets delayed under the old figure may be
//!   in flight). Then the host hears `HostDelayKnown`. A delay no bound can hold with the host's
//!   tunnels (a sum past 64 bits, a higher sub-lane's wider spread saturating a link) is
//!   refused and the host's tunnels are terminated, so that no announced bound leaves it out;
//!   the delay is held, and the host's later requests are analysed with it.
//! - **Terminate**: every tunnel is told `Terminated`; afterwards every input is refused.
//!
//! Every input and notice goes to the event log with its time.

use std::collections::{BTreeMap, HashMap};

use crate::te::{Allocation, Change, HostDelay, NodeId, Picos, Refusal, Request, Resources, TunnelId};

/// Why a tunnel's resources changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Reason {
    /// Traffic engineering: another tunnel was admitted, changed or released.
    Te,
    /// The tunnel sent more than granted.
    BwExceeded,
    /// The tunnel used much less than granted.
    BwUnused,
    /// A sending host's own share of the jitter changed: its node reported it to the
    /// controller, or (said by the node alone) timed a receiver's node that came up after it
    /// and widens its promise until the controller holds the new figure.
    Host,
}

/// What the controller is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Admit a new tunnel.
    Request(Request),
    /// Replace a tunnel's parameters (same sender and receivers or not).
    Change {
        /// The tunnel to replace.
        tunnel: TunnelId,
        /// Its new parameters.
        request: Request,
    },
    /// Release a tunnel.
    Release {
        /// The tunnel.
        tunnel: TunnelId,
    },
    /// What a node's policer saw of a tunnel over `window`: packets and their largest size.
    Usage {
        /// The tunnel.
        tunnel: TunnelId,
        /// The time the report covers.
        window: Picos,
        /// Packets seen in it.
        packets: u64,
        /// The largest of them.
        max_bytes: u64,
    },
    /// What a sending host adds before its first link, as its node measured it.
    HostDelay {
        /// The host.
        host: NodeId,
        /// Its delay.
        delay: HostDelay,
    },
    /// End every tunnel and refuse everything after.
    Terminate,
}

/// What the controller tells endhosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A request (or change) was admitted.
    Granted {
        /// The request's name.
        name: String,
        /// The new tunnel.
        tunnel: TunnelId,
        /// What it is granted.
        resources: Resources,
        /// When it may start sending.
        send_from: Picos,
    },
    /// A request (or change, release, report) was refused.
    Refused {
        /// The request's name (empty when the input had none).
        name: String,
        /// Why.
        reason: String,
    },
    /// A tunnel's resources changed.
    BandwidthChanged {
        /// The tunnel.
        tunnel: TunnelId,
        /// What it has from `effective_at`.
        resources: Resources,
        /// Why.
        reason: Reason,
        /// When the change takes effect.
        effective_at: Picos,
    },
    /// A tunnel was released.
    Released {
        /// The tunnel.
        tunnel: TunnelId,
    },
    /// A tunnel was ended by the controller (termination, or repeated excess).
    Terminated {
        /// The tunnel.
        tunnel: TunnelId,
    },
    /// Every bound from here on holds a host's delay (its tunnels' changes follow).
    HostDelayKnown {
        /// The host.
        host: NodeId,
        /// The delay the bounds hold.
        delay: HostDelay,
    },
}

/// One entry of the event log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEvent {
    /// An input handled.
    Input(Input),
    /// A notice sent.
    Notice(Notice),
}

/// An event and when it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// The time given with the input.
    pub at: Picos,
    /// What happened.
    pub event: LogEvent,
}

/// Work the controller owes at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Deferred {
    /// The grace period of a change is over: release the old tunnel.
    ReleaseOld { old: TunnelId },
}

/// The controller over one allocation; see the module docs.
#[derive(Debug)]
pub struct Controller {
    alloc: Allocation,
    grace: Picos,
    deferred: BTreeMap<Picos, Vec<Deferred>>,
    /// Policing reports of excess per tunnel.
    strikes: HashMap<TunnelId, u32>,
    /// Reports in a row that found the tunnel using under a quarter of its grant.
    quiet: HashMap<TunnelId, u32>,
    terminated: bool,
    log: Vec<LogEntry>,
    /// The log keeps at least this many of the latest entries, at most twice as many.
    log_limit: usize,
}

/// How the refusal of a host's delay begins (its node says it: no application waits for it).
pub const HOST_DELAY_REFUSED: &str = "the host's delay is refused";

/// Excess reports before a tunnel is terminated.
const STRIKES: u32 = 3;
/// Reports in a row of a tunnel using under a quarter of its grant before it is re-planned.
pub const UNUSED_REPORTS: u32 = 3;

impl Controller {
    /// A controller over `alloc` whose changes take effect after `grace`.
    pub fn new(alloc: Allocation, grace: Picos) -> Self {
        Self {
            alloc,
            grace,
            deferred: BTreeMap::new(),
            strikes: HashMap::new(),
            quiet: HashMap::new(),
            terminated: false,
            log: Vec::new(),
            log_limit: usize::MAX,
        }
    }

    /// The same controller with its event log bounded: it keeps at least the latest `limit`
    /// entries and at most twice as many (the oldest are dropped in one go, so each entry costs
    /// O(1)). A long-running service wants this: every usage report is an input, and its
    /// durable record is the journal on disk, not this log.
    pub fn with_log_limit(mut self, limit: usize) -> Self {
        self.log_limit = limit.max(1);
        self
    }

    /// The tunnels admitted now.
    pub fn allocation(&self) -> &Allocation {
        &self.alloc
    }

    /// Every input and notice so far, in order (the latest ones only, under a
    /// [`Controller::with_log_limit`]).
    pub fn log(&self) -> &[LogEntry] {
        &self.log
    }

    /// Drops the oldest entries once the log holds twice its limit.
    fn trim_log(&mut self) {
        if self.log.len() >= self.log_limit.saturating_mul(2) {
            let excess = self.log.len() - self.log_limit;
            self.log.drain(..excess);
        }
    }

    /// When [`Controller::tick`] must next be called, if ever.
    pub fn next_deadline(&self) -> Option<Picos> {
        self.deferred.keys().next().copied()
    }

    /// Handles one input at `now`.
    pub fn handle(&mut self, input: Input, now: Picos) -> Vec<Notice> {
        self.log.push(LogEntry { at: now, event: LogEvent::Input(input.clone()) });
        self.trim_log();
        let mut out = self.tick_inner(now);
        if self.terminated {
            let name = match &input {
                Input::Request(r) | Input::Change { request: r, .. } => r.name.clone(),
                _ => String::new(),
            };
            out.push(Notice::Refused { name, reason: "the controller has terminated".into() });
            return self.record(now, out);
        }
        match input {
            Input::Request(request) => self.request(request, now, &mut out),
            Input::Change { tunnel, request } => self.change(tunnel, request, now, &mut out),
            Input::Release { tunnel } => self.release(tunnel, now, &mut out),
            Input::Usage { tunnel, window, packets, max_bytes } => {
                self.usage(tunnel, window, packets, max_bytes, now, &mut out)
            }
            Input::HostDelay { host, delay } => self.host_delay(host, delay, now, &mut out),
            Input::Terminate => {
                self.terminated = true;
                self.deferred.clear();
                for t in self.alloc.tunnels().iter().map(|t| t.id).collect::<Vec<_>>() {
                    self.alloc.release(t);
                    out.push(Notice::Terminated { tunnel: t });
                }
            }
        }
        self.record(now, out)
    }

    /// Does the work due by `now`.
    pub fn tick(&mut self, now: Picos) -> Vec<Notice> {
        let out = self.tick_inner(now);
        self.record(now, out)
    }

    fn tick_inner(&mut self, now: Picos) -> Vec<Notice> {
        let mut out = Vec::new();
        while let Some((&at, _)) = self.deferred.first_key_value() {
            if at > now {
                break;
            }
            let (_, work) = self.deferred.pop_first().expect("looked at");
            for w in work {
                match w {
                    Deferred::ReleaseOld { old } => self.release(old, at, &mut out),
                }
            }
        }
        out
    }

    fn record(&mut self, now: Picos, notices: Vec<Notice>) -> Vec<Notice> {
        self.log.extend(notices.iter().map(|n| LogEntry { at: now, event: LogEvent::Notice(n.clone()) }));
        self.trim_log();
        notices
    }

    /// Tells affected tunnels; returns whether any bound got worse.
    fn tell(&self, changed: &[Change], reason: Reason, at: Picos, out: &mut Vec<Notice>) -> bool {
        let mut any_worse = false;
        for c in changed {
            any_worse |= worse(c);
            out.push(Notice::BandwidthChanged { tunnel: c.id, resources: c.after, reason, effective_at: at });
        }
        any_worse
    }

    fn request(&mut self, request: Request, now: Picos, out: &mut Vec<Notice>) {
        let name = request.name.clone();
        match self.alloc.admit(request) {
            Ok(adm) => {
                let worse = self.tell(&adm.changed, Reason::Te, now.saturating_add(self.grace), out);
                let send_from = if worse { now.saturating_add(self.grace) } else { now };
                out.push(Notice::Granted { name, tunnel: adm.id, resources: adm.resources, send_from });
            }
            Err(e) => out.push(Notice::Refused { name, reason: e.to_string() }),
        }
    }

    fn change(&mut self, old: TunnelId, request: Request, now: Picos, out: &mut Vec<Notice>) {
        if self.alloc.tunnel(old).is_none() {
            out.push(Notice::Refused { name: request.name, reason: format!("no tunnel {old}") });
            return;
        }
        let name = request.name.clone();
        match self.alloc.admit(request) {
            Ok(adm) => {
                self.tell(&adm.changed, Reason::Te, now.saturating_add(self.grace), out);
                out.push(Notice::Granted {
                    name,
                    tunnel: adm.id,
                    resources: adm.resources,
                    send_from: now.saturating_add(self.grace),
                });
                self.deferred
                    .entry(now.saturating_add(self.grace))
                    .or_default()
                    .push(Deferred::ReleaseOld { old });
            }
            Err(e) => out.push(Notice::Refused { name, reason: e.to_string() }),
        }
    }

    fn release(&mut self, tunnel: TunnelId, now: Picos, out: &mut Vec<Notice>) {
        match self.alloc.release(tunnel) {
            Some(changed) => {
                self.strikes.remove(&tunnel);
                self.quiet.remove(&tunnel);
                out.push(Notice::Released { tunnel });
                self.tell(&changed, Reason::Te, now.saturating_add(self.grace), out);
            }
            None => out.push(Notice::Refused { name: String::new(), reason: format!("no tunnel {tunnel}") }),
        }
    }

    fn usage(
        &mut self,
        tunnel: TunnelId,
        window: Picos,
        packets: u64,
        max_bytes: u64,
        now: Picos,
        out: &mut Vec<Notice>,
    ) {
        let Some(t) = self.alloc.tunnel(tunnel) else {
            out.push(Notice::Refused { name: String::new(), reason: format!("no tunnel {tunnel}") });
            return;
        };
        let granted = t.resources;
        // Packets the grant allows in the window (one more for the phase).
        let allowed = (window / granted.period.max(1)).saturating_add(1);
        let quiet = packets > 0 && packets.saturating_mul(4) < allowed;
        if !quiet {
            // A report of use (or of excess) ends a quiet streak.
            self.quiet.remove(&tunnel);
        }
        if max_bytes > granted.packet_bytes || packets > allowed {
            let strikes = self.strikes.entry(tunnel).or_insert(0);
            *strikes += 1;
            if *strikes >= STRIKES {
                self.alloc.release(tunnel);
                self.strikes.remove(&tunnel);
                out.push(Notice::Terminated { tunnel });
            } else {
                out.push(Notice::BandwidthChanged {
                    tunnel,
                    resources: granted,
                    reason: Reason::BwExceeded,
                    effective_at: now,
                });
            }
        } else if quiet {
            let quiet = self.quiet.entry(tunnel).or_insert(0);
            *quiet += 1;
            if *quiet < UNUSED_REPORTS {
                return;
            }
            self.quiet.remove(&tunnel);
            // Re-plan at the period actually used; the grant never gets shorter than asked.
            let mut request = t.request.clone();
            request.period = (window / packets).max(request.period);
            let Some(changed) = self.replan(tunnel, request) else { return };
            let resources = self.alloc.tunnel(tunnel).expect("replanned in place").resources;
            out.push(Notice::BandwidthChanged {
                tunnel,
                resources,
                reason: Reason::BwUnused,
                effective_at: now,
            });
            self.tell(&changed, Reason::Te, now.saturating_add(self.grace), out);
        }
    }

    fn host_delay(&mut self, host: NodeId, delay: HostDelay, now: Picos, out: &mut Vec<Notice>) {
        let changed = match self.alloc.set_host_delay(host, delay) {
            Ok(changed) => changed,
            Err(e @ Refusal::Invalid(_)) => {
                let reason = format!("{HOST_DELAY_REFUSED}: {e}");
                return out.push(Notice::Refused { name: String::new(), reason });
            }
            Err(e) => {
                // No bound holds this delay with the host's tunnels as they are, and bounds that
                // leave it out would be false, for them and for the tunnels they delay: they end.
                // The delay is then held, and the host's later requests are analysed with it.
                let reason = format!("{HOST_DELAY_REFUSED}: {e}; the host's tunnels are ended");
                out.push(Notice::Refused { name: String::new(), reason });
                self.end_tunnels_of(host, now, out);
                self.alloc.set_host_delay(host, delay).expect("a host that sends nothing delays no tunnel")
            }
        };
        // A wider bound holds from now (the delay is already there); a narrower one after the
        // grace period, since packets delayed under the old figure may still be in flight.
        for c in &changed {
            let at = if worse(c) { now } else { now.saturating_add(self.grace) };
            self.tell(std::slice::from_ref(c), Reason::Host, at, out);
        }
        // Last, so that the host's node has every new grant when it hears its delay is held.
        out.push(Notice::HostDelayKnown { host, delay });
    }

    /// Terminates every tunnel `host` sends; the others' bounds, better for it, take effect
    /// after the grace period.
    fn end_tunnels_of(&mut self, host: NodeId, now: Picos, out: &mut Vec<Notice>) {
        let before: HashMap<TunnelId, Resources> =
            self.alloc.tunnels().iter().map(|t| (t.id, t.resources)).collect();
        let own: Vec<TunnelId> =
            self.alloc.tunnels().iter().filter(|t| t.request.sender == host).map(|t| t.id).collect();
        for tunnel in own {
            self.alloc.release(tunnel);
            self.strikes.remove(&tunnel);
            self.quiet.remove(&tunnel);
            out.push(Notice::Terminated { tunnel });
        }
        let changed: Vec<Change> = self
            .alloc
            .tunnels()
            .iter()
            .filter(|t| before[&t.id] != t.resources)
            .map(|t| Change { id: t.id, before: before[&t.id], after: t.resources })
            .collect();
        self.tell(&changed, Reason::Te, now.saturating_add(self.grace), out);
    }

    /// Changes a tunnel's requested period in place and re-adjusts what it affects.
    fn replan(&mut self, tunnel: TunnelId, request: Request) -> Option<Vec<Change>> {
        self.alloc.set_period(tunnel, request.period).ok()
    }
}

/// Whether a change makes some bound of its tunnel worse: an earlier minimum, a later maximum,
/// or a longer period.
fn worse(c: &Change) -> bool {
    c.after.min_latency < c.before.min_latency
        || c.after.max_latency() > c.before.max_latency()
        || c.after.period > c.before.period
}
