//! X-ADJ (the source's Appendix A, Algorithm 1): given a tunnel's tree and everything else
//! sharing its queues, set its period, minimum latency and maximum jitter so that every packet of
//! every run of the formal model (A.1) reaches every receiver within the bounds.
//!
//! Per link `(u, v)` of the tree, with `t` the tunnel's own transmission time there and `W` the
//! longest its packet can wait in the queue before being sent:
//!
//! - latest arrival below `u`: `hi(u) = max_v hi(v) + lambda_min + delta_max + t + W`;
//! - earliest: `lo(u) = min_v lo(v) + lambda_min + t` (0 at a receiver; without `t` over a
//!   topology of software links, [`Topology::software_links`], which hand a lone packet on at
//!   once);
//! - period lower bound: `D(u) = max_v max(W + t, D(v) + W + delta_max)` (0 at a leaf);
//!
//! and then `period = max(requested, D(sender))`, `min_latency = lo(sender)`,
//! `max_jitter = hi(sender) - lo(sender)`.
//!
//! The sending host's own delay `J` (its lane core and fan-out, [`crate::request::HostDelay`],
//! as its node measured it) sits before the first link like a link of jitter `J`, no minimum
//! delay and no queue: a packet enters the first queue anywhere in `[0, J]` after its release,
//! so `hi(sender)` and `D(sender)` gain `J` (packet `j` must still have left the first queue
//! before packet `j + 1`, which can enter it `period - J` later), and the arrival spread that
//! lower sub-lanes see on every link of the tree includes it. `lo` is unchanged: the host only
//! ever delays.
//!
//! # Where this differs from the algorithm as printed, and why
//!
//! The validator ([`crate::validator`]) is the judge; [`AdjOptions::as_printed`] turns each fix
//! off, and the tests keep a case where each fix is needed.
//!
//! 1. **The tunnel's own transmission time bounds the period** (`W + t` in `D(u)`). Line 15 of
//!    Algorithm 1 only has `t' + D(v) + delta_max`: with no other tunnel and no jitter that is 0,
//!    and a request asking for a period shorter than its packet's transmission time (a 9,000 B
//!    packet every 100 ns on 10 Gbit/s) is approved as asked: the queue grows without bound and
//!    packets are dropped. The proof's base case needs packet `j` to have *left* the queue (sent,
//!    `W + t`) before packet `j+1` arrives, not just to have started.
//! 2. **Sub-lanes.** `W` counts one packet of every other tunnel of the same sub-lane on the link
//!    (FIFO: later arrivals queue behind), one maximum-size packet of a lower sub-lane (a switch
//!    does not preempt a packet already on the wire; the source does not spell this out), and
//!    for every higher sub-lane tunnel as many packets as can be queued when ours arrives or
//!    arrive before it is sent: strict priority lets them overtake it again and again, so "one
//!    packet each" is optimistic there. The fixed point is
//!    `W = B + sum_same t' + sum_higher ceil((W + W' + t' + J') / period') t'`, with `W' + t'`
//!    the higher tunnel's own residence bound at the link and `J'` the spread of its arrival
//!    times there (both from its own analysis; tunnels are adjusted in sub-lane order). The
//!    textbook CAN form, `ceil((W + J') / period')` measured from the start of a busy period,
//!    is optimistic here: with FIFO inside a sub-lane, a packet that arrives late in a busy
//!    period does not see the same-sub-lane packets that arrived before it, so the busy period's
//!    start is not its worst case (the validator found such a case: it is kept as a test).
//!    When the fixed point does not converge (the higher sub-lanes fill the link), the request
//!    is refused.
//! 3. **Receivers inside the tree.** Line 11 returns at a receiver without looking at its
//!    children; a receiver that also forwards (a host on the path to another) would lose the
//!    bounds of its subtree. Here a receiver contributes 0 to `lo` and `hi`, and its children
//!    are still visited. (X-OPT here never routes through hosts, so this only matters for trees
//!    given by hand.)

use hashbrown::HashMap;

use crate::request::Resources;
use crate::topology::{LinkId, NodeId, Topology};
use crate::tunnel::{Hop, LinkLoad, Tunnel, TunnelId};
use crate::units::{Picos, sum};

/// Which of the fixes described in the module docs to apply (all, by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdjOptions {
    /// Fix 1: `W + t` bounds the period.
    pub own_transmission: bool,
    /// Fix 2: one maximum-size lower sub-lane packet blocks.
    pub lower_blocking: bool,
    /// Fix 2: higher sub-lanes counted by the fixed point (else one packet each).
    pub higher_interference: bool,
}

impl Default for AdjOptions {
    fn default() -> Self {
        Self { own_transmission: true, lower_blocking: true, higher_interference: true }
    }
}

impl AdjOptions {
    /// Algorithm 1 as the source prints it (for tests that show why the fixes are needed).
    pub fn as_printed() -> Self {
        Self { own_transmission: false, lower_blocking: false, higher_interference: false }
    }
}

/// Why a tunnel could not be adjusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdjError {
    /// The higher sub-lanes leave no room on this link: the waiting time does not converge.
    Saturated {
        /// The link.
        link: LinkId,
        /// The tunnel's sub-lane.
        sublane: u8,
    },
    /// A time the analysis adds up at this link does not fit in 64-bit picoseconds.
    Overflow {
        /// The link.
        link: LinkId,
        /// Which quantity (`the maximum latency`, ...).
        what: &'static str,
    },
}

/// Waits longer than this are treated as unbounded.
const WAIT_LIMIT: Picos = 1_000_000_000_000; // 1 s

/// `terms` added up at `link`, or the overflow naming `what`.
fn add(link: LinkId, what: &'static str, terms: &[Picos]) -> Result<Picos, AdjError> {
    sum(terms).ok_or(AdjError::Overflow { link, what })
}

/// The tunnel's resources and per-hop analysis, given the other tunnels on its links (those of
/// higher sub-lanes already adjusted). Every sum is checked: one that does not fit in 64-bit
/// picoseconds is an [`AdjError::Overflow`], never a wrapped bound.
pub(crate) fn adjust(
    topo: &Topology,
    me: &Tunnel,
    host_jitter: Picos,
    loads: &[LinkLoad],
    options: AdjOptions,
) -> Result<(Resources, Vec<Hop>), AdjError> {
    let req = &me.request;
    let sublane = req.sublane;
    // Forward pass (links are in preorder): arrival windows at each node; the sending host lets
    // a packet into the first queue up to `host_jitter` after its release.
    let mut arrive: HashMap<NodeId, (Picos, Picos)> = HashMap::with_capacity(me.links.len() + 1);
    arrive.insert(req.sender, (0, host_jitter));
    let mut hops = Vec::with_capacity(me.links.len());
    for &l in &me.links {
        let link = topo.link(l);
        let (a_min, a_max) = arrive[&link.from];
        let tx = link
            .tx_time(req.packet_bytes)
            .ok_or(AdjError::Overflow { link: l, what: "the packet's transmission time" })?;
        let wait = wait_bound(topo, l, me.id, sublane, tx, &loads[l], options)?;
        hops.push(Hop { link: l, tx, wait, arrive_min: a_min, arrive_max: a_max });
        let earliest = add(l, "the earliest arrival", &[a_min, topo.tx_in_min(tx), link.min_delay])?;
        let latest = add(l, "the latest arrival", &[a_max, wait, tx, link.min_delay, link.max_jitter])?;
        arrive.insert(link.to, (earliest, latest));
    }
    // Backward pass (reverse preorder visits children before parents).
    #[derive(Clone, Copy)]
    struct Below {
        lo: Option<Picos>,
        hi: Option<Picos>,
        period: Picos,
    }
    let mut below: HashMap<NodeId, Below> = HashMap::with_capacity(me.links.len() + 1);
    let at = |below: &HashMap<NodeId, Below>, n: NodeId| {
        let receiver = req.receivers.contains(&n);
        below.get(&n).copied().unwrap_or(Below {
            lo: receiver.then_some(0),
            hi: receiver.then_some(0),
            period: 0,
        })
    };
    for hop in hops.iter().rev() {
        let l = hop.link;
        let link = topo.link(l);
        let child = at(&below, link.to);
        let mut parent = at(&below, link.from);
        if let Some(lo) = child.lo {
            let via = add(l, "the minimum latency", &[lo, link.min_delay, topo.tx_in_min(hop.tx)])?;
            parent.lo = Some(parent.lo.map_or(via, |p| p.min(via)));
        }
        if let Some(hi) = child.hi {
            let via =
                add(l, "the maximum latency", &[hi, link.min_delay, link.max_jitter, hop.tx, hop.wait])?;
            parent.hi = Some(parent.hi.map_or(via, |p| p.max(via)));
        }
        let mut d = add(l, "the period bound", &[child.period, hop.wait, link.max_jitter])?;
        if options.own_transmission {
            d = d.max(add(l, "the period bound", &[hop.wait, hop.tx])?);
        }
        parent.period = parent.period.max(d);
        below.insert(link.from, parent);
    }
    let root = at(&below, req.sender);
    let first = me.links.first().copied().unwrap_or(0);
    // The host's delay before the first link, as a link of jitter `host_jitter` (module docs).
    let host = |what, x: Option<Picos>| {
        x.map(|x| x.checked_add(host_jitter).ok_or(AdjError::Overflow { link: first, what })).transpose()
    };
    let lo = root.lo.unwrap_or(0);
    let hi = host("the maximum latency", root.hi)?.unwrap_or(0);
    let period_bound = host("the period bound", (!me.links.is_empty()).then_some(root.period))?.unwrap_or(0);
    // Every path's latest arrival is at least its earliest, so `hi >= lo`; checked all the same.
    let max_jitter = hi.checked_sub(lo).ok_or(AdjError::Overflow { link: first, what: "the jitter" })?;
    let resources = Resources {
        packet_bytes: req.packet_bytes,
        period: req.period.max(period_bound),
        min_latency: lo,
        max_jitter,
        sublane,
    };
    Ok((resources, hops))
}

/// The longest a packet of tunnel `me` (sub-lane `sublane`, transmission `tx`) waits in the
/// queue of link `l` before it is sent.
fn wait_bound(
    topo: &Topology,
    l: LinkId,
    me: TunnelId,
    sublane: u8,
    tx: Picos,
    load: &LinkLoad,
    options: AdjOptions,
) -> Result<Picos, AdjError> {
    let link = topo.link(l);
    let s = usize::from(sublane);
    // The same sub-lane: one packet of each other tunnel (this one's own is in the sum too).
    let same = load.tx_sum[s]
        .checked_sub(tx)
        .ok_or(AdjError::Overflow { link: l, what: "the same sub-lane's transmission times" })?;
    let blocking = if options.lower_blocking {
        match load.max_bytes_below(sublane) {
            0 => 0,
            b => link
                .tx_time(b)
                .ok_or(AdjError::Overflow { link: l, what: "a lower sub-lane packet's transmission time" })?,
        }
    } else {
        0
    };
    // The higher sub-lane tunnels on the link, with their transmission, residence bound and
    // arrival spread here, and period (kept up to date by the allocation).
    let higher = || load.by_sublane[..s].iter().flatten().filter(move |e| e.id != me);
    let base = add(l, "the waiting time", &[blocking, same])?;
    let first = higher()
        .try_fold(base, |w, e| w.checked_add(e.tx))
        .ok_or(AdjError::Overflow { link: l, what: "the waiting time" })?;
    if !options.higher_interference {
        return Ok(first);
    }
    // A higher packet that delays ours either sits in the queue when ours arrives at `a` (it
    // arrived after `a - W' - t'`, or it would have left) or arrives before ours starts, by
    // `a + W`: its arrival lies in an open window of length `W + W' + t'`, so its release in
    // one of length `W + W' + t' + J'`, which holds at most `ceil(that / period')` of them.
    // A term that overflows 64 bits is far past `WAIT_LIMIT`: the sub-lane is saturated.
    let saturated = AdjError::Saturated { link: l, sublane };
    let mut w = first;
    loop {
        let mut next = base;
        for e in higher() {
            let window = sum(&[w, e.residence, e.spread]).ok_or_else(|| saturated.clone())?;
            let packets = window.div_ceil(e.period.max(1));
            let term = packets.checked_mul(e.tx).ok_or_else(|| saturated.clone())?;
            next = next.checked_add(term).ok_or_else(|| saturated.clone())?;
        }
        if next == w {
            return Ok(w);
        }
        if next > WAIT_LIMIT {
            return Err(saturated);
        }
        w = next;
    }
}
