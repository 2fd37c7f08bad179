//! The CUDA 4-bit matrix-vector kernels (`gmlx_mlx::cuda_qmv`) against the reference
//! dequantization (`w = scale * q + bias`, summed in float64 on the host) and MLX's own
//! quantized product, for bfloat16, float16 and float32 rows, row counts that do not fill a
//! block, and rows that start off a 16-byte boundary; the fused kernels (three matrices in one
//! launch, the SwiGLU of two) against the same reference. Runs where MLX's CUDA backend is
//! loaded (the rented GPU machine); elsewhere it says so and passes, as the kernels are never
//! taken there. MLX's `qmv` is only compared where it can read the row: in MLX 0.32.2 it faults
//! ("misaligned address") on a 2-byte element 2 bytes off a 4-byte boundary.
use gmlx_mlx::qmm::{self, Mode, Packed};
use gmlx_mlx::runtime::{backend, Backend};
use gmlx_mlx::{cuda_qmv, device, Array, Dtype};

/// A small deterministic generator (no dependency): uniform in [0, 1).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }
}

fn host(a: &Array) -> Vec<f32> {
    let a = a.as_dtype(Dtype::Float32).expect("cast");
    a.eval().expect("eval");
    a.as_slice::<f32>().to_vec()
}

/// A random `n x k` MLX affine 4-bit matrix whose scales and biases are in `dtype`: its arrays
/// and, on the host, its codes and the scales and biases as the kernel reads them.
struct Matrix {
    w: Array,
    s: Array,
    b: Array,
    words: Vec<u32>,
    scales: Vec<f32>,
    biases: Vec<f32>,
    n: i32,
    k: i32,
}

impl Matrix {
    fn random(n: i32, k: i32, dtype: Dtype, rng: &mut Lcg) -> Matrix {
        let words: Vec<u32> = (0..n * k / 8)
            .map(|_| (rng.next() * u32::MAX as f32) as u32 ^ (rng.next() * 65536.0) as u32)
            .collect();
        let groups = k / 32;
        let scales: Vec<f32> = (0..n * groups).map(|_| (rng.next() - 0.5) * 0.02).collect();
        let biases: Vec<f32> = (0..n * groups).map(|_| (rng.next() - 0.5) * 0.1).collect();
        let w = Array::from_slice(&words, &[n, k / 8]);
        let s = Array::from_slice(&scales, &[n, groups])
            .as_dtype(dtype)
            .expect("cast");
        let b = Array::from_slice(&biases, &[n, groups])
            .as_dtype(dtype)
            .expect("cast");
        let (scales, biases) = (host(&s), host(&b));
        Matrix {
            w,
            s,
            b,
            words,
            scales,
            biases,
            n,
            k,
        }
    }

    fn packed(&self) -> Packed<'_> {
        Packed {
            w: &self.w,
            scales: &self.s,
            biases: Some(&self.b),
            group_size: 32,
            bits: 4,
            mode: Mode::Affine,
        }
    }

    /// `W x` in float64 from the dequantized weights.
    fn reference(&self, xs: &[f32]) -> Vec<f64> {
        let (k, groups) = (self.k as usize, self.k as usize / 32);
        (0..self.n as usize)
            .map(|r| {
                (0..k)
                    .map(|c| {
                        let q = (self.words[r * k / 8 + c / 8] >> (4 * (c % 8))) & 15;
                        let g = r * groups + c / 32;
                        (self.scales[g] as f64 * q as f64 + self.biases[g] as f64) * xs[c] as f64
                    })
                    .sum()
            })
            .collect()
    }
}

/// A row of `k` random values of `dtype`, read from `offset` elements into a longer one.
fn row(k: i32, dtype: Dtype, offset: i32, rng: &mut Lcg) -> Array {
    let long: Vec<f32> = (0..k + 16).map(|_| (rng.next() - 0.5) * 4.0).collect();
    let long = Array::from_slice(&long, &[1, k + 16])
        .as_dtype(dtype)
        .expect("cast");
    gmlx_mlx::slicing::slice(&long, &[0, offset], &[1, offset + k]).expect("slice")
}

/// The output's own rounding, plus float32 accumulation over k terms.
fn tolerance(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::Float32 => 1e-5,
        Dtype::Float16 => 2e-3,
        _ => 1e-2,
    }
}

/// The largest error of `got` against `reference`, relative to each value plus the
/// reference's root mean square.
fn worst(got: &[f32], reference: &[f64]) -> f64 {
    let rms = (reference.iter().map(|v| v * v).sum::<f64>() / reference.len() as f64).sqrt();
    assert_eq!(got.len(), reference.len());
    got.iter()
        .zip(reference)
        .map(|(g, r)| (*g as f64 - r).abs() / (r.abs() + rms))
        .fold(0.0f64, f64::max)
}

/// Checks the kernel on an `n x k` matrix for rows of `dtype`, the row read from `offset`
/// elements into a longer one.
fn check(n: i32, k: i32, dtype: Dtype, offset: i32, rng: &mut Lcg) {
    let m = Matrix::random(n, k, dtype, rng);
    let x = row(k, dtype, offset, rng);
    let p = m.packed();
    assert!(cuda_qmv::applies(&x, &p, 1), "{n}x{k} {dtype:?}: not taken");
    eprintln!("{n} x {k}, {dtype:?}, row offset {offset}: running");
    let ours = host(&cuda_qmv::matmul(&x, p).expect("kernel"));
    let element_bytes = if dtype == Dtype::Float32 { 4 } else { 2 };
    let mlx_reads_it = (offset * element_bytes) % 4 == 0;
    let reference = m.reference(&host(&x));
    let ours_err = worst(&ours, &reference);
    let mlx_err = if mlx_reads_it {
        worst(
            &host(&qmm::quantized_matmul(&x, p, true).expect("mlx")),
            &reference,
        )
    } else {
        f64::NAN
    };
    eprintln!(
        "{n} x {k}, {dtype:?}, row offset {offset}: kernel {ours_err:.2e}, MLX qmv {mlx_err:.2e}"
    );
    let tolerance = tolerance(dtype);
    assert!(
        ours_err <= tolerance,
        "{n}x{k} {dtype:?} offset {offset}: {ours_err:.2e} > {tolerance:.0e} (MLX: {mlx_err:.2e})"
    );
}

/// Three matrices of `k` columns and `ns` rows in one launch, each against its reference.
fn check_three(ns: [i32; 3], k: i32, dtype: Dtype, offset: i32, rng: &mut Lcg) {
    let ms = ns.map(|n| Matrix::random(n, k, dtype, rng));
    let x = row(k, dtype, offset, rng);
    let ys = cuda_qmv::matmul_three(&x, [ms[0].packed(), ms[1].packed(), ms[2].packed()])
        .expect("kernel");
    let xs = host(&x);
    for (i, (m, y)) in ms.iter().zip(&ys).enumerate() {
        assert_eq!(y.shape(), &[1, m.n], "output {i}'s shape");
        let err = worst(&host(y), &m.reference(&xs));
        eprintln!("three {ns:?} x {k}, {dtype:?}, offset {offset}: output {i} {err:.2e}");
        assert!(
            err <= tolerance(dtype),
            "three {ns:?} x {k} {dtype:?}: output {i} {err:.2e}"
        );
    }
}

/// `silu(G x) * (U x)` for two `n x k` matrices in one launch against the reference.
fn check_silu(n: i32, k: i32, dtype: Dtype, rng: &mut Lcg) {
    let (g, u) = (
        Matrix::random(n, k, dtype, rng),
        Matrix::random(n, k, dtype, rng),
    );
    let x = row(k, dtype, 0, rng);
    let y = host(&cuda_qmv::silu_glu(&x, g.packed(), u.packed()).expect("kernel"));
    let xs = host(&x);
    let reference: Vec<f64> = g
        .reference(&xs)
        .iter()
        .zip(u.reference(&xs))
        .map(|(gate, up)| gate / (1.0 + (-gate).exp()) * up)
        .collect();
    let err = worst(&y, &reference);
    eprintln!("silu {n} x {k}, {dtype:?}: {err:.2e}");
    assert!(
        err <= tolerance(dtype),
        "silu {n} x {k} {dtype:?}: {err:.2e}"
    );
}

#[test]
fn the_cuda_4bit_product_matches_the_reference_dequantization() {
    if backend().ok() != Some(Backend::Cuda) {
        eprintln!("skipped: the MLX runtime in use has no CUDA backend");
        return;
    }
    std::env::remove_var(cuda_qmv::SWITCH_VAR);
    device::use_device(device::DeviceChoice::Gpu).expect("gpu");
    let mut rng = Lcg(7);
    // a row at a 4-byte but not 16-byte boundary, then one at a 2-byte boundary
    check(258, 4096, Dtype::Float32, 1, &mut rng);
    check(258, 4096, Dtype::Bfloat16, 2, &mut rng);
    for dtype in [Dtype::Bfloat16, Dtype::Float16, Dtype::Float32] {
        for (n, k) in [(1024, 4096), (301, 4096), (64, 14336), (4, 32)] {
            check(n, k, dtype, 0, &mut rng);
        }
        check(258, 4096, dtype, 1, &mut rng);
        check_three([512, 129, 131], 4096, dtype, 0, &mut rng);
        check_three([96, 32, 32], 576, dtype, 1, &mut rng);
        check_silu(301, 4096, dtype, &mut rng);
        check_silu(64, 14336, dtype, &mut rng);
    }
}
