//! Host-side references shared by the MLX tests.
#![allow(dead_code)]
use gmlx_mlx::mlx_rs::{self, error::Exception};
use gmlx_mlx::{Array, Dtype};

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

/// [`host`] where the test cannot go on without it.
pub fn host_values(a: &Array) -> Vec<f32> {
    host(a).expect("the array's values on the host")
}

/// A small deterministic generator (no dependency): uniform in [0, 1).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }

    /// `n` values uniform in `[-spread / 2, spread / 2)`.
    pub fn values(&mut self, n: i32, spread: f32) -> Vec<f32> {
        (0..n).map(|_| (self.next() - 0.5) * spread).collect()
    }
}

/// A GPU kernel's tolerance against a float64 reference: the output's own rounding in `dtype`
/// plus float32 accumulation.
pub fn tolerance(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::Float32 => 1e-5,
        Dtype::Float16 => 2e-3,
        _ => 1e-2,
    }
}

/// The largest error of `got` against `reference`, relative to each value plus the
/// reference's root mean square.
pub fn worst(got: &[f32], reference: &[f64]) -> f64 {
    let rms = (reference.iter().map(|v| v * v).sum::<f64>() / reference.len() as f64).sqrt();
    assert_eq!(got.len(), reference.len());
    got.iter()
        .zip(reference)
        .map(|(g, r)| (*g as f64 - r).abs() / (r.abs() + rms))
        .fold(0.0f64, f64::max)
}
