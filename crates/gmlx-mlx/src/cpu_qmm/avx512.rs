//! The 4- and 8-bit kernel with AVX-512: a block's codes as two vectors of 16 floats, each
//! widened from bytes in one instruction (for 4 bits the even codes are the low nibbles of
//! the 16 widened bytes, the odd ones their high nibbles), half the instructions of AVX2's.
use std::arch::x86_64::*;

use super::simd::{self, Lanes, Row, Rows};
use super::Affine;

pub(super) fn available() -> bool {
    std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("f16c")
}

/// [`simd::features`] with AVX-512.
///
/// # Safety
/// [`available`]; the rest as [`simd::features`].
#[target_feature(enable = "avx512f,f16c")]
pub(super) unsafe fn features(
    w: &Affine<'_>,
    first: usize,
    x: &Rows,
    chunk: &mut [f32],
    rows: usize,
) {
    // SAFETY: as the caller promised.
    unsafe { simd::features::<Avx512>(w, first, x, chunk, rows) }
}

struct Avx512;

impl Lanes for Avx512 {
    type Codes = [__m512; 2];

    #[target_feature(enable = "avx512f,f16c")]
    #[inline]
    unsafe fn widen(words: &[u32], bits: usize) -> [__m512; 2] {
        let p = words.as_ptr().cast::<__m128i>();
        // SAFETY: 4 bits: 16 readable bytes; 8 bits: 32.
        let (low, high) = unsafe {
            if bits == 4 {
                let bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(p));
                (
                    _mm512_and_si512(bytes, _mm512_set1_epi32(0x0F)),
                    _mm512_srli_epi32::<4>(bytes),
                )
            } else {
                (
                    _mm512_cvtepu8_epi32(_mm_loadu_si128(p)),
                    _mm512_cvtepu8_epi32(_mm_loadu_si128(p.add(1))),
                )
            }
        };
        [_mm512_cvtepi32_ps(low), _mm512_cvtepi32_ps(high)]
    }

    /// Per row two vector chains (even and odd blocks) for the code products and two scalar
    /// ones for the bias terms, added at the end.
    #[target_feature(enable = "avx512f,f16c")]
    #[inline]
    unsafe fn dots<const R: usize>(
        rows: [Row<'_>; R],
        q: impl Fn(usize) -> [__m512; 2],
    ) -> [f32; R] {
        let first = &rows[0];
        let blocks = first.sums.len();
        let mut even = [_mm512_setzero_ps(); R];
        let mut odd = [_mm512_setzero_ps(); R];
        let (mut even_bias, mut odd_bias) = ([0f32; R], [0f32; R]);
        for b in 0..blocks {
            let g = b >> first.shift;
            let codes = q(b);
            let scale = _mm512_set1_ps(first.scales[g]);
            let bias = first.biases[g];
            for r in 0..R {
                let at = rows[r].x[b * 32..b * 32 + 32].as_ptr();
                // SAFETY: 32 floats from `at`.
                let (x0, x1) = unsafe { (_mm512_loadu_ps(at), _mm512_loadu_ps(at.add(16))) };
                let d = _mm512_fmadd_ps(codes[1], x1, _mm512_mul_ps(codes[0], x0));
                if b % 2 == 0 {
                    even[r] = _mm512_fmadd_ps(d, scale, even[r]);
                    even_bias[r] = bias.mul_add(rows[r].sums[b], even_bias[r]);
                } else {
                    odd[r] = _mm512_fmadd_ps(d, scale, odd[r]);
                    odd_bias[r] = bias.mul_add(rows[r].sums[b], odd_bias[r]);
                }
            }
        }
        let mut out = [0f32; R];
        for r in 0..R {
            out[r] =
                _mm512_reduce_add_ps(_mm512_add_ps(even[r], odd[r])) + (even_bias[r] + odd_bias[r]);
        }
        out
    }
}
