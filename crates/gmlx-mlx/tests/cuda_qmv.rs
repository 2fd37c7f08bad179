//! The CUDA 4-bit matrix-vector kernels (`gmlx_mlx::cuda_qmv`) against the reference
//! dequantization (`w = scale * q + bias`, summed in float64 on the host) and MLX's own
//! quantized product, for bfloat16, float16 and float32 rows, row counts that do not fill a
//! block, and rows that start off a 16-byte boundary; the fused kernels (three matrices in one
//! launch, the SwiGLU of two, each also with the RMSNorm of its row in the launch; a product
//! with the residual added) against the same reference, the normed ones of MLX's own
//! `rms_norm` of the row (for 16-bit rows, unless `GMLX_CUDA_QMV_Q8=0`, the normed kernels and
//! the one-matrix ones up to 4 096 columns, or as wide as `GMLX_CUDA_QMV_Q8_APART` says, against
//! the row rounded to 8 bits per value as they round it; rows of 14 336 are rounded apart,
//! and `GMLX_CUDA_QMV_Q8_SPLIT` has warps share those products' rows; the gate-up kernel that
//! hands the down product its SwiGLU so rounded gives the same words). Runs where MLX's CUDA
//! backend is loaded (the rented GPU machine); elsewhere it says so and passes, as the kernels
//! are never taken there. MLX's `qmv` is only compared where it can read the row: in MLX
//! 0.32.2 it faults ("misaligned address") on a 2-byte element 2 bytes off a 4-byte boundary.
mod common;

use common::{host_values as host, tolerance, worst, Lcg};
use gmlx_mlx::cuda_warm::WarmSet;
use gmlx_mlx::qmm::{self, Mode, Packed};
use gmlx_mlx::runtime::{backend, Backend};
use gmlx_mlx::{cuda_attention, cuda_qmv, device, fast, Array, Dtype};

/// A random `n x k` MLX affine 4-bit matrix whose scales and biases are in `dtype`: its arrays
/// and, on the host, its codes and the scales and biases as the kernel reads them. About half
/// are centered (biases -8 times the scales, as Q4_0 loads), which the kernels take without
/// reading the biases (unless `GMLX_CUDA_QMV_CENTERED=0`).
struct Matrix {
    w: Array,
    s: Array,
    b: Array,
    words: Vec<u32>,
    scales: Vec<f32>,
    biases: Vec<f32>,
    n: i32,
    k: i32,
    centered: bool,
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
        let centered = rng.next() < 0.5;
        let b = match centered {
            true => s.multiply(Array::from_f32(-8.0)).expect("scale"),
            false => Array::from_slice(&biases, &[n, groups]),
        }
        .as_dtype(dtype)
        .expect("cast");
        let (scales, biases) = (host(&s), host(&b));
        if centered {
            assert!(scales.iter().zip(&biases).all(|(s, b)| *b == -8.0 * s));
        }
        Matrix {
            w,
            s,
            b,
            words,
            scales,
            biases,
            n,
            k,
            centered,
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
            centered: self.centered,
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
    let reference = m.reference(&multiplied(
        host(&x),
        cuda_qmv::one_matrix_rounds_row(dtype, k),
    ));
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

/// An RMSNorm weight of `k` values around 1 in `dtype`.
fn norm_weight(k: i32, dtype: Dtype, rng: &mut Lcg) -> Array {
    let w: Vec<f32> = (0..k).map(|_| 0.5 + rng.next()).collect();
    Array::from_slice(&w, &[k]).as_dtype(dtype).expect("cast")
}

/// The three products of `norm(x)` in one launch against the reference dequantization of
/// MLX's own `rms_norm` of the row (what the unfused route multiplies).
fn check_norm_three(ns: [i32; 3], k: i32, dtype: Dtype, rng: &mut Lcg) {
    let ms = ns.map(|n| Matrix::random(n, k, dtype, rng));
    let x = row(k, dtype, 1, rng);
    let weight = norm_weight(k, dtype, rng);
    let norm = cuda_qmv::Norm {
        weight: &weight,
        eps: 1e-5,
    };
    assert!(
        cuda_qmv::norm_fits(&x, norm),
        "{k} {dtype:?}: norm not taken"
    );
    // a weight wider than the row would make MLX's rms_norm promote: declined
    let wider = norm_weight(k, Dtype::Float32, rng);
    let wider = cuda_qmv::Norm {
        weight: &wider,
        eps: 1e-5,
    };
    assert_eq!(cuda_qmv::norm_fits(&x, wider), dtype == Dtype::Float32);
    let ys =
        cuda_qmv::norm_matmul_three(&x, norm, [ms[0].packed(), ms[1].packed(), ms[2].packed()])
            .expect("kernel");
    let normed = multiplied(
        host(&fast::rms_norm(&x, Some(&weight), 1e-5).expect("rms_norm")),
        cuda_qmv::q8_activations(dtype),
    );
    for (i, (m, y)) in ms.iter().zip(&ys).enumerate() {
        assert_eq!(y.shape(), &[1, m.n], "output {i}'s shape");
        let err = worst(&host(y), &m.reference(&normed));
        eprintln!("norm three {ns:?} x {k}, {dtype:?}: output {i} {err:.2e}");
        assert!(
            err <= tolerance(dtype),
            "norm three {ns:?} x {k} {dtype:?}: output {i} {err:.2e}"
        );
    }
}

/// [`check_norm_three`] with the first two products rotated at `position` in the launch (heads
/// of `head_dim` rows, the first `dims` of each rotated), against the reference rotated in
/// float64 by the angle MLX computes (a float32 product of position and frequency).
fn check_norm_rope_three(
    n_heads: [i32; 2],
    head_dim: i32,
    dims: i32,
    k: i32,
    dtype: Dtype,
    rng: &mut Lcg,
) {
    let ns = [
        n_heads[0] * head_dim,
        n_heads[1] * head_dim,
        n_heads[1] * head_dim,
    ];
    let ms = ns.map(|n| Matrix::random(n, k, dtype, rng));
    let x = row(k, dtype, 0, rng);
    let weight = norm_weight(k, dtype, rng);
    let norm = cuda_qmv::Norm {
        weight: &weight,
        eps: 1e-5,
    };
    let inv_freqs: Vec<f32> = (0..dims / 2)
        .map(|i| 500_000f32.powf(-2.0 * i as f32 / dims as f32))
        .collect();
    let inv_array = Array::from_slice(&inv_freqs, &[dims / 2]);
    let position = 1234;
    // the position as the GPU copies it (GMLX_CUDA_POSITION_COPY) for float32 rows, as the host
    // makes it for the others
    let position_array = if dtype == Dtype::Float32 {
        cuda_attention::copied_position(position).expect("copied")
    } else {
        Array::from_slice(&[position], &[1])
    };
    let rope = cuda_qmv::Rotation {
        inv_freqs: &inv_array,
        position: &position_array,
        head_dim,
        dims,
        position_scale: 1.0,
    };
    let packed = [ms[0].packed(), ms[1].packed(), ms[2].packed()];
    assert!(
        cuda_qmv::rotation_fits(&x, rope, &packed),
        "rotation not taken"
    );
    let ys = cuda_qmv::norm_rope_matmul_three(&x, norm, rope, packed).expect("kernel");
    let normed = multiplied(
        host(&fast::rms_norm(&x, Some(&weight), 1e-5).expect("rms_norm")),
        cuda_qmv::q8_activations(dtype),
    );
    for (i, (m, y)) in ms.iter().zip(&ys).enumerate() {
        assert_eq!(
            y.shape(),
            &[m.n / head_dim, 1, head_dim],
            "output {i}: not in heads"
        );
        let mut reference = m.reference(&normed);
        if i < 2 {
            for head in reference.chunks_exact_mut(head_dim as usize) {
                for (j, &f) in inv_freqs.iter().enumerate() {
                    let theta = (position as f32 * f) as f64;
                    let (a, b) = (head[2 * j], head[2 * j + 1]);
                    head[2 * j] = a * theta.cos() - b * theta.sin();
                    head[2 * j + 1] = a * theta.sin() + b * theta.cos();
                }
            }
        }
        let err = worst(&host(y), &reference);
        eprintln!("norm rope three {ns:?} x {k} (rotating {dims} of {head_dim}), {dtype:?}: output {i} {err:.2e}");
        assert!(
            err <= tolerance(dtype),
            "norm rope three {ns:?} x {k} {dtype:?}: output {i} {err:.2e}"
        );
    }
}

/// `silu(G n) * (U n)` of `n = norm(x)` in one launch, as [`check_norm_three`].
fn check_norm_silu(n: i32, k: i32, dtype: Dtype, rng: &mut Lcg) {
    let (g, u) = (
        Matrix::random(n, k, dtype, rng),
        Matrix::random(n, k, dtype, rng),
    );
    let x = row(k, dtype, 0, rng);
    let weight = norm_weight(k, dtype, rng);
    let norm = cuda_qmv::Norm {
        weight: &weight,
        eps: 1e-6,
    };
    let y = host(&cuda_qmv::norm_silu_glu(&x, norm, g.packed(), u.packed()).expect("kernel"));
    let normed = multiplied(
        host(&fast::rms_norm(&x, Some(&weight), 1e-6).expect("rms_norm")),
        cuda_qmv::q8_activations(dtype),
    );
    let reference: Vec<f64> = g
        .reference(&normed)
        .iter()
        .zip(u.reference(&normed))
        .map(|(gate, up)| gate / (1.0 + (-gate).exp()) * up)
        .collect();
    let err = worst(&y, &reference);
    eprintln!("norm silu {n} x {k}, {dtype:?}: {err:.2e}");
    assert!(
        err <= tolerance(dtype),
        "norm silu {n} x {k} {dtype:?}: {err:.2e}"
    );
}

/// The gate-up kernel's SwiGLU rounded to 8-bit activations in its own launch
/// ([`cuda_qmv::norm_silu_rounded`]) against what [`cuda_qmv::round_row`] makes of
/// [`cuda_qmv::norm_silu_glu`]'s row: the same words (codes, scales and scaled sums). Where the
/// down product reads its row so rounded (`apart`, [`cuda_qmv::one_matrix_rounds_row`] by a
/// launch of its own), the feed-forward half on it ([`cuda_qmv::norm_silu_down_add`]) gives
/// exactly the SwiGLU's product and add ([`cuda_qmv::matmul_add`]).
fn check_norm_silu_down_add(n: i32, k: i32, dtype: Dtype, apart: bool, rng: &mut Lcg) {
    let (g, u, d) = (
        Matrix::random(n, k, dtype, rng),
        Matrix::random(n, k, dtype, rng),
        Matrix::random(k, n, dtype, rng),
    );
    let x = row(k, dtype, 0, rng);
    let weight = norm_weight(k, dtype, rng);
    let norm = cuda_qmv::Norm {
        weight: &weight,
        eps: 1e-6,
    };
    let silu = cuda_qmv::norm_silu_glu(&x, norm, g.packed(), u.packed()).expect("kernel");
    let apart_words = words(&cuda_qmv::round_row(&silu, n).expect("kernel"));
    // each block size the model's launch may take (8 warps of 4 rows to 32 of 1; the row normed
    // by the plain kernel's warps in each)
    for warps in [8, 16, 32] {
        let fused =
            cuda_qmv::norm_silu_rounded(&x, norm, g.packed(), u.packed(), warps).expect("kernel");
        let fused_words = words(&fused);
        let differing = fused_words
            .iter()
            .zip(&apart_words)
            .filter(|(a, b)| a != b)
            .count();
        eprintln!(
            "norm silu rounded {n} x {k}, {dtype:?}, {warps} warps: {differing} of {} words differ",
            fused_words.len()
        );
        assert_eq!(
            fused_words, apart_words,
            "norm silu rounded {n} x {k} {dtype:?} {warps} warps: not the row rounded apart"
        );
    }
    if apart {
        let r = row(k, dtype, 3, rng);
        let y = cuda_qmv::norm_silu_down_add(&x, norm, g.packed(), u.packed(), d.packed(), &r)
            .expect("kernel");
        let two_launches = cuda_qmv::matmul_add(&silu, d.packed(), &r, None).expect("kernel");
        assert_eq!(
            host(&y),
            host(&two_launches),
            "norm silu down add {n} x {k} {dtype:?}: not the down product of the SwiGLU"
        );
    }
}

/// A uint32 array's words on the host.
fn words(a: &Array) -> Vec<u32> {
    a.eval().expect("eval");
    a.as_slice::<u32>().to_vec()
}

/// The values of a row that the kernels multiply: the row, or where they round it
/// (`rounded`: [`cuda_qmv::q8_activations`] for the normed kernels,
/// [`cuda_qmv::one_matrix_rounds_row`] for the one-matrix ones) its 8-bit rounding
/// ([`q8_values`]).
fn multiplied(values: Vec<f32>, rounded: bool) -> Vec<f32> {
    match rounded {
        true => q8_values(&values),
        false => values,
    }
}

/// The values the kernels multiply where they round the row to 8 bits: each group of 32 rounded to
/// 8 bits as llama.cpp's q8_1 rounds them (`d = max|x| / 127`, `q = round(x * (1 / d))` half
/// away from zero, in float32; zeros where `d` is not a normal float), then `d * q`.
fn q8_values(xs: &[f32]) -> Vec<f32> {
    xs.chunks(32)
        .flat_map(|group| {
            let amax = group.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d >= f32::MIN_POSITIVE { 1.0 / d } else { 0.0 };
            group.iter().map(move |v| d * (v * id).round())
        })
        .collect()
}

/// `r + W x` in one launch against the reference, and exactly what MLX's add of the
/// one-matrix kernel's product gives.
fn check_add(n: i32, k: i32, dtype: Dtype, rng: &mut Lcg) {
    let m = Matrix::random(n, k, dtype, rng);
    let x = row(k, dtype, 0, rng);
    let r = row(n, dtype, 3, rng);
    let y = cuda_qmv::matmul_add(&x, m.packed(), &r, None).expect("kernel");
    let rs = host(&r);
    let reference: Vec<f64> = m
        .reference(&multiplied(
            host(&x),
            cuda_qmv::one_matrix_rounds_row(dtype, k),
        ))
        .iter()
        .zip(&rs)
        .map(|(p, r)| p + *r as f64)
        .collect();
    let err = worst(&host(&y), &reference);
    eprintln!("add {n} x {k}, {dtype:?}: {err:.2e}");
    assert!(
        err <= tolerance(dtype),
        "add {n} x {k} {dtype:?}: {err:.2e}"
    );
    let unfused = r
        .add(cuda_qmv::matmul(&x, m.packed()).expect("kernel"))
        .expect("add");
    assert_eq!(
        host(&y),
        host(&unfused),
        "add {n} x {k} {dtype:?}: not MLX's add"
    );
    // with blocks added that pull three matrices into L2 for a next launch: the same values
    let next = [0, 1, 2].map(|_| Matrix::random(n, k, dtype, rng));
    let set = WarmSet::of(&next.each_ref().map(|m| m.packed())).expect("three matrices");
    let warmed = cuda_qmv::matmul_add(&x, m.packed(), &r, Some(&set)).expect("kernel");
    assert_eq!(
        host(&warmed),
        host(&y),
        "add {n} x {k} {dtype:?}: warming L2 changed the product"
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
        check_add(301, 4096, dtype, &mut rng);
        check_add(4096, 14336, dtype, &mut rng);
        check_norm_three([512, 129, 131], 4096, dtype, &mut rng);
        check_norm_three([96, 32, 32], 576, dtype, &mut rng);
        check_norm_silu(301, 4096, dtype, &mut rng);
        check_norm_silu(96, 576, dtype, &mut rng);
        check_norm_silu(4, 32, dtype, &mut rng);
        check_norm_rope_three([32, 8], 128, 128, 4096, dtype, &mut rng);
        check_norm_rope_three([9, 3], 64, 32, 576, dtype, &mut rng);
    }
    for dtype in [Dtype::Bfloat16, Dtype::Float16] {
        if cuda_qmv::q8_activations(dtype) {
            // 14 336 columns are past the rows the one-matrix kernels round in each block
            let apart = cuda_qmv::one_matrix_rounds_row(dtype, 14336);
            check_norm_silu_down_add(14336, 4096, dtype, apart, &mut rng);
            check_norm_silu_down_add(1536, 576, dtype, false, &mut rng);
            check_norm_silu_down_add(64, 32, dtype, false, &mut rng);
        }
    }
}
