//! Q6_K matrices on CUDA in the file's own blocks (`kernels/q6k*.cu`), through MLX's
//! custom-kernel API. MLX's affine form cannot hold Q6_K (a scale per 16 weights, MLX's
//! smallest group is 32), so elsewhere a Q6_K matrix is dequantized at load: a Llama-3-8B output
//! head of 0.43 GB in the file became 1.05 GB of bfloat16, read in full by every decode step
//! (`docs/performance.md`). On MLX's CUDA backend [`QuantWeight`](crate::QuantWeight) keeps the
//! blocks instead, `uint8 [rows, cols / 256 * 210]`: one row is multiplied by [`matmul`] (a warp
//! per output row, reading the blocks as they are), more rows by the dense product of
//! [`dequantize`] (the weights as the reference dequantizes them, rounded to the activation
//! dtype, as the dense form held them). On by default since its GPU test passed on an H100
//! and the 8B decode read faster with it (`bench/runs/2026-12-07-h100/`); `GMLX_CUDA_Q6K=0`
//! dequantizes at load as before.
use std::sync::OnceLock;

use mlx_rs::{Array, Dtype};

use crate::cuda_kernel::{self, error, single, Spec};
use crate::error::Result;

/// The environment variable that turns the kernels off (`0`): Q6_K matrices dequantized at load
/// on CUDA too instead of kept in their blocks.
pub const SWITCH_VAR: &str = "GMLX_CUDA_Q6K";

/// Bytes of one Q6_K block of 256 weights.
pub const BLOCK_BYTES: i32 = 210;

const HEADER: &str = include_str!("kernels/q6k.cuh");

static MATMUL: Spec = Spec {
    name: "gmlx_q6k_mv",
    source: include_str!("kernels/q6k_mv.cu"),
    header: HEADER,
    inputs: &["w", "x"],
    outputs: &["y"],
};

static DEQUANTIZE: Spec = Spec {
    name: "gmlx_q6k_dequantize",
    source: include_str!("kernels/q6k_dequantize.cu"),
    header: HEADER,
    inputs: &["w"],
    outputs: &["y"],
};

/// Warps per thread block of the matrix-vector kernel (a warp per output row).
const WARPS_PER_BLOCK: i32 = 8;

/// Threads per block of the dequantization (a thread per 32 weights).
const DEQUANTIZE_THREADS: i32 = 256;

/// Blocks each lane of the matrix-vector kernel loads before it uses any:
/// `GMLX_CUDA_Q6K_INFLIGHT` (1 to 8), 4 by default (fewer hold fewer registers, so more warps
/// fit a multiprocessor).
fn inflight() -> i32 {
    static INFLIGHT: OnceLock<i32> = OnceLock::new();
    *INFLIGHT.get_or_init(|| cuda_kernel::int_setting("GMLX_CUDA_Q6K_INFLIGHT", 1..=8, 4))
}

/// Whether Q6_K matrices are kept in their blocks now: MLX's CUDA backend on the GPU, unless
/// `GMLX_CUDA_Q6K=0`.
pub fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| cuda_kernel::switched_on(SWITCH_VAR) && cuda_kernel::on_cuda())
        && crate::device::current() == Some(crate::device::DeviceKind::Gpu)
}

/// Whether [`matmul`] takes `x [..., cols]` now: on the GPU of MLX's CUDA backend (a weight kept
/// in blocks there may be used after the device changed to the CPU), one row of a float
/// dtype, not training (the kernel has no VJP).
pub fn applies(x: &Array, cols: i32) -> bool {
    on_gpu() && takes(x, cols)
}

/// MLX's CUDA backend with the GPU as the default device: where the kernels can run.
fn on_gpu() -> bool {
    crate::device::current() == Some(crate::device::DeviceKind::Gpu) && cuda_kernel::on_cuda()
}

/// [`applies`]'s operand checks: one row of `cols` values of a float dtype, not training.
fn takes(x: &Array, cols: i32) -> bool {
    x.shape().iter().rev().skip(1).all(|&d| d == 1)
        && x.shape().last() == Some(&cols)
        && matches!(x.dtype(), Dtype::Bfloat16 | Dtype::Float16 | Dtype::Float32)
        && !crate::quant::training()
}

fn check_blocks(spec: &Spec, blocks: &Array, cols: i32) -> Result<()> {
    let row_bytes = cols / 256 * BLOCK_BYTES;
    if cols <= 0 || cols % 256 != 0 || blocks.ndim() != 2 || blocks.shape()[1] != row_bytes {
        return Err(error(spec, "blocks that are not whole Q6_K rows"));
    }
    if blocks.dtype() != Dtype::Uint8 {
        return Err(error(spec, "blocks that are not bytes"));
    }
    Ok(())
}

/// `x @ W^T` for one row `x [..., cols]` and a Q6_K matrix `W` in its blocks `[rows, cols / 256
/// * 210]`: `[..., rows]` in `x`'s dtype (the sum in float, rounded once). The caller checks
/// [`applies`].
pub fn matmul(x: &Array, blocks: &Array, cols: i32) -> Result<Array> {
    check_blocks(&MATMUL, blocks, cols)?;
    if !applies(x, cols) {
        return Err(error(&MATMUL, "a row of another width or type"));
    }
    let rows = blocks.shape()[0];
    let mut shape = x.shape().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = rows;
    }
    let blocks_of_threads = (rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
    let threads = 32 * WARPS_PER_BLOCK;
    let outputs = cuda_kernel::launch(
        &MATMUL,
        &[blocks.clone(), x.clone()],
        &[(&shape, x.dtype())],
        &[(c"T", x.dtype())],
        &[(c"K", cols), (c"N", rows), (c"INFLIGHT", inflight())],
        (blocks_of_threads * threads, threads),
    )?;
    single(&MATMUL, outputs)
}

/// The weights of Q6_K rows `blocks [..., rows, cols / 256 * 210]` as `[..., rows, cols]` of
/// `dtype`: each `(d * scale) * (q - 32)` in float, rounded to `dtype` (the reference
/// dequantization's values, as the dense form holds them). Off the GPU (a weight loaded there,
/// used after the device changed to the CPU) the reference itself dequantizes them on the host.
pub fn dequantize(blocks: &Array, cols: i32, dtype: Dtype) -> Result<Array> {
    let shape = blocks.shape().to_vec();
    let Some((&row_bytes, lead)) = shape.split_last() else {
        return Err(error(&DEQUANTIZE, "no rows"));
    };
    let rows: i32 = lead.iter().product();
    let flat = blocks.reshape(&[rows, row_bytes])?;
    check_blocks(&DEQUANTIZE, &flat, cols)?;
    if !matches!(dtype, Dtype::Bfloat16 | Dtype::Float16 | Dtype::Float32) {
        return Err(error(&DEQUANTIZE, "an output that is not a float type"));
    }
    let mut out_shape = lead.to_vec();
    out_shape.push(cols);
    if rows == 0 {
        return Ok(mlx_rs::ops::zeros_dtype(&out_shape, dtype)?);
    }
    if !on_gpu() {
        return host_dequantize(&flat, &out_shape, dtype);
    }
    let parts = i64::from(rows) * i64::from(cols / 256) * 8;
    let threads =
        i32::try_from((parts + i64::from(DEQUANTIZE_THREADS) - 1) / i64::from(DEQUANTIZE_THREADS))
            .ok()
            .and_then(|b| b.checked_mul(DEQUANTIZE_THREADS))
            .ok_or_else(|| error(&DEQUANTIZE, "a matrix too large for one launch"))?;
    let outputs = cuda_kernel::launch(
        &DEQUANTIZE,
        &[flat],
        &[(&out_shape, dtype)],
        &[(c"T", dtype)],
        &[(c"K", cols)],
        (threads, DEQUANTIZE_THREADS),
    )?;
    single(&DEQUANTIZE, outputs)
}

/// [`dequantize`] on the host: `flat [rows, row bytes]` (checked whole Q6_K rows) by the GGUF
/// reference, as `out_shape` of `dtype`.
fn host_dequantize(flat: &Array, out_shape: &[i32], dtype: Dtype) -> Result<Array> {
    let flat = flat.contiguous()?;
    flat.eval()?;
    let n: u64 = out_shape.iter().map(|&d| d as u64).product();
    let values = gmlx_gguf::codec::dequantize(gmlx_gguf::GgmlType::Q6_K, flat.as_slice::<u8>(), n)
        .map_err(|e| error(&DEQUANTIZE, &e.to_string()))?;
    Ok(Array::from_slice(&values, out_shape).as_dtype(dtype)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeros(shape: &[i32], dtype: Dtype) -> Array {
        mlx_rs::ops::zeros_dtype(shape, dtype).expect("zeros")
    }

    #[test]
    fn the_vector_kernel_takes_one_float_row_of_the_matrix_width() {
        assert!(takes(&zeros(&[1, 1, 512], Dtype::Bfloat16), 512));
        assert!(takes(&zeros(&[512], Dtype::Float32), 512));
        assert!(!takes(&zeros(&[2, 512], Dtype::Float16), 512), "two rows");
        assert!(
            !takes(&zeros(&[1, 256], Dtype::Float32), 512),
            "another width"
        );
        assert!(
            !takes(&zeros(&[1, 512], Dtype::Int32), 512),
            "not a float row"
        );
        let _training = crate::quant::training_products();
        assert!(!takes(&zeros(&[1, 512], Dtype::Float32), 512), "training");
    }

    #[test]
    fn off_the_gpu_the_kernel_is_not_taken() {
        if !on_gpu() {
            assert!(!applies(&zeros(&[1, 512], Dtype::Float32), 512));
        }
    }

    #[test]
    fn off_the_gpu_blocks_are_dequantized_by_the_reference() {
        // two rows of 512 weights: four blocks of varied bytes, each with a finite scale d
        let mut bytes: Vec<u8> = (0..4 * BLOCK_BYTES as usize)
            .map(|i| (i * 37 % 251) as u8)
            .collect();
        for block in bytes.chunks_mut(BLOCK_BYTES as usize) {
            block[208..].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
        }
        let reference =
            gmlx_gguf::codec::dequantize(gmlx_gguf::GgmlType::Q6_K, &bytes, 1024).expect("ref");
        let blocks = Array::from_slice(&bytes, &[2, 2 * BLOCK_BYTES]);
        for dtype in [Dtype::Float32, Dtype::Bfloat16] {
            let w = dequantize(&blocks, 512, dtype).expect("host dequantization");
            assert_eq!(w.shape(), [2, 512]);
            assert_eq!(w.dtype(), dtype);
            let expected = Array::from_slice(&reference, &[2, 512])
                .as_dtype(dtype)
                .expect("cast");
            // widening to float32 is exact, so equal floats are equal values of `dtype`
            let widened = |a: &Array| -> Vec<f32> {
                a.as_dtype(Dtype::Float32)
                    .expect("widen")
                    .as_slice::<f32>()
                    .to_vec()
            };
            assert_eq!(widened(&w), widened(&expected), "{dtype:?}");
        }
    }

    #[test]
    fn blocks_must_be_whole_q6k_rows_of_bytes() {
        assert!(check_blocks(&MATMUL, &zeros(&[3, 420], Dtype::Uint8), 512).is_ok());
        assert!(check_blocks(&MATMUL, &zeros(&[3, 419], Dtype::Uint8), 512).is_err());
        assert!(check_blocks(&MATMUL, &zeros(&[3, 420], Dtype::Uint8), 500).is_err());
        assert!(check_blocks(&MATMUL, &zeros(&[3, 420], Dtype::Int32), 512).is_err());
        assert!(check_blocks(&MATMUL, &zeros(&[2, 3, 420], Dtype::Uint8), 512).is_err());
    }
}
