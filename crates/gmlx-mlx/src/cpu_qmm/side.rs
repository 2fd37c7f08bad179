//! Per-group scales or biases as MLX holds them: float32, or float16 where every value is
//! exactly a float16 (the legacy quants' and 8-bit's; see [`crate::quant`]), a third fewer
//! bytes for a 4-bit weight to read.
use std::cell::RefCell;
use std::ops::Range;

use half::f16;
use half::slice::HalfFloatSliceExt;
use mlx_rs::{Array, Dtype};

use super::host_error;
use crate::error::Result;

#[derive(Clone, Copy)]
pub(super) enum Side<'a> {
    Single(&'a [f32]),
    Half(&'a [f16]),
}

thread_local! {
    /// Buffers for a task's float16 side data widened, reused across tasks.
    static BUFFERS: RefCell<Widened> = RefCell::default();
}

impl<'a> Side<'a> {
    /// Whether the kernel reads side data of this dtype.
    pub(super) fn reads(dtype: Dtype) -> bool {
        matches!(dtype, Dtype::Float32 | Dtype::Float16)
    }

    /// The host slice of an evaluated float32 or float16 array.
    pub(super) fn of(a: &'a Array) -> Result<Side<'a>> {
        Ok(match a.dtype() {
            Dtype::Float16 => Side::Half(a.try_as_slice::<f16>().map_err(host_error)?),
            _ => Side::Single(a.try_as_slice::<f32>().map_err(host_error)?),
        })
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Side::Single(v) => v.len(),
            Side::Half(v) => v.len(),
        }
    }

    /// The address of value `i`, which need not exist (for a prefetch).
    #[inline(always)]
    pub(super) fn address(&self, i: usize) -> *const u8 {
        match self {
            Side::Single(v) => v.as_ptr().wrapping_add(i).cast(),
            Side::Half(v) => v.as_ptr().wrapping_add(i).cast(),
        }
    }
}

/// Scales and biases widened to float32 for a range of groups (a task's features).
#[derive(Default)]
pub(super) struct Widened {
    scales: Vec<f32>,
    biases: Vec<f32>,
}

impl Widened {
    /// This thread's buffers, taken until [`Widened::give_back`].
    pub(super) fn take() -> Widened {
        BUFFERS.with(|b| b.take())
    }

    pub(super) fn give_back(self) {
        BUFFERS.with(|b| *b.borrow_mut() = self);
    }

    /// `scales` and `biases` values `range` as float32: borrowed, or widened into the buffers.
    #[inline(always)]
    pub(super) fn read<'s>(
        &'s mut self,
        scales: Side<'s>,
        biases: Side<'s>,
        range: Range<usize>,
    ) -> (&'s [f32], &'s [f32]) {
        match (scales, biases) {
            (Side::Single(s), Side::Single(b)) => (&s[range.clone()], &b[range]),
            _ => {
                fill(scales, range.clone(), &mut self.scales);
                fill(biases, range, &mut self.biases);
                (&self.scales, &self.biases)
            }
        }
    }
}

fn fill(side: Side<'_>, range: Range<usize>, out: &mut Vec<f32>) {
    out.clear();
    match side {
        Side::Single(v) => out.extend_from_slice(&v[range]),
        Side::Half(v) => {
            out.resize(range.len(), 0.0);
            widen(&v[range], out);
        }
    }
}

/// Float16 to float32 (exact): 8 at a time with F16C where the processor has it (`half`'s
/// slice conversion calls a function per 8 values: 5.8% of a decode step when tried).
fn widen(src: &[f16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("f16c") {
        // SAFETY: the processor has F16C.
        return unsafe { widen_f16c(src, dst) };
    }
    src.convert_to_f32_slice(dst);
}

/// # Safety
/// The processor has F16C; `dst` is as long as `src`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "f16c")]
unsafe fn widen_f16c(src: &[f16], dst: &mut [f32]) {
    use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};
    let whole = src.len() / 8 * 8;
    for (s, d) in src[..whole]
        .chunks_exact(8)
        .zip(dst[..whole].chunks_exact_mut(8))
    {
        // SAFETY: 8 float16 values are readable at `s`, 8 floats writable at `d`.
        unsafe {
            _mm256_storeu_ps(
                d.as_mut_ptr(),
                _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().cast::<__m128i>())),
            )
        };
    }
    src[whole..].convert_to_f32_slice(&mut dst[whole..]);
}
