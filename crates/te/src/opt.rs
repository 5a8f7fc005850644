//! X-OPT (the source's Appendix A, Algorithm 2): grow the tunnel's tree from the sender by
//! attaching, one receiver at a time, a shortest path in the graph of links that still have room
//! for the request's packet, each weighted by the worst latency X-ADJ would charge on it
//! (`lambda_min + delta_max + t + sum of the other tunnels' t'`).
//!
//! Each round, every receiver not yet reached gets a cost: over the tree nodes `v` it could hang
//! from, the least of `SP(v, u) + max(0, depth(v) + SP(v, u) - LP)`, where `depth(v)` is the
//! weight of the tree path to `v` and `LP` the tree's longest path from the sender: the path's
//! weight plus how much it lengthens the tree's worst latency. (Line 16 of the printed algorithm
//! writes `LP_T(u)` for a `u` not yet in the tree; the tree's longest path is what the cost needs
//! to measure that lengthening.) The receiver with the *highest* cost is attached first, as in the
//! printed algorithm: the hardest receiver shapes the tree, and the easy ones then hang from it.
//!
//! Paths never pass through a host (hosts do not forward): a path may start at the sender and
//! end at its receiver, and every node between is a switch. Shortest paths are `petgraph`'s
//! Dijkstra, run backwards from each receiver once per request.

use hashbrown::{HashMap, HashSet};

use petgraph::algo::dijkstra;
use petgraph::graph::NodeIndex;
use petgraph::visit::{EdgeFiltered, EdgeRef, Reversed};

use crate::request::{InvalidRequest, Request, RequestProblem};
use crate::topology::{LinkId, NodeId, NodeKind, Topology};
use crate::tunnel::{LinkLoad, Refusal};

/// A tunnel's tree: a set of links from the sender reaching every receiver.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tree {
    /// The tree's links, in any order.
    pub links: Vec<LinkId>,
}

/// Path weights, in picoseconds. 128 bits: a link's weight is a sum of 64-bit times and a path
/// adds up at most every link, so neither can overflow (64 bits could, and would then pick a
/// wrong path silently).
type Weight = u128;

/// Whether link `l` can hold one more packet of `bytes` (a sum past 64 bits cannot).
pub(crate) fn has_room(topo: &Topology, loads: &[LinkLoad], l: LinkId, bytes: u64) -> bool {
    loads[l].bytes.checked_add(bytes).is_some_and(|held| held <= topo.link(l).queue_bytes)
}

/// X-OPT's tree for `req` over the current loads.
pub(crate) fn build_tree(topo: &Topology, loads: &[LinkLoad], req: &Request) -> Result<Tree, Refusal> {
    // A link whose transmission time for this packet does not fit in 64-bit picoseconds has no
    // room for it either.
    let tx: Vec<Option<u64>> = topo.links().iter().map(|link| link.tx_time(req.packet_bytes)).collect();
    let room = |l: LinkId| tx[l].is_some() && has_room(topo, loads, l, req.packet_bytes);
    let weight: Vec<Weight> = topo
        .links()
        .iter()
        .zip(loads)
        .zip(&tx)
        .map(|((link, load), tx)| {
            Weight::from(link.min_delay)
                + Weight::from(link.max_jitter)
                + Weight::from(tx.unwrap_or(0))
                + load.tx_sum.iter().map(|&t| Weight::from(t)).sum::<Weight>()
        })
        .collect();
    let switch = |n: NodeId| topo.node(n).kind == NodeKind::Switch;
    // May the path toward `target` use the link from `x` to `y`?
    let passable =
        |x: NodeId, y: NodeId, target: NodeId| (switch(x) || x == req.sender) && (switch(y) || y == target);
    let graph = topo.graph();
    let mut dist: Vec<HashMap<NodeId, Weight>> = Vec::with_capacity(req.receivers.len());
    for &u in &req.receivers {
        let filtered = EdgeFiltered::from_fn(graph, |e: petgraph::graph::EdgeReference<'_, LinkId>| {
            let l = *e.weight();
            room(l) && passable(e.source().index(), e.target().index(), u)
        });
        let d = dijkstra(Reversed(&filtered), NodeIndex::new(u), None, |e| weight[*e.weight()]);
        let d: HashMap<NodeId, Weight> = d.into_iter().map(|(n, w)| (n.index(), w)).collect();
        if !d.contains_key(&req.sender) {
            return Err(why_unreachable(topo, loads, req, u));
        }
        dist.push(d);
    }
    // Grow the tree.
    let mut depth: HashMap<NodeId, Weight> = HashMap::from([(req.sender, 0)]);
    let mut links = Vec::new();
    let mut remaining: Vec<usize> = (0..req.receivers.len()).collect();
    while !remaining.is_empty() {
        let longest = depth.values().copied().max().unwrap_or(0);
        let mut pick: Option<(Weight, usize, NodeId)> = None; // (cost, index in remaining, attach)
        for (i, &r) in remaining.iter().enumerate() {
            let best = depth
                .iter()
                .filter(|&(&v, _)| v == req.sender || switch(v))
                .filter_map(|(&v, &dv)| {
                    let sp = *dist[r].get(&v)?;
                    Some((sp + (dv + sp).saturating_sub(longest), v))
                })
                .min();
            let Some((cost, v)) = best else { continue };
            if pick.is_none_or(|(c, _, _)| cost > c) {
                pick = Some((cost, i, v));
            }
        }
        let Some((_, i, from)) = pick else {
            return Err(why_unreachable(topo, loads, req, req.receivers[remaining[0]]));
        };
        let r = remaining.remove(i);
        let target = req.receivers[r];
        // Walk the shortest path from `from` to `target` along tight edges.
        let d = &dist[r];
        let mut path: Vec<LinkId> = Vec::new();
        let mut x = from;
        while x != target {
            let next = graph
                .edges(NodeIndex::new(x))
                .map(|e| (*e.weight(), e.target().index()))
                .find(|&(l, y)| {
                    room(l) && passable(x, y, target) && d.get(&y).is_some_and(|&dy| dy + weight[l] == d[&x])
                })
                .expect("a node with a distance has a tight edge toward the target");
            path.push(next.0);
            x = next.1;
        }
        // Keep the part after the last node already in the tree, so that it stays a tree.
        let start = path.iter().rposition(|&l| depth.contains_key(&topo.link(l).from)).unwrap_or(0);
        for &l in &path[start..] {
            let link = topo.link(l);
            let dv = depth[&link.from] + weight[l];
            depth.insert(link.to, dv);
            links.push(l);
        }
    }
    Ok(Tree { links })
}

/// Why no path with room leads from the sender to `receiver`: the first full link on a path
/// that ignores room, or no path at all.
fn why_unreachable(topo: &Topology, loads: &[LinkLoad], req: &Request, receiver: NodeId) -> Refusal {
    let switch = |n: NodeId| topo.node(n).kind == NodeKind::Switch;
    let graph = topo.graph();
    let filtered = EdgeFiltered::from_fn(graph, |e: petgraph::graph::EdgeReference<'_, LinkId>| {
        let (x, y) = (e.source().index(), e.target().index());
        (switch(x) || x == req.sender) && (switch(y) || y == receiver)
    });
    let d = dijkstra(Reversed(&filtered), NodeIndex::new(receiver), None, |_| 1u64);
    let name = topo.node(receiver).name.clone();
    let Some(&hops) = d.get(&NodeIndex::new(req.sender)) else {
        return Refusal::Unreachable { receiver: name };
    };
    // Walk a fewest-hop path and report its first full link.
    let (mut x, mut left) = (req.sender, hops);
    while left > 0 {
        let Some((l, y)) = graph
            .edges(NodeIndex::new(x))
            .map(|e| (*e.weight(), e.target().index()))
            .find(|&(_, y)| (switch(y) || y == receiver) && d.get(&NodeIndex::new(y)) == Some(&(left - 1)))
        else {
            break;
        };
        let link = topo.link(l);
        if !has_room(topo, loads, l, req.packet_bytes) {
            return Refusal::Full {
                receiver: name,
                link: topo.link_name(l),
                bytes: req.packet_bytes,
                held: loads[l].bytes,
                queue: link.queue_bytes,
            };
        }
        x = y;
        left -= 1;
    }
    // Every fewest-hop path had room on its own links but not together with detours: name the
    // receiver's last link.
    Refusal::Unreachable { receiver: name }
}

/// The links of a tree in preorder from the sender; an error when they are not a tree from the
/// sender reaching every receiver.
pub(crate) fn preorder(
    topo: &Topology,
    req: &Request,
    links: &[LinkId],
) -> Result<Vec<LinkId>, InvalidRequest> {
    let invalid = |problem| Err(InvalidRequest { request: req.name.clone(), problem });
    let mut children: HashMap<NodeId, Vec<LinkId>> = HashMap::new();
    let mut parents: HashSet<NodeId> = HashSet::new();
    for &l in links {
        if l >= topo.links().len() {
            return invalid(RequestProblem::NoLink(l));
        }
        let link = topo.link(l);
        if !parents.insert(link.to) || link.to == req.sender {
            return invalid(RequestProblem::NotATree(topo.node(link.to).name.clone()));
        }
        children.entry(link.from).or_default().push(l);
    }
    let mut order = Vec::with_capacity(links.len());
    let mut stack: Vec<LinkId> = children.get(&req.sender).cloned().unwrap_or_default();
    stack.reverse();
    let mut reached: HashSet<NodeId> = HashSet::from([req.sender]);
    while let Some(l) = stack.pop() {
        order.push(l);
        let to = topo.link(l).to;
        reached.insert(to);
        if let Some(c) = children.get(&to) {
            stack.extend(c.iter().rev());
        }
    }
    if order.len() != links.len() {
        return invalid(RequestProblem::LinksNotBelowSender);
    }
    if let Some(&r) = req.receivers.iter().find(|r| !reached.contains(*r)) {
        return invalid(RequestProblem::ReceiverNotReached(topo.node(r).name.clone()));
    }
    Ok(order)
}
