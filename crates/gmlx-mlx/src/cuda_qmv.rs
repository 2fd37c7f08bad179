//! A 4-bit matrix-vector product on CUDA (`kernels/qmv4.cu`), through MLX's custom-kernel API:
//! one activation row times an MLX affine 4-bit matrix in groups of 32 (the in-memory form of
//! Q4_0, Q4_1 and Q4_K), the decode step's product. MLX's own `qmv` reads such a matrix at about
//! 814 GB/s on an H100 (`docs/performance.md`); this kernel keeps several 16-byte loads of codes
//! in flight per lane, converts each activation once for two rows, and turns nibbles into
//! floats without conversion instructions. Its error against the reference dequantization is a
//! quarter of MLX's (`tests/cuda_qmv.rs`), and it reads a row at any offset (MLX 0.32.2's `qmv`
//! faults on a bfloat16 row that starts 2 bytes off a 4-byte boundary).
//!
//! [`applies`] says when [`QuantWeight::matmul`](crate::QuantWeight::matmul) takes it: MLX's
//! CUDA backend on the GPU, one row, not training (the product has no VJP), unless
//! `GMLX_CUDA_QMV=0`.
use std::ffi::CString;
use std::sync::OnceLock;

use mlx_rs::{Array, Dtype, Stream};

use crate::error::{Error, Result};
use crate::qmm::{Mode, Packed};
use crate::runtime::{check, Backend};

/// The environment variable that turns the kernel off (`0`).
pub const SWITCH_VAR: &str = "GMLX_CUDA_QMV";

const SOURCE: &str = include_str!("kernels/qmv4.cu");
/// Rows of the matrix per warp (each activation converted once serves them all):
/// `GMLX_CUDA_QMV_ROWS` (1 to 16), 2 by default.
fn rows_per_warp() -> i32 {
    static ROWS: OnceLock<i32> = OnceLock::new();
    *ROWS.get_or_init(|| {
        std::env::var("GMLX_CUDA_QMV_ROWS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|r| (1..=16).contains(r))
            .unwrap_or(2)
    })
}

const WARPS_PER_BLOCK: i32 = 4;

fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        std::env::var(SWITCH_VAR).map_or(true, |v| v.trim() != "0")
            && crate::runtime::backend().is_ok_and(|b| b == Backend::Cuda)
    })
}

/// Whether [`matmul`] computes `x @ W^T` for these operands now (see the module's text).
pub fn applies(x: &Array, p: &Packed<'_>, rows: usize) -> bool {
    rows == 1
        && p.mode == Mode::Affine
        && p.bits == 4
        && p.group_size == 32
        && p.w.ndim() == 2
        && p.biases.is_some()
        && matches!(x.dtype(), Dtype::Bfloat16 | Dtype::Float16 | Dtype::Float32)
        && x.shape().last().is_some_and(|&k| k > 0 && k % 32 == 0)
        && p.w.shape()[1] * 8 == x.shape()[x.ndim() - 1]
        && enabled()
}

/// `x @ W^T` for one row `x [..., K]` and a 4-bit affine matrix `W [N, K]`: `[..., N]` in
/// `x`'s dtype. The caller checks [`applies`].
pub fn matmul(x: &Array, p: Packed<'_>) -> Result<Array> {
    let Some(biases) = p.biases else {
        return Err(kernel_error("an affine matrix without biases"));
    };
    let n = p.w.shape()[0];
    let k = p.w.shape()[1] * 8;
    let mut out_shape = x.shape().to_vec();
    if let Some(last) = out_shape.last_mut() {
        *last = n;
    }
    let rows = rows_per_warp();
    let warps = (n + rows - 1) / rows;
    let blocks = (warps + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
    let threads = 32 * WARPS_PER_BLOCK;
    let inputs = [p.w.clone(), p.scales.clone(), biases.clone(), x.clone()];
    let outputs = kernel(|kernel| {
        launch(
            kernel,
            &inputs,
            &out_shape,
            x.dtype(),
            &[("K", k), ("N", n), ("ROWS", rows)],
            (blocks * threads, threads),
        )
    })?;
    outputs
        .into_iter()
        .next()
        .ok_or_else(|| kernel_error("MLX returned no output"))
}

fn kernel_error(reason: &str) -> Error {
    Error::CudaKernel {
        kernel: "gmlx_qmv4",
        reason: reason.to_owned(),
    }
}

/// The kernel object, made once per thread (its handle is not shared between threads).
fn kernel<T>(f: impl FnOnce(mlx_sys::mlx_fast_cuda_kernel) -> Result<T>) -> Result<T> {
    struct Kernel(mlx_sys::mlx_fast_cuda_kernel);
    impl Drop for Kernel {
        fn drop(&mut self) {
            // SAFETY: made by mlx_fast_cuda_kernel_new, freed once.
            unsafe { mlx_sys::mlx_fast_cuda_kernel_free(self.0) };
        }
    }
    thread_local! {
        static KERNEL: OnceLock<Kernel> = const { OnceLock::new() };
    }
    KERNEL.with(|cell| {
        if cell.get().is_none() {
            let made = new_kernel()?;
            let _ = cell.set(Kernel(made));
        }
        match cell.get() {
            Some(k) => f(k.0),
            None => unreachable!("set above"),
        }
    })
}

fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| kernel_error("a name with a NUL byte"))
}

/// An mlx-c string vector, freed when dropped.
struct Names(mlx_sys::mlx_vector_string);

impl Names {
    fn new(list: &[&str]) -> Result<Names> {
        // SAFETY: a new vector, freed by the guard; mlx-c copies each string appended.
        let names = Names(unsafe { mlx_sys::mlx_vector_string_new() });
        for name in list {
            let c = cstring(name)?;
            // SAFETY: the vector is live, `c` outlives the call.
            check("mlx_vector_string_append_value", unsafe {
                mlx_sys::mlx_vector_string_append_value(names.0, c.as_ptr())
            })?;
        }
        Ok(names)
    }
}

impl Drop for Names {
    fn drop(&mut self) {
        // SAFETY: made by mlx_vector_string_new, freed once.
        unsafe { mlx_sys::mlx_vector_string_free(self.0) };
    }
}

fn new_kernel() -> Result<mlx_sys::mlx_fast_cuda_kernel> {
    let inputs = Names::new(&["w", "scales", "biases", "x"])?;
    let outputs = Names::new(&["y"])?;
    let (name, source, header) = (cstring("gmlx_qmv4")?, cstring(SOURCE)?, cstring("")?);
    // SAFETY: every pointer is live for the call; mlx-c copies what it keeps.
    let kernel = unsafe {
        mlx_sys::mlx_fast_cuda_kernel_new(
            name.as_ptr(),
            inputs.0,
            outputs.0,
            source.as_ptr(),
            header.as_ptr(),
            true,
            0,
        )
    };
    if kernel.ctx.is_null() {
        return Err(kernel_error("MLX could not make it"));
    }
    Ok(kernel)
}

/// Applies `kernel` to `inputs` with one output of `shape` and `dtype`, the template type `T`
/// = `dtype`, integer constants `ints`, over `(threads in all, threads per block)`.
fn launch(
    kernel: mlx_sys::mlx_fast_cuda_kernel,
    inputs: &[Array],
    shape: &[i32],
    dtype: Dtype,
    ints: &[(&str, i32)],
    (grid, block): (i32, i32),
) -> Result<Vec<Array>> {
    struct Config(mlx_sys::mlx_fast_cuda_kernel_config);
    impl Drop for Config {
        fn drop(&mut self) {
            // SAFETY: made by mlx_fast_cuda_kernel_config_new, freed once.
            unsafe { mlx_sys::mlx_fast_cuda_kernel_config_free(self.0) };
        }
    }
    // SAFETY: a new config, freed by its guard.
    let config = Config(unsafe { mlx_sys::mlx_fast_cuda_kernel_config_new() });
    let t = cstring("T")?;
    // SAFETY: the config is live; the shape and names outlive each call.
    unsafe {
        check(
            "mlx_fast_cuda_kernel_config_add_output_arg",
            mlx_sys::mlx_fast_cuda_kernel_config_add_output_arg(
                config.0,
                shape.as_ptr(),
                shape.len(),
                dtype.into(),
            ),
        )?;
        check(
            "mlx_fast_cuda_kernel_config_set_grid",
            mlx_sys::mlx_fast_cuda_kernel_config_set_grid(config.0, grid, 1, 1),
        )?;
        check(
            "mlx_fast_cuda_kernel_config_set_thread_group",
            mlx_sys::mlx_fast_cuda_kernel_config_set_thread_group(config.0, block, 1, 1),
        )?;
        check(
            "mlx_fast_cuda_kernel_config_add_template_arg_dtype",
            mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_dtype(
                config.0,
                t.as_ptr(),
                dtype.into(),
            ),
        )?;
        for (name, value) in ints {
            let c = cstring(name)?;
            check(
                "mlx_fast_cuda_kernel_config_add_template_arg_int",
                mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_int(
                    config.0,
                    c.as_ptr(),
                    *value,
                ),
            )?;
        }
    }
    let inputs = crate::closure::vector_of(inputs);
    let stream = Stream::thread_local_or_default();
    // SAFETY: every handle is live for the call; `outputs` is read, then freed once.
    unsafe {
        let mut outputs = mlx_sys::mlx_vector_array_new();
        let code = mlx_sys::mlx_fast_cuda_kernel_apply(
            &mut outputs,
            kernel,
            inputs,
            config.0,
            stream.as_ptr(),
        );
        mlx_sys::mlx_vector_array_free(inputs);
        let arrays = if code == 0 {
            crate::closure::arrays_of(outputs).map_err(|e| kernel_error(&e))
        } else {
            Err(Error::Ffi {
                call: "mlx_fast_cuda_kernel_apply",
                code,
            })
        };
        mlx_sys::mlx_vector_array_free(outputs);
        arrays
    }
}
