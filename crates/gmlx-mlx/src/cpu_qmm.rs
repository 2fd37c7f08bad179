//! A quantized matmul for few rows on the CPU, computed on the host straight from MLX's
//! packed affine layout.
//!
//! MLX's CPU `quantized_matmul` unpacks the whole weight once per row of `x` on one thread
//! (about 1.5 GMAC/s), so a decode step costs the same per stream however many streams share
//! it. This kernel unpacks each group once for all rows (AVX2 intrinsics for 4 and 8 bits on
//! x86_64, portable 8-lane code otherwise) and splits the output features over the rayon
//! pool. Each row's sum runs in the same order whatever the number of rows, so a
//! row's result does not depend on what it is batched with.
//!
//! It evaluates `x` to read it, so it is only for inference: [`crate::quant`] uses it while a
//! [`crate::quant::host_products`] guard is alive and no `training_products` guard is
//! (a differentiated graph must not be cut).
use mlx_rs::{Array, Dtype};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::qmm::{Mode, Packed};

/// Rows of `x` up to which this kernel beats dequantize-then-BLAS for 2, 4 and 8 bits
/// (`benches/qmm.rs`).
pub const MAX_ROWS: usize = 24;
/// The same for 3, 5 and 6 bits, whose MLX dequantization is 4x slower: at 128 rows of a
/// 1536 x 576 5-bit matrix, 5.7 ms here against 10.4 ms.
pub const MAX_ROWS_ODD_BITS: usize = 128;

/// Rows of `x` up to which this kernel is used for `bits`-bit codes.
pub fn max_rows(bits: i32) -> usize {
    match bits {
        3 | 5 | 6 => MAX_ROWS_ODD_BITS,
        _ => MAX_ROWS,
    }
}

const LANES: usize = 8;
/// Output features per rayon task.
const FEATURES_PER_TASK: usize = 32;

/// Whether the kernel handles this product: float32 activations and scales, affine codes of
/// 2 to 6 or 8 bits, a 2-D weight, at most [`max_rows`] rows, a little-endian processor.
pub fn handles(x: &Array, p: &Packed<'_>, rows: usize) -> bool {
    cfg!(target_endian = "little")
        && p.mode == Mode::Affine
        && matches!(p.bits, 2..=6 | 8)
        && p.group_size % 32 == 0
        && p.w.ndim() == 2
        && x.dtype() == Dtype::Float32
        && p.scales.dtype() == Dtype::Float32
        && p.biases.is_some_and(|b| b.dtype() == Dtype::Float32)
        && rows <= max_rows(p.bits)
}

/// `x @ W^T` for `x [..., cols]`; the caller has checked [`handles`].
pub fn matmul(x: &Array, p: Packed<'_>) -> Result<Array> {
    let biases = p
        .biases
        .ok_or_else(|| host_error("affine weight without biases"))?;
    let weight = Affine {
        codes: p.w.try_as_slice::<u32>().map_err(host_error)?,
        scales: p.scales.try_as_slice::<f32>().map_err(host_error)?,
        biases: biases.try_as_slice::<f32>().map_err(host_error)?,
        bits: p.bits as usize,
        group_size: p.group_size as usize,
        cols: p.scales.shape()[1] as usize * p.group_size as usize,
        features: p.w.shape()[0] as usize,
    };
    let groups = weight.cols / weight.group_size.max(1);
    if weight.codes.len() * 32 != weight.features * weight.cols * weight.bits
        || weight.scales.len() != weight.features * groups
        || weight.biases.len() != weight.scales.len()
    {
        return Err(host_error(format!(
            "packed weight of {} words and {} scales does not hold {} x {} {}-bit codes",
            weight.codes.len(),
            weight.scales.len(),
            weight.features,
            weight.cols,
            weight.bits
        )));
    }
    let shape = x.shape().to_vec();
    let cols = shape.last().copied().unwrap_or(0) as usize;
    if cols != weight.cols || x.dtype() != Dtype::Float32 {
        return Err(host_error(format!(
            "x is {:?} with {cols} columns, the weight takes float32 with {}",
            x.dtype(),
            weight.cols
        )));
    }
    // a strided view is copied to row-major first
    let contiguous;
    let xs = match x.try_as_slice::<f32>() {
        Ok(xs) => xs,
        Err(_) => {
            contiguous = x.contiguous()?;
            contiguous.try_as_slice::<f32>().map_err(host_error)?
        }
    };
    let rows = xs.len() / cols.max(1);
    let by_feature = weight.multiply(xs, rows);
    let mut out = vec![0f32; rows * weight.features];
    for (n, values) in by_feature.chunks_exact(rows.max(1)).enumerate() {
        for (r, v) in values.iter().enumerate() {
            out[r * weight.features + n] = *v;
        }
    }
    let mut out_shape = shape;
    if let Some(last) = out_shape.last_mut() {
        *last = weight.features as i32;
    }
    Ok(Array::from_slice(&out, &out_shape))
}

fn host_error(e: impl std::fmt::Display) -> Error {
    Error::HostKernel {
        reason: e.to_string(),
    }
}

/// A borrowed affine matrix `[features, cols]`: `w = scale * code + bias` per group.
struct Affine<'a> {
    codes: &'a [u32],
    scales: &'a [f32],
    biases: &'a [f32],
    bits: usize,
    group_size: usize,
    cols: usize,
    features: usize,
}

impl Affine<'_> {
    /// `x [rows, cols] @ W^T`, laid out feature-major: `[features, rows]`.
    fn multiply(&self, x: &[f32], rows: usize) -> Vec<f32> {
        let mut out = vec![0f32; self.features * rows];
        if rows == 0 {
            return out;
        }
        let fma = has_fma();
        let avx2 = avx2::handles(self.bits, rows);
        out.par_chunks_mut(FEATURES_PER_TASK * rows)
            .enumerate()
            .for_each(|(task, chunk)| {
                let first = task * FEATURES_PER_TASK;
                let mut lanes = vec![[0f32; LANES]; rows];
                for (i, out_row) in chunk.chunks_exact_mut(rows).enumerate() {
                    if avx2 {
                        // SAFETY: `avx2::handles` checked the processor and the operands.
                        unsafe { avx2::feature(self, first + i, x, out_row) };
                        continue;
                    }
                    if fma {
                        // SAFETY: `has_fma` checked that the processor has AVX2 and FMA.
                        unsafe { self.feature_fma(first + i, x, &mut lanes) };
                    } else {
                        self.feature_plain(first + i, x, &mut lanes);
                    }
                    for (o, l) in out_row.iter_mut().zip(&lanes) {
                        *o = sum_lanes(l);
                    }
                }
            });
        out
    }

    #[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx2,fma"))]
    unsafe fn feature_fma(&self, n: usize, x: &[f32], lanes: &mut [[f32; LANES]]) {
        self.feature_bits::<true>(n, x, lanes);
    }

    fn feature_plain(&self, n: usize, x: &[f32], lanes: &mut [[f32; LANES]]) {
        self.feature_bits::<false>(n, x, lanes);
    }

    #[inline(always)]
    fn feature_bits<const FMA: bool>(&self, n: usize, x: &[f32], lanes: &mut [[f32; LANES]]) {
        match self.bits {
            2 => self.feature::<FMA, 2>(n, x, lanes),
            3 => self.feature::<FMA, 3>(n, x, lanes),
            4 => self.feature::<FMA, 4>(n, x, lanes),
            5 => self.feature::<FMA, 5>(n, x, lanes),
            6 => self.feature::<FMA, 6>(n, x, lanes),
            _ => self.feature::<FMA, 8>(n, x, lanes),
        }
    }

    /// Accumulates feature `n`'s dot product with every row of `x` into `lanes[row]`. A row's
    /// codes are one little-endian bit stream, code `j` at bit `j * BITS` (MLX packs 2, 4
    /// and 8 bits per `u32` low bits first, and 3, 5 and 6 bits 8 codes per `BITS` bytes:
    /// the same stream).
    #[inline(always)]
    fn feature<const FMA: bool, const BITS: usize>(
        &self,
        n: usize,
        x: &[f32],
        lanes: &mut [[f32; LANES]],
    ) {
        for l in lanes.iter_mut() {
            *l = [0.0; LANES];
        }
        let mask = (1u16 << BITS) - 1;
        let groups = self.cols / self.group_size;
        let row_bytes = self.cols * BITS / 8;
        let codes = &code_bytes(self.codes)[n * row_bytes..(n + 1) * row_bytes];
        let scales = &self.scales[n * groups..(n + 1) * groups];
        let biases = &self.biases[n * groups..(n + 1) * groups];
        let mut w = [0f32; 32];
        // one block's 4 * BITS bytes, and a zero byte so the last code reads two bytes
        let mut block = [0u8; 33];
        for start in (0..self.cols).step_by(32) {
            let g = start / self.group_size;
            let (scale, bias) = (scales[g], biases[g]);
            let at = start * BITS / 8;
            block[..4 * BITS].copy_from_slice(&codes[at..at + 4 * BITS]);
            for (j, v) in w.iter_mut().enumerate() {
                let bit = j * BITS;
                let pair = u16::from_le_bytes([block[bit / 8], block[bit / 8 + 1]]);
                let code = (pair >> (bit % 8)) & mask;
                *v = mul_add::<FMA>(f32::from(code), scale, bias);
            }
            for (r, acc) in lanes.iter_mut().enumerate() {
                let xr = &x[r * self.cols + start..r * self.cols + start + 32];
                for c in 0..32 / LANES {
                    for l in 0..LANES {
                        acc[l] = mul_add::<FMA>(w[c * LANES + l], xr[c * LANES + l], acc[l]);
                    }
                }
            }
        }
    }
}

/// The packed codes as bytes, in memory order (the kernel reads them little-endian; see
/// [`handles`]).
fn code_bytes(codes: &[u32]) -> &[u8] {
    // SAFETY: any u32 is 4 valid bytes, u8 has alignment 1, and the length is exact.
    unsafe { std::slice::from_raw_parts(codes.as_ptr().cast::<u8>(), std::mem::size_of_val(codes)) }
}

#[inline(always)]
fn mul_add<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

fn sum_lanes(l: &[f32; LANES]) -> f32 {
    ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]))
}

/// The 4- and 8-bit kernel with AVX2 intrinsics: a group's codes are widened to float32 8 at
/// a time (variable shifts for nibbles, a zero-extending load for bytes), dequantized with one
/// FMA, then multiplied into 4 independent accumulators per row.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Affine, MAX_ROWS};

    /// Vectors of 8 per 32 columns.
    const VECTORS: usize = 4;
    /// Columns dequantized at a time: 8 KiB of float32, well inside L1 with a few rows.
    const SPAN: usize = 512;

    pub(super) fn handles(bits: usize, rows: usize) -> bool {
        matches!(bits, 4 | 8)
            && rows <= MAX_ROWS
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
    }

    /// Feature `n` of `w` times each row of `x` into `out[row]`. Columns go in spans of
    /// [`SPAN`]: a span's weights are dequantized once into a buffer, then each pair of rows
    /// runs over it with its accumulators in registers.
    ///
    /// # Safety
    /// The processor has AVX2 and FMA; `w.bits` is 4 or 8; `x` holds `out.len()` rows of
    /// `w.cols`; `out.len() <= MAX_ROWS`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn feature(w: &Affine<'_>, n: usize, x: &[f32], out: &mut [f32]) {
        let rows = out.len();
        let cols = w.cols;
        let per_word = 32 / w.bits;
        let groups = cols / w.group_size;
        let codes = &w.codes[n * cols / per_word..(n + 1) * cols / per_word];
        let mut acc = [[_mm256_setzero_ps(); VECTORS]; MAX_ROWS];
        let nibble_shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
        let nibble_mask = _mm256_set1_epi32(0xF);
        let mut weights = [_mm256_setzero_ps(); SPAN / 8];
        for span in (0..cols).step_by(SPAN) {
            let len = SPAN.min(cols - span);
            for block in (0..len).step_by(32) {
                let start = span + block;
                let g = n * groups + start / w.group_size;
                let scale = _mm256_set1_ps(w.scales[g]);
                let bias = _mm256_set1_ps(w.biases[g]);
                let words = &codes[start / per_word..(start + 32) / per_word];
                for v in 0..VECTORS {
                    let q = if w.bits == 4 {
                        let word = _mm256_set1_epi32(words[v] as i32);
                        _mm256_and_si256(_mm256_srlv_epi32(word, nibble_shifts), nibble_mask)
                    } else {
                        // 8 bytes: words 2v and 2v + 1, lowest byte first
                        let bytes = words[2 * v..2 * v + 2].as_ptr().cast::<__m128i>();
                        // SAFETY: the two words are 8 readable bytes.
                        _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(bytes) })
                    };
                    weights[block / 8 + v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), scale, bias);
                }
            }
            let weights = &weights[..len / 8];
            let mut r = 0;
            while r + 2 <= rows {
                let (first, second) = acc[r..r + 2].split_at_mut(1);
                // SAFETY: both rows have `len` floats from `span`.
                unsafe {
                    accumulate_pair(
                        weights,
                        &x[r * cols + span..],
                        &x[(r + 1) * cols + span..],
                        &mut first[0],
                        &mut second[0],
                    )
                };
                r += 2;
            }
            if r < rows {
                // SAFETY: the row has `len` floats from `span`.
                unsafe { accumulate_one(weights, &x[r * cols + span..], &mut acc[r]) };
            }
        }
        for (o, acc) in out.iter_mut().zip(&acc) {
            let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
            let half = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
            let quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
            let one = _mm_add_ss(quarter, _mm_shuffle_ps(quarter, quarter, 1));
            *o = _mm_cvtss_f32(one);
        }
    }
    /// `acc0 += weights . x0`, `acc1 += weights . x1`, 32 columns at a time.
    ///
    /// # Safety
    /// AVX2 and FMA; `x0` and `x1` have at least `8 * weights.len()` floats.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn accumulate_pair(
        weights: &[__m256],
        x0: &[f32],
        x1: &[f32],
        acc0: &mut [__m256; VECTORS],
        acc1: &mut [__m256; VECTORS],
    ) {
        let (mut a0, mut a1) = (*acc0, *acc1);
        for (b, w) in weights.chunks_exact(VECTORS).enumerate() {
            for v in 0..VECTORS {
                let at = b * 32 + v * 8;
                // SAFETY: `at + 8 <= 8 * weights.len()`, within both rows.
                let (p, q) = unsafe {
                    (
                        _mm256_loadu_ps(x0.as_ptr().add(at)),
                        _mm256_loadu_ps(x1.as_ptr().add(at)),
                    )
                };
                a0[v] = _mm256_fmadd_ps(w[v], p, a0[v]);
                a1[v] = _mm256_fmadd_ps(w[v], q, a1[v]);
            }
        }
        (*acc0, *acc1) = (a0, a1);
    }

    /// `acc += weights . x`, in the same order per row as [`accumulate_pair`].
    ///
    /// # Safety
    /// AVX2 and FMA; `x` has at least `8 * weights.len()` floats.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn accumulate_one(weights: &[__m256], x: &[f32], acc: &mut [__m256; VECTORS]) {
        let mut a = *acc;
        for (b, w) in weights.chunks_exact(VECTORS).enumerate() {
            for v in 0..VECTORS {
                // SAFETY: as in `accumulate_pair`.
                let p = unsafe { _mm256_loadu_ps(x.as_ptr().add(b * 32 + v * 8)) };
                a[v] = _mm256_fmadd_ps(w[v], p, a[v]);
            }
        }
        *acc = a;
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod avx2 {
    use super::Affine;

    pub(super) fn handles(_bits: usize, _rows: usize) -> bool {
        false
    }

    pub(super) unsafe fn feature(_: &Affine<'_>, _: usize, _: &[f32], _: &mut [f32]) {
        unreachable!("no AVX2 off x86_64")
    }
}

fn has_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // aarch64 always has fused multiply-add
        cfg!(target_arch = "aarch64")
    }
}
