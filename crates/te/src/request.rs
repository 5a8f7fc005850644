//! What an application asks of the express lane and what it is granted, with the shape of the
//! source's Listing 1: a request names the sender, the receivers (one for unicast, several for
//! multicast), the largest packet and the wanted period; the answer ([`Resources`]) carries the
//! packet size, the approved period (never shorter than asked), the minimum latency and the
//! maximum jitter. Each request picks a sub-lane (a strict priority level; 0 is the highest).

use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::topology::{NodeId, NodeKind, Topology, TopologyError, at_most, error_at, number, parse, read};
use crate::units::{MAX_BYTES, MAX_TIME, MAX_TIME_NS, Picos, ns_to_ps, ps_to_ns};

/// What an application asks for: a periodic tunnel from a host to one or more hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Names the request in notices and reports.
    pub name: String,
    /// The sending host.
    pub sender: NodeId,
    /// The receiving hosts (several for multicast), distinct, without the sender.
    pub receivers: Vec<NodeId>,
    /// The largest packet, 1 to [`MAX_BYTES`].
    pub packet_bytes: u64,
    /// The wanted period, 1 ps to [`MAX_TIME`].
    pub period: Picos,
    /// The strict priority level, 0 (highest) to [`SUBLANES`] - 1.
    pub sublane: u8,
}

/// What a tunnel is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resources {
    /// The packet size granted (the request's).
    pub packet_bytes: u64,
    /// Approved period, at least the requested one.
    pub period: Picos,
    /// Every packet reaches every receiver at least this long after its release...
    pub min_latency: Picos,
    /// ...and at most `min_latency + max_jitter` after it.
    pub max_jitter: Picos,
    /// The request's sub-lane.
    pub sublane: u8,
}

impl Resources {
    /// `min_latency + max_jitter`; saturates, though for resources an allocation granted the
    /// sum was checked when the bounds were computed.
    pub fn max_latency(&self) -> Picos {
        self.min_latency.saturating_add(self.max_jitter)
    }
}

impl serde::Serialize for Resources {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Resources", 5)?;
        st.serialize_field("packet_bytes", &self.packet_bytes)?;
        st.serialize_field("period_ns", &ps_to_ns(self.period))?;
        st.serialize_field("min_latency_ns", &ps_to_ns(self.min_latency))?;
        st.serialize_field("max_jitter_ns", &ps_to_ns(self.max_jitter))?;
        st.serialize_field("sublane", &self.sublane)?;
        st.end()
    }
}

/// What a sending host adds to each of its packets before the packet enters its first link,
/// as the host's node measured it. The topology's links do not hold it: their jitter is the
/// network's, while this is the sender's own lane core (an interrupt, a preemption, the
/// hypervisor between a release and its send) and its fan-out (a tunnel's packet goes to each
/// receiver in a send call of its own, so the last receiver's leaves one call per receiver
/// after the first). Both only ever delay a packet, so they widen the jitter and never lower
/// the minimum latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostDelay {
    /// The longest the lane core kept a release from its send.
    pub core_jitter: Picos,
    /// The longest send call of one packet to one receiver.
    pub per_receiver: Picos,
}

impl HostDelay {
    /// The latest a packet of a tunnel to `receivers` hosts enters the network after its
    /// release; `None` past 64-bit picoseconds.
    pub fn for_receivers(&self, receivers: usize) -> Option<Picos> {
        let fan_out = (receivers.saturating_sub(1) as u64).checked_mul(self.per_receiver)?;
        self.core_jitter.checked_add(fan_out)
    }
}

/// Number of sub-lanes (priority levels) a request may use.
pub const SUBLANES: u8 = 8;

impl Request {
    /// Checks the request against the topology: known hosts, distinct receivers, sizes.
    pub fn validate(&self, topo: &Topology) -> Result<(), InvalidRequest> {
        let invalid = |problem| Err(InvalidRequest { request: self.name.clone(), problem });
        let host = |n: NodeId| n < topo.nodes().len() && topo.node(n).kind == NodeKind::Host;
        if !host(self.sender) {
            return invalid(RequestProblem::SenderNotHost);
        }
        if self.receivers.is_empty() {
            return invalid(RequestProblem::NoReceiver);
        }
        for (i, &r) in self.receivers.iter().enumerate() {
            if !host(r) {
                return invalid(RequestProblem::ReceiverNotHost);
            }
            if r == self.sender {
                return invalid(RequestProblem::SenderReceives);
            }
            if self.receivers[..i].contains(&r) {
                return invalid(RequestProblem::ReceiverTwice(topo.node(r).name.clone()));
            }
        }
        if !(1..=MAX_BYTES).contains(&self.packet_bytes) {
            return invalid(RequestProblem::PacketBytes);
        }
        if !(1..=MAX_TIME).contains(&self.period) {
            return invalid(RequestProblem::Period);
        }
        if self.sublane >= SUBLANES {
            return invalid(RequestProblem::Sublane);
        }
        Ok(())
    }
}

/// A request that is wrong in itself or for its topology ([`Request::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("request '{request}': {problem}")]
pub struct InvalidRequest {
    /// The request's name.
    pub request: String,
    /// What is wrong with it.
    pub problem: RequestProblem,
}

/// What is wrong with a request ([`InvalidRequest`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestProblem {
    /// The sender is not a host of the topology.
    #[error("the sender must be a host")]
    SenderNotHost,
    /// No receiver.
    #[error("at least one receiver")]
    NoReceiver,
    /// A receiver is not a host of the topology.
    #[error("receivers must be hosts")]
    ReceiverNotHost,
    /// The sender is among the receivers.
    #[error("the sender cannot receive its own tunnel")]
    SenderReceives,
    /// A receiver is named twice (its name).
    #[error("receiver '{0}' given twice")]
    ReceiverTwice(String),
    /// The packet size is outside 1 to [`MAX_BYTES`].
    #[error("packet_bytes must be between 1 and {MAX_BYTES} (1 TiB)")]
    PacketBytes,
    /// The period is outside 1 ps to [`MAX_TIME`].
    #[error("period_ns must be between 0.001 (1 ps) and {MAX_TIME_NS} (1 hour)")]
    Period,
    /// The sub-lane is [`SUBLANES`] or above.
    #[error("sublane must be below {SUBLANES}")]
    Sublane,
    /// A tree names a link the topology does not have (the link's index).
    #[error("no link {0}")]
    NoLink(usize),
    /// A tree enters a node twice, or enters the sender (the node's name).
    #[error("the tree enters '{0}' twice (not a tree)")]
    NotATree(String),
    /// Some of a tree's links are not below the sender.
    #[error("some links are not below the sender")]
    LinksNotBelowSender,
    /// A tree does not reach a receiver (its name).
    #[error("the tree does not reach '{0}'")]
    ReceiverNotReached(String),
}

/// Parses `[[request]]` tables against `topo`; `file` names the file in errors.
pub fn requests_from_toml(text: &str, file: &str, topo: &Topology) -> Result<Vec<Request>, TopologyError> {
    let at = error_at(text, file);
    let raw: RawRequests = parse(text, file)?;
    let mut out: Vec<Request> = Vec::new();
    for r in &raw.request {
        let span = r.span();
        let r = r.get_ref();
        let node = |s: &Spanned<String>| {
            let id = topo
                .find(s.get_ref())
                .ok_or_else(|| at(s.span(), format!("unknown node '{}'", s.get_ref())))?;
            if topo.node(id).kind != NodeKind::Host {
                return Err(at(
                    s.span(),
                    format!("'{}' is a switch; tunnels start and end at hosts", s.get_ref()),
                ));
            }
            Ok(id)
        };
        let sender = node(&r.sender)?;
        let receivers = r.receivers.iter().map(node).collect::<Result<Vec<_>, _>>()?;
        let bytes = number(&r.packet_bytes, "packet_bytes", &at)?;
        if !(bytes >= 1.0 && bytes.fract() == 0.0) {
            return Err(at(
                r.packet_bytes.span(),
                format!("packet_bytes must be a positive integer, got {bytes}"),
            ));
        }
        let bytes = at_most(bytes, &r.packet_bytes, "packet_bytes", MAX_BYTES, "1 TiB", &at)?;
        let period = number(&r.period_ns, "period_ns", &at)?;
        if period <= 0.0 {
            return Err(at(r.period_ns.span(), format!("period_ns must be positive, got {period}")));
        }
        let why = "1 hour; bounds add such times up in 64-bit picoseconds";
        let period = at_most(period, &r.period_ns, "period_ns", MAX_TIME_NS, why, &at)?;
        let period = match ns_to_ps(period) {
            Some(ps) if ps > 0 => ps,
            _ => {
                return Err(at(
                    r.period_ns.span(),
                    format!("period_ns must be at least 0.001 (1 ps), got {period}"),
                ));
            }
        };
        if out.iter().any(|o| o.name == *r.name.get_ref()) {
            return Err(at(r.name.span(), format!("duplicate request name '{}'", r.name.get_ref())));
        }
        let req = Request {
            name: r.name.get_ref().clone(),
            sender,
            receivers,
            // An integer of at most 2^40: exact.
            packet_bytes: bytes as u64,
            period,
            sublane: r.sublane.unwrap_or(0),
        };
        req.validate(topo).map_err(|what| at(span.clone(), what.to_string()))?;
        out.push(req);
    }
    Ok(out)
}

/// Reads and parses the requests file at `path` (at most
/// [`MAX_FILE_BYTES`](crate::MAX_FILE_BYTES)) against `topo`; a file with no request is refused,
/// since there is nothing to plan. Errors name the file.
pub fn requests_from_file(path: &Path, topo: &Topology) -> Result<Vec<Request>, TopologyError> {
    let file = path.display().to_string();
    let requests = requests_from_toml(&read(path)?, &file, topo)?;
    if requests.is_empty() {
        return Err(TopologyError::File { file, what: "no [[request]] tables: nothing to plan".into() });
    }
    Ok(requests)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequests {
    #[serde(default)]
    request: Vec<Spanned<RawRequest>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest {
    name: Spanned<String>,
    sender: Spanned<String>,
    receivers: Vec<Spanned<String>>,
    packet_bytes: Spanned<toml::Value>,
    period_ns: Spanned<toml::Value>,
    sublane: Option<u8>,
}
