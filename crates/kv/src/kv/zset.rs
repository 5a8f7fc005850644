//! A sorted set: members with scores, ordered by (score, member) as Redis orders them.
//!
//! Two structures kept in step: a map from member to score (ZSCORE, ZADD's lookups in O(1))
//! and an ordered set of (score, member) (ranges by score, lex and rank). Rank operations
//! walk the ordered set, O(rank) where Redis's skiplist is O(log n); ranges cost what they
//! return plus that walk.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::ops::Bound;

use indexmap::IndexMap;

/// A score: an `f64` that is never NaN, ordered totally (-0.0 and 0.0 are equal, as in Redis).
#[derive(Debug, Clone, Copy)]
pub struct Score(pub f64);

impl PartialEq for Score {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.partial_cmp(&other.0).unwrap_or(Ordering::Equal)
    }
}

/// A sorted set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ZSet {
    scores: IndexMap<Vec<u8>, f64>,
    order: BTreeSet<(Score, Vec<u8>)>,
}

impl ZSet {
    /// An empty sorted set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Members.
    pub fn len(&self) -> usize {
        self.scores.len()
    }

    /// Whether it has no member.
    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    /// A member's score.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.get(member).copied()
    }

    /// Sets a member's score (NaN is the caller's to refuse); returns the old score.
    pub fn insert(&mut self, member: Vec<u8>, score: f64) -> Option<f64> {
        let old = self.scores.insert(member.clone(), score);
        if let Some(old) = old {
            self.order.remove(&(Score(old), member.clone()));
        }
        self.order.insert((Score(score), member));
        old
    }

    /// Removes a member; returns its score.
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        let score = self.scores.swap_remove(member)?;
        self.order.remove(&(Score(score), member.to_vec()));
        Some(score)
    }

    /// Members from lowest to highest.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&[u8], f64)> {
        self.order.iter().map(|(s, m)| (m.as_slice(), s.0))
    }

    /// Members in the order they were added (with swap-removal), for random picks that
    /// every member makes alike.
    pub fn by_index(&self, index: usize) -> Option<(&[u8], f64)> {
        self.scores.get_index(index).map(|(m, s)| (m.as_slice(), *s))
    }

    /// The 0-based rank of a member from the lowest score.
    pub fn rank(&self, member: &[u8]) -> Option<usize> {
        let score = self.score(member)?;
        Some(self.order.range(..(Score(score), member.to_vec())).count())
    }

    /// Members with score in the range given by bounds (inclusive or not), lowest first.
    pub fn range_by_score(
        &self,
        min: f64,
        min_exclusive: bool,
        max: f64,
        max_exclusive: bool,
    ) -> impl Iterator<Item = (&[u8], f64)> {
        self.order
            .range((Score(min), Vec::new())..)
            .take_while(move |(s, _)| if max_exclusive { s.0 < max } else { s.0 <= max })
            .filter(move |(s, _)| !(min_exclusive && s.0 <= min))
            .map(|(s, m)| (m.as_slice(), s.0))
    }

    /// Members with score in the range given by bounds (inclusive or not), lowest first;
    /// double-ended, so a reverse range walks down from its top without a pass over the
    /// members below it.
    pub fn between(
        &self,
        min: f64,
        min_exclusive: bool,
        max: f64,
        max_exclusive: bool,
    ) -> impl DoubleEndedIterator<Item = (&[u8], f64)> {
        // An excluded end becomes the next score inward, so both ends are included; the
        // empty member is the least of any score, the lower key of both ends.
        let low = if min_exclusive { (min < f64::INFINITY).then_some(min.next_up()) } else { Some(min) };
        let high =
            if max_exclusive { (max > f64::NEG_INFINITY).then_some(max.next_down()) } else { Some(max) };
        let span = match (low, high) {
            (Some(low), Some(high)) if low <= high => {
                let upper: Bound<(Score, Vec<u8>)> = if high == f64::INFINITY {
                    Bound::Unbounded
                } else {
                    Bound::Excluded((Score(high.next_up()), Vec::new()))
                };
                Some(self.order.range((Bound::Included((Score(low), Vec::new())), upper)))
            }
            _ => None,
        };
        span.into_iter().flatten().map(|(s, m)| (m.as_slice(), s.0))
    }

    /// Removes and returns the member with the lowest score, or the highest when `highest`.
    pub fn pop(&mut self, highest: bool) -> Option<(Vec<u8>, f64)> {
        let (score, member) = if highest { self.order.pop_last()? } else { self.order.pop_first()? };
        self.scores.swap_remove(&member);
        Some((member, score.0))
    }
}
