//! A quantized matmul for few rows on the CPU, computed on the host straight from MLX's
//! packed affine layout.
//!
//! MLX's CPU `quantized_matmul` unpacks the whole weight once per row of `x` on one thread
//! (about 1.5 GMAC/s), so a decode step costs the same per stream however many streams share
//! it. This kernel unpacks each group once for all rows and splits the output features over
//! the rayon pool. For 4 and 8 bits on x86_64 (AVX-512 or AVX2 intrinsics, [`Kernel`]) it sums
//! `(scale * codes) . x` per block of 32 columns and `bias * sum(x)` per group, so the codes go
//! straight from integers to products, and prefetches the codes ahead of the loads;
//! the other widths dequantize first (portable 8-lane code). Each row's sum runs in the same
//! order whatever the number of rows, so a row's result does not depend on what it is
//! batched with.
//!
//! It evaluates `x` to read it, so it is only for inference: [`crate::quant`] uses it while a
//! [`crate::quant::host_products`] guard is alive and no `training_products` guard is
//! (a differentiated graph must not be cut).
use mlx_rs::{Array, Dtype};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::qmm::{Mode, Packed};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod dequant;
mod side;
mod simd;

pub use dequant::dequantize;
use side::{Side, Widened};

/// One feature's scales and biases as float32.
type Side32<'a> = (&'a [f32], &'a [f32]);
use simd::{reads as simd_reads, Rows as Prepared};

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

/// The code the kernel runs for 4- and 8-bit codes in groups of a multiple of 32 (other widths
/// always run the portable loop). Each gives a row the same result whatever its batch; the
/// kernels differ from one another in summation order only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// 16 float32 lanes (x86_64 with AVX-512F).
    Avx512,
    /// 8 float32 lanes (x86_64 with AVX2 and FMA).
    Avx2,
    /// Dequantize each block, then multiply (any processor).
    Portable,
}

impl Kernel {
    /// Every kernel, widest first.
    pub const ALL: [Kernel; 3] = [Kernel::Avx512, Kernel::Avx2, Kernel::Portable];

    /// Whether this processor runs the kernel.
    pub fn available(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => avx512::available(),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => avx2::available(),
            Kernel::Portable => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The kernel products use: the widest this processor runs, or the one
    /// `GMLX_HOST_KERNEL` names (`avx512`, `avx2`, `portable`) where it runs (to compare them
    /// in one benchmark). Read once per process.
    pub fn chosen() -> Kernel {
        static CHOSEN: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        *CHOSEN.get_or_init(|| {
            let named = std::env::var("GMLX_HOST_KERNEL").ok().and_then(|v| {
                Kernel::ALL
                    .into_iter()
                    .find(|k| k.name().eq_ignore_ascii_case(v.trim()))
            });
            named
                .filter(|k| k.available())
                .or_else(|| Kernel::ALL.into_iter().find(|k| k.available()))
                .unwrap_or(Kernel::Portable)
        })
    }

    /// The kernel's name, as `GMLX_HOST_KERNEL` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Avx512 => "avx512",
            Kernel::Avx2 => "avx2",
            Kernel::Portable => "portable",
        }
    }
}

/// Whether the kernel handles this product: float32 activations, float32 or float16 scales,
/// affine codes of 2 to 6 or 8 bits, a 2-D weight, at most [`max_rows`] rows, a little-endian
/// processor.
pub fn handles(x: &Array, p: &Packed<'_>, rows: usize) -> bool {
    x.dtype() == Dtype::Float32 && handles_rows(p, rows)
}

/// Whether the kernel handles `rows` float32 rows times this weight (see [`handles`]).
pub fn handles_rows(p: &Packed<'_>, rows: usize) -> bool {
    dequantizes(p) && rows <= max_rows(p.bits)
}

/// Whether [`dequantize`] reads this weight: affine codes of 2 to 6 or 8 bits in groups of a
/// multiple of 32, float32 or float16 scales and biases (one dtype: the result is float32
/// either way), 2-D, on a little-endian processor.
pub fn dequantizes(p: &Packed<'_>) -> bool {
    cfg!(target_endian = "little")
        && p.mode == Mode::Affine
        && matches!(p.bits, 2..=6 | 8)
        && p.group_size > 0
        && p.group_size % 32 == 0
        && p.w.ndim() == 2
        && Side::reads(p.scales.dtype())
        && p.biases.is_some_and(|b| b.dtype() == p.scales.dtype())
}

/// `x @ W^T` for `x [..., cols]` with [`Kernel::chosen`]; the caller has checked [`handles`].
pub fn matmul(x: &Array, p: Packed<'_>) -> Result<Array> {
    matmul_with(x, p, Kernel::chosen())
}

/// [`matmul`] with the given kernel (an error where the processor does not run it).
pub fn matmul_with(x: &Array, p: Packed<'_>, kernel: Kernel) -> Result<Array> {
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
    let out = matmul_rows_with(xs, rows, p, kernel)?;
    let mut out_shape = shape;
    if let Some(last) = out_shape.last_mut() {
        *last = (out.len() / rows.max(1)) as i32;
    }
    Ok(Array::from_slice(&out, &out_shape))
}

/// `x @ W^T` for `rows` row-major rows of `x` on the host, row-major `[rows, features]`; the
/// caller has checked [`handles_rows`]. With [`Kernel::chosen`].
pub fn matmul_rows(xs: &[f32], rows: usize, p: Packed<'_>) -> Result<Vec<f32>> {
    matmul_rows_with(xs, rows, p, Kernel::chosen())
}

/// [`matmul_rows`] with the given kernel (an error where the processor does not run it).
pub fn matmul_rows_with(
    xs: &[f32],
    rows: usize,
    p: Packed<'_>,
    kernel: Kernel,
) -> Result<Vec<f32>> {
    if !kernel.available() {
        return Err(host_error(format!(
            "this processor does not run the {} kernel",
            kernel.name()
        )));
    }
    let weight = affine(p)?;
    if xs.len() != rows * weight.cols {
        return Err(host_error(format!(
            "x holds {} floats, not {rows} rows of the weight's {} columns",
            xs.len(),
            weight.cols
        )));
    }
    Ok(weight.multiply(xs, rows, kernel))
}

/// The packed weight's host slices, checked against its shape (the operands must be evaluated).
fn affine(p: Packed<'_>) -> Result<Affine<'_>> {
    let biases = p
        .biases
        .ok_or_else(|| host_error("affine weight without biases"))?;
    let weight = Affine {
        codes: p.w.try_as_slice::<u32>().map_err(host_error)?,
        scales: Side::of(p.scales)?,
        biases: Side::of(biases)?,
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

/// The output rows as the pool's tasks store into them, each its own features.
struct OutputRows(*mut f32);

// SAFETY: the tasks write disjoint elements of one live buffer (see `Affine::multiply`).
unsafe impl Send for OutputRows {}
// SAFETY: as above.
unsafe impl Sync for OutputRows {}

impl OutputRows {
    /// # Safety
    /// `i` is within the buffer, and no other thread reads or writes element `i` meanwhile.
    unsafe fn write(&self, i: usize, v: f32) {
        // SAFETY: as the caller promised.
        unsafe { self.0.add(i).write(v) }
    }
}

/// A borrowed affine matrix `[features, cols]`: `w = scale * code + bias` per group.
struct Affine<'a> {
    codes: &'a [u32],
    scales: Side<'a>,
    biases: Side<'a>,
    bits: usize,
    group_size: usize,
    cols: usize,
    features: usize,
}

impl Affine<'_> {
    /// `x [rows, cols] @ W^T`, row-major `[rows, features]`: each task computes its features
    /// for every row (feature-major, as the kernels write them) and stores them into the rows
    /// itself, so no pass over the whole output follows on one thread.
    fn multiply(&self, x: &[f32], rows: usize, kernel: Kernel) -> Vec<f32> {
        let mut out = vec![0f32; self.features * rows];
        if rows == 0 {
            return out;
        }
        let kernel = match kernel {
            Kernel::Portable => Kernel::Portable,
            _ if !simd_reads(self.bits, self.group_size, rows) => Kernel::Portable,
            k => k,
        };
        let prepared = match kernel {
            Kernel::Portable => Prepared::default(),
            _ => Prepared::new(x, rows, self.cols, self.bits, self.group_size),
        };
        let fma = has_fma();
        let compute = |first: usize, chunk: &mut [f32]| match kernel {
            // SAFETY (both): `Kernel::available` checked the processor before the kernel was
            // chosen, `simd_reads` the operands, and `prepared` holds `rows` rows of `x`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { avx512::features(self, first, &prepared, chunk, rows) },
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { avx2::features(self, first, &prepared, chunk, rows) },
            _ => self.portable_features(first, x, chunk, rows, fma),
        };
        if rows == 1 {
            // one row: feature-major is row-major
            out.par_chunks_mut(FEATURES_PER_TASK)
                .enumerate()
                .for_each(|(task, chunk)| compute(task * FEATURES_PER_TASK, chunk));
            return out;
        }
        let features = self.features;
        let dest = OutputRows(out.as_mut_ptr());
        (0..features.div_ceil(FEATURES_PER_TASK))
            .into_par_iter()
            .for_each(|task| {
                let first = task * FEATURES_PER_TASK;
                let count = FEATURES_PER_TASK.min(features - first);
                // on the stack up to MAX_ROWS rows
                let (mut stack, mut heap) = ([0f32; FEATURES_PER_TASK * MAX_ROWS], Vec::new());
                let chunk = if count * rows <= stack.len() {
                    &mut stack[..count * rows]
                } else {
                    heap.resize(count * rows, 0f32);
                    &mut heap[..]
                };
                compute(first, chunk);
                for (i, values) in chunk.chunks_exact(rows).enumerate() {
                    for (r, v) in values.iter().enumerate() {
                        // SAFETY: `r < rows` and `first + i < features`, so the index is within
                        // `out`, which outlives the pool's work; each (row, feature) belongs to
                        // this task alone.
                        unsafe { dest.write(r * features + first + i, *v) };
                    }
                }
            });
        out
    }

    /// Features `first..` times each row of `x` into `chunk`, dequantizing each block first.
    fn portable_features(
        &self,
        first: usize,
        x: &[f32],
        chunk: &mut [f32],
        rows: usize,
        fma: bool,
    ) {
        let mut lanes = vec![[0f32; LANES]; rows];
        let groups = self.cols / self.group_size;
        let features = chunk.len() / rows;
        let mut widened = Widened::take();
        let range = first * groups..(first + features) * groups;
        let (scales, biases) = widened.read(self.scales, self.biases, range);
        for (i, out_row) in chunk.chunks_exact_mut(rows).enumerate() {
            let side = (
                &scales[i * groups..(i + 1) * groups],
                &biases[i * groups..(i + 1) * groups],
            );
            if fma {
                // SAFETY: `has_fma` checked that the processor has AVX2 and FMA.
                unsafe { self.feature_fma(first + i, side, x, &mut lanes) };
            } else {
                self.feature_plain(first + i, side, x, &mut lanes);
            }
            for (o, l) in out_row.iter_mut().zip(&lanes) {
                *o = sum_lanes(l);
            }
        }
        widened.give_back();
    }

    #[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx2,fma"))]
    unsafe fn feature_fma(
        &self,
        n: usize,
        side: Side32<'_>,
        x: &[f32],
        lanes: &mut [[f32; LANES]],
    ) {
        self.feature_bits::<true>(n, side, x, lanes);
    }

    fn feature_plain(&self, n: usize, side: Side32<'_>, x: &[f32], lanes: &mut [[f32; LANES]]) {
        self.feature_bits::<false>(n, side, x, lanes);
    }

    #[inline(always)]
    fn feature_bits<const FMA: bool>(
        &self,
        n: usize,
        side: Side32<'_>,
        x: &[f32],
        lanes: &mut [[f32; LANES]],
    ) {
        match self.bits {
            2 => self.feature::<FMA, 2>(n, side, x, lanes),
            3 => self.feature::<FMA, 3>(n, side, x, lanes),
            4 => self.feature::<FMA, 4>(n, side, x, lanes),
            5 => self.feature::<FMA, 5>(n, side, x, lanes),
            6 => self.feature::<FMA, 6>(n, side, x, lanes),
            _ => self.feature::<FMA, 8>(n, side, x, lanes),
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
        (scales, biases): Side32<'_>,
        x: &[f32],
        lanes: &mut [[f32; LANES]],
    ) {
        for l in lanes.iter_mut() {
            *l = [0.0; LANES];
        }
        let mask = (1u16 << BITS) - 1;
        let row_bytes = self.cols * BITS / 8;
        let codes = &code_bytes(self.codes)[n * row_bytes..(n + 1) * row_bytes];
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
