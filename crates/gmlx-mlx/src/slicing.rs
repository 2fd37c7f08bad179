//! Strided slices and in-place-style slice updates over raw mlx-c (mlx-rs exposes them only
//! through its indexing traits, which take ranges per axis rather than plain bounds).
use mlx_rs::{Array, Stream};

use crate::error::Result;
use crate::runtime::check;

/// `a[start[0]..stop[0], start[1]..stop[1], ...]`.
pub fn slice(a: &Array, start: &[i32], stop: &[i32]) -> Result<Array> {
    bounded("mlx_slice", start, stop, |res, strides, stream| {
        // SAFETY: every pointer/length pair describes a live slice for the call.
        unsafe {
            mlx_sys::mlx_slice(
                res,
                a.as_ptr(),
                start.as_ptr(),
                start.len(),
                stop.as_ptr(),
                stop.len(),
                strides.as_ptr(),
                strides.len(),
                stream,
            )
        }
    })
}

/// `a` narrowed to `from..to` along `axis` (negative: counted from the last), every other
/// axis whole.
pub fn slice_axis(a: &Array, axis: i32, from: i32, to: i32) -> Result<Array> {
    let shape = a.shape();
    let n = shape.len() as i32;
    let axis = if axis < 0 { n + axis } else { axis } as usize;
    let mut start = vec![0; shape.len()];
    let mut stop = shape.to_vec();
    start[axis] = from;
    stop[axis] = to;
    slice(a, &start, &stop)
}

/// `src` with `src[start..stop] = update` (a new array; MLX reuses the buffer when it can).
pub fn slice_update(src: &Array, update: &Array, start: &[i32], stop: &[i32]) -> Result<Array> {
    bounded("mlx_slice_update", start, stop, |res, strides, stream| {
        // SAFETY: as in `slice`.
        unsafe {
            mlx_sys::mlx_slice_update(
                res,
                src.as_ptr(),
                update.as_ptr(),
                start.as_ptr(),
                start.len(),
                stop.as_ptr(),
                stop.len(),
                strides.as_ptr(),
                strides.len(),
                stream,
            )
        }
    })
}

/// Runs one unit-stride slicing call into a fresh result array.
fn bounded(
    call: &'static str,
    start: &[i32],
    stop: &[i32],
    op: impl FnOnce(&mut mlx_sys::mlx_array, &[i32], mlx_sys::mlx_stream) -> i32,
) -> Result<Array> {
    debug_assert_eq!(start.len(), stop.len());
    let strides = vec![1; start.len()];
    let stream = Stream::thread_local_or_default();
    // SAFETY: the result handle is created here and owned by the returned Array.
    let mut res = unsafe { mlx_sys::mlx_array_new() };
    let code = op(&mut res, &strides, stream.as_ptr());
    // SAFETY: `res` is a valid (possibly empty) handle either way; the Array frees it.
    let out = unsafe { Array::from_ptr(res) };
    check(call, code)?;
    Ok(out)
}
