//! What the AVX2 and AVX-512 kernels share: `x` prepared as they read it, and the loop over a
//! task's features that widens each block's codes once for every 8 rows. Both compute, per row,
//! `sum_b (scale_g * q_b) . x_b + sum_g bias_g * sum(x_g)` over blocks `b` of 32 columns and
//! groups `g`: the codes are widened to float32 (exact) and scaled once for all rows, so a
//! row's block costs two fused multiply-adds, and the bias terms are one dot product per row
//! with the group sums of `x`, computed once per product.
use std::array::from_fn;

use super::side::Widened;
use super::{Affine, MAX_ROWS};

/// Rows that read a block's widened codes together, in registers as they are widened (8 streams
/// of the default model with the codes stored for the rows to reload: 142-151 tok/s with 8,
/// 131-135 with 6, 134 with 4, 127 with 3, 101 with each row alone; read in registers,
/// 180-201 against 152-162 stored).
const ROWS_TOGETHER: usize = 8;

/// Blocks past the one being multiplied whose codes are prefetched. The
/// hardware prefetcher alone left the kernel waiting on the codes' loads: the default model's
/// decode went from 49.5-51.7 tok/s without to 72.8-80.7 with (alternating in one run; 64
/// blocks gave less, 96 to 512 the same).
const PREFETCH_BLOCKS: usize = 128;

/// Whether the vector kernels read this weight: 4- or 8-bit codes in groups of 32, 64, 128...
/// columns, at most [`MAX_ROWS`] rows.
pub(super) fn reads(bits: usize, group_size: usize, rows: usize) -> bool {
    matches!(bits, 4 | 8) && (group_size / 32).is_power_of_two() && rows <= MAX_ROWS
}

/// The rows of `x` as the kernels read them: each block of 32 columns in the order its codes
/// widen to (for 4 bits the even columns, then the odd ones: a byte's low nibble is the even
/// code), and each group's sum.
#[derive(Default)]
pub(super) struct Rows {
    x: Vec<f32>,
    sums: Vec<f32>,
}

impl Rows {
    pub(super) fn new(x: &[f32], rows: usize, cols: usize, bits: usize, group_size: usize) -> Rows {
        let mut out = Rows {
            x: Vec::with_capacity(rows * cols),
            sums: Vec::with_capacity(rows * cols / group_size),
        };
        let blocks_per_group = group_size / 32;
        let mut lanes = [0f32; 8];
        for (b, block) in x[..rows * cols].chunks_exact(32).enumerate() {
            if bits == 4 {
                out.x.extend(block.iter().step_by(2));
                out.x.extend(block.iter().skip(1).step_by(2));
            } else {
                out.x.extend_from_slice(block);
            }
            for part in block.chunks_exact(8) {
                for (l, v) in lanes.iter_mut().zip(part) {
                    *l += v;
                }
            }
            if (b + 1) % blocks_per_group == 0 {
                out.sums.push(super::sum_lanes(&lanes));
                lanes = [0.0; 8];
            }
        }
        out
    }
}

/// One prepared row of `x`.
#[derive(Clone, Copy)]
pub(super) struct Row<'a> {
    /// The row, laid out as [`Rows`] says.
    pub(super) x: &'a [f32],
    /// Each group's sum of `x`.
    pub(super) sums: &'a [f32],
}

/// One instruction set's kernel.
pub(super) trait Lanes {
    /// A block's 32 codes widened to float32 and multiplied by their scale, in the order
    /// [`Rows`] lays `x` out.
    type Codes: Copy;

    /// Block codes of `BITS` bits (4 or 8) from `words`, times `scale`.
    ///
    /// # Safety
    /// The processor has the instruction set; `words` holds at least `BITS` words.
    unsafe fn widen<const BITS: usize>(words: &[u32], scale: f32) -> Self::Codes;

    /// For each of `R` rows, its dot product with the feature: the scaled codes `q(b)` of
    /// every block `b` (read once for the `R` rows) and `biases` (one per group) times the
    /// row's group sums. A row's arithmetic is the same whatever `R`, so its result does not
    /// depend on the rows beside it.
    ///
    /// # Safety
    /// The processor has the instruction set; `q(b)` is safe to call for every block of the
    /// first row; every row is as long, with as many group sums as `biases`.
    unsafe fn dots<const R: usize>(
        rows: [Row<'_>; R],
        biases: &[f32],
        q: impl Fn(usize) -> Self::Codes,
    ) -> [f32; R];
}

/// Features `first..` of `w` times each prepared row, into `chunk` (`rows` values per feature),
/// their scales and biases widened to float32 once for all of them where they are float16.
///
/// # Safety
/// The processor has `K`'s instruction set (the caller is compiled for it, so this inlines
/// there); [`reads`] holds for `w` and `rows`; `x` holds `rows` rows of `w.cols`; the features
/// are within `w`.
#[inline(always)]
pub(super) unsafe fn features<K: Lanes>(
    w: &Affine<'_>,
    first: usize,
    x: &Rows,
    chunk: &mut [f32],
    rows: usize,
) {
    let groups = w.cols / w.group_size;
    let features = chunk.len() / rows;
    let mut widened = Widened::take();
    let range = first * groups..(first + features) * groups;
    // the next task's side data (widened at its start, not read in the block loop)
    for side in [w.scales, w.biases] {
        for at in (range.end..range.end + range.len()).step_by(16) {
            prefetch(side.address(at));
        }
    }
    let (scales, biases) = widened.read(w.scales, w.biases, range);
    for (i, out) in chunk.chunks_exact_mut(rows).enumerate() {
        let side = Side {
            scales: &scales[i * groups..(i + 1) * groups],
            biases: &biases[i * groups..(i + 1) * groups],
        };
        // SAFETY: as the caller promised.
        unsafe {
            if w.bits == 4 {
                feature::<K, 4>(w, first + i, side, x, out)
            } else {
                feature::<K, 8>(w, first + i, side, x, out)
            }
        };
    }
    widened.give_back();
}

/// One feature's scales and biases as float32.
struct Side<'a> {
    scales: &'a [f32],
    biases: &'a [f32],
}

/// Feature `n` of `w` times each prepared row into `out[row]`, [`ROWS_TOGETHER`] rows at a
/// time (the last group what is left): each group reads every block's codes in registers as
/// they are widened (again for each group: fewer instructions than storing them once and
/// reloading them for every group), with the same arithmetic in the same order for every
/// row.
///
/// # Safety
/// As [`features`].
#[inline(always)]
unsafe fn feature<K: Lanes, const BITS: usize>(
    w: &Affine<'_>,
    n: usize,
    side: Side<'_>,
    x: &Rows,
    out: &mut [f32],
) {
    let cols = w.cols;
    let blocks = cols / 32;
    let groups = cols / w.group_size;
    let block_words = BITS; // 32 codes of `BITS` bits are `BITS` words
    let words = &w.codes[n * blocks * block_words..(n + 1) * blocks * block_words];
    let Side { scales, biases } = side;
    let shift = (w.group_size / 32).trailing_zeros();
    let row = |r: usize| Row {
        x: &x.x[r * cols..(r + 1) * cols],
        sums: &x.sums[r * groups..(r + 1) * groups],
    };
    // Block `b`'s scaled codes, prefetching those PREFETCH_BLOCKS on (into the next features
    // past the last block; the side data is prefetched a task ahead, in `features`).
    let widen = |b: usize| {
        let ahead = b + PREFETCH_BLOCKS;
        prefetch(words.as_ptr().wrapping_add(ahead * block_words));
        // SAFETY: the instruction set; block `b`'s `bits` words are within the feature's codes.
        unsafe { K::widen::<BITS>(&words[b * block_words..], scales[b >> shift]) }
    };
    for (g, out) in out.chunks_mut(ROWS_TOGETHER).enumerate() {
        let row = |i: usize| row(g * ROWS_TOGETHER + i);
        // SAFETY (all): the instruction set; every row has `blocks` blocks.
        unsafe {
            match out.len() {
                1 => out.copy_from_slice(&K::dots([row(0)], biases, widen)),
                2 => out.copy_from_slice(&K::dots(from_fn::<_, 2, _>(row), biases, widen)),
                3 => out.copy_from_slice(&K::dots(from_fn::<_, 3, _>(row), biases, widen)),
                4 => out.copy_from_slice(&K::dots(from_fn::<_, 4, _>(row), biases, widen)),
                5 => out.copy_from_slice(&K::dots(from_fn::<_, 5, _>(row), biases, widen)),
                6 => out.copy_from_slice(&K::dots(from_fn::<_, 6, _>(row), biases, widen)),
                7 => out.copy_from_slice(&K::dots(from_fn::<_, 7, _>(row), biases, widen)),
                _ => out.copy_from_slice(&K::dots(
                    from_fn::<_, ROWS_TOGETHER, _>(row),
                    biases,
                    widen,
                )),
            }
        }
    }
}

/// Asks for the cache line holding `p` (any address: a prefetch faults on none).
#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing and faults on no address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    }
}
