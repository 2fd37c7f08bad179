//! 4-bit matrix-vector products on CUDA (`kernels/qmv4*.cu`), through MLX's custom-kernel API:
//! one activation row times MLX affine 4-bit matrices in groups of 32 (the in-memory form of
//! Q4_0, Q4_1 and Q4_K), the decode step's products. MLX's own `qmv` reads such a matrix at
//! about 814 GB/s on an H100 (`docs/performance.md`); these kernels keep several 16-byte loads
//! of codes in flight per lane, convert each activation once for all of a warp's rows, and turn
//! nibbles into floats without conversion instructions (`kernels/qmv4.cuh`). Their error
//! against the reference dequantization is a quarter of MLX's (`tests/cuda_qmv.rs`), and they
//! read a row at any offset (MLX 0.32.2's `qmv` faults on a bfloat16 row that starts 2 bytes off
//! a 4-byte boundary).
//!
//! Three kernels: [`matmul`] (one matrix), [`matmul_three`] (three matrices of one input, as a
//! block's query, key and value projections, in one launch) and [`silu_glu`] (`silu(G x) * (U
//! x)`, a gated MLP's gate, up and SwiGLU in one launch). A decode step is a few hundred small
//! operations, each with its launch and MLX's work on the host to build and submit it; the two
//! fused kernels take six of a dense block's operations out (three products into one; two
//! products, a sigmoid and two multiplications into one).
//!
//! [`applies`] says when [`QuantWeight::matmul`](crate::QuantWeight::matmul) takes them: MLX's
//! CUDA backend on the GPU, one row, not training (the products have no VJP), unless
//! `GMLX_CUDA_QMV=0`; `GMLX_CUDA_QMV_FUSE=0` keeps [`matmul`] and turns the two fused ones off.
use std::ffi::{CStr, CString};
use std::sync::OnceLock;

use mlx_rs::{Array, Dtype, Stream};

use crate::error::{Error, Result};
use crate::qmm::{Mode, Packed};
use crate::runtime::{check, Backend};

/// The environment variable that turns the kernels off (`0`).
pub const SWITCH_VAR: &str = "GMLX_CUDA_QMV";
/// The environment variable that turns the fused kernels off (`0`).
pub const FUSE_VAR: &str = "GMLX_CUDA_QMV_FUSE";

const HEADER: &str = include_str!("kernels/qmv4.cuh");

/// Rows of the matrix per warp (each activation converted once serves them all):
/// `GMLX_CUDA_QMV_ROWS` (1 to 16), 2 by default. [`silu_glu`] takes half as many rows of each
/// of its two matrices (at least one).
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

fn switched_on(var: &str) -> bool {
    std::env::var(var).map_or(true, |v| v.trim() != "0")
}

fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        switched_on(SWITCH_VAR) && crate::runtime::backend().is_ok_and(|b| b == Backend::Cuda)
    })
}

/// Whether the fused kernels ([`matmul_three`], [`silu_glu`]) are on: the kernels are
/// (`GMLX_CUDA_QMV`, MLX's CUDA backend) and `GMLX_CUDA_QMV_FUSE` is not `0`.
pub fn fusion_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| enabled() && switched_on(FUSE_VAR))
}

/// Whether [`matmul`] computes `x @ W^T` for these operands now (see the module's text); each
/// matrix of [`matmul_three`] and [`silu_glu`] must pass it too.
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

/// The kernels, each an MLX custom kernel made once per thread.
#[derive(Clone, Copy)]
enum Kernel {
    One,
    Three,
    Silu,
}

impl Kernel {
    const ALL: usize = 3;

    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static str {
        match self {
            Kernel::One => "gmlx_qmv4",
            Kernel::Three => "gmlx_qmv4_three",
            Kernel::Silu => "gmlx_qmv4_silu",
        }
    }

    fn source(self) -> &'static str {
        match self {
            Kernel::One => include_str!("kernels/qmv4.cu"),
            Kernel::Three => include_str!("kernels/qmv4_three.cu"),
            Kernel::Silu => include_str!("kernels/qmv4_silu.cu"),
        }
    }

    fn inputs(self) -> &'static [&'static str] {
        match self {
            Kernel::One => &["w", "scales", "biases", "x"],
            Kernel::Three => &["w0", "s0", "b0", "w1", "s1", "b1", "w2", "s2", "b2", "x"],
            Kernel::Silu => &["wg", "sg", "bg", "wu", "su", "bu", "x"],
        }
    }

    fn outputs(self) -> &'static [&'static str] {
        match self {
            Kernel::One | Kernel::Silu => &["y"],
            Kernel::Three => &["y0", "y1", "y2"],
        }
    }
}

/// `[..., K]` with the last dimension `n`.
fn out_shape(x: &Array, n: i32) -> Vec<i32> {
    let mut shape = x.shape().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = n;
    }
    shape
}

/// The operands of one matrix: codes, scales, biases.
fn operands(p: &Packed<'_>) -> Result<[Array; 3]> {
    let Some(biases) = p.biases else {
        return Err(kernel_error("an affine matrix without biases"));
    };
    Ok([p.w.clone(), p.scales.clone(), biases.clone()])
}

/// `(threads in all, threads per block)` for `warps` warps.
fn grid(warps: i32) -> (i32, i32) {
    let blocks = (warps + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
    let threads = 32 * WARPS_PER_BLOCK;
    (blocks * threads, threads)
}

/// `x @ W^T` for one row `x [..., K]` and a 4-bit affine matrix `W [N, K]`: `[..., N]` in
/// `x`'s dtype. The caller checks [`applies`].
pub fn matmul(x: &Array, p: Packed<'_>) -> Result<Array> {
    let n = p.w.shape()[0];
    let k = p.w.shape()[1] * 8;
    let rows = rows_per_warp();
    let mut inputs = operands(&p)?.to_vec();
    inputs.push(x.clone());
    let shape = out_shape(x, n);
    let outputs = launch(
        Kernel::One,
        &inputs,
        &[&shape],
        x.dtype(),
        p.scales.dtype(),
        &[(c"K", k), (c"N", n), (c"ROWS", rows)],
        grid((n + rows - 1) / rows),
    )?;
    one(outputs)
}

/// `[x @ W0^T, x @ W1^T, x @ W2^T]` for one row `x [..., K]` in one launch. The caller checks
/// [`applies`] for each matrix; their scales share one dtype.
pub fn matmul_three(x: &Array, p: [Packed<'_>; 3]) -> Result<[Array; 3]> {
    let k = x.shape()[x.ndim() - 1];
    let rows = rows_per_warp();
    let ns = p.each_ref().map(|p| p.w.shape()[0]);
    let mut inputs = Vec::with_capacity(10);
    for m in &p {
        inputs.extend(operands(m)?);
    }
    inputs.push(x.clone());
    let shapes = ns.map(|n| out_shape(x, n));
    let warps: i32 = ns.iter().map(|n| (n + rows - 1) / rows).sum();
    let outputs = launch(
        Kernel::Three,
        &inputs,
        &[&shapes[0], &shapes[1], &shapes[2]],
        x.dtype(),
        side_dtype(&p)?,
        &[
            (c"K", k),
            (c"N0", ns[0]),
            (c"N1", ns[1]),
            (c"N2", ns[2]),
            (c"ROWS", rows),
        ],
        grid(warps),
    )?;
    <[Array; 3]>::try_from(outputs).map_err(|_| kernel_error("MLX returned other than 3 outputs"))
}

/// `silu(x @ G^T) * (x @ U^T)` for one row `x [..., K]` and two matrices of the same shape, in
/// one launch, in `x`'s dtype (the product rounded once, from float). The caller checks
/// [`applies`] for both; their scales share one dtype.
pub fn silu_glu(x: &Array, gate: Packed<'_>, up: Packed<'_>) -> Result<Array> {
    let n = gate.w.shape()[0];
    if up.w.shape() != gate.w.shape() {
        return Err(kernel_error("gate and up matrices of different shapes"));
    }
    let k = x.shape()[x.ndim() - 1];
    let rows = (rows_per_warp() / 2).max(1);
    let mut inputs = operands(&gate)?.to_vec();
    inputs.extend(operands(&up)?);
    inputs.push(x.clone());
    let shape = out_shape(x, n);
    let outputs = launch(
        Kernel::Silu,
        &inputs,
        &[&shape],
        x.dtype(),
        side_dtype(&[gate, up])?,
        &[(c"K", k), (c"N", n), (c"ROWS", rows)],
        grid((n + rows - 1) / rows),
    )?;
    one(outputs)
}

/// The one dtype of the matrices' scales and biases, `None` where they differ (a fused
/// kernel takes only such matrices).
pub fn shared_side_dtype(p: &[Packed<'_>]) -> Option<Dtype> {
    let d = p.first()?.scales.dtype();
    p.iter().all(|m| m.scales.dtype() == d).then_some(d)
}

fn side_dtype(p: &[Packed<'_>]) -> Result<Dtype> {
    shared_side_dtype(p).ok_or_else(|| kernel_error("matrices whose scales differ in type"))
}

fn one(outputs: Vec<Array>) -> Result<Array> {
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

/// `f` on kernel `which`, made once per thread (its handle is not shared between threads).
fn with_kernel<R>(
    which: Kernel,
    f: impl FnOnce(mlx_sys::mlx_fast_cuda_kernel) -> Result<R>,
) -> Result<R> {
    struct Made(mlx_sys::mlx_fast_cuda_kernel);
    impl Drop for Made {
        fn drop(&mut self) {
            // SAFETY: made by mlx_fast_cuda_kernel_new, freed once.
            unsafe { mlx_sys::mlx_fast_cuda_kernel_free(self.0) };
        }
    }
    thread_local! {
        static KERNELS: [OnceLock<Made>; Kernel::ALL] =
            const { [const { OnceLock::new() }; Kernel::ALL] };
    }
    KERNELS.with(|cells| {
        let cell = &cells[which.index()];
        if cell.get().is_none() {
            let made = new_kernel(which)?;
            let _ = cell.set(Made(made));
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

fn new_kernel(which: Kernel) -> Result<mlx_sys::mlx_fast_cuda_kernel> {
    let inputs = Names::new(which.inputs())?;
    let outputs = Names::new(which.outputs())?;
    let (source, header) = (without_comments(which.source()), without_comments(HEADER));
    // MLX keeps a compiled kernel under its name and template values alone (in memory and in
    // its kernel cache on disk): the name carries a hash of the text, so an edited kernel is
    // never served from an older build
    let name = format!("{}_{:08x}", which.name(), fnv1a(&[&header, &source]));
    let (name, source, header) = (cstring(&name)?, cstring(&source)?, cstring(&header)?);
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

/// `source` without its whole-line comments and blank lines, each line ending in a newline: MLX
/// copies a kernel's header and source into a new string at every launch (the text is looked up
/// by name only when the kernel is compiled), so the text it gets is kept short. The kernels'
/// sources have no line continuations, block comments or string literals.
fn without_comments(source: &str) -> String {
    source
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !t.is_empty() && !t.starts_with("//")
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The 32-bit FNV-1a hash of `parts`, in order.
fn fnv1a(parts: &[&str]) -> u32 {
    parts
        .iter()
        .flat_map(|p| p.bytes())
        .fold(0x811c_9dc5, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        })
}

/// Applies kernel `which` to `inputs` with outputs of `shapes`, all of `dtype`, the template
/// types `T` = `dtype` and `S` = `side` (the matrices' scales and biases), integer constants
/// `ints`, over `(threads in all, threads per block)`.
fn launch(
    which: Kernel,
    inputs: &[Array],
    shapes: &[&[i32]],
    dtype: Dtype,
    side: Dtype,
    ints: &[(&CStr, i32)],
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
    // SAFETY: the config is live; the shapes and names outlive each call.
    unsafe {
        for shape in shapes {
            check(
                "mlx_fast_cuda_kernel_config_add_output_arg",
                mlx_sys::mlx_fast_cuda_kernel_config_add_output_arg(
                    config.0,
                    shape.as_ptr(),
                    shape.len(),
                    dtype.into(),
                ),
            )?;
        }
        check(
            "mlx_fast_cuda_kernel_config_set_grid",
            mlx_sys::mlx_fast_cuda_kernel_config_set_grid(config.0, grid, 1, 1),
        )?;
        check(
            "mlx_fast_cuda_kernel_config_set_thread_group",
            mlx_sys::mlx_fast_cuda_kernel_config_set_thread_group(config.0, block, 1, 1),
        )?;
        // `S` (the scales' and biases' type, which the kernels deduce) is named so that it
        // enters the compiled kernel's name with `T`
        for (name, dtype) in [(c"T", dtype), (c"S", side)] {
            check(
                "mlx_fast_cuda_kernel_config_add_template_arg_dtype",
                mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_dtype(
                    config.0,
                    name.as_ptr(),
                    dtype.into(),
                ),
            )?;
        }
        for (name, value) in ints {
            check(
                "mlx_fast_cuda_kernel_config_add_template_arg_int",
                mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_int(
                    config.0,
                    name.as_ptr(),
                    *value,
                ),
            )?;
        }
    }
    let outputs = with_kernel(which, |kernel| apply(kernel, inputs, config.0))?;
    if outputs.len() != shapes.len() {
        return Err(kernel_error("MLX returned another number of outputs"));
    }
    Ok(outputs)
}

fn apply(
    kernel: mlx_sys::mlx_fast_cuda_kernel,
    inputs: &[Array],
    config: mlx_sys::mlx_fast_cuda_kernel_config,
) -> Result<Vec<Array>> {
    let inputs = crate::closure::vector_of(inputs);
    let stream = Stream::thread_local_or_default();
    // SAFETY: every handle is live for the call; `outputs` is read, then freed once.
    unsafe {
        let mut outputs = mlx_sys::mlx_vector_array_new();
        let code = mlx_sys::mlx_fast_cuda_kernel_apply(
            &mut outputs,
            kernel,
            inputs,
            config,
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
