//! Legacy block codecs with one scale per block: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (32 elements),
//! and the 1-/2-bit Q1_0 (128) and Q2_0 (64).
//!
//! Element order in the 4/5-bit codecs: byte `j` of `qs` holds element `j` in its low nibble and
//! element `j + 16` in its high nibble. In Q5_x, bit `i` of the little-endian u32 `qh` is the
//! fifth bit of element `i`.

use super::{blocks, f16_at, u32_at};

/// Q4_0: `{ f16 d; u8 qs[16] }`, `x = d * (q - 8)`.
pub(crate) fn q4_0(src: &[u8], dst: &mut [f32]) {
    blocks::<18, 32>(src, dst, |b, y| {
        let d = f16_at(b, 0);
        for j in 0..16 {
            let q = b[2 + j];
            y[j] = d * f32::from((q & 0xF) as i8 - 8);
            y[j + 16] = d * f32::from((q >> 4) as i8 - 8);
        }
    });
}

/// Q4_1: `{ f16 d; f16 m; u8 qs[16] }`, `x = d * q + m`.
pub(crate) fn q4_1(src: &[u8], dst: &mut [f32]) {
    blocks::<20, 32>(src, dst, |b, y| {
        let d = f16_at(b, 0);
        let m = f16_at(b, 2);
        for j in 0..16 {
            let q = b[4 + j];
            y[j] = d * f32::from(q & 0xF) + m;
            y[j + 16] = d * f32::from(q >> 4) + m;
        }
    });
}

/// Q5_0: `{ f16 d; u32 qh; u8 qs[16] }`, `x = d * (q - 16)`.
pub(crate) fn q5_0(src: &[u8], dst: &mut [f32]) {
    blocks::<22, 32>(src, dst, |b, y| {
        let d = f16_at(b, 0);
        let qh = u32_at(b, 2);
        for j in 0..16 {
            let q = b[6 + j];
            let h0 = ((qh >> j) & 1) as u8;
            let h1 = ((qh >> (j + 16)) & 1) as u8;
            y[j] = d * f32::from(((q & 0xF) | (h0 << 4)) as i8 - 16);
            y[j + 16] = d * f32::from(((q >> 4) | (h1 << 4)) as i8 - 16);
        }
    });
}

/// Q5_1: `{ f16 d; f16 m; u32 qh; u8 qs[16] }`, `x = d * q + m`.
pub(crate) fn q5_1(src: &[u8], dst: &mut [f32]) {
    blocks::<24, 32>(src, dst, |b, y| {
        let d = f16_at(b, 0);
        let m = f16_at(b, 2);
        let qh = u32_at(b, 4);
        for j in 0..16 {
            let q = b[8 + j];
            let h0 = ((qh >> j) & 1) as u8;
            let h1 = ((qh >> (j + 16)) & 1) as u8;
            y[j] = d * f32::from((q & 0xF) | (h0 << 4)) + m;
            y[j + 16] = d * f32::from((q >> 4) | (h1 << 4)) + m;
        }
    });
}

/// Q8_0: `{ f16 d; i8 qs[32] }`, `x = d * q`.
pub(crate) fn q8_0(src: &[u8], dst: &mut [f32]) {
    blocks::<34, 32>(src, dst, |b, y| {
        let d = f16_at(b, 0);
        for j in 0..32 {
            y[j] = d * f32::from(b[2 + j] as i8);
        }
    });
}

/// Q1_0: `{ f16 d; u8 qs[16] }`, bit `j % 8` of byte `j / 8` set means `+d`, clear `-d`.
pub(crate) fn q1_0(src: &[u8], dst: &mut [f32]) {
    blocks::<18, 128>(src, dst, |b, y| {
        let d = f16_at(b, 0);
        for j in 0..128 {
            y[j] = if (b[2 + j / 8] >> (j % 8)) & 1 == 1 {
                d
            } else {
                -d
            };
        }
    });
}

/// Q2_0: `{ f16 d; u8 qs[16] }`, 2-bit `q` at bits `2*(j%4)` of byte `j/4`, `x = (q - 1) * d`.
pub(crate) fn q2_0(src: &[u8], dst: &mut [f32]) {
    blocks::<18, 64>(src, dst, |b, y| {
        let d = f16_at(b, 0);
        for j in 0..64 {
            let q = (b[2 + j / 4] >> (2 * (j % 4))) & 3;
            y[j] = f32::from(q as i8 - 1) * d;
        }
    });
}

#[cfg(test)]
mod tests {
    // Q1_0 and Q2_0 have no gguf-py oracle; these check them against llama.cpp's
    // dequantize_row_q1_0 / dequantize_row_q2_0 by hand.
    use super::*;

    #[test]
    fn q1_0_by_hand() {
        let mut b = vec![0u8; 18];
        b[0..2].copy_from_slice(&half::f16::from_f32(1.5).to_bits().to_le_bytes());
        b[2] = 0b0000_0101; // elements 0 and 2 positive
        b[17] = 0x80; // element 127 positive
        let mut y = vec![0f32; 128];
        q1_0(&b, &mut y);
        assert_eq!(&y[..4], &[1.5, -1.5, 1.5, -1.5]);
        assert_eq!(y[126], -1.5);
        assert_eq!(y[127], 1.5);
    }

    #[test]
    fn q2_0_by_hand() {
        let mut b = vec![0u8; 18];
        b[0..2].copy_from_slice(&half::f16::from_f32(-0.5).to_bits().to_le_bytes());
        b[2] = 0b11_10_01_00; // q = 0, 1, 2, 3 for elements 0..4
        b[17] = 0b10 << 6; // element 63: q = 2
        let mut y = vec![0f32; 64];
        q2_0(&b, &mut y);
        assert_eq!(&y[..4], &[0.5, -0.0, -0.5, -1.0]);
        assert_eq!(y[63], -0.5);
        assert_eq!(y[4], 0.5);
    }
}
