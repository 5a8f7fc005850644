//! The faults of a run: each drawn from the kinds asked for, on at most one member at a time so
//! that a majority can go on, and a member removed by a membership change added back once its
//! links are.

use rand::Rng;

use super::{FaultEvent, FaultKind, MemberState, Sim};
use crate::replica::{MemDisk, Sync};

impl Sim {
    /// Adds back a member removed while cut off, once the links are back: proposed at the
    /// leader until it is in the membership again.
    pub(super) fn readd_member(&mut self) {
        let Some(member) = self.readd else { return };
        if self.heal_at_us.is_some() {
            return;
        }
        let Some(leader) = self.leader() else { return };
        let Some(replica) = self.replica(leader) else { return };
        if replica.voters().contains(&member) {
            self.readd = None;
            return;
        }
        if !replica.membership_busy() {
            let _ = replica.propose_membership(raft::eraftpb::ConfChangeType::AddNode, member, Vec::new());
            self.drain(leader);
        }
    }

    pub(super) fn inject_fault(&mut self) {
        let kind = self.config.faults[self.rng.random_range(0..self.config.faults.len())];
        let n = self.config.members as u64;
        let leader = self.leader();
        let up: Vec<u64> =
            (1..=n).filter(|&id| matches!(self.members[(id - 1) as usize], MemberState::Up(_))).collect();
        // Keep a majority able to make progress most of the time: at most one member out.
        if up.len() < n as usize || self.readd.is_some() {
            return;
        }
        let follower = up
            .iter()
            .copied()
            .filter(|&id| Some(id) != leader)
            .nth(self.rng.random_range(0..n as usize - 1))
            .unwrap_or(1);
        let lasted_us = self.rng.random_range(10_000..80_000);
        let member =
            match kind {
                FaultKind::CrashLeader => leader.unwrap_or(follower),
                FaultKind::Loss => 0,
                FaultKind::PowerLoss | FaultKind::Partition | FaultKind::Pause => {
                    if self.rng.random_bool(0.5) { leader.unwrap_or(follower) } else { follower }
                }
                FaultKind::CrashFollower => follower,
                // Never member 1: the final reads go through it.
                FaultKind::MembershipChange => {
                    match up.iter().copied().find(|&id| id != 1 && Some(id) != leader) {
                        Some(id) => id,
                        None => return,
                    }
                }
            };
        match kind {
            FaultKind::CrashLeader | FaultKind::CrashFollower | FaultKind::PowerLoss => {
                if kind == FaultKind::PowerLoss && self.config.sync != Sync::Always {
                    return;
                }
                let i = (member - 1) as usize;
                let MemberState::Up(replica) = &self.members[i] else { return };
                let mut disk = replica.log().disk().clone();
                if kind == FaultKind::PowerLoss {
                    disk.power_loss();
                }
                self.members[i] = MemberState::Down { disk, until_us: self.now_us + lasted_us };
            }
            FaultKind::Partition => {
                for other in 1..=n {
                    if other != member {
                        self.network.cut(member, other);
                    }
                }
                self.heal_at_us = Some(self.now_us + lasted_us);
            }
            FaultKind::Loss => {
                self.network.loss = self.rng.random_range(0.05..0.3);
                self.heal_at_us = Some(self.now_us + lasted_us);
            }
            FaultKind::MembershipChange => {
                let Some(leader) = leader else { return };
                for other in 1..=n {
                    if other != member {
                        self.network.cut(member, other);
                    }
                }
                self.heal_at_us = Some(self.now_us + lasted_us);
                let Some(replica) = self.replica(leader) else { return };
                if replica
                    .propose_membership(raft::eraftpb::ConfChangeType::RemoveNode, member, Vec::new())
                    .is_ok()
                {
                    self.readd = Some(member);
                }
                self.drain(leader);
            }
            FaultKind::Pause => {
                let i = (member - 1) as usize;
                let state = std::mem::replace(
                    &mut self.members[i],
                    MemberState::Down { disk: MemDisk::default(), until_us: 0 },
                );
                self.members[i] = match state {
                    MemberState::Up(replica) => {
                        MemberState::Paused { replica, until_us: self.now_us + lasted_us, held: Vec::new() }
                    }
                    other => other,
                };
            }
        }
        self.faults.push(FaultEvent { at_us: self.now_us, kind, member, lasted_us });
    }
}
