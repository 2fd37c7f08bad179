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

    /// `scales` and `biases` values `range` as float32: borrowed, or widened into the buffers
    /// by `widen` (the kernel's own conversion of float16 to float32).
    #[inline(always)]
    pub(super) fn read<'s>(
        &'s mut self,
        scales: Side<'s>,
        biases: Side<'s>,
        range: Range<usize>,
        widen: impl Fn(&[f16], &mut [f32]),
    ) -> (&'s [f32], &'s [f32]) {
        match (scales, biases) {
            (Side::Single(s), Side::Single(b)) => (&s[range.clone()], &b[range]),
            _ => {
                fill(scales, range.clone(), &mut self.scales, &widen);
                fill(biases, range, &mut self.biases, &widen);
                (&self.scales, &self.biases)
            }
        }
    }
}

#[inline(always)]
fn fill(
    side: Side<'_>,
    range: Range<usize>,
    out: &mut Vec<f32>,
    widen: impl Fn(&[f16], &mut [f32]),
) {
    out.clear();
    match side {
        Side::Single(v) => out.extend_from_slice(&v[range]),
        Side::Half(v) => {
            out.resize(range.len(), 0.0);
            widen(&v[range], out);
        }
    }
}

/// Float16 to float32 for any processor (exact).
pub(super) fn widen_portable(src: &[f16], dst: &mut [f32]) {
    src.convert_to_f32_slice(dst);
}
