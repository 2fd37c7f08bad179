//! A quantized matmul for few rows on the CPU, computed on the host straight from MLX's
//! packed affine layout.
//!
//! MLX's CPU `quantized_matmul` unpacks the whole weight once per row of `x` on one thread
//! (about 1.5 GMAC/s), so a decode step costs the same per stream however many streams share
//! it. This kernel unpacks each group once for all rows and splits the output features over
//! the rayon pool. For 4 and 8 bits on x86_64 (AVX2 intrinsics) it sums in the factored form
//! `scale * (codes . x) + bias * sum(x)` per block of 32 columns, so the codes go straight from
//! integers to products; the other widths dequantize first (portable 8-lane code). Each row's
//! sum runs in the same order whatever the number of rows, so a row's result does not depend
//! on what it is batched with.
//!
//! It evaluates `x` to read it, so it is only for inference: [`crate::quant`] uses it while a
//! [`crate::quant::host_products`] guard is alive and no `training_products` guard is
//! (a differentiated graph must not be cut).
use mlx_rs::{Array, Dtype};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::qmm::{Mode, Packed};

mod dequant;
pub use dequant::dequantize;

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
    x.dtype() == Dtype::Float32 && handles_rows(p, rows)
}

/// Whether the kernel handles `rows` float32 rows times this weight (see [`handles`]).
pub fn handles_rows(p: &Packed<'_>, rows: usize) -> bool {
    dequantizes(p) && rows <= max_rows(p.bits)
}

/// Whether [`dequantize`] reads this weight: affine codes of 2 to 6 or 8 bits in groups of a
/// multiple of 32, float32 scales and biases, 2-D, on a little-endian processor.
pub fn dequantizes(p: &Packed<'_>) -> bool {
    cfg!(target_endian = "little")
        && p.mode == Mode::Affine
        && matches!(p.bits, 2..=6 | 8)
        && p.group_size > 0
        && p.group_size % 32 == 0
        && p.w.ndim() == 2
        && p.scales.dtype() == Dtype::Float32
        && p.biases.is_some_and(|b| b.dtype() == Dtype::Float32)
}

/// `x @ W^T` for `x [..., cols]`; the caller has checked [`handles`].
pub fn matmul(x: &Array, p: Packed<'_>) -> Result<Array> {
    let shape = x.shape().to_vec();
    let cols = shape.last().copied().unwrap_or(0) as usize;
    if x.dtype() != Dtype::Float32 {
        return Err(host_error(format!(
            "x is {:?}, the kernel takes float32",
            x.dtype()
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
    let out = matmul_rows(xs, rows, p)?;
    let mut out_shape = shape;
    if let Some(last) = out_shape.last_mut() {
        *last = (out.len() / rows.max(1)) as i32;
    }
    Ok(Array::from_slice(&out, &out_shape))
}

/// `x @ W^T` for `rows` row-major rows of `x` on the host, row-major `[rows, features]`; the
/// caller has checked [`handles_rows`].
pub fn matmul_rows(xs: &[f32], rows: usize, p: Packed<'_>) -> Result<Vec<f32>> {
    let weight = affine(p)?;
    if xs.len() != rows * weight.cols {
        return Err(host_error(format!(
            "x holds {} floats, not {rows} rows of the weight's {} columns",
            xs.len(),
            weight.cols
        )));
    }
    let by_feature = weight.multiply(xs, rows);
    if rows == 1 {
        return Ok(by_feature);
    }
    let mut out = vec![0f32; rows * weight.features];
    for (n, values) in by_feature.chunks_exact(rows.max(1)).enumerate() {
        for (r, v) in values.iter().enumerate() {
            out[r * weight.features + n] = *v;
        }
    }
    Ok(out)
}

/// The packed weight's host slices, checked against its shape (the operands must be evaluated).
fn affine(p: Packed<'_>) -> Result<Affine<'_>> {
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
    Ok(weight)
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
        let avx2 = avx2::handles(self.bits, self.group_size, rows);
        let prepared = if avx2 {
            avx2::Rows::new(x, rows, self.cols, self.bits)
        } else {
            avx2::Rows::default()
        };
        let task = |(task, chunk): (usize, &mut [f32])| {
            let first = task * FEATURES_PER_TASK;
            if avx2 {
                // one row reads the codes as it widens them; several share them widened once
                let mut codes = Vec::with_capacity(if rows > 1 { self.cols / 8 } else { 0 });
                for (i, out_row) in chunk.chunks_exact_mut(rows).enumerate() {
                    // SAFETY: `avx2::handles` checked the processor and the operands, and
                    // `prepared` holds `rows` rows of `x`.
                    unsafe { avx2::feature(self, first + i, &prepared, out_row, &mut codes) };
                }
                return;
            }
            let mut lanes = vec![[0f32; LANES]; rows];
            for (i, out_row) in chunk.chunks_exact_mut(rows).enumerate() {
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
        };
        out.par_chunks_mut(FEATURES_PER_TASK * rows)
            .enumerate()
            .for_each(task);
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

/// The 4- and 8-bit kernel with AVX2 intrinsics, in the factored form
/// `sum_g scale_g * (q_g . x_g) + bias_g * sum(x_g)` over blocks `g` of 32 columns: the codes
/// are widened to float32 (exact) and multiplied into the row directly, and the bias term comes
/// from each block's sum of `x`, computed once per product.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;
    use std::array::from_fn;

    use super::{Affine, MAX_ROWS};

    /// Rows that read a block's widened codes together (8 streams of the default model: 142-151
    /// tok/s with 8, 131-135 with 6, 134 with 4, 127 with 3, 101 with each row alone).
    const ROWS_TOGETHER: usize = 8;

    pub(super) fn handles(bits: usize, group_size: usize, rows: usize) -> bool {
        matches!(bits, 4 | 8)
            && (group_size / 32).is_power_of_two()
            && rows <= MAX_ROWS
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
    }

    /// The rows of `x` as the kernel reads them: each block of 32 columns in the order its
    /// codes widen to (for 4 bits the even columns, then the odd ones: a byte's low nibble is
    /// the even code), and each block's sum.
    #[derive(Default)]
    pub(super) struct Rows {
        x: Vec<f32>,
        sums: Vec<f32>,
    }

    impl Rows {
        pub(super) fn new(x: &[f32], rows: usize, cols: usize, bits: usize) -> Rows {
            let mut out = Rows {
                x: Vec::with_capacity(rows * cols),
                sums: Vec::with_capacity(rows * cols / 32),
            };
            for block in x[..rows * cols].chunks_exact(32) {
                if bits == 4 {
                    out.x.extend(block.iter().step_by(2));
                    out.x.extend(block.iter().skip(1).step_by(2));
                } else {
                    out.x.extend_from_slice(block);
                }
                let mut lanes = [0f32; 8];
                for part in block.chunks_exact(8) {
                    for (l, v) in lanes.iter_mut().zip(part) {
                        *l += v;
                    }
                }
                out.sums.push(super::sum_lanes(&lanes));
            }
            out
        }
    }

    /// Feature `n` of `w` times each prepared row into `out[row]`. One row widens the codes as
    /// it goes; several widen them once into `codes` and each row reads them there, with the
    /// same arithmetic in the same order, so a row's result does not depend on its batch.
    ///
    /// # Safety
    /// The processor has AVX2 and FMA; `w.bits` is 4 or 8; `x` holds `out.len()` rows of
    /// `w.cols`; `out.len() <= MAX_ROWS`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn feature(
        w: &Affine<'_>,
        n: usize,
        x: &Rows,
        out: &mut [f32],
        codes: &mut Vec<__m256>,
    ) {
        let cols = w.cols;
        let blocks = cols / 32;
        let groups = cols / w.group_size;
        let block_words = w.bits; // 32 codes of `bits` bits are `bits` words
        let words = &w.codes[n * blocks * block_words..(n + 1) * blocks * block_words];
        let scales = &w.scales[n * groups..(n + 1) * groups];
        let biases = &w.biases[n * groups..(n + 1) * groups];
        // groups of 32, 64 or 128 columns: block `b`'s group is `b >> shift`
        let shift = (w.group_size / 32).trailing_zeros();
        let row = |r: usize| Row {
            x: &x.x[r * cols..(r + 1) * cols],
            sums: &x.sums[r * blocks..(r + 1) * blocks],
            scales,
            biases,
            shift,
        };
        if out.len() == 1 {
            // SAFETY: AVX2 and FMA; each block's `bits` words are within the feature's codes.
            out[0] = unsafe { dots([row(0)], |b| widen(&words[b * block_words..], w.bits)) }[0];
            return;
        }
        codes.clear();
        for b in 0..blocks {
            // SAFETY: as above.
            codes.extend(unsafe { widen(&words[b * block_words..], w.bits) });
        }
        let stored = |b: usize| {
            [
                codes[4 * b],
                codes[4 * b + 1],
                codes[4 * b + 2],
                codes[4 * b + 3],
            ]
        };
        // rows several at a time (ROWS_TOGETHER, else 4, else what is left): a block's codes
        // are read once for all of them
        let mut r = 0;
        while r < out.len() {
            let take = match out.len() - r {
                n if n >= ROWS_TOGETHER => ROWS_TOGETHER,
                n if n >= 4 => 4,
                n => n,
            };
            let part = &mut out[r..r + take];
            let rows = |i| row(r + i);
            // SAFETY: AVX2 and FMA; `codes` holds 4 vectors per block.
            unsafe {
                match take {
                    1 => part.copy_from_slice(&dots([row(r)], stored)),
                    2 => part.copy_from_slice(&dots(from_fn::<_, 2, _>(rows), stored)),
                    3 => part.copy_from_slice(&dots(from_fn::<_, 3, _>(rows), stored)),
                    4 => part.copy_from_slice(&dots(from_fn::<_, 4, _>(rows), stored)),
                    _ => part.copy_from_slice(&dots(from_fn::<_, ROWS_TOGETHER, _>(rows), stored)),
                }
            }
            r += take;
        }
    }

    /// A block's 32 codes as four vectors of float32, in the order [`Rows`] lays `x` out.
    ///
    /// # Safety
    /// AVX2; `words` holds at least `bits` words.
    #[target_feature(enable = "avx2,fma")]
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

    /// One prepared row of `x` against one feature's scales and biases.
    struct Row<'a> {
        x: &'a [f32],
        sums: &'a [f32],
        scales: &'a [f32],
        biases: &'a [f32],
        shift: u32,
    }

    /// For each of `R` rows, `sum_b scale * (q_b . x_b) + bias * sum(x_b)` over its blocks, `q(b)`
    /// giving block `b`'s codes (read once for the `R` rows): per row two vector chains (even
    /// and odd blocks) for the code products and two scalar ones for the bias terms, added at
    /// the end. A row's arithmetic is the same whatever `R`, so its result does not depend on
    /// the rows beside it.
    ///
    /// # Safety
    /// AVX2 and FMA; `q(b)` is safe to call for every block; the rows have as many blocks.
    #[target_feature(enable = "avx2,fma")]
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
        let mut b = 0;
        while b < blocks {
            let g = b >> first.shift;
            let codes = q(b);
            let scale = _mm256_set1_ps(first.scales[g]);
            let bias = first.biases[g];
            for r in 0..R {
                // SAFETY: block `b` is within every row.
                let d = unsafe { rows[r].block(&codes, b) };
                if b % 2 == 0 {
                    even[r] = _mm256_fmadd_ps(d, scale, even[r]);
                    even_bias[r] = bias.mul_add(rows[r].sums[b], even_bias[r]);
                } else {
                    odd[r] = _mm256_fmadd_ps(d, scale, odd[r]);
                    odd_bias[r] = bias.mul_add(rows[r].sums[b], odd_bias[r]);
                }
            }
            b += 1;
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

    impl Row<'_> {
        /// `q . x` over block `b`, as 8 lanes.
        ///
        /// # Safety
        /// AVX2 and FMA; block `b` is within the row.
        #[target_feature(enable = "avx2,fma")]
        #[inline]
        unsafe fn block(&self, q: &[__m256; 4], b: usize) -> __m256 {
            let at = self.x[b * 32..b * 32 + 32].as_ptr();
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
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod avx2 {
    use super::Affine;

    pub(super) fn handles(_bits: usize, _group_size: usize, _rows: usize) -> bool {
        false
    }

    #[derive(Default)]
    pub(super) struct Rows;

    impl Rows {
        pub(super) fn new(_: &[f32], _: usize, _: usize, _: usize) -> Rows {
            Rows
        }
    }

    pub(super) unsafe fn feature(
        _: &Affine<'_>,
        _: usize,
        _: &Rows,
        _: &mut [f32],
        _: &mut Vec<()>,
    ) {
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
