//! Strided slices and in-place-style slice updates over raw mlx-c (mlx-rs exposes them only
//! through its indexing traits, which take ranges per axis rather than plain bounds).
use mlx_rs::{Array, Stream};

use crate::error::Result;
use crate::runtime::check;

fn unit_strides(n: usize) -> Vec<i32> {
    vec![1; n]
}

/// `a[start[0]..stop[0], start[1]..stop[1], ...]`.
pub fn slice(a: &Array, start: &[i32], stop: &[i32]) -> Result<Array> {
    let strides = unit_strides(start.len());
    let stream = Stream::thread_local_or_default();
    // SAFETY: every pointer/length pair describes a live slice; the result handle is owned by
    // the returned Array.
    unsafe {
        let mut res = mlx_sys::mlx_array_new();
        let code = mlx_sys::mlx_slice(
            &mut res,
            a.as_ptr(),
            start.as_ptr(),
            start.len(),
            stop.as_ptr(),
            stop.len(),
            strides.as_ptr(),
            strides.len(),
            stream.as_ptr(),
        );
        let out = Array::from_ptr(res);
        check("mlx_slice", code)?;
        Ok(out)
    }
}

/// `src` with `src[start..stop] = update` (a new array; MLX reuses the buffer when it can).
pub fn slice_update(src: &Array, update: &Array, start: &[i32], stop: &[i32]) -> Result<Array> {
    let strides = unit_strides(start.len());
    let stream = Stream::thread_local_or_default();
    // SAFETY: as in `slice`.
    unsafe {
        let mut res = mlx_sys::mlx_array_new();
        let code = mlx_sys::mlx_slice_update(
            &mut res,
            src.as_ptr(),
            update.as_ptr(),
            start.as_ptr(),
            start.len(),
            stop.as_ptr(),
            stop.len(),
            strides.as_ptr(),
            strides.len(),
            stream.as_ptr(),
        );
        let out = Array::from_ptr(res);
        check("mlx_slice_update", code)?;
        Ok(out)
    }
}
