//! Host-side references shared by the MLX tests.
#![allow(dead_code)]
use gmlx_mlx::mlx_rs::{self, error::Exception};
use gmlx_mlx::Array;

/// `a` as float32 values, row-major.
pub fn host(a: &Array) -> Result<Vec<f32>, Exception> {
    let a = a.as_dtype(mlx_rs::Dtype::Float32)?.flatten(None, None)?;
    a.eval()?;
    Ok(a.as_slice::<f32>().to_vec())
}

/// `x [m,k] @ w[n,k]^T` on the host in f64.
pub fn host_matmul_t(x: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let mut out = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k)
                .map(|p| f64::from(x[i * k + p]) * f64::from(w[j * k + p]))
                .sum();
            out[i * n + j] = dot as f32;
        }
    }
    out
}
