//! A whole packed affine weight dequantized to float32 on the host, over the rayon pool: what a
//! CPU product of many rows multiplies with BLAS. MLX's CPU `dequantize` runs on one thread
//! and unpacks codes through general shift and copy kernels.
use mlx_rs::Array;
use rayon::prelude::*;

use super::side::Widened;
use super::{affine, has_fma, Affine};
use crate::error::Result;
use crate::qmm::Packed;

/// Output features per rayon task.
const FEATURES_PER_TASK: usize = 16;

/// `W` as a float32 `[features, cols]` array, `w = scale * code + bias` per group rounded after
/// the product and after the sum (as MLX's `dequantize` does: the same bits), in memory the
/// array owns. The caller has checked [`super::handles_rows`] for any row count.
pub fn dequantize(p: Packed<'_>) -> Result<Array> {
    let weight = affine(p)?;
    let mut out = vec![0f32; weight.features * weight.cols];
    let avx2 = has_fma();
    let groups = weight.cols / weight.group_size;
    out.par_chunks_mut(weight.cols * FEATURES_PER_TASK)
        .enumerate()
        .for_each(|(task, chunk)| {
            let first = task * FEATURES_PER_TASK;
            let features = chunk.len() / weight.cols;
            let mut widened = Widened::take();
            let range = first * groups..(first + features) * groups;
            let (scales, biases) = widened.read(weight.scales, weight.biases, range);
            for (i, row) in chunk.chunks_exact_mut(weight.cols).enumerate() {
                let side = (
                    &scales[i * groups..(i + 1) * groups],
                    &biases[i * groups..(i + 1) * groups],
                );
                if avx2 {
                    // SAFETY: `has_fma` checked that the processor has AVX2.
                    unsafe { weight.dequantize_avx2(first + i, side, row) };
                } else {
                    weight.dequantize_bits(first + i, side, row);
                }
            }
            widened.give_back();
        });
    crate::owned::f32_array(out, &[weight.features as i32, weight.cols as i32])
}

impl Affine<'_> {
    /// [`Affine::dequantize_bits`] compiled for AVX2 (wider vectors, the same values: no FMA).
    #[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx2"))]
    unsafe fn dequantize_avx2(&self, n: usize, side: (&[f32], &[f32]), row: &mut [f32]) {
        self.dequantize_bits(n, side, row);
    }

    #[inline(always)]
    fn dequantize_bits(&self, n: usize, side: (&[f32], &[f32]), row: &mut [f32]) {
        match self.bits {
            2 => self.dequantize_row::<2>(n, side, row),
            3 => self.dequantize_row::<3>(n, side, row),
            4 => self.dequantize_row::<4>(n, side, row),
            5 => self.dequantize_row::<5>(n, side, row),
            6 => self.dequantize_row::<6>(n, side, row),
            _ => self.dequantize_row::<8>(n, side, row),
        }
    }

    /// Feature `n`'s weights into `row` (`cols` floats), with its `(scales, biases)`. Codes are
    /// the little-endian bit stream of [`Affine::feature`]; 4 and 8 bits take whole bytes.
    #[inline(always)]
    fn dequantize_row<const BITS: usize>(
        &self,
        n: usize,
        (scales, biases): (&[f32], &[f32]),
        row: &mut [f32],
    ) {
        let row_bytes = self.cols * BITS / 8;
        let codes = &super::code_bytes(self.codes)[n * row_bytes..(n + 1) * row_bytes];
        for (g, out) in row.chunks_exact_mut(self.group_size).enumerate() {
            let (scale, bias) = (scales[g], biases[g]);
            let bytes =
                &codes[g * self.group_size * BITS / 8..(g + 1) * self.group_size * BITS / 8];
            match BITS {
                8 => {
                    for (o, &b) in out.iter_mut().zip(bytes) {
                        *o = f32::from(b) * scale + bias;
                    }
                }
                4 => {
                    for (o, &b) in out.chunks_exact_mut(2).zip(bytes) {
                        o[0] = f32::from(b & 15) * scale + bias;
                        o[1] = f32::from(b >> 4) * scale + bias;
                    }
                }
                _ => {
                    // 8 codes in every BITS bytes
                    let mask = (1u32 << BITS) - 1;
                    for (o, b) in out.chunks_exact_mut(8).zip(bytes.chunks_exact(BITS)) {
                        let mut stream = 0u64;
                        for (i, &byte) in b.iter().enumerate() {
                            stream |= u64::from(byte) << (8 * i);
                        }
                        for (j, v) in o.iter_mut().enumerate() {
                            let code = ((stream >> (j * BITS)) as u32) & mask;
                            *v = code as f32 * scale + bias;
                        }
                    }
                }
            }
        }
    }
}
