//! FP4 codecs: MXFP4 (32 E2M1 values, one E8M0 scale) and NVFP4 (64 values in four 16-element
//! sub-blocks, one unsigned E4M3 scale each). Values are the doubled E2M1 table
//! (`kvalues_mxfp4`), so scales carry an extra factor 1/2.

use super::blocks;
use super::iq_tables::KVALUES_MXFP4;

/// `0.5 * 2^(e - 127)` as f32 bits (llama.cpp `ggml_e8m0_to_fp32_half`).
fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

/// Unsigned E4M3 (bias 7) times 0.5; 0 and 0x7F decode to 0 (llama.cpp `ggml_ue4m3_to_fp32`).
fn ue4m3_half(x: u8) -> f32 {
    if x == 0 || x == 0x7F {
        return 0.0;
    }
    let exp = i32::from((x >> 3) & 0xF);
    let man = f32::from(x & 7);
    let raw = if exp == 0 {
        man * f32::powi(2.0, -9)
    } else {
        (1.0 + man / 8.0) * f32::powi(2.0, exp - 7)
    };
    raw * 0.5
}

/// MXFP4: `{ u8 e; u8 qs[16] }`; element `j` low nibble of `qs[j]`, `j + 16` high nibble.
pub(crate) fn mxfp4(src: &[u8], dst: &mut [f32]) {
    blocks::<17, 32>(src, dst, |b, y| {
        let d = e8m0_half(b[0]);
        for j in 0..16 {
            let q = b[1 + j];
            y[j] = d * f32::from(KVALUES_MXFP4[usize::from(q & 0xF)]);
            y[j + 16] = d * f32::from(KVALUES_MXFP4[usize::from(q >> 4)]);
        }
    });
}

/// NVFP4: `{ u8 d[4]; u8 qs[32] }`; sub-block `s` uses `d[s]` and `qs[8s..8s+8]`, low nibbles
/// first then high nibbles.
pub(crate) fn nvfp4(src: &[u8], dst: &mut [f32]) {
    blocks::<36, 64>(src, dst, |b, y| {
        for s in 0..4 {
            let d = ue4m3_half(b[s]);
            for j in 0..8 {
                let q = b[4 + 8 * s + j];
                y[16 * s + j] = d * f32::from(KVALUES_MXFP4[usize::from(q & 0xF)]);
                y[16 * s + j + 8] = d * f32::from(KVALUES_MXFP4[usize::from(q >> 4)]);
            }
        }
    });
}
