//! The simulated clients: one request at a time each, in the history from its call to its
//! answer; a client whose request timed out or whose member went down is replaced (its outcome
//! unknown); and the reads of every key once the run is over.

use std::collections::BTreeMap;

use rand::Rng;

use super::{FINAL_READERS, MemberState, Micro, OpKind, Sim, SimOp, Workload};
use crate::kv::{ReadOp, Reply, WriteOp};
use crate::replica::Ticket;
use crate::sim::list_append;

impl Sim {
    pub(super) fn complete(&mut self, member: u64, ticket: Ticket, reply: Reply) {
        let Some(&slot) = self.client_slots.get(&ticket.client) else {
            if ticket.client > FINAL_READERS {
                self.final_answers.push((ticket, reply));
            }
            return;
        };
        let client = &mut self.clients[slot];
        if client.id != ticket.client || client.member != member {
            return;
        }
        let Some((op, seq)) = client.waiting else { return };
        if let Some((first, None)) = client.first_half
            && first == ticket.seq
        {
            client.first_half = Some((first, Some(reply)));
            return;
        }
        if seq != ticket.seq {
            return;
        }
        client.waiting = None;
        // Split: the answer is the two halves' answers joined (unknown without the first).
        let reply = match client.first_half.take() {
            Some((_, Some(Reply::Array(mut first)))) => match reply {
                Reply::Array(second) => {
                    first.extend(second);
                    Reply::Array(first)
                }
                other => other,
            },
            Some(_) => {
                client.next_at_us = self.now_us;
                return;
            }
            None => reply,
        };
        client.next_at_us = self.now_us + self.rng.random_range(0..2_000);
        let record = &mut self.history[op];
        record.output = Some(reply);
        record.return_us = Some(self.now_us);
    }

    fn retire(&mut self, slot: usize) {
        let member = self.rng.random_range(1..=self.config.members as u64);
        let old = self.clients[slot].id;
        if let Some(r) = self.replica(self.clients[slot].member) {
            r.forget_client(old);
        }
        self.client_slots.remove(&old);
        let id = self.new_client_id(slot);
        let client = &mut self.clients[slot];
        client.id = id;
        client.member = member;
        client.seq = 0;
        client.waiting = None;
        client.next_at_us = self.now_us + 1_000;
    }

    pub(super) fn serve_clients(&mut self, active: bool) {
        for slot in 0..self.clients.len() {
            let (member, waiting, next_at) = {
                let c = &self.clients[slot];
                (c.member, c.waiting, c.next_at_us)
            };
            let member_up = matches!(
                self.members[(member - 1) as usize],
                MemberState::Up(_) | MemberState::Paused { .. }
            );
            if let Some((op, _)) = waiting {
                // The connection broke, or the answer is too late: the outcome is unknown.
                if !member_up || self.now_us >= self.history[op].call_us + self.config.request_timeout_us {
                    self.retire(slot);
                }
                continue;
            }
            if !active || next_at > self.now_us {
                continue;
            }
            if !member_up {
                self.retire(slot);
                continue;
            }
            self.issue(slot);
        }
    }

    fn issue(&mut self, slot: usize) {
        if self.config.workload == Workload::ListAppend {
            return self.issue_transaction(slot);
        }
        let key = format!("k{}", self.rng.random_range(0..self.config.keys)).into_bytes();
        let (client_id, member, seq) = {
            let c = &mut self.clients[slot];
            c.seq += 1;
            (c.id, c.member, c.seq)
        };
        let unique = format!("{client_id}.{seq};").into_bytes();
        let roll = self.rng.random_range(0..100);
        let kind = match roll {
            0..40 => OpKind::Get,
            40..70 => OpKind::Set(unique),
            70..85 => OpKind::Incr,
            _ => OpKind::Append(unique),
        };
        let op = self.history.len();
        self.history.push(SimOp {
            client: client_id,
            key: key.clone(),
            kind: kind.clone(),
            output: None,
            call_us: self.now_us,
            return_us: None,
        });
        self.clients[slot].waiting = Some((op, seq));
        let ticket = Ticket { client: client_id, seq };
        let now_ns = self.now_us * 1_000;
        let Some(replica) = self.replica(member) else {
            // Paused: the request waits in its socket until the member resumes; modelled as
            // a time-out unless it resumes in time, which the pause bounds.
            return;
        };
        replica.observe_clock(now_ns);
        match kind {
            OpKind::Get => replica.submit_read(ticket, ReadOp::get(key)),
            OpKind::Set(value) => replica.submit_write(ticket, seq, WriteOp::set(key, value)),
            OpKind::Incr => replica.submit_write(ticket, seq, WriteOp::incr_by(key, 1)),
            OpKind::Append(value) => replica.submit_write(ticket, seq, WriteOp::append(key, value)),
            OpKind::Txn(_) => unreachable!("transactions are issued by issue_transaction"),
        }
        // Half the requests are proposed at once (a member batching per pass of its loop), the
        // rest at the next tick (per period): both paths run under the faults.
        let now_ms = self.now_us / 1000;
        if self.rng.random_bool(0.5)
            && let Some(replica) = self.replica(member)
        {
            replica.flush(now_ms);
        }
        self.drain(member);
    }

    /// A list-append transaction: one to four RPUSHes and LRANGEs on the few keys.
    fn issue_transaction(&mut self, slot: usize) {
        let n = self.rng.random_range(1..=4);
        let micros: Vec<Micro> = (0..n)
            .map(|_| {
                let key = format!("k{}", self.rng.random_range(0..self.config.keys)).into_bytes();
                if self.rng.random_bool(0.5) {
                    self.next_value += 1;
                    Micro::Append(key, self.next_value)
                } else {
                    Micro::Read(key)
                }
            })
            .collect();
        let (client_id, member, seq) = {
            let c = &mut self.clients[slot];
            c.seq += 2;
            (c.id, c.member, c.seq)
        };
        let op = self.history.len();
        self.history.push(SimOp {
            client: client_id,
            key: Vec::new(),
            kind: OpKind::Txn(micros.clone()),
            output: None,
            call_us: self.now_us,
            return_us: None,
        });
        self.clients[slot].waiting = Some((op, seq));
        let (now_ns, now_ms) = (self.now_us * 1_000, self.now_us / 1000);
        let split = self.config.split_transactions && micros.len() >= 2;
        let Some(replica) = self.replica(member) else { return };
        replica.observe_clock(now_ns);
        let transaction = |ms: &[Micro]| WriteOp::Transaction {
            commands: ms.iter().map(|m| (0, m.words())).collect(),
            watched: Vec::new(),
        };
        if split {
            // The fault: the first half in an entry of its own, the rest in a later one.
            let (first, second) = micros.split_at(micros.len() / 2);
            replica.submit_write(Ticket { client: client_id, seq: seq - 1 }, seq - 1, transaction(first));
            replica.flush(now_ms);
            replica.submit_write(Ticket { client: client_id, seq }, seq - 1, transaction(second));
        } else {
            replica.submit_write(Ticket { client: client_id, seq }, seq, transaction(&micros));
        }
        if split {
            self.clients[slot].first_half = Some((seq - 1, None));
        }
        if self.rng.random_bool(0.5)
            && let Some(replica) = self.replica(member)
        {
            replica.flush(now_ms);
        }
        self.drain(member);
    }

    /// After the run: heal everything, let the cluster settle, then read every key through
    /// a fresh client at member 1 (linearizable reads, in the history too).
    pub(super) fn final_reads(&mut self) -> Option<BTreeMap<Vec<u8>, Option<Vec<u8>>>> {
        self.network.heal();
        self.network.loss = 0.0;
        self.heal_at_us = None;
        let settle = self.now_us + 300_000;
        self.run_until(settle, false, false);
        for slot in 0..self.clients.len() {
            if self.clients[slot].waiting.is_some() {
                self.retire(slot);
            }
        }
        let mut values = BTreeMap::new();
        for k in 0..self.config.keys {
            let key = format!("k{k}").into_bytes();
            let slot = 0;
            self.retire(slot);
            self.clients[slot].member = 1;
            let id = self.clients[slot].id;
            let op = self.history.len();
            self.history.push(SimOp {
                client: id,
                key: key.clone(),
                kind: OpKind::Get,
                output: None,
                call_us: self.now_us,
                return_us: None,
            });
            self.clients[slot].seq = 1;
            self.clients[slot].waiting = Some((op, 1));
            self.replica(1)?.submit_read(Ticket { client: id, seq: 1 }, ReadOp::get(key.clone()));
            let deadline = self.now_us + self.config.request_timeout_us;
            while self.history[op].output.is_none() && self.now_us < deadline {
                let step = self.now_us + self.config.tick_us;
                self.run_until(step, false, false);
            }
            match &self.history[op].output {
                Some(Reply::Bulk(v)) => values.insert(key, Some(v.clone())),
                Some(Reply::Nil) => values.insert(key, None),
                _ => return None,
            };
        }
        Some(values)
    }

    /// After a list-append run: heal, settle, then LRANGE every key at member 1.
    pub(super) fn final_lists(&mut self) -> Option<BTreeMap<Vec<u8>, Vec<u64>>> {
        self.network.heal();
        self.network.loss = 0.0;
        self.heal_at_us = None;
        let settle = self.now_us + 300_000;
        self.run_until(settle, false, false);
        let mut lists = BTreeMap::new();
        for k in 0..self.config.keys {
            let key = format!("k{k}").into_bytes();
            let ticket = Ticket { client: u64::MAX - k as u64, seq: 1 };
            let read = ReadOp { db: 0, args: Micro::Read(key.clone()).words() };
            self.replica(1)?.submit_read(ticket, read);
            let deadline = self.now_us + self.config.request_timeout_us;
            let mut answer = None;
            while answer.is_none() && self.now_us < deadline {
                let step = self.now_us + self.config.tick_us;
                self.run_until(step, false, false);
                if let Some(at) = self.final_answers.iter().position(|(t, _)| *t == ticket) {
                    answer = Some(self.final_answers.swap_remove(at).1);
                }
            }
            lists.insert(key, list_append::values(&answer?)?);
        }
        Some(lists)
    }
}
