//! The semantic index's store: partitions of vectors and values, the FIFO that orders
//! expiry and capacity eviction, and the exact top-1 search.
//!
//! Owns normalising and quantising vectors, the error bound that makes the int8 pre-scan safe,
//! and eviction. Time is an argument (`now`, nanoseconds on any monotonic scale) so tests can
//! drive it. It must not touch Python.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use super::kernel::{dot_f32, scan, LANES};

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
    codes: Vec<i8>,
    vectors: Vec<f32>,
    /// Per row: an upper bound of the L2 norm of (vector - codes / SCALE).
    error: Vec<f32>,
    expires: Vec<u64>,
    seqs: Vec<u64>,
    values: Vec<Box<[u8]>>,
    slot_of: HashMap<u64, usize>,
}

impl Partition {
    fn len(&self) -> usize {
        self.seqs.len()
    }

    fn remove(&mut self, seq: u64, dim: usize, padded: usize) {
        let Some(slot) = self.slot_of.remove(&seq) else { return };
        let last = self.len() - 1;
        if slot != last {
            self.codes.copy_within(last * padded..(last + 1) * padded, slot * padded);
            self.vectors.copy_within(last * dim..(last + 1) * dim, slot * dim);
            self.slot_of.insert(self.seqs[last], slot);
        }
        self.codes.truncate(last * padded);
        self.vectors.truncate(last * dim);
        self.error.swap_remove(slot);
        self.expires.swap_remove(slot);
        self.seqs.swap_remove(slot);
        self.values.swap_remove(slot);
    }
}

/// A query prepared once: unit vector, its codes and its quantisation error.
pub struct Query {
    vector: Vec<f32>,
    codes: Vec<i8>,
    code_norm: f32,
    error: f32,
}

pub struct Index {
    cfg: Config,
    padded: usize,
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

/// Codes of a unit vector (padded with zeros to `padded`), their norm, and the quantisation
/// error's norm (rounded up).
fn quantise(unit: &[f32], padded: usize) -> (Vec<i8>, f32, f32) {
    let mut codes = vec![0i8; padded];
    let (mut err2, mut norm2) = (0f64, 0f64);
    for (c, &x) in codes.iter_mut().zip(unit) {
        let q = (x * SCALE).round().clamp(-127.0, 127.0);
        *c = q as i8;
        let back = f64::from(q) / f64::from(SCALE);
        err2 += (f64::from(x) - back).powi(2);
        norm2 += back * back;
    }
    (codes, norm2.sqrt() as f32, (err2.sqrt() * (1.0 + 1e-6) + 1e-7) as f32)
}

impl Index {
    pub fn new(cfg: Config) -> Self {
        Self {
            padded: cfg.dim.div_ceil(LANES) * LANES,
            cfg,
            parts: HashMap::new(),
            fifo: VecDeque::new(),
            next_seq: 0,
        }
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
            let (dim, padded) = (self.cfg.dim, self.padded);
            if let Some(part) = self.parts.get_mut(&name) {
                part.remove(seq, dim, padded);
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
        let (codes, _, error) = quantise(&unit, self.padded);
        let name: Arc<str> = match self.parts.get_key_value(partition) {
            Some((name, _)) => name.clone(),
            None => Arc::from(partition),
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        let expires = self.cfg.ttl_ns.map_or(u64::MAX, |ttl| now.saturating_add(ttl));
        let part = self.parts.entry(name.clone()).or_default();
        part.slot_of.insert(seq, part.len());
        part.codes.extend_from_slice(&codes);
        part.vectors.extend_from_slice(&unit);
        part.error.push(error);
        part.expires.push(expires);
        part.seqs.push(seq);
        part.values.push(value.into());
        self.fifo.push_back((seq, now, name));
        Ok(())
    }

    /// Checks and prepares a query vector.
    pub fn prepare(&self, vector: &[f32]) -> Result<Query, IndexError> {
        let unit = self.check(vector)?;
        let (codes, code_norm, error) = quantise(&unit, self.padded);
        Ok(Query { vector: unit, codes, code_norm, error })
    }

    /// The best live entry of `partition` whose cosine with the query is at least the
    /// threshold: (cosine, value).
    pub fn lookup(&self, partition: &str, query: &Query, now: u64) -> Option<(f32, Vec<u8>)> {
        let part = self.parts.get(partition)?;
        let mut approx = Vec::with_capacity(part.len());
        scan(&part.codes, &query.codes, &mut approx);
        let inv = 1.0 / (SCALE * SCALE);
        let threshold = self.cfg.threshold;
        let mut best: Option<(f32, usize)> = None;
        let dim = self.cfg.dim;
        for (row, &dot) in approx.iter().enumerate() {
            // |q.x - q~.x~| <= |q~|.|x - x~| + |q - q~|.|x| = |q~|.err(x) + err(q), |x| = 1.
            let bound = query.code_norm * part.error[row] + query.error + BOUND_SLACK;
            let floor = best.map_or(threshold, |(s, _)| s.max(threshold));
            if dot as f32 * inv + bound < floor || part.expires[row] <= now {
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
