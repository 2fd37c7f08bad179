//! The 4- and 8-bit kernel with AVX-512: a block's scaled codes as two vectors of 16 floats,
//! half the instructions of AVX2's. A 4-bit block's 16 bytes widen in one instruction and each
//! code (the low nibbles are the even codes, the high ones the odd) looks its value up among
//! the block's 16 scaled codes; 8-bit codes are converted and scaled.
use std::arch::x86_64::*;
use std::array::from_fn;

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
    unsafe fn widen<const BITS: usize>(words: &[u32], scale: f32) -> [__m512; 2] {
        let p = words.as_ptr().cast::<__m128i>();
        let scale = _mm512_set1_ps(scale);
        if BITS == 4 {
            // the 16 values `scale * code` looked up by each code (a permute reads an index's
            // low 4 bits): the same products as widening each code and multiplying, with one
            // multiplication per block instead of two and no conversions
            let table = _mm512_mul_ps(
                _mm512_setr_ps(
                    0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0,
                    15.0,
                ),
                scale,
            );
            // SAFETY: 16 readable bytes.
            let bytes = _mm512_cvtepu8_epi32(unsafe { _mm_loadu_si128(p) });
            return [
                _mm512_permutexvar_ps(bytes, table),
                _mm512_permutexvar_ps(_mm512_srli_epi32::<4>(bytes), table),
            ];
        }
        // SAFETY: 32 readable bytes.
        let (low, high) = unsafe {
            (
                _mm512_cvtepu8_epi32(_mm_loadu_si128(p)),
                _mm512_cvtepu8_epi32(_mm_loadu_si128(p.add(1))),
            )
        };
        [
            _mm512_mul_ps(_mm512_cvtepi32_ps(low), scale),
            _mm512_mul_ps(_mm512_cvtepi32_ps(high), scale),
        ]
    }

    /// Per row two vector chains (a block's first and second 16 columns), then the bias terms
    /// as a third, added before the one horizontal sum.
    #[target_feature(enable = "avx512f,f16c")]
    #[inline]
    unsafe fn dots<const R: usize>(
        rows: [Row<'_>; R],
        biases: &[f32],
        q: impl Fn(usize) -> [__m512; 2],
    ) -> [f32; R] {
        let blocks = rows[0].x.len() / 32;
        let starts: [*const f32; R] = from_fn(|r| rows[r].x.as_ptr());
        let mut low = [_mm512_setzero_ps(); R];
        let mut high = [_mm512_setzero_ps(); R];
        for b in 0..blocks {
            let codes = q(b);
            for r in 0..R {
                // SAFETY: every row holds `blocks` blocks of 32 floats.
                let (x0, x1) = unsafe {
                    let at = starts[r].add(b * 32);
                    (_mm512_loadu_ps(at), _mm512_loadu_ps(at.add(16)))
                };
                low[r] = _mm512_fmadd_ps(codes[0], x0, low[r]);
                high[r] = _mm512_fmadd_ps(codes[1], x1, high[r]);
            }
        }
        // SAFETY: the instruction set.
        from_fn(|r| unsafe {
            let bias = bias_dot(biases, rows[r].sums);
            _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(low[r], high[r]), bias))
        })
    }
}

/// `a . b` over their common length, as 16 lanes.
///
/// # Safety
/// AVX-512F.
#[target_feature(enable = "avx512f,f16c")]
#[inline]
unsafe fn bias_dot(a: &[f32], b: &[f32]) -> __m512 {
    let n = a.len().min(b.len());
    let (a, b) = (a.as_ptr(), b.as_ptr());
    let mut acc = _mm512_setzero_ps();
    let mut i = 0;
    // SAFETY (both): `n` floats are readable from `a` and `b`; the masked loads read only the
    // lanes below `n`.
    while i + 16 <= n {
        acc = unsafe { _mm512_fmadd_ps(_mm512_loadu_ps(a.add(i)), _mm512_loadu_ps(b.add(i)), acc) };
        i += 16;
    }
    if i < n {
        let mask: __mmask16 = (1 << (n - i)) - 1;
        acc = unsafe {
            _mm512_fmadd_ps(
                _mm512_maskz_loadu_ps(mask, a.add(i)),
                _mm512_maskz_loadu_ps(mask, b.add(i)),
                acc,
            )
        };
    }
    acc
}
