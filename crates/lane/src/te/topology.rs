//! The network the express lane runs over: hosts and switches joined by directed links, each with
//! the source's four parameters (bandwidth, egress queue length in bytes, minimum delay, maximum
//! jitter). Loaded from TOML with errors that name the line and what is wrong, or built by a
//! generator (one-switch rack, leaf-spine, k-ary fat-tree).
//!
//! Times are integer picoseconds ([`Picos`]) so that the analysis and the validator compute the
//! same transmission times exactly; files speak nanoseconds.

use std::collections::HashMap;
use std::fmt;

use petgraph::graph::{DiGraph, EdgeIndex, NodeIndex};
use serde::Deserialize;
use toml::Spanned;

use super::{Picos, ns_to_ps};

pub type NodeId = usize;
pub type LinkId = usize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    Host,
    Switch,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
}

/// A directed link and its egress queue at `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub from: NodeId,
    pub to: NodeId,
    pub bandwidth_bps: u64,
    pub queue_bytes: u64,
    pub min_delay: Picos,
    pub max_jitter: Picos,
}

impl Link {
    /// Time to put `bytes` on this link, rounded up to a picosecond.
    pub fn tx_time(&self, bytes: u64) -> Picos {
        super::tx_time(bytes, self.bandwidth_bps)
    }
}

/// What a loaded or generated link carries, before it has endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSpec {
    pub bandwidth_bps: u64,
    pub queue_bytes: u64,
    pub min_delay: Picos,
    pub max_jitter: Picos,
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

#[derive(Debug, Clone, Default)]
pub struct Topology {
    nodes: Vec<Node>,
    links: Vec<Link>,
    by_name: HashMap<String, NodeId>,
    by_ends: HashMap<(NodeId, NodeId), LinkId>,
    /// Node weights are node ids, edge weights link ids (indices match: nodes and links are
    /// only ever added).
    graph: DiGraph<NodeId, LinkId>,
}

/// Why a topology could not be built or loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("{file}: line {line}: {what}")]
    At { file: String, line: usize, what: String },
    #[error("{0}")]
    Invalid(String),
}

impl Topology {
    pub fn new() -> Self {
        Self::default()
    }

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

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn links(&self) -> &[Link] {
        &self.links
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    pub fn link(&self, id: LinkId) -> &Link {
        &self.links[id]
    }

    pub fn find(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    pub fn link_between(&self, from: NodeId, to: NodeId) -> Option<LinkId> {
        self.by_ends.get(&(from, to)).copied()
    }

    pub fn graph(&self) -> &DiGraph<NodeId, LinkId> {
        &self.graph
    }

    pub fn hosts(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..self.nodes.len()).filter(|&n| self.nodes[n].kind == NodeKind::Host)
    }

    /// `from -> to` by names, for messages.
    pub fn link_name(&self, id: LinkId) -> String {
        let l = &self.links[id];
        format!("{} -> {}", self.nodes[l.from].name, self.nodes[l.to].name)
    }

    pub fn edge_link(&self, e: EdgeIndex) -> LinkId {
        self.graph[e]
    }

    /// Parses the TOML form (see the crate docs); `file` names it in errors.
    pub fn from_toml(text: &str, file: &str) -> Result<Self, TopologyError> {
        let at = error_at(text, file);
        let raw: RawTopology = parse(text, file)?;
        let mut topo = Topology::new();
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
            let bandwidth = positive(&l.bandwidth_bps, "bandwidth_bps", MAX_COUNT, &at)?;
            let queue = non_negative(&l.queue_bytes, "queue_bytes", MAX_COUNT, &at)?;
            let min_delay = non_negative(&l.min_delay_ns, "min_delay_ns", MAX_DELAY_NS, &at)?;
            let jitter = non_negative(&l.max_jitter_ns, "max_jitter_ns", MAX_DELAY_NS, &at)?;
            let spec = LinkSpec {
                bandwidth_bps: bandwidth.round() as u64,
                queue_bytes: queue.round() as u64,
                min_delay: ns_to_ps(min_delay),
                max_jitter: ns_to_ps(jitter),
            };
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

    /// The TOML form, which [`Topology::from_toml`] reads back.
    pub fn to_toml(&self) -> String {
        let mut out = String::new();
        // Names may hold quotes and backslashes: `toml::Value` writes them as escaped strings.
        for n in &self.nodes {
            let kind = match n.kind {
                NodeKind::Host => "host",
                NodeKind::Switch => "switch",
            };
            out.push_str(&format!("[[node]]\nname = {}\nkind = \"{kind}\"\n\n", toml::Value::from(&*n.name)));
        }
        for l in &self.links {
            out.push_str(&format!(
                "[[link]]\nfrom = {}\nto = {}\nbandwidth_bps = {}\nqueue_bytes = {}\nmin_delay_ns = {}\nmax_jitter_ns = {}\n\n",
                toml::Value::from(&*self.nodes[l.from].name),
                toml::Value::from(&*self.nodes[l.to].name),
                l.bandwidth_bps,
                l.queue_bytes,
                super::ps_to_ns(l.min_delay),
                super::ps_to_ns(l.max_jitter)
            ));
        }
        out
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hosts = self.hosts().count();
        write!(f, "{} hosts, {} switches, {} links", hosts, self.nodes.len() - hosts, self.links.len())
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

type At<'a> = dyn Fn(std::ops::Range<usize>, String) -> TopologyError + 'a;

/// A number (integer or float) from a field, or an error naming the field.
pub(crate) fn number(v: &Spanned<toml::Value>, field: &str, at: &At<'_>) -> Result<f64, TopologyError> {
    match v.get_ref() {
        toml::Value::Integer(i) => Ok(*i as f64),
        toml::Value::Float(x) if x.is_finite() => Ok(*x),
        other => Err(at(v.span(), format!("{field} must be a number, got {other}"))),
    }
}

/// The largest bandwidth or queue a file may give: `to_toml` writes it back as a TOML integer.
const MAX_COUNT: f64 = 1e18;
/// The largest delay or jitter a file may give, in ns (1000 s): sums over many hops stay far from
/// u64's limit in picoseconds, and `to_toml` writes it back to the same picosecond (beyond about
/// 2^52 ps, the nanoseconds it writes can read back a picosecond off).
const MAX_DELAY_NS: f64 = 1e12;

fn positive(v: &Spanned<toml::Value>, field: &str, max: f64, at: &At<'_>) -> Result<f64, TopologyError> {
    let x = number(v, field, at)?;
    if x > max {
        return Err(at(v.span(), format!("{field} must be at most {max:e}, got {x:e}")));
    }
    if x > 0.0 { Ok(x) } else { Err(at(v.span(), format!("{field} must be positive, got {x}"))) }
}

fn non_negative(v: &Spanned<toml::Value>, field: &str, max: f64, at: &At<'_>) -> Result<f64, TopologyError> {
    let x = number(v, field, at)?;
    if x > max {
        return Err(at(v.span(), format!("{field} must be at most {max:e}, got {x:e}")));
    }
    if x >= 0.0 { Ok(x) } else { Err(at(v.span(), format!("{field} must not be negative, got {x}"))) }
}
