//! Quantized matmuls with an explicit quantization mode (`affine`, `mxfp4`), over raw mlx-c:
//! mlx-rs 0.33 always passes `affine`.
use std::ffi::CStr;

use mlx_rs::{Array, Stream};

use crate::error::Result;
use crate::runtime::check;

/// MLX's quantization modes gmlx uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `w = scale * q + bias`, per group.
    Affine,
    /// OCP MXFP4: E2M1 values, one E8M0 (power of two) scale per 32, no bias.
    Mxfp4,
}

impl Mode {
    fn name(self) -> &'static CStr {
        match self {
            Mode::Affine => c"affine",
            Mode::Mxfp4 => c"mxfp4",
        }
    }
}

/// The packed weights of one quantized matrix (or stack of matrices).
#[derive(Debug, Clone, Copy)]
pub struct Packed<'a> {
    pub w: &'a Array,
    pub scales: &'a Array,
    pub biases: Option<&'a Array>,
    pub group_size: i32,
    pub bits: i32,
    pub mode: Mode,
    /// The biases are -8 times the scales (Q4_0's `d * (q - 8)` as MLX's affine form): a
    /// kernel may derive them instead of reading them ([`crate::cuda_qmv`]).
    pub centered: bool,
}

fn opt_int(v: i32) -> mlx_sys::mlx_optional_int {
    mlx_sys::mlx_optional_int {
        value: v,
        has_value: true,
    }
}

/// A null array handle for an absent optional argument, freed when dropped.
struct Null(mlx_sys::mlx_array);

impl Null {
    fn new() -> Null {
        // SAFETY: creates an empty handle.
        Null(unsafe { mlx_sys::mlx_array_new() })
    }
}

impl Drop for Null {
    fn drop(&mut self) {
        // SAFETY: the handle was created by mlx_array_new and is freed once.
        unsafe {
            mlx_sys::mlx_array_free(self.0);
        }
    }
}

fn handle(a: Option<&Array>, null: &Null) -> mlx_sys::mlx_array {
    a.map_or(null.0, Array::as_ptr)
}

/// `x @ W^T` (`transpose`) or `x @ W`.
pub fn quantized_matmul(x: &Array, p: Packed<'_>, transpose: bool) -> Result<Array> {
    let stream = Stream::thread_local_or_default();
    let null = Null::new();
    // SAFETY: all handles are live for the call; the result is owned by the returned Array.
    unsafe {
        let mut res = mlx_sys::mlx_array_new();
        let code = mlx_sys::mlx_quantized_matmul(
            &mut res,
            x.as_ptr(),
            p.w.as_ptr(),
            p.scales.as_ptr(),
            handle(p.biases, &null),
            transpose,
            opt_int(p.group_size),
            opt_int(p.bits),
            p.mode.name().as_ptr(),
            stream.as_ptr(),
        );
        let out = Array::from_ptr(res);
        check("mlx_quantized_matmul", code)?;
        Ok(out)
    }
}

/// For stacked matrices `[experts, out, ...]`: row `i` of `x` times matrix `indices[i]`.
pub fn gather_qmm(x: &Array, p: Packed<'_>, indices: &Array, transpose: bool) -> Result<Array> {
    let stream = Stream::thread_local_or_default();
    let null = Null::new();
    // SAFETY: as in `quantized_matmul`.
    unsafe {
        let mut res = mlx_sys::mlx_array_new();
        let code = mlx_sys::mlx_gather_qmm(
            &mut res,
            x.as_ptr(),
            p.w.as_ptr(),
            p.scales.as_ptr(),
            handle(p.biases, &null),
            null.0,
            indices.as_ptr(),
            transpose,
            opt_int(p.group_size),
            opt_int(p.bits),
            p.mode.name().as_ptr(),
            false,
            stream.as_ptr(),
        );
        let out = Array::from_ptr(res);
        check("mlx_gather_qmm", code)?;
        Ok(out)
    }
}

/// The float matrix the packed weights encode.
pub fn dequantize(p: Packed<'_>) -> Result<Array> {
    let stream = Stream::thread_local_or_default();
    let null = Null::new();
    // SAFETY: as in `quantized_matmul`; no output dtype is requested.
    unsafe {
        let mut res = mlx_sys::mlx_array_new();
        let no_dtype = mlx_sys::mlx_optional_dtype {
            value: mlx_sys::mlx_dtype__MLX_FLOAT32,
            has_value: false,
        };
        let code = mlx_sys::mlx_dequantize(
            &mut res,
            p.w.as_ptr(),
            p.scales.as_ptr(),
            handle(p.biases, &null),
            opt_int(p.group_size),
            opt_int(p.bits),
            p.mode.name().as_ptr(),
            null.0,
            no_dtype,
            stream.as_ptr(),
        );
        let out = Array::from_ptr(res);
        check("mlx_dequantize", code)?;
        Ok(out)
    }
}
