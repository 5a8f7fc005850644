//! The allocation: the admitted tunnels and what each link carries. Admission runs X-OPT for a
//! tree, checks approximate validity (the packet sizes of the tunnels on every link fit its
//! queue), then re-runs X-ADJ on every tunnel whose bounds the new one can change: those sharing
//! a link with it, and, in sub-lane order, the lower sub-lane tunnels sharing a link with any
//! tunnel whose period or arrival spread changed. Release does the same in reverse.

use std::collections::BTreeSet;

use hashbrown::HashMap;

use crate::adj::{self, AdjError, AdjOptions};
use crate::opt::{self, Tree};
use crate::request::{HostDelay, Request, Resources, SUBLANES};
use crate::topology::{LinkId, NodeId, NodeKind, Topology};
use crate::tunnel::{Entry, LinkLoad, Refusal, Tunnel, TunnelId};
use crate::units::Picos;

/// A tunnel whose resources an operation changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// The tunnel.
    pub id: TunnelId,
    /// What it had before the operation.
    pub before: Resources,
    /// What it has now.
    pub after: Resources,
}

/// An admitted request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// The new tunnel.
    pub id: TunnelId,
    /// What it is granted.
    pub resources: Resources,
    /// Other tunnels whose resources changed.
    pub changed: Vec<Change>,
}

/// The admitted tunnels over a topology, and what each link carries.
#[derive(Debug, Clone)]
pub struct Allocation {
    topo: Topology,
    tunnels: HashMap<TunnelId, Tunnel>,
    loads: Vec<LinkLoad>,
    next_id: TunnelId,
    options: AdjOptions,
    /// What each sending host adds before its first link, as its node reported it.
    hosts: HashMap<NodeId, HostDelay>,
    /// Tunnels X-ADJ ran on in the last operation (for benchmarks and reports).
    last_readjusted: usize,
}

impl Allocation {
    /// An empty allocation over `topo`, with every fix of X-ADJ.
    pub fn new(topo: Topology) -> Self {
        Self::with_options(topo, AdjOptions::default())
    }

    /// An empty allocation over `topo` whose X-ADJ applies `options`.
    pub fn with_options(topo: Topology, options: AdjOptions) -> Self {
        let loads = vec![LinkLoad::default(); topo.links().len()];
        Self {
            topo,
            tunnels: HashMap::new(),
            loads,
            next_id: 1,
            options,
            hosts: HashMap::new(),
            last_readjusted: 0,
        }
    }

    /// The topology the tunnels run over.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The tunnel `id`, if admitted and not released.
    pub fn tunnel(&self, id: TunnelId) -> Option<&Tunnel> {
        self.tunnels.get(&id)
    }

    /// The tunnels in admission order.
    pub fn tunnels(&self) -> Vec<&Tunnel> {
        let mut v: Vec<&Tunnel> = self.tunnels.values().collect();
        v.sort_by_key(|t| t.id);
        v
    }

    /// How many tunnels are admitted.
    pub fn len(&self) -> usize {
        self.tunnels.len()
    }

    /// Whether no tunnel is admitted.
    pub fn is_empty(&self) -> bool {
        self.tunnels.is_empty()
    }

    /// How many tunnels X-ADJ ran on in the last admission, release or change.
    pub fn last_readjusted(&self) -> usize {
        self.last_readjusted
    }

    /// What link `link` carries.
    pub fn load(&self, link: LinkId) -> &LinkLoad {
        &self.loads[link]
    }

    /// Admits `request` along the tree X-OPT finds.
    pub fn admit(&mut self, request: Request) -> Result<Admission, Refusal> {
        request.validate(&self.topo).map_err(|e| Refusal::Invalid(e.to_string()))?;
        let tree = opt::build_tree(&self.topo, &self.loads, &request)?;
        self.admit_on(request, tree)
    }

    /// Admits `request` along a given tree (links in any order; must be a tree from the sender
    /// reaching every receiver), after the approximate validity check.
    pub fn admit_on(&mut self, request: Request, tree: Tree) -> Result<Admission, Refusal> {
        request.validate(&self.topo).map_err(|e| Refusal::Invalid(e.to_string()))?;
        let links =
            opt::preorder(&self.topo, &request, &tree.links).map_err(|e| Refusal::Invalid(e.to_string()))?;
        let s = usize::from(request.sublane);
        // The packet's transmission time on each link; every per-link sum the allocation keeps
        // must stay within 64 bits.
        let mut txs: Vec<Picos> = Vec::with_capacity(links.len());
        for &l in &links {
            let (load, link) = (&self.loads[l], self.topo.link(l));
            if !opt::has_room(&self.topo, &self.loads, l, request.packet_bytes) {
                return Err(Refusal::Full {
                    receiver: self.topo.node(link.to).name.clone(),
                    link: self.topo.link_name(l),
                    bytes: request.packet_bytes,
                    held: load.bytes,
                    queue: link.queue_bytes,
                });
            }
            let overflow = |what: &str| Refusal::Overflow { link: self.topo.link_name(l), what: what.into() };
            let tx = link
                .tx_time(request.packet_bytes)
                .ok_or_else(|| overflow("the packet's transmission time"))?;
            load.tx_sum[s]
                .checked_add(tx)
                .ok_or_else(|| overflow("the sub-lane's summed transmission times"))?;
            txs.push(tx);
        }
        let id = self.next_id;
        self.next_id += 1;
        let tunnel =
            Tunnel { id, request, links, resources: Resources::default(), hops: Vec::new(), host_jitter: 0 };
        let mut seeds: Vec<TunnelId> = self.affected_by(&tunnel);
        seeds.push(id);
        self.insert_load(&tunnel, &txs);
        self.tunnels.insert(id, tunnel);
        match self.readjust(seeds) {
            Ok(mut changed) => {
                changed.retain(|c| c.id != id);
                Ok(Admission { id, resources: self.tunnels[&id].resources, changed })
            }
            Err(e) => {
                // Undo: without the new tunnel every other one gets back exactly its old bounds.
                let tunnel = self.tunnels.remove(&id).expect("just inserted");
                self.remove_load(&tunnel);
                let all: Vec<TunnelId> = self.tunnels.keys().copied().collect();
                self.readjust(all).expect("the allocation was valid before this request");
                Err(e)
            }
        }
    }

    /// Releases a tunnel; returns the tunnels whose resources changed.
    pub fn release(&mut self, id: TunnelId) -> Option<Vec<Change>> {
        let tunnel = self.tunnels.remove(&id)?;
        self.remove_load(&tunnel);
        let touched = self.affected_by(&tunnel);
        Some(self.readjust(touched).expect("removing a tunnel never makes the others unschedulable"))
    }

    /// Changes the period a tunnel asks for (never below what it asked first is up to the
    /// caller) and re-adjusts it and what it affects; returns the other tunnels that changed.
    pub fn set_period(&mut self, id: TunnelId, period: Picos) -> Result<Vec<Change>, Refusal> {
        let t = self.tunnels.get_mut(&id).ok_or_else(|| Refusal::Invalid(format!("no tunnel {id}")))?;
        if period == 0 {
            return Err(Refusal::Invalid("a period must be positive".into()));
        }
        let before = std::mem::replace(&mut t.request.period, period);
        match self.readjust(vec![id]) {
            Ok(mut changed) => {
                changed.retain(|c| c.id != id);
                Ok(changed)
            }
            Err(e) => {
                self.tunnels.get_mut(&id).expect("present").request.period = before;
                self.readjust(vec![id]).expect("the allocation was valid before");
                Err(e)
            }
        }
    }

    /// What host `host` adds before its first link (zero until its node reports it).
    pub fn host_delay(&self, host: NodeId) -> HostDelay {
        self.hosts.get(&host).copied().unwrap_or_default()
    }

    /// Sets what host `host` adds before its first link and re-adjusts every tunnel it sends,
    /// and what they affect; returns every tunnel that changed, its own included. A delay that
    /// leaves some tunnel unschedulable (a higher sub-lane's wider spread saturates a link) is
    /// refused and the allocation is left as it was.
    pub fn set_host_delay(&mut self, host: NodeId, delay: HostDelay) -> Result<Vec<Change>, Refusal> {
        if host >= self.topo.nodes().len() || self.topo.node(host).kind != NodeKind::Host {
            return Err(Refusal::Invalid(format!("node {host} is not a host")));
        }
        let before = self.hosts.insert(host, delay).unwrap_or_default();
        let sent: Vec<TunnelId> =
            self.tunnels.values().filter(|t| t.request.sender == host).map(|t| t.id).collect();
        match self.readjust(sent) {
            Ok(changed) => Ok(changed),
            Err(e) => {
                if before == HostDelay::default() {
                    self.hosts.remove(&host);
                } else {
                    self.hosts.insert(host, before);
                }
                let all: Vec<TunnelId> = self.tunnels.keys().copied().collect();
                self.readjust(all).expect("the allocation was valid before");
                Err(e)
            }
        }
    }

    /// Re-runs X-ADJ on every tunnel (for tests and after changing options).
    pub fn readjust_all(&mut self) -> Result<Vec<Change>, Refusal> {
        let all: Vec<TunnelId> = self.tunnels.keys().copied().collect();
        self.readjust(all)
    }

    /// The tunnels whose analysis `t` enters, given loads that do not include `t`: on each of
    /// its links, those of its own sub-lane (one more packet to wait behind) and of lower ones
    /// (one more higher sub-lane tunnel), and those of higher sub-lanes only where `t`'s packet
    /// is larger than every lower sub-lane packet they already allow for as blocking.
    fn affected_by(&self, t: &Tunnel) -> Vec<TunnelId> {
        let mut out: BTreeSet<TunnelId> = BTreeSet::new();
        let (sublane, bytes) = (t.request.sublane, t.request.packet_bytes);
        for &l in &t.links {
            let load = &self.loads[l];
            for (s, ids) in load.by_sublane.iter().enumerate() {
                let s = s as u8;
                let affected =
                    s >= sublane || (self.options.lower_blocking && bytes > load.max_bytes_below(s));
                if affected {
                    out.extend(ids.iter().map(|e| e.id).filter(|&x| x != t.id));
                }
            }
        }
        out.into_iter().collect()
    }

    /// X-ADJ on `seeds`, in sub-lane order, cascading to lower sub-lane tunnels that share a
    /// link with a tunnel whose period or arrival spread changed.
    fn readjust(&mut self, seeds: Vec<TunnelId>) -> Result<Vec<Change>, Refusal> {
        let mut work: BTreeSet<(u8, TunnelId)> =
            seeds.iter().filter_map(|id| self.tunnels.get(id).map(|t| (t.request.sublane, *id))).collect();
        let mut changed: HashMap<TunnelId, Change> = HashMap::new();
        self.last_readjusted = 0;
        while let Some((sublane, id)) = work.pop_first() {
            self.last_readjusted += 1;
            let me = &self.tunnels[&id];
            let host_jitter = self
                .host_delay(me.request.sender)
                .for_receivers(me.request.receivers.len())
                .ok_or_else(|| Refusal::Overflow {
                    link: me.links.first().map(|&l| self.topo.link_name(l)).unwrap_or_default(),
                    what: "the sending host's delay".into(),
                })?;
            let (resources, hops) = adj::adjust(&self.topo, me, host_jitter, &self.loads, self.options)
                .map_err(|e| match e {
                    AdjError::Saturated { link, sublane } => {
                        Refusal::Saturated { link: self.topo.link_name(link), sublane }
                    }
                    AdjError::Overflow { link, what } => {
                        Refusal::Overflow { link: self.topo.link_name(link), what: what.into() }
                    }
                })?;
            let period_changed = me.resources.period != resources.period;
            if me.resources != resources {
                let before = changed.get(&id).map_or(me.resources, |c| c.before);
                changed.insert(id, Change { id, before, after: resources });
            }
            // Lower sub-lane tunnels count this one's packets from its period, and, per link, its
            // residence there (wait + transmission) and the spread of its arrivals.
            if (sublane as usize) + 1 < SUBLANES as usize {
                let fresh = me.hops.len() != hops.len();
                for (i, hop) in hops.iter().enumerate() {
                    let same = !fresh && {
                        let old = &me.hops[i];
                        old.wait == hop.wait
                            && old.arrive_max - old.arrive_min == hop.arrive_max - hop.arrive_min
                    };
                    if period_changed || !same {
                        let load = &self.loads[hop.link];
                        for (s, ids) in load.by_sublane.iter().enumerate().skip(sublane as usize + 1) {
                            work.extend(ids.iter().map(|e| (s as u8, e.id)));
                        }
                    }
                }
            }
            for hop in &hops {
                let entry = self.loads[hop.link].by_sublane[sublane as usize]
                    .iter_mut()
                    .find(|e| e.id == id)
                    .expect("a tunnel is listed on its links");
                entry.residence = hop.wait + hop.tx;
                entry.spread = hop.arrive_max - hop.arrive_min;
                entry.period = resources.period;
            }
            let me = self.tunnels.get_mut(&id).expect("present");
            me.resources = resources;
            me.hops = hops;
            me.host_jitter = host_jitter;
        }
        let mut out: Vec<Change> = changed.into_values().filter(|c| c.before != c.after).collect();
        out.sort_by_key(|c| c.id);
        Ok(out)
    }

    /// Lists `t` on its links; `txs` are its transmission times there, whose sums
    /// [`Allocation::admit_on`] has checked.
    fn insert_load(&mut self, t: &Tunnel, txs: &[Picos]) {
        let s = usize::from(t.request.sublane);
        for (&l, &tx) in t.links.iter().zip(txs) {
            let load = &mut self.loads[l];
            load.by_sublane[s].push(Entry {
                id: t.id,
                bytes: t.request.packet_bytes,
                tx,
                residence: tx,
                spread: 0,
                period: t.request.period,
            });
            load.bytes += t.request.packet_bytes;
            load.tx_sum[s] += tx;
            load.max_bytes[s] = load.max_bytes[s].max(t.request.packet_bytes);
        }
    }

    fn remove_load(&mut self, t: &Tunnel) {
        let s = usize::from(t.request.sublane);
        for &l in &t.links {
            let load = &mut self.loads[l];
            // Take back exactly what `insert_load` added.
            let tx = load.by_sublane[s].iter().find(|e| e.id == t.id).map_or(0, |e| e.tx);
            load.by_sublane[s].retain(|e| e.id != t.id);
            load.bytes -= t.request.packet_bytes;
            load.tx_sum[s] -= tx;
            if load.max_bytes[s] == t.request.packet_bytes {
                load.max_bytes[s] = load.by_sublane[s].iter().map(|e| e.bytes).max().unwrap_or(0);
            }
        }
    }
}
