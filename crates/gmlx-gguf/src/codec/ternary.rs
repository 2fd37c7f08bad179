//! The ternary codecs: weights in {-1, 0, 1} times one f16 scale per 256.
//!
//! TQ2_0 stores each trit in 2 bits. TQ1_0 packs 5 trits per byte as a base-3 fixed-point
//! fraction (`byte = ceil(value * 256 / 243)`), read back by multiplying by a power of 3
//! modulo 256 and taking the top trit: `(byte * 3^n mod 256) * 3 >> 8`. The last 16 trits sit
//! 4 per byte in `qh`. Element order follows llama.cpp's `dequantize_row_tq1_0`.
use super::{blocks, f16_at};

const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// The `n`-th trit (0, 1 or 2) of a TQ1_0 byte.
#[inline]
fn trit(byte: u8, n: usize) -> i16 {
    let shifted = byte.wrapping_mul(POW3[n]);
    ((u16::from(shifted) * 3) >> 8) as i16
}

/// 256 per block: 48 bytes of 5 trits, 4 bytes of 4 trits, f16 scale.
pub(crate) fn tq1_0(src: &[u8], dst: &mut [f32]) {
    blocks::<54, 256>(src, dst, |b, y| {
        let (qs, qh) = (&b[..48], &b[48..52]);
        let d = f16_at(b, 52);
        let mut out = y.iter_mut();
        let mut put = |t: i16| {
            if let Some(v) = out.next() {
                *v = f32::from(t - 1) * d;
            }
        };
        // bytes 0..32 in one run of 32, bytes 32..48 in one run of 16; each run 5 times
        for run in [&qs[..32], &qs[32..]] {
            for n in 0..5 {
                for &byte in run {
                    put(trit(byte, n));
                }
            }
        }
        for n in 0..4 {
            for &byte in qh {
                put(trit(byte, n));
            }
        }
    });
}

/// 256 per block: 64 bytes of 2-bit trits, f16 scale.
pub(crate) fn tq2_0(src: &[u8], dst: &mut [f32]) {
    blocks::<66, 256>(src, dst, |b, y| {
        let d = f16_at(b, 64);
        for (half, out) in y.chunks_exact_mut(128).enumerate() {
            let qs = &b[half * 32..half * 32 + 32];
            for (l, run) in out.chunks_exact_mut(32).enumerate() {
                for (v, &byte) in run.iter_mut().zip(qs) {
                    let q = (byte >> (2 * l)) & 3;
                    *v = f32::from(q as i8 - 1) * d;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tq1_0_trits_round_trip_through_the_base_3_byte() {
        // pack five trits the way llama.cpp's quantizer does: the base-3 number, scaled up
        for value in 0u16..243 {
            let byte = ((value * 256).div_ceil(243)) as u8;
            let digits: Vec<i16> = (0..5)
                .map(|n| ((value / 3u16.pow(4 - n)) % 3) as i16)
                .collect();
            let read: Vec<i16> = (0..5).map(|n| trit(byte, n as usize)).collect();
            assert_eq!(read, digits, "value {value}");
        }
    }

    #[test]
    fn tq2_0_by_hand() {
        let mut b = vec![0u8; 66];
        b[64..66].copy_from_slice(&half::f16::from_f32(2.0).to_bits().to_le_bytes());
        b[0] = 0b10_01_00_10; // element 0: q=2, element 32: 0, element 64: 1, element 96: 2
        let mut y = vec![0f32; 256];
        tq2_0(&b, &mut y);
        assert_eq!([y[0], y[32], y[64], y[96]], [2.0, -2.0, 0.0, 2.0]);
        assert_eq!(y[1], -2.0);
    }
}
