//! IQ codecs: codebook ("grid") quantization with sign patterns (IQ1, IQ2, IQ3), and the
//! non-linear 4-bit IQ4_NL / IQ4_XS. Tables are in `iq_tables.rs`.
//!
//! Each 256-element super-block has 8 sub-blocks of 32. A grid entry gives 8 (IQ1/IQ2) or 4
//! (IQ3) unsigned magnitudes; sign bit `j` (set means negative) comes from a `ksigns` byte or
//! an explicit sign byte. Arithmetic order follows ggml: `(db * grid) * sign`.

use super::iq_tables::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
    KVALUES_IQ4NL,
};
use super::{blocks, f16_at, u16_at, u32_at};
use crate::ggml_type::QK_K;

const B: usize = QK_K;
const IQ1S_DELTA: f32 = 0.125;

#[inline]
fn sign(signs: u8, j: usize) -> f32 {
    if (signs >> j) & 1 == 1 {
        -1.0
    } else {
        1.0
    }
}

/// Write 8 values `db * grid[j] * sign_j`.
#[inline]
fn put8(y: &mut [f32], db: f32, grid: &[u8; 8], signs: u8) {
    for j in 0..8 {
        y[j] = db * f32::from(grid[j]) * sign(signs, j);
    }
}

/// IQ2_XXS: `{ f16 d; u16 qs[32] }`; per sub-block two u32: four grid indices (bytes), then
/// four 7-bit `ksigns` indices and a 4-bit scale in the top bits.
pub(crate) fn iq2_xxs(src: &[u8], dst: &mut [f32]) {
    blocks::<66, B>(src, dst, |b, y| {
        let d = f16_at(b, 0);
        for (ib, sub) in y.chunks_exact_mut(32).enumerate() {
            let base = 2 + 8 * ib;
            let aux1 = u32_at(b, base + 4);
            let db = d * (0.5 + (aux1 >> 28) as f32) * 0.25;
            for l in 0..4 {
                let grid = &IQ2XXS_GRID[usize::from(b[base + l])];
                let signs = KSIGNS_IQ2XS[((aux1 >> (7 * l)) & 127) as usize];
                put8(&mut sub[8 * l..8 * l + 8], db, grid, signs);
            }
        }
    });
}

/// IQ2_XS: `{ f16 d; u16 qs[32]; u8 scales[8] }`; each u16: 9-bit grid index, 7-bit ksigns
/// index; a 4-bit scale per 16 elements.
pub(crate) fn iq2_xs(src: &[u8], dst: &mut [f32]) {
    blocks::<74, B>(src, dst, |b, y| {
        let d = f16_at(b, 0);
        for (ib, sub) in y.chunks_exact_mut(32).enumerate() {
            let sc = b[66 + ib];
            let db = [
                d * (0.5 + f32::from(sc & 0xF)) * 0.25,
                d * (0.5 + f32::from(sc >> 4)) * 0.25,
            ];
            for l in 0..4 {
                let q = u16_at(b, 2 + 2 * (4 * ib + l));
                let grid = &IQ2XS_GRID[usize::from(q & 511)];
                let signs = KSIGNS_IQ2XS[usize::from(q >> 9)];
                put8(&mut sub[8 * l..8 * l + 8], db[l / 2], grid, signs);
            }
        }
    });
}

/// IQ2_S: `{ f16 d; u8 qs[32]; u8 signs[32]; u8 qh[8]; u8 scales[8] }`; 10-bit grid index
/// (low 8 bits in `qs`, 2 high bits in `qh`), explicit sign bytes.
pub(crate) fn iq2_s(src: &[u8], dst: &mut [f32]) {
    blocks::<82, B>(src, dst, |b, y| {
        let d = f16_at(b, 0);
        let (qs, signs, qh, scales) = (&b[2..34], &b[34..66], &b[66..74], &b[74..82]);
        for (ib, sub) in y.chunks_exact_mut(32).enumerate() {
            let sc = scales[ib];
            let db = [
                d * (0.5 + f32::from(sc & 0xF)) * 0.25,
                d * (0.5 + f32::from(sc >> 4)) * 0.25,
            ];
            for l in 0..4 {
                let hi = (usize::from(qh[ib]) >> (2 * l)) & 3;
                let grid = &IQ2S_GRID[usize::from(qs[4 * ib + l]) | (hi << 8)];
                put8(
                    &mut sub[8 * l..8 * l + 8],
                    db[l / 2],
                    grid,
                    signs[4 * ib + l],
                );
            }
        }
    });
}

/// IQ3_XXS: `{ f16 d; u8 qs[64]; u8 scales_and_signs[32] }`; byte grid indices of 4 values, per
/// sub-block a u32 of four 7-bit ksigns indices and a 4-bit scale.
pub(crate) fn iq3_xxs(src: &[u8], dst: &mut [f32]) {
    blocks::<98, B>(src, dst, |b, y| {
        let d = f16_at(b, 0);
        let qs = &b[2..66];
        for (ib, sub) in y.chunks_exact_mut(32).enumerate() {
            let aux = u32_at(b, 66 + 4 * ib);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            for l in 0..4 {
                let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
                let g1 = &IQ3XXS_GRID[usize::from(qs[8 * ib + 2 * l])];
                let g2 = &IQ3XXS_GRID[usize::from(qs[8 * ib + 2 * l + 1])];
                for j in 0..4 {
                    sub[8 * l + j] = db * f32::from(g1[j]) * sign(signs, j);
                    sub[8 * l + j + 4] = db * f32::from(g2[j]) * sign(signs, j + 4);
                }
            }
        }
    });
}

/// IQ3_S: `{ f16 d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4] }`; 9-bit grid index (bit
/// `k` of `qh[ib]` is the high bit of index `8*ib + k`), odd scales `1 + 2*s`.
pub(crate) fn iq3_s(src: &[u8], dst: &mut [f32]) {
    blocks::<110, B>(src, dst, |b, y| {
        let d = f16_at(b, 0);
        let (qs, qh, signs, scales) = (&b[2..66], &b[66..74], &b[74..106], &b[106..110]);
        for (ib, sub) in y.chunks_exact_mut(32).enumerate() {
            let s = (scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
            let db = d * f32::from(1 + 2 * s);
            for k in 0..8 {
                let idx = usize::from(qs[8 * ib + k]) | ((usize::from(qh[ib]) >> k) & 1) << 8;
                let grid = &IQ3S_GRID[idx];
                let sg = signs[4 * ib + k / 2];
                for j in 0..4 {
                    sub[4 * k + j] = db * f32::from(grid[j]) * sign(sg, 4 * (k % 2) + j);
                }
            }
        }
    });
}

/// IQ1_S: `{ f16 d; u8 qs[32]; u16 qh[8] }`; 11-bit grid index of 8 ternary values, per
/// sub-block a 3-bit odd scale and the sign of a ±1/8 shift.
pub(crate) fn iq1_s(src: &[u8], dst: &mut [f32]) {
    blocks::<50, B>(src, dst, |b, y| {
        let d = f16_at(b, 0);
        let qs = &b[2..34];
        for (ib, sub) in y.chunks_exact_mut(32).enumerate() {
            let qh = u16_at(b, 34 + 2 * ib);
            let dl = d * f32::from(2 * ((qh >> 12) & 7) + 1);
            let delta = if qh & 0x8000 != 0 {
                -IQ1S_DELTA
            } else {
                IQ1S_DELTA
            };
            for l in 0..4 {
                let idx = usize::from(qs[4 * ib + l]) | (usize::from((qh >> (3 * l)) & 7) << 8);
                let grid = &IQ1S_GRID[idx];
                for j in 0..8 {
                    sub[8 * l + j] = dl * (f32::from(grid[j]) + delta);
                }
            }
        }
    });
}

/// IQ1_M: `{ u8 qs[32]; u8 qh[16]; u16 scales[4] }`; the f16 super-block scale is spread over
/// the top nibbles of the four scale words; 3-bit scales per 16 elements, a shift sign per 8.
pub(crate) fn iq1_m(src: &[u8], dst: &mut [f32]) {
    blocks::<56, B>(src, dst, |b, y| {
        let (qs, qh) = (&b[0..32], &b[32..48]);
        let sc = [u16_at(b, 48), u16_at(b, 50), u16_at(b, 52), u16_at(b, 54)];
        let d_bits =
            (sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000);
        let d = half::f16::from_bits(d_bits).to_f32();
        for (ib, sub) in y.chunks_exact_mut(32).enumerate() {
            let s = sc[ib / 2] >> (6 * (ib % 2));
            let dl = [
                d * f32::from(2 * (s & 7) + 1),
                d * f32::from(2 * ((s >> 3) & 7) + 1),
            ];
            for l in 0..4 {
                let h = qh[2 * ib + l / 2] >> (4 * (l % 2));
                let idx = usize::from(qs[4 * ib + l]) | (usize::from(h & 7) << 8);
                let delta = if h & 8 != 0 { -IQ1S_DELTA } else { IQ1S_DELTA };
                let grid = &IQ1S_GRID[idx];
                for j in 0..8 {
                    sub[8 * l + j] = dl[l / 2] * (f32::from(grid[j]) + delta);
                }
            }
        }
    });
}

/// IQ4_NL: `{ f16 d; u8 qs[16] }`, `x = d * kvalues_iq4nl[q]`, nibble order as Q4_0.
pub(crate) fn iq4_nl(src: &[u8], dst: &mut [f32]) {
    blocks::<18, 32>(src, dst, |b, y| {
        let d = f16_at(b, 0);
        for j in 0..16 {
            let q = b[2 + j];
            y[j] = d * f32::from(KVALUES_IQ4NL[usize::from(q & 0xF)]);
            y[j + 16] = d * f32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
        }
    });
}

/// IQ4_XS: `{ f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128] }`; 6-bit signed scale per
/// sub-block (offset 32), IQ4_NL values.
pub(crate) fn iq4_xs(src: &[u8], dst: &mut [f32]) {
    blocks::<136, B>(src, dst, |b, y| {
        let d = f16_at(b, 0);
        let scales_h = u16_at(b, 2);
        let (scales_l, qs) = (&b[4..8], &b[8..136]);
        for (ib, sub) in y.chunks_exact_mut(32).enumerate() {
            let low = (scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
            let high = ((scales_h >> (2 * ib)) & 3) as u8;
            let dl = d * f32::from((low | (high << 4)) as i8 - 32);
            for j in 0..16 {
                let q = qs[16 * ib + j];
                sub[j] = dl * f32::from(KVALUES_IQ4NL[usize::from(q & 0xF)]);
                sub[j + 16] = dl * f32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
            }
        }
    });
}
