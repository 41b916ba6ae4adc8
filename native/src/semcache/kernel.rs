//! Scan kernels for the semantic index: int8 and f32 dot products over row-major matrices.
//!
//! Owns the arithmetic and the choice of instruction set (AVX2 when the CPU has it, detected at
//! run time; portable code otherwise). The portable loops are written with independent
//! accumulator lanes so the compiler vectorises them. It must not know about partitions, TTLs
//! or thresholds beyond the pruning rule handed to it.

/// Lanes per accumulator block; rows of int8 codes are padded to a multiple of this.
pub const LANES: usize = 32;

#[inline(always)]
fn dot_i8_portable(a: &[i8], b: &[i8]) -> i32 {
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
#[inline(always)]
fn scan_portable(codes: &[i8], query: &[i8], out: &mut Vec<i32>) {
    out.clear();
    out.extend(codes.chunks_exact(query.len()).map(|row| dot_i8_portable(row, query)));
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn scan_avx2(codes: &[i8], query: &[i8], out: &mut Vec<i32>) {
    scan_portable(codes, query, out);
}

/// Integer dot products of `query` with every row of `codes`, using the best instruction set.
pub fn scan(codes: &[i8], query: &[i8], out: &mut Vec<i32>) {
    debug_assert_eq!(query.len() % LANES, 0);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { scan_avx2(codes, query, out) };
        return;
    }
    scan_portable(codes, query, out);
}
