//! The network the express lane runs over: hosts and switches joined by directed links, each with
//! the source's four parameters (bandwidth, egress queue length in bytes, minimum delay, maximum
//! jitter). Loaded from TOML with errors that name the line and what is wrong, or built by a
//! generator (one-switch rack, leaf-spine, k-ary fat-tree).
//!
//! Times are integer picoseconds ([`Picos`]) so that the analysis and the validator compute the
//! same transmission times exactly; files speak nanoseconds.

use std::collections::HashMap;
use std::path::Path;

use petgraph::graph::{DiGraph, EdgeIndex, NodeIndex};
use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::units::{MAX_BANDWIDTH_BPS, MAX_BYTES, MAX_TIME, MAX_TIME_NS, Picos, ns_to_ps, ps_to_ns, tx_time};

/// A node's index in [`Topology::nodes`].
pub type NodeId = usize;
/// A link's index in [`Topology::links`].
pub type LinkId = usize;

/// The largest topology or requests file read: 1 MiB, some 7,000 links. A path to something
/// else (a device that never ends, a log) is refused at once instead of filling memory.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// What a node is: hosts send and receive, switches forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// An endhost: tunnels start and end here; it never forwards.
    Host,
    /// A switch: forwards, never sends or receives a tunnel.
    Switch,
}

/// A named host or switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Unique in its topology.
    pub name: String,
    /// Host or switch.
    pub kind: NodeKind,
}

/// A directed link and its egress queue at `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// The sending end (the queue is here).
    pub from: NodeId,
    /// The receiving end.
    pub to: NodeId,
    /// Bits per second, at least 1 (at most [`MAX_BANDWIDTH_BPS`] from a file).
    pub bandwidth_bps: u64,
    /// The egress queue, bytes (at most [`MAX_BYTES`] from a file).
    pub queue_bytes: u64,
    /// Minimum propagation delay (`lambda_min`).
    pub min_delay: Picos,
    /// Most a delay exceeds the minimum (`delta_max`).
    pub max_jitter: Picos,
}

impl Link {
    /// Time to put `bytes` on this link, rounded up to a picosecond; `None` when it does not fit
    /// in 64-bit picoseconds (never, from a file, for a packet that fits the link's queue).
    pub fn tx_time(&self, bytes: u64) -> Option<Picos> {
        tx_time(bytes, self.bandwidth_bps)
    }
}

/// What a loaded or generated link carries, before it has endpoints. The limits below are those
/// of files and flags ([`LinkSpec::check`]); a link built by hand needs only a positive
/// bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSpec {
    /// Bits per second, 1 to [`MAX_BANDWIDTH_BPS`].
    pub bandwidth_bps: u64,
    /// The egress queue, bytes, up to [`MAX_BYTES`], and sent within 64-bit picoseconds.
    pub queue_bytes: u64,
    /// Minimum propagation delay, up to [`MAX_TIME`].
    pub min_delay: Picos,
    /// Most a delay exceeds the minimum, up to [`MAX_TIME`].
    pub max_jitter: Picos,
}

impl LinkSpec {
    /// Checks the limits files and the generator's flags are held to (see the fields); the
    /// error says which and why.
    pub fn check(&self) -> Result<(), LinkSpecError> {
        if !(1..=MAX_BANDWIDTH_BPS).contains(&self.bandwidth_bps) {
            return Err(LinkSpecError::Bandwidth { bandwidth_bps: self.bandwidth_bps });
        }
        if self.queue_bytes > MAX_BYTES {
            return Err(LinkSpecError::QueueBytes { queue_bytes: self.queue_bytes });
        }
        for (field, time) in [("min_delay_ns", self.min_delay), ("max_jitter_ns", self.max_jitter)] {
            if time > MAX_TIME {
                return Err(LinkSpecError::Time { field, time });
            }
        }
        check_drain(self.queue_bytes, self.bandwidth_bps)
    }
}

/// A [`LinkSpec`] past the limits files and flags are held to ([`LinkSpec::check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkSpecError {
    /// The bandwidth is 0 or above [`MAX_BANDWIDTH_BPS`].
    #[error("bandwidth_bps must be between 1 and {MAX_BANDWIDTH_BPS} (1 Pbit/s), got {bandwidth_bps}")]
    Bandwidth {
        /// The bandwidth given, bits per second.
        bandwidth_bps: u64,
    },
    /// The queue is above [`MAX_BYTES`].
    #[error("queue_bytes must be at most {MAX_BYTES} (1 TiB), got {queue_bytes}")]
    QueueBytes {
        /// The queue given, bytes.
        queue_bytes: u64,
    },
    /// A delay or jitter above [`MAX_TIME`].
    #[error("{field} must be at most {MAX_TIME_NS} (1 hour), got {}; {LIMIT_WHY}", ps_to_ns(*.time))]
    Time {
        /// The field as files name it: `min_delay_ns` or `max_jitter_ns`.
        field: &'static str,
        /// The time given, ps.
        time: Picos,
    },
    /// A full queue takes longer to send than 64-bit picoseconds hold.
    #[error(
        "queue_bytes {queue_bytes} takes {:.0} s to send at bandwidth_bps {bandwidth_bps}, more than the {:.0} s (about 213 days) that 64-bit picoseconds hold; give a smaller queue or a faster link",
        drain_seconds(*.queue_bytes, *.bandwidth_bps),
        Picos::MAX as f64 / 1e12
    )]
    Drain {
        /// The queue, bytes.
        queue_bytes: u64,
        /// The bandwidth, bits per second.
        bandwidth_bps: u64,
    },
}

/// How long a queue of `queue_bytes` takes to send at `bandwidth_bps`, seconds (for messages).
fn drain_seconds(queue_bytes: u64, bandwidth_bps: u64) -> f64 {
    queue_bytes as f64 * 8.0 / bandwidth_bps.max(1) as f64
}

/// Why times are limited, for error messages.
const LIMIT_WHY: &str = "bounds add such times up in 64-bit picoseconds";

/// A full queue's transmission time must fit in 64-bit picoseconds (about 213 days): then so
/// does that of every packet the link admits (a packet must fit in the queue), and a file
/// cannot make the analysis truncate one (a truncated transmission time once made `lane plan`
/// announce a bound about 4x too small).
fn check_drain(queue_bytes: u64, bandwidth_bps: u64) -> Result<(), LinkSpecError> {
    match tx_time(queue_bytes, bandwidth_bps) {
        Some(_) => Ok(()),
        None => Err(LinkSpecError::Drain { queue_bytes, bandwidth_bps }),
    }
}

impl Default for LinkSpec {
    /// 10 Gbit/s, 512 KiB of egress queue, 1 us of propagation and 100 ns of jitter.
    fn default() -> Self {
        Self {
            bandwidth_bps: 10_000_000_000,
            queue_bytes: 512 * 1024,
            min_delay: 1_000_000,
            max_jitter: 100_000,
        }
    }
}

/// Hosts and switches joined by directed links; ids are indices, never reused.
#[derive(Debug, Clone, Default)]
pub struct Topology {
    nodes: Vec<Node>,
    links: Vec<Link>,
    by_name: HashMap<String, NodeId>,
    by_ends: HashMap<(NodeId, NodeId), LinkId>,
    /// Node weights are node ids, edge weights link ids (indices match: nodes and links are
    /// only ever added).
    graph: DiGraph<NodeId, LinkId>,
    /// Whether the links hand a lone packet on at once ([`Topology::software_links`]).
    software_links: bool,
}

/// Why a topology could not be built or loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// A file's content is wrong at a line.
    #[error("{file}: line {line}: {what}")]
    At {
        /// The file, as given.
        file: String,
        /// 1-based line.
        line: usize,
        /// What is wrong, and how to fix it.
        what: String,
    },
    /// A file is wrong as a whole (no hosts, no requests).
    #[error("{file}: {what}")]
    File {
        /// The file, as given.
        file: String,
        /// What is wrong.
        what: String,
    },
    /// The file could not be read (missing, a directory, larger than [`MAX_FILE_BYTES`], not
    /// text); the message names it.
    #[error("{0}")]
    Read(String),
    /// A topology built by hand is wrong.
    #[error("{0}")]
    Invalid(String),
}

impl Topology {
    /// An empty topology.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the links are software ones that hand a lone packet on at once (veths under a
    /// shaper, as the testbed's): a packet's own transmission then counts toward its latest
    /// arrival (packets queued ahead of it are sent at the link's rate, and so may it be) but
    /// not toward its earliest, so a lane's minimum latency is the links' minimum delays alone.
    /// On a wire (the default, `false`) a store-and-forward hop always takes it.
    pub fn software_links(&self) -> bool {
        self.software_links
    }

    /// Says whether the links are software ones ([`Topology::software_links`]).
    pub fn set_software_links(&mut self, software: bool) {
        self.software_links = software;
    }

    /// What a packet's transmission time `tx` adds to its earliest arrival over one hop.
    pub(crate) fn tx_in_min(&self, tx: Picos) -> Picos {
        if self.software_links { 0 } else { tx }
    }

    /// Adds a node named `name` (unique).
    pub fn add_node(&mut self, name: &str, kind: NodeKind) -> Result<NodeId, TopologyError> {
        if self.by_name.contains_key(name) {
            return Err(TopologyError::Invalid(format!("duplicate node '{name}'")));
        }
        let id = self.nodes.len();
        self.nodes.push(Node { name: name.to_string(), kind });
        self.by_name.insert(name.to_string(), id);
        let index = self.graph.add_node(id);
        debug_assert_eq!(index.index(), id);
        Ok(id)
    }

    /// Adds the link `from -> to` (at most one per direction). A link built by hand needs only a
    /// positive bandwidth (tests give queues of `u64::MAX / 2` for "unbounded"); the analysis
    /// stays checked whatever the values. Files and the generator's flags are held to
    /// [`LinkSpec::check`].
    pub fn add_link(&mut self, from: NodeId, to: NodeId, spec: LinkSpec) -> Result<LinkId, TopologyError> {
        if from >= self.nodes.len() || to >= self.nodes.len() {
            return Err(TopologyError::Invalid(format!("link {from} -> {to}: no such node")));
        }
        if from == to {
            return Err(TopologyError::Invalid(format!("link from '{}' to itself", self.nodes[from].name)));
        }
        if self.by_ends.contains_key(&(from, to)) {
            return Err(TopologyError::Invalid(format!(
                "duplicate link '{}' -> '{}'",
                self.nodes[from].name, self.nodes[to].name
            )));
        }
        if spec.bandwidth_bps == 0 {
            return Err(TopologyError::Invalid("a link needs a positive bandwidth".into()));
        }
        let id = self.links.len();
        self.links.push(Link {
            from,
            to,
            bandwidth_bps: spec.bandwidth_bps,
            queue_bytes: spec.queue_bytes,
            min_delay: spec.min_delay,
            max_jitter: spec.max_jitter,
        });
        self.by_ends.insert((from, to), id);
        let edge = self.graph.add_edge(NodeIndex::new(from), NodeIndex::new(to), id);
        debug_assert_eq!(edge.index(), id);
        Ok(id)
    }

    /// Both directions, with the same parameters.
    pub fn add_duplex(&mut self, a: NodeId, b: NodeId, spec: LinkSpec) -> Result<(), TopologyError> {
        self.add_link(a, b, spec)?;
        self.add_link(b, a, spec)?;
        Ok(())
    }

    /// Replaces a link's parameters (its ends stay).
    pub fn set_link(&mut self, id: LinkId, spec: LinkSpec) -> Result<(), TopologyError> {
        if spec.bandwidth_bps == 0 {
            return Err(TopologyError::Invalid("a link needs a positive bandwidth".into()));
        }
        let l = self.links.get_mut(id).ok_or_else(|| TopologyError::Invalid(format!("no link {id}")))?;
        l.bandwidth_bps = spec.bandwidth_bps;
        l.queue_bytes = spec.queue_bytes;
        l.min_delay = spec.min_delay;
        l.max_jitter = spec.max_jitter;
        Ok(())
    }

    /// Every node, by id.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Every link, by id.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// Node `id` (panics when there is none).
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    /// Link `id` (panics when there is none).
    pub fn link(&self, id: LinkId) -> &Link {
        &self.links[id]
    }

    /// The node named `name`.
    pub fn find(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    /// The link `from -> to`, if any.
    pub fn link_between(&self, from: NodeId, to: NodeId) -> Option<LinkId> {
        self.by_ends.get(&(from, to)).copied()
    }

    /// The graph: node weights are node ids, edge weights link ids, and indices equal them.
    pub fn graph(&self) -> &DiGraph<NodeId, LinkId> {
        &self.graph
    }

    /// The hosts' ids.
    pub fn hosts(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..self.nodes.len()).filter(|&n| self.nodes[n].kind == NodeKind::Host)
    }

    /// `from -> to` by names, for messages.
    pub fn link_name(&self, id: LinkId) -> String {
        let l = &self.links[id];
        format!("{} -> {}", self.nodes[l.from].name, self.nodes[l.to].name)
    }

    /// The link of a graph edge.
    pub fn edge_link(&self, e: EdgeIndex) -> LinkId {
        self.graph[e]
    }

    /// Parses the TOML form (see the crate docs); `file` names it in errors.
    pub fn from_toml(text: &str, file: &str) -> Result<Self, TopologyError> {
        let at = error_at(text, file);
        let raw: RawTopology = parse(text, file)?;
        let mut topo = Topology::new();
        topo.software_links = raw.software_links;
        for node in &raw.node {
            let name = node.get_ref().name.get_ref();
            if name.is_empty() {
                return Err(at(node.span(), "a node needs a non-empty name".into()));
            }
            topo.add_node(name, node.get_ref().kind)
                .map_err(|_| at(node.get_ref().name.span(), format!("duplicate node '{name}'")))?;
        }
        for link in &raw.link {
            let l = link.get_ref();
            let end = |s: &Spanned<String>| {
                topo.find(s.get_ref()).ok_or_else(|| {
                    at(s.span(), format!("unknown node '{}' (declare it in a [[node]] table)", s.get_ref()))
                })
            };
            let (from, to) = (end(&l.from)?, end(&l.to)?);
            let bandwidth = positive(&l.bandwidth_bps, "bandwidth_bps", &at)?;
            let bandwidth =
                at_most(bandwidth, &l.bandwidth_bps, "bandwidth_bps", MAX_BANDWIDTH_BPS, "1 Pbit/s", &at)?;
            if bandwidth.round() < 1.0 {
                return Err(at(
                    l.bandwidth_bps.span(),
                    format!("bandwidth_bps must be at least 1, got {bandwidth}"),
                ));
            }
            let queue = non_negative(&l.queue_bytes, "queue_bytes", &at)?;
            let queue = at_most(queue, &l.queue_bytes, "queue_bytes", MAX_BYTES, "1 TiB", &at)?;
            let time = |v: &Spanned<toml::Value>, field: &str| {
                let ns = non_negative(v, field, &at)?;
                let ns = at_most(ns, v, field, MAX_TIME_NS, &format!("1 hour; {LIMIT_WHY}"), &at)?;
                // Within the limit, so within 64-bit picoseconds.
                Ok::<Picos, TopologyError>(ns_to_ps(ns).unwrap_or(MAX_TIME))
            };
            let spec = LinkSpec {
                // Both within their limits, far below 2^64: the casts are exact after rounding.
                bandwidth_bps: bandwidth.round() as u64,
                queue_bytes: queue.round() as u64,
                min_delay: time(&l.min_delay_ns, "min_delay_ns")?,
                max_jitter: time(&l.max_jitter_ns, "max_jitter_ns")?,
            };
            check_drain(spec.queue_bytes, spec.bandwidth_bps)
                .map_err(|what| at(l.queue_bytes.span(), what.to_string()))?;
            let pairs: &[(NodeId, NodeId)] =
                if l.bidirectional.unwrap_or(false) { &[(from, to), (to, from)] } else { &[(from, to)] };
            for &(a, b) in pairs {
                if topo.link_between(a, b).is_some() {
                    return Err(at(
                        link.span(),
                        format!("duplicate link '{}' -> '{}'", topo.nodes[a].name, topo.nodes[b].name),
                    ));
                }
                topo.add_link(a, b, spec).map_err(|e| at(link.span(), e.to_string()))?;
            }
        }
        Ok(topo)
    }

    /// The TOML form, which [`Topology::from_toml`] reads back to the same nodes and links.
    pub fn to_toml(&self) -> String {
        let out = OutTopology {
            software_links: self.software_links,
            node: self.nodes.iter().map(|n| OutNode { name: &n.name, kind: n.kind }).collect(),
            link: self
                .links
                .iter()
                .map(|l| OutLink {
                    from: &self.nodes[l.from].name,
                    to: &self.nodes[l.to].name,
                    bandwidth_bps: l.bandwidth_bps.into(),
                    queue_bytes: l.queue_bytes.into(),
                    min_delay_ns: ps_to_ns(l.min_delay),
                    max_jitter_ns: ps_to_ns(l.max_jitter),
                })
                .collect(),
        };
        // Strings (escaped by the serializer), integers within i64, floats: this cannot fail.
        toml::to_string(&out).expect("a topology serializes to TOML")
    }

    /// Reads and parses the topology file at `path` (at most [`MAX_FILE_BYTES`]); one with no
    /// host is refused, since tunnels start and end at hosts. Errors name the file.
    pub fn load(path: &Path) -> Result<Self, TopologyError> {
        let file = path.display().to_string();
        let text = read(path)?;
        let topo = Self::from_toml(&text, &file)?;
        if topo.hosts().next().is_none() {
            let what =
                if topo.nodes.is_empty() { "no [[node]] tables" } else { "no node has kind = \"host\"" };
            return Err(TopologyError::File {
                file,
                what: format!("{what}: tunnels start and end at hosts, so there is nothing to plan"),
            });
        }
        Ok(topo)
    }
}

/// Reads a topology or requests file, at most [`MAX_FILE_BYTES`].
pub(crate) fn read(path: &Path) -> Result<String, TopologyError> {
    kairos_sys::fs::read_text(path, MAX_FILE_BYTES).map_err(|e| TopologyError::Read(e.to_string()))
}

#[derive(Serialize)]
struct OutTopology<'a> {
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    software_links: bool,
    node: Vec<OutNode<'a>>,
    link: Vec<OutLink<'a>>,
}

#[derive(Serialize)]
struct OutNode<'a> {
    name: &'a str,
    kind: NodeKind,
}

#[derive(Serialize)]
struct OutLink<'a> {
    from: &'a str,
    to: &'a str,
    bandwidth_bps: Number,
    queue_bytes: Number,
    min_delay_ns: f64,
    max_jitter_ns: f64,
}

/// A count written as a TOML integer, or as a float past TOML's 64-bit signed integers (a link
/// built by hand with a queue of `u64::MAX`; [`Topology::from_toml`] refuses it, past the limit).
#[derive(Serialize)]
#[serde(untagged)]
enum Number {
    Int(i64),
    Float(f64),
}

impl From<u64> for Number {
    fn from(n: u64) -> Self {
        i64::try_from(n).map_or(Number::Float(n as f64), Number::Int)
    }
}

/// Deserializes `text`, reporting a syntax or shape error at its line of `file`.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(text: &str, file: &str) -> Result<T, TopologyError> {
    toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(0, |s| line_of(text, s.start));
        TopologyError::At { file: file.to_string(), line, what: e.message().trim().to_string() }
    })
}

/// Makes errors that name the line of `file` a span of `text` starts on.
pub(crate) fn error_at<'a>(
    text: &'a str,
    file: &'a str,
) -> impl Fn(std::ops::Range<usize>, String) -> TopologyError + 'a {
    move |span, what| TopologyError::At { file: file.to_string(), line: line_of(text, span.start), what }
}

/// 1-based line of a byte offset.
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopology {
    #[serde(default)]
    software_links: bool,
    #[serde(default)]
    node: Vec<Spanned<RawNode>>,
    #[serde(default)]
    link: Vec<Spanned<RawLink>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: Spanned<String>,
    kind: NodeKind,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    from: Spanned<String>,
    to: Spanned<String>,
    bandwidth_bps: Spanned<toml::Value>,
    queue_bytes: Spanned<toml::Value>,
    min_delay_ns: Spanned<toml::Value>,
    max_jitter_ns: Spanned<toml::Value>,
    bidirectional: Option<bool>,
}

pub(crate) type At<'a> = dyn Fn(std::ops::Range<usize>, String) -> TopologyError + 'a;

/// A number (integer or float) from a field, or an error naming the field.
pub(crate) fn number(v: &Spanned<toml::Value>, field: &str, at: &At<'_>) -> Result<f64, TopologyError> {
    match v.get_ref() {
        toml::Value::Integer(i) => Ok(*i as f64),
        toml::Value::Float(x) if x.is_finite() => Ok(*x),
        other => Err(at(v.span(), format!("{field} must be a number, got {other}"))),
    }
}

fn positive(v: &Spanned<toml::Value>, field: &str, at: &At<'_>) -> Result<f64, TopologyError> {
    let x = number(v, field, at)?;
    if x > 0.0 { Ok(x) } else { Err(at(v.span(), format!("{field} must be positive, got {x}"))) }
}

fn non_negative(v: &Spanned<toml::Value>, field: &str, at: &At<'_>) -> Result<f64, TopologyError> {
    let x = number(v, field, at)?;
    if x >= 0.0 { Ok(x) } else { Err(at(v.span(), format!("{field} must not be negative, got {x}"))) }
}

/// `x` (read from `v`) when at most `max`, else an error at its line naming the limit and
/// `why` it is there.
pub(crate) fn at_most(
    x: f64,
    v: &Spanned<toml::Value>,
    field: &str,
    max: u64,
    why: &str,
    at: &At<'_>,
) -> Result<f64, TopologyError> {
    if x <= max as f64 {
        Ok(x)
    } else {
        Err(at(v.span(), format!("{field} must be at most {max} ({why}), got {x}")))
    }
}
