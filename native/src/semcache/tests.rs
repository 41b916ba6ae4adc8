//! Tests of the semantic index: exact top-1 against brute force, threshold, partitions, TTL,
//! capacity eviction order, bad vectors.
//!
//! Owns Rust-side coverage with a driven clock. It must not start Python.

use super::kernel::{scan, scan_portable};
use super::{Config, Index, IndexError};

/// Deterministic pseudo-random floats (xorshift64*), no dependency needed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        bits as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }

    fn vector(&mut self, dim: usize) -> Vec<f32> {
        (0..dim).map(|_| self.next()).collect()
    }
}

fn cfg(dim: usize, capacity: usize, ttl_ns: Option<u64>, threshold: f32) -> Config {
    Config { dim, capacity, ttl_ns, threshold }
}

#[test]
fn exact_top1_matches_brute_force_over_random_and_near_duplicate_vectors() {
    // 48 dims: one pass; 160 and 384: the two-pass split (head 64 / tail 96, 192 / 192).
    for (dim, rows) in [(48usize, 2000u32), (160, 1000), (384, 600)] {
        let mut rng = Rng(7 + dim as u64);
        let mut index = Index::new(cfg(dim, 10_000, None, 0.5));
        let base: Vec<Vec<f32>> = (0..40).map(|_| rng.vector(dim)).collect();
        for i in 0..rows {
            // Clusters around the base vectors, so many rows sit near any query.
            let b = &base[i as usize % base.len()];
            let noise = 0.3 * (i % 7) as f32 / 7.0;
            let v: Vec<f32> = b.iter().map(|x| x + noise * rng.next()).collect();
            index.insert("p", &v, &i.to_le_bytes(), 0).unwrap();
        }
        for _ in 0..200 {
            let b = &base[(rng.next().abs() * 39.0) as usize];
            let q: Vec<f32> = b.iter().map(|x| x + 0.4 * rng.next()).collect();
            let query = index.prepare(&q).unwrap();
            let got = index.lookup("p", &query, 0).map(|(s, _)| s);
            assert_eq!(got, index.brute_force("p", &query, 0), "dim {dim}");
        }
    }
}

#[test]
fn threshold_partition_and_value() {
    let mut index = Index::new(cfg(3, 10, None, 0.9));
    index.insert("a", &[1.0, 0.0, 0.0], b"x", 0).unwrap();
    index.insert("b", &[0.0, 1.0, 0.0], b"y", 0).unwrap();
    let q = index.prepare(&[2.0, 0.1, 0.0]).unwrap();
    let (score, value) = index.lookup("a", &q, 0).unwrap();
    assert!((score - 0.99875).abs() < 1e-4, "{score}");
    assert_eq!(value, b"x");
    assert!(index.lookup("b", &q, 0).is_none(), "other partition");
    assert!(index.lookup("c", &q, 0).is_none(), "unknown partition");
    let far = index.prepare(&[1.0, 1.0, 0.0]).unwrap();
    assert!(index.lookup("a", &far, 0).is_none(), "cosine 0.707 is below 0.9");
}

#[test]
fn ttl_ignores_then_evicts_expired_entries() {
    let mut index = Index::new(cfg(2, 10, Some(100), 0.5));
    index.insert("p", &[1.0, 0.0], b"old", 0).unwrap();
    index.insert("p", &[1.0, 0.1], b"new", 50).unwrap();
    let q = index.prepare(&[1.0, 0.0]).unwrap();
    assert_eq!(index.lookup("p", &q, 99).unwrap().1, b"old");
    assert_eq!(index.lookup("p", &q, 100).unwrap().1, b"new", "old expired at 100");
    assert_eq!(index.len(100), 1);
    assert!(index.lookup("p", &q, 150).is_none());
    assert_eq!(index.len(150), 0);
}

#[test]
fn capacity_evicts_oldest_first_across_partitions() {
    let mut index = Index::new(cfg(2, 3, None, 0.99));
    index.insert("a", &[1.0, 0.0], b"1", 0).unwrap();
    index.insert("b", &[0.0, 1.0], b"2", 1).unwrap();
    index.insert("a", &[-1.0, 0.0], b"3", 2).unwrap();
    index.insert("a", &[0.0, -1.0], b"4", 3).unwrap();
    assert_eq!(index.len(3), 3);
    let lookup = |index: &Index, part: &str, v: [f32; 2]| {
        let q = index.prepare(&v).unwrap();
        index.lookup(part, &q, 3).map(|(_, v)| v)
    };
    assert_eq!(lookup(&index, "a", [1.0, 0.0]), None, "oldest evicted");
    assert_eq!(lookup(&index, "b", [0.0, 1.0]), Some(b"2".to_vec()));
    assert_eq!(lookup(&index, "a", [-1.0, 0.0]), Some(b"3".to_vec()));
    assert_eq!(lookup(&index, "a", [0.0, -1.0]), Some(b"4".to_vec()));
    index.insert("c", &[1.0, 1.0], b"5", 4).unwrap();
    assert_eq!(lookup(&index, "b", [0.0, 1.0]), None, "b's entry was next oldest");
    assert_eq!(lookup(&index, "a", [0.0, -1.0]), Some(b"4".to_vec()), "swap-removed rows keep values");
}

#[test]
fn bad_vectors_are_errors() {
    let mut index = Index::new(cfg(3, 4, None, 0.9));
    assert_eq!(index.insert("p", &[1.0, 2.0], b"", 0), Err(IndexError::WrongDim { expected: 3, got: 2 }));
    assert_eq!(index.insert("p", &[0.0; 3], b"", 0), Err(IndexError::NotNormalisable));
    assert_eq!(index.insert("p", &[f32::NAN, 1.0, 0.0], b"", 0), Err(IndexError::NotNormalisable));
    assert!(index.prepare(&[f32::INFINITY, 0.0, 0.0]).is_err());
    assert!(index.is_empty(0));
}

#[test]
fn best_kernel_equals_portable_kernel() {
    let mut rng = Rng(11);
    for dim in [32usize, 64, 96, 384] {
        let codes: Vec<i8> = (0..dim * 37).map(|_| (rng.next() * 127.0).round() as i8).collect();
        let query: Vec<i8> = (0..dim).map(|_| (rng.next() * 127.0).round() as i8).collect();
        let (mut fast, mut slow) = (Vec::new(), Vec::new());
        scan(&codes, &query, &mut fast);
        scan_portable(&codes, &query, &mut slow);
        assert_eq!(fast, slow, "dim {dim}");
    }
    let extreme = vec![127i8; 64];
    let (mut fast, mut slow) = (Vec::new(), Vec::new());
    scan(&extreme, &[-127i8; 64], &mut fast);
    scan_portable(&extreme, &[-127i8; 64], &mut slow);
    assert_eq!((fast, slow), (vec![-127 * 127 * 64], vec![-127 * 127 * 64]));
}
