//! The semantic index's store: partitions of vectors and values, the FIFO that orders
//! expiry and capacity eviction, and the exact top-1 search.
//!
//! Owns normalising and quantising vectors, the error bound that makes the int8 pre-scan safe,
//! and eviction. Time is an argument (`now`, nanoseconds on any monotonic scale) so tests can
//! drive it. It must not touch Python.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use super::kernel::{dot_f32, dot_i8, scan, LANES};

/// Scale of the int8 codes: a unit vector's components lie in [-1, 1].
const SCALE: f32 = 127.0;

/// Slack added to the pre-scan bound for f32 rounding in the bound itself.
const BOUND_SLACK: f32 = 1e-4;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    pub dim: usize,
    pub capacity: usize,
    /// Entries live this long; `None` never expires.
    pub ttl_ns: Option<u64>,
    pub threshold: f32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexError {
    WrongDim { expected: usize, got: usize },
    NotNormalisable,
}

impl std::error::Error for IndexError {}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WrongDim { expected, got } => {
                write!(f, "vector has {got} dimensions, the index has {expected}")
            }
            Self::NotNormalisable => f.write_str("vector has a zero, infinite or NaN norm"),
        }
    }
}

#[derive(Default)]
struct Partition {
    /// int8 codes of the leading `split` dimensions, then of the rest, one matrix each, so the
    /// first pass reads only the leading part.
    head: Vec<i8>,
    tail: Vec<i8>,
    vectors: Vec<f32>,
    /// Per row: upper bounds of the quantisation error's L2 norm over the head and over all
    /// dimensions, and the L2 norm of the vector's tail.
    head_error: Vec<f32>,
    error: Vec<f32>,
    tail_norm: Vec<f32>,
    expires: Vec<u64>,
    seqs: Vec<u64>,
    values: Vec<Box<[u8]>>,
    slot_of: HashMap<u64, usize>,
}

impl Partition {
    fn len(&self) -> usize {
        self.seqs.len()
    }

    fn remove(&mut self, seq: u64, dim: usize, split: usize, rest: usize) {
        let Some(slot) = self.slot_of.remove(&seq) else { return };
        let last = self.len() - 1;
        if slot != last {
            self.head.copy_within(last * split..(last + 1) * split, slot * split);
            self.tail.copy_within(last * rest..(last + 1) * rest, slot * rest);
            self.vectors.copy_within(last * dim..(last + 1) * dim, slot * dim);
            self.slot_of.insert(self.seqs[last], slot);
        }
        self.head.truncate(last * split);
        self.tail.truncate(last * rest);
        self.vectors.truncate(last * dim);
        self.head_error.swap_remove(slot);
        self.error.swap_remove(slot);
        self.tail_norm.swap_remove(slot);
        self.expires.swap_remove(slot);
        self.seqs.swap_remove(slot);
        self.values.swap_remove(slot);
    }
}

/// A unit vector's codes and the norms the pruning bounds need.
struct Coded {
    head: Vec<i8>,
    tail: Vec<i8>,
    head_code_norm: f32,
    code_norm: f32,
    head_error: f32,
    error: f32,
    tail_norm: f32,
}

/// A query prepared once: unit vector and its codes.
pub struct Query {
    vector: Vec<f32>,
    coded: Coded,
}

pub struct Index {
    cfg: Config,
    /// Padded widths of the head and tail code matrices.
    split: usize,
    rest: usize,
    parts: HashMap<Arc<str>, Partition>,
    /// Every live entry in insertion order: (seq, inserted at, partition).
    fifo: VecDeque<(u64, u64, Arc<str>)>,
    next_seq: u64,
}

/// Unit vector of `v`, or None when its norm is zero or not finite.
fn normalise(v: &[f32]) -> Option<Vec<f32>> {
    let norm = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
    if !(norm.is_finite() && norm > 0.0) {
        return None;
    }
    let unit: Vec<f32> = v.iter().map(|&x| (f64::from(x) / norm) as f32).collect();
    unit.iter().all(|x| x.is_finite()).then_some(unit)
}

/// Rounds an error norm up, so float rounding cannot make a bound too tight.
fn round_up(x: f64) -> f32 {
    (x * (1.0 + 1e-6) + 1e-7) as f32
}

/// Codes of a unit vector, split at `split` and padded with zeros to `split + rest`.
fn quantise(unit: &[f32], split: usize, rest: usize) -> Coded {
    let mut codes = vec![0i8; split + rest];
    let (mut err2, mut norm2, mut head_err2, mut head_norm2, mut tail2) = (0f64, 0f64, 0f64, 0f64, 0f64);
    for (i, (c, &x)) in codes.iter_mut().zip(unit).enumerate() {
        let q = (x * SCALE).round().clamp(-127.0, 127.0);
        *c = q as i8;
        let back = f64::from(q) / f64::from(SCALE);
        let e = (f64::from(x) - back).powi(2);
        err2 += e;
        norm2 += back * back;
        if i < split {
            head_err2 += e;
            head_norm2 += back * back;
        } else {
            tail2 += f64::from(x) * f64::from(x);
        }
    }
    let tail = codes.split_off(split);
    Coded {
        head: codes,
        tail,
        head_code_norm: head_norm2.sqrt() as f32,
        code_norm: norm2.sqrt() as f32,
        head_error: round_up(head_err2.sqrt()),
        error: round_up(err2.sqrt()),
        tail_norm: round_up(tail2.sqrt()),
    }
}

impl Index {
    pub fn new(cfg: Config) -> Self {
        let padded = cfg.dim.div_ceil(LANES) * LANES;
        // Two passes only pay off on wide vectors: split them in half (on a lane boundary).
        let split = if padded >= 4 * LANES { padded / 2 / LANES * LANES } else { padded };
        Self { split, rest: padded - split, cfg, parts: HashMap::new(), fifo: VecDeque::new(), next_seq: 0 }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Live and not yet evicted entries (expired ones are evicted first).
    pub fn len(&mut self, now: u64) -> usize {
        self.evict_expired(now);
        self.fifo.len()
    }

    pub fn is_empty(&mut self, now: u64) -> bool {
        self.len(now) == 0
    }

    fn check(&self, v: &[f32]) -> Result<Vec<f32>, IndexError> {
        if v.len() != self.cfg.dim {
            return Err(IndexError::WrongDim { expected: self.cfg.dim, got: v.len() });
        }
        normalise(v).ok_or(IndexError::NotNormalisable)
    }

    fn expired(&self, inserted: u64, now: u64) -> bool {
        self.cfg.ttl_ns.is_some_and(|ttl| inserted.saturating_add(ttl) <= now)
    }

    fn evict_front(&mut self) {
        if let Some((seq, _, name)) = self.fifo.pop_front() {
            let (dim, split, rest) = (self.cfg.dim, self.split, self.rest);
            if let Some(part) = self.parts.get_mut(&name) {
                part.remove(seq, dim, split, rest);
                if part.len() == 0 {
                    self.parts.remove(&name);
                }
            }
        }
    }

    fn evict_expired(&mut self, now: u64) {
        while self.fifo.front().is_some_and(|&(_, at, _)| self.expired(at, now)) {
            self.evict_front();
        }
    }

    /// Stores `value` under `vector` in `partition`, evicting expired entries and, at capacity,
    /// the oldest entry.
    pub fn insert(
        &mut self,
        partition: &str,
        vector: &[f32],
        value: &[u8],
        now: u64,
    ) -> Result<(), IndexError> {
        let unit = self.check(vector)?;
        self.evict_expired(now);
        while self.fifo.len() >= self.cfg.capacity {
            self.evict_front();
        }
        let coded = quantise(&unit, self.split, self.rest);
        let name: Arc<str> = match self.parts.get_key_value(partition) {
            Some((name, _)) => name.clone(),
            None => Arc::from(partition),
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        let expires = self.cfg.ttl_ns.map_or(u64::MAX, |ttl| now.saturating_add(ttl));
        let part = self.parts.entry(name.clone()).or_default();
        part.slot_of.insert(seq, part.len());
        part.head.extend_from_slice(&coded.head);
        part.tail.extend_from_slice(&coded.tail);
        part.vectors.extend_from_slice(&unit);
        part.head_error.push(coded.head_error);
        part.error.push(coded.error);
        part.tail_norm.push(coded.tail_norm);
        part.expires.push(expires);
        part.seqs.push(seq);
        part.values.push(value.into());
        self.fifo.push_back((seq, now, name));
        Ok(())
    }

    /// Checks and prepares a query vector.
    pub fn prepare(&self, vector: &[f32]) -> Result<Query, IndexError> {
        let unit = self.check(vector)?;
        let coded = quantise(&unit, self.split, self.rest);
        Ok(Query { vector: unit, coded })
    }

    /// The best live entry of `partition` whose cosine with the query is at least the
    /// threshold: (cosine, value).
    ///
    /// Exact, in three passes that each bound the cosine from above and drop rows that cannot
    /// reach the threshold (or beat the best so far): the int8 codes of the leading dimensions
    /// for every row (the only full scan, half the bytes of the int8 matrix), the remaining
    /// codes for the survivors, then the f32 vectors. With q, x unit vectors, x~ the codes
    /// / 127, h and t the head and tail dimensions:
    /// `q.x = q_h.x_h + q_t.x_t <= q~_h.x~_h + |q~_h| err_h(x) + err_h(q) + |q_t| |x_t|`, and
    /// over all dimensions `q.x <= q~.x~ + |q~| err(x) + err(q)`.
    pub fn lookup(&self, partition: &str, query: &Query, now: u64) -> Option<(f32, Vec<u8>)> {
        let part = self.parts.get(partition)?;
        let q = &query.coded;
        let mut head_dots = Vec::with_capacity(part.len());
        scan(&part.head, &q.head, &mut head_dots);
        let inv = 1.0 / (SCALE * SCALE);
        let threshold = self.cfg.threshold;
        let mut best: Option<(f32, usize)> = None;
        let (dim, rest) = (self.cfg.dim, self.rest);
        let head_slack = q.head_error + BOUND_SLACK;
        let full_slack = q.error + BOUND_SLACK;
        for (row, &head_dot) in head_dots.iter().enumerate() {
            let floor = best.map_or(threshold, |(s, _)| s.max(threshold));
            let head_bound = q.head_code_norm * part.head_error[row] + q.tail_norm * part.tail_norm[row];
            if head_dot as f32 * inv + head_bound + head_slack < floor {
                continue;
            }
            let dot = head_dot + dot_i8(&part.tail[row * rest..(row + 1) * rest], &q.tail);
            if dot as f32 * inv + q.code_norm * part.error[row] + full_slack < floor
                || part.expires[row] <= now
            {
                continue;
            }
            let exact = dot_f32(&part.vectors[row * dim..(row + 1) * dim], &query.vector);
            if exact >= threshold && best.is_none_or(|(s, _)| exact > s) {
                best = Some((exact, row));
            }
        }
        best.map(|(score, row)| (score, part.values[row].to_vec()))
    }

    /// Exact scores of every live row of `partition` in f32, best first (tests only).
    #[cfg(test)]
    pub fn brute_force(&self, partition: &str, query: &Query, now: u64) -> Option<f32> {
        let part = self.parts.get(partition)?;
        let dim = self.cfg.dim;
        (0..part.len())
            .filter(|&row| part.expires[row] > now)
            .map(|row| dot_f32(&part.vectors[row * dim..(row + 1) * dim], &query.vector))
            .filter(|&s| s >= self.cfg.threshold)
            .reduce(f32::max)
    }
}
