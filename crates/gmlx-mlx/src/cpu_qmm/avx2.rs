//! The 4- and 8-bit kernel with AVX2 and FMA: a block's codes as four vectors of 8 floats.
use std::arch::x86_64::*;
use std::array::from_fn;

use super::simd::{self, Lanes, Row, Rows};
use super::Affine;

pub(super) fn available() -> bool {
    std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
}

/// [`simd::features`] with AVX2.
///
/// # Safety
/// [`available`]; the rest as [`simd::features`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn features(
    w: &Affine<'_>,
    first: usize,
    x: &Rows,
    chunk: &mut [f32],
    rows: usize,
) {
    // SAFETY: as the caller promised.
    unsafe { simd::features::<Avx2>(w, first, x, chunk, rows) }
}

struct Avx2;

impl Lanes for Avx2 {
    type Codes = [__m256; 4];

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn widen<const BITS: usize>(words: &[u32], scale: f32) -> [__m256; 4] {
        let p = words.as_ptr().cast::<__m128i>();
        // SAFETY: 4 bits: 16 readable bytes; 8 bits: 32.
        let (a, b, c, d) = unsafe {
            if BITS == 4 {
                let v = _mm_loadu_si128(p);
                let mask = _mm_set1_epi8(0x0F);
                let even = _mm_and_si128(v, mask);
                let odd = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
                (even, _mm_srli_si128(even, 8), odd, _mm_srli_si128(odd, 8))
            } else {
                let lo = _mm_loadu_si128(p);
                let hi = _mm_loadu_si128(p.add(1));
                (lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8))
            }
        };
        let scale = _mm256_set1_ps(scale);
        let f = |v| _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), scale);
        [f(a), f(b), f(c), f(d)]
    }

    /// Per row two vector chains (a block's first and second 16 columns), then the bias terms
    /// as a third, added before the one horizontal sum.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn dots<const R: usize>(
        rows: [Row<'_>; R],
        biases: &[f32],
        q: impl Fn(usize) -> [__m256; 4],
    ) -> [f32; R] {
        let blocks = rows[0].x.len() / 32;
        let starts: [*const f32; R] = from_fn(|r| rows[r].x.as_ptr());
        let mut front = [_mm256_setzero_ps(); R];
        let mut back = [_mm256_setzero_ps(); R];
        for b in 0..blocks {
            let q = q(b);
            for r in 0..R {
                // SAFETY: every row holds `blocks` blocks of 32 floats.
                let x: [__m256; 4] =
                    unsafe { from_fn(|i| _mm256_loadu_ps(starts[r].add(b * 32 + i * 8))) };
                front[r] = _mm256_fmadd_ps(q[1], x[1], _mm256_fmadd_ps(q[0], x[0], front[r]));
                back[r] = _mm256_fmadd_ps(q[3], x[3], _mm256_fmadd_ps(q[2], x[2], back[r]));
            }
        }
        from_fn(|r| {
            let (bias, tail) = bias_dot(biases, rows[r].sums);
            sum8(_mm256_add_ps(_mm256_add_ps(front[r], back[r]), bias)) + tail
        })
    }
}

/// `a . b` over their common length: 8 lanes, and the sum past the last whole 8.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn bias_dot(a: &[f32], b: &[f32]) -> (__m256, f32) {
    let n = a.len().min(b.len());
    let whole = n / 8 * 8;
    let mut acc = _mm256_setzero_ps();
    for i in (0..whole).step_by(8) {
        // SAFETY: 8 floats from `i` are within both.
        acc = unsafe {
            _mm256_fmadd_ps(
                _mm256_loadu_ps(a.as_ptr().add(i)),
                _mm256_loadu_ps(b.as_ptr().add(i)),
                acc,
            )
        };
    }
    let tail = a[whole..n]
        .iter()
        .zip(&b[whole..n])
        .fold(0f32, |s, (x, y)| x.mul_add(*y, s));
    (acc, tail)
}

/// The sum of 8 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn sum8(v: __m256) -> f32 {
    let half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
    _mm_cvtss_f32(_mm_add_ss(quarter, _mm_shuffle_ps(quarter, quarter, 1)))
}
