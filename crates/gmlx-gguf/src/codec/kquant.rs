//! K-quants: 256-element super-blocks with 16 sub-blocks of 16 (Q2_K, Q3_K, Q6_K) or 8
//! sub-blocks of 32 (Q4_K, Q5_K), each with its own integer scale (and min) relative to the
//! super-block's f16 `d` (and `dmin`).
//!
//! Element `e` of a super-block is in 128-element half `e / 128`; within a half, the 2-bit
//! codecs take bit pair `(e % 128) / 32` of byte `e % 32`, and the nibble codecs take the low
//! nibble for even 32-sub-blocks and the high nibble for odd ones.

use super::{blocks, f16_at};
use crate::ggml_type::QK_K;

const B: usize = QK_K;

/// Q2_K: `{ u8 scales[16]; u8 qs[64]; f16 d; f16 dmin }`; scale byte: low nibble scale, high
/// nibble min; `x = (d * sc) * q - (dmin * m)`.
pub(crate) fn q2_k(src: &[u8], dst: &mut [f32]) {
    blocks::<84, B>(src, dst, |b, y| {
        let (scales, qs) = (&b[0..16], &b[16..80]);
        let d = f16_at(b, 80);
        let dmin = f16_at(b, 82);
        for (e, out) in y.iter_mut().enumerate() {
            let sc = scales[e / 16];
            let dl = d * f32::from(sc & 0xF);
            let ml = dmin * f32::from(sc >> 4);
            let (half, r) = (e / 128, e % 128);
            let q = (qs[32 * half + r % 32] >> (2 * (r / 32))) & 3;
            *out = dl * f32::from(q) - ml;
        }
    });
}

/// Q3_K: `{ u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d }`; 6-bit signed scales (offset 32),
/// low 2 bits of `q` from `qs`, the third from `hmask` (clear means subtract 4).
pub(crate) fn q3_k(src: &[u8], dst: &mut [f32]) {
    blocks::<110, B>(src, dst, |b, y| {
        let (hmask, qs, sc) = (&b[0..32], &b[32..96], &b[96..108]);
        let d = f16_at(b, 108);
        let mut scales = [0f32; 16];
        for (k, s) in scales.iter_mut().enumerate() {
            let low = if k < 8 { sc[k] & 0xF } else { sc[k - 8] >> 4 };
            let high = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
            *s = f32::from((low | (high << 4)) as i8 - 32);
        }
        for (e, out) in y.iter_mut().enumerate() {
            let dl = d * scales[e / 16];
            let (half, r) = (e / 128, e % 128);
            let low = ((qs[32 * half + r % 32] >> (2 * (r / 32))) & 3) as i8;
            let high = (hmask[e % 32] >> (e / 32)) & 1;
            let q = if high == 1 { low } else { low - 4 };
            *out = dl * f32::from(q);
        }
    });
}

/// The 6-bit scale and min of sub-block `j` (0..8) from the 12 packed bytes of Q4_K / Q5_K.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Q4_K: `{ f16 d; f16 dmin; u8 scales[12]; u8 qs[128] }`; `x = (d * sc) * q - (dmin * m)`.
pub(crate) fn q4_k(src: &[u8], dst: &mut [f32]) {
    blocks::<144, B>(src, dst, |b, y| {
        let d = f16_at(b, 0);
        let dmin = f16_at(b, 2);
        let (scales, qs) = (&b[4..16], &b[16..144]);
        for (s, sub) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = scale_min_k4(s, scales);
            let d1 = d * f32::from(sc);
            let m1 = dmin * f32::from(m);
            let shift = 4 * (s % 2);
            for (l, out) in sub.iter_mut().enumerate() {
                let q = (qs[32 * (s / 2) + l] >> shift) & 0xF;
                *out = d1 * f32::from(q) - m1;
            }
        }
    });
}

/// Q5_K: `{ f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128] }`; the fifth bit of
/// element `l` of sub-block `s` is bit `s` of `qh[l]`.
pub(crate) fn q5_k(src: &[u8], dst: &mut [f32]) {
    blocks::<176, B>(src, dst, |b, y| {
        let d = f16_at(b, 0);
        let dmin = f16_at(b, 2);
        let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..176]);
        for (s, sub) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = scale_min_k4(s, scales);
            let d1 = d * f32::from(sc);
            let m1 = dmin * f32::from(m);
            let shift = 4 * (s % 2);
            for (l, out) in sub.iter_mut().enumerate() {
                let q = ((qs[32 * (s / 2) + l] >> shift) & 0xF) | (((qh[l] >> s) & 1) << 4);
                *out = d1 * f32::from(q) - m1;
            }
        }
    });
}

/// Q6_K: `{ u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d }`; `x = (d * sc) * (q - 32)`.
pub(crate) fn q6_k(src: &[u8], dst: &mut [f32]) {
    blocks::<210, B>(src, dst, |b, y| {
        let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
        let d = f16_at(b, 208);
        for (e, out) in y.iter_mut().enumerate() {
            let (half, r) = (e / 128, e % 128);
            let (k, l) = (r / 32, r % 32);
            let low = (ql[64 * half + l + 32 * (k & 1)] >> (4 * (k >> 1))) & 0xF;
            let high = (qh[32 * half + l] >> (2 * k)) & 3;
            let q = (low | (high << 4)) as i8 - 32;
            let dl = d * f32::from(sc[e / 16] as i8);
            *out = dl * f32::from(q);
        }
    });
}
