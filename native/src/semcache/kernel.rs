//! Scan kernels for the semantic index: int8 and f32 dot products over row-major matrices.
//!
//! Owns the arithmetic and the choice of instruction set (AVX2 when the CPU has it, detected at
//! run time; portable code otherwise). The portable loops are written with independent
//! accumulator lanes so the compiler vectorises them. It must not know about partitions, TTLs
//! or thresholds beyond the pruning rule handed to it.

/// Lanes per accumulator block; rows of int8 codes are padded to a multiple of this.
pub const LANES: usize = 32;

/// int8 dot product of two equal-length slices (a multiple of `LANES` long).
#[inline(always)]
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let mut acc = [0i32; LANES];
    for (ca, cb) in a.chunks_exact(LANES).zip(b.chunks_exact(LANES)) {
        for k in 0..LANES {
            acc[k] += i32::from(ca[k]) * i32::from(cb[k]);
        }
    }
    acc.iter().sum()
}

/// f32 dot product with 16 independent partial sums (a fixed order, so results are
/// reproducible for a given build).
#[inline(always)]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let chunks = a.len() / 16 * 16;
    for (ca, cb) in a[..chunks].chunks_exact(16).zip(b[..chunks].chunks_exact(16)) {
        for k in 0..16 {
            acc[k] += ca[k] * cb[k];
        }
    }
    let mut tail = 0f32;
    for (x, y) in a[chunks..].iter().zip(&b[chunks..]) {
        tail += x * y;
    }
    acc.iter().sum::<f32>() + tail
}

/// Integer dot products of `query` with every row of `codes` (rows of `query.len()` bytes),
/// written to `out`.
pub(super) fn scan_portable(codes: &[i8], query: &[i8], out: &mut Vec<i32>) {
    out.clear();
    out.extend(codes.chunks_exact(query.len()).map(|row| dot_i8(row, query)));
}

/// AVX2 scan: per 32 codes, `sign(x, q)` then `maddubs(|q|, .)` (exact: |q|, |x| <= 127 so a
/// pair sum is at most 32,258 and never saturates) and `madd` by ones into i32 lanes.
///
/// # Safety
/// The CPU must support AVX2; `query.len()` must be a multiple of 32 and `codes.len()` a
/// multiple of `query.len()`; no code may be -128.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn scan_avx2(codes: &[i8], query: &[i8], out: &mut Vec<i32>) {
    use std::arch::x86_64::*;
    let n = query.len();
    let chunks = n / 32;
    let q: Vec<__m256i> = query.chunks_exact(32).map(|c| _mm256_loadu_si256(c.as_ptr().cast())).collect();
    let q_abs: Vec<__m256i> = q.iter().map(|&v| _mm256_abs_epi8(v)).collect();
    let ones = _mm256_set1_epi16(1);
    out.clear();
    out.reserve(codes.len() / n);
    for row in codes.chunks_exact(n) {
        let p = row.as_ptr();
        let mut acc0 = _mm256_setzero_si256();
        let mut acc1 = _mm256_setzero_si256();
        let mut c = 0;
        while c + 1 < chunks {
            // SAFETY: c + 1 < chunks, so both 32-byte loads lie inside `row`.
            let x0 = _mm256_loadu_si256(p.add(c * 32).cast());
            let x1 = _mm256_loadu_si256(p.add(c * 32 + 32).cast());
            let p0 = _mm256_maddubs_epi16(q_abs[c], _mm256_sign_epi8(x0, q[c]));
            let p1 = _mm256_maddubs_epi16(q_abs[c + 1], _mm256_sign_epi8(x1, q[c + 1]));
            acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(p0, ones));
            acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(p1, ones));
            c += 2;
        }
        if c < chunks {
            // SAFETY: c < chunks, so the load lies inside `row`.
            let x0 = _mm256_loadu_si256(p.add(c * 32).cast());
            let p0 = _mm256_maddubs_epi16(q_abs[c], _mm256_sign_epi8(x0, q[c]));
            acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(p0, ones));
        }
        let acc = _mm256_add_epi32(acc0, acc1);
        let s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
        out.push(_mm_cvtsi128_si32(s));
    }
}

/// Integer dot products of `query` with every row of `codes`, using the best instruction set.
pub fn scan(codes: &[i8], query: &[i8], out: &mut Vec<i32>) {
    assert!(query.len() % LANES == 0 && codes.len() % query.len().max(1) == 0, "misaligned codes");
    #[cfg(target_arch = "x86_64")]
    if !query.is_empty() && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above), the lengths were asserted, and
        // the index never stores -128 (codes are clamped to [-127, 127]).
        unsafe { scan_avx2(codes, query, out) };
        return;
    }
    scan_portable(codes, query, out);
}
