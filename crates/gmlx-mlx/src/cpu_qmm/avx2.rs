//! The 4- and 8-bit kernel with AVX2 and FMA: a block's codes as four vectors of 8 floats.
use std::arch::x86_64::*;

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
    unsafe fn widen(words: &[u32], bits: usize) -> [__m256; 4] {
        let p = words.as_ptr().cast::<__m128i>();
        // SAFETY: 4 bits: 16 readable bytes; 8 bits: 32.
        let (a, b, c, d) = unsafe {
            if bits == 4 {
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
        let f = |v| _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
        [f(a), f(b), f(c), f(d)]
    }

    /// Per row two vector chains (even and odd blocks) for the code products and two scalar
    /// ones for the bias terms, added at the end.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn dots<const R: usize>(
        rows: [Row<'_>; R],
        q: impl Fn(usize) -> [__m256; 4],
    ) -> [f32; R] {
        let first = &rows[0];
        let blocks = first.sums.len();
        let mut even = [_mm256_setzero_ps(); R];
        let mut odd = [_mm256_setzero_ps(); R];
        let (mut even_bias, mut odd_bias) = ([0f32; R], [0f32; R]);
        for b in 0..blocks {
            let g = b >> first.shift;
            let codes = q(b);
            let scale = _mm256_set1_ps(first.scales[g]);
            let bias = first.biases[g];
            for r in 0..R {
                // SAFETY: block `b` is within every row.
                let d = unsafe { block(&rows[r], &codes, b) };
                if b % 2 == 0 {
                    even[r] = _mm256_fmadd_ps(d, scale, even[r]);
                    even_bias[r] = bias.mul_add(rows[r].sums[b], even_bias[r]);
                } else {
                    odd[r] = _mm256_fmadd_ps(d, scale, odd[r]);
                    odd_bias[r] = bias.mul_add(rows[r].sums[b], odd_bias[r]);
                }
            }
        }
        let mut out = [0f32; R];
        for r in 0..R {
            let sum = _mm256_add_ps(even[r], odd[r]);
            let half = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
            let quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
            let one = _mm_add_ss(quarter, _mm_shuffle_ps(quarter, quarter, 1));
            out[r] = _mm_cvtss_f32(one) + (even_bias[r] + odd_bias[r]);
        }
        out
    }
}

/// `q . x` over block `b` of `row`, as 8 lanes.
///
/// # Safety
/// AVX2 and FMA; block `b` is within the row.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn block(row: &Row<'_>, q: &[__m256; 4], b: usize) -> __m256 {
    let at = row.x[b * 32..b * 32 + 32].as_ptr();
    // SAFETY: 32 floats from `at`.
    let (x0, x1, x2, x3) = unsafe {
        (
            _mm256_loadu_ps(at),
            _mm256_loadu_ps(at.add(8)),
            _mm256_loadu_ps(at.add(16)),
            _mm256_loadu_ps(at.add(24)),
        )
    };
    let front = _mm256_fmadd_ps(q[1], x1, _mm256_mul_ps(q[0], x0));
    let back = _mm256_fmadd_ps(q[3], x3, _mm256_mul_ps(q[2], x2));
    _mm256_add_ps(front, back)
}
