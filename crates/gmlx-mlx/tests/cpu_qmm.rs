//! The host quantized matmul against MLX's own dequantization times a float64 host matmul,
//! and its independence from the number of rows it is batched with.
mod common;

use common::{host, host_matmul_t};
use gmlx_mlx::mlx_rs::ops::indexing::IndexOp;
use gmlx_mlx::mlx_rs::{self, error::Exception, random, Device};
use gmlx_mlx::qmm::{Mode, Packed};
use gmlx_mlx::{cpu_qmm, ops, Array};

type R<T> = Result<T, Box<dyn std::error::Error>>;

fn randn(shape: &[i32], seed: u64) -> Result<Array, Exception> {
    random::normal::<f32>(shape, None, None, &random::key(seed)?)
}

struct Quantized {
    w: Array,
    scales: Array,
    biases: Array,
    group_size: i32,
    bits: i32,
}

impl Quantized {
    fn new(n: i32, k: i32, group_size: i32, bits: i32, seed: u64) -> R<Quantized> {
        let (w, scales, biases) = ops::quantize(&randn(&[n, k], seed)?, group_size, bits)?;
        Ok(Quantized {
            w,
            scales,
            biases,
            group_size,
            bits,
        })
    }

    fn packed(&self) -> Packed<'_> {
        Packed {
            w: &self.w,
            scales: &self.scales,
            biases: Some(&self.biases),
            group_size: self.group_size,
            bits: self.bits,
            mode: Mode::Affine,
            centered: false,
        }
    }

    /// `x @ dequantize(W)^T` in float64 on the host.
    fn reference(&self, x: &Array) -> R<Vec<f32>> {
        let w = host(&gmlx_mlx::qmm::dequantize(self.packed())?)?;
        let xs = host(x)?;
        let k = *x.shape().last().unwrap_or(&0) as usize;
        Ok(host_matmul_t(&xs, &w, xs.len() / k, w.len() / k, k))
    }
}

/// The kernels this processor runs (the portable one everywhere).
fn kernels() -> Vec<cpu_qmm::Kernel> {
    let all: Vec<_> = cpu_qmm::Kernel::ALL
        .into_iter()
        .filter(|k| k.available())
        .collect();
    assert!(all.contains(&cpu_qmm::Kernel::Portable));
    assert!(all.contains(&cpu_qmm::Kernel::chosen()));
    all
}

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / scale)
        .fold(0.0, f32::max)
}

#[test]
fn matches_dequantized_product_for_every_bit_width_and_group_size() -> R<()> {
    Device::set_default(&Device::cpu());
    for bits in [2, 3, 4, 5, 6, 8] {
        for group_size in [32, 64, 128] {
            // 70 features: not a multiple of the kernel's task size
            let q = Quantized::new(70, 256, group_size, bits, 7)?;
            for rows in [1, 3, 8, 40] {
                let x = randn(&[rows, 256], 11)?;
                // past its row limit the kernel is not routed to, but still exact
                assert_eq!(
                    cpu_qmm::handles(&x, &q.packed(), rows as usize),
                    rows as usize <= cpu_qmm::max_rows(bits)
                );
                let want = q.reference(&x)?;
                for kernel in kernels() {
                    let got = host(&cpu_qmm::matmul_with(&x, q.packed(), kernel)?)?;
                    let d = max_rel_diff(&got, &want);
                    assert!(
                        d < 1e-5,
                        "{kernel:?}: bits {bits} group {group_size} rows {rows}: {d}"
                    );
                }
            }
        }
    }
    Ok(())
}

#[test]
fn float16_scales_and_biases_give_the_float32_results() -> R<()> {
    Device::set_default(&Device::cpu());
    for (bits, group_size) in [(4, 32), (8, 32), (5, 64), (4, 128)] {
        // scales and biases that are exactly float16 (as the legacy quants' are)
        let q = Quantized::new(70, 256, group_size, bits, 21)?;
        let half = |a: &Array| a.as_dtype(mlx_rs::Dtype::Float16);
        let (s16, b16) = (half(&q.scales)?, half(&q.biases)?);
        let (s32, b32) = (
            s16.as_dtype(mlx_rs::Dtype::Float32)?,
            b16.as_dtype(mlx_rs::Dtype::Float32)?,
        );
        let single = Packed {
            scales: &s32,
            biases: Some(&b32),
            ..q.packed()
        };
        let compact = Packed {
            scales: &s16,
            biases: Some(&b16),
            ..q.packed()
        };
        assert!(cpu_qmm::dequantizes(&compact));
        assert_eq!(
            host(&cpu_qmm::dequantize(compact)?)?,
            host(&cpu_qmm::dequantize(single)?)?
        );
        for rows in [1, 8, 13] {
            let x = randn(&[rows, 256], 23)?;
            for kernel in kernels() {
                assert_eq!(
                    host(&cpu_qmm::matmul_with(&x, compact, kernel)?)?,
                    host(&cpu_qmm::matmul_with(&x, single, kernel)?)?,
                    "{kernel:?} bits {bits} group {group_size} rows {rows}"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn keeps_leading_dimensions_and_reads_strided_views() -> R<()> {
    Device::set_default(&Device::cpu());
    let q = Quantized::new(48, 128, 64, 4, 3)?;
    // [128, 2, 3] transposed to [3, 2, 128]: a strided view of x
    let x = randn(&[128, 2, 3], 5)?.transpose()?;
    let y = cpu_qmm::matmul(&x, q.packed())?;
    assert_eq!(y.shape(), &[3, 2, 48]);
    let d = max_rel_diff(&host(&y)?, &q.reference(&x.contiguous()?)?);
    assert!(d < 1e-5, "{d}");
    Ok(())
}

#[test]
fn a_rows_result_does_not_depend_on_its_batch() -> R<()> {
    Device::set_default(&Device::cpu());
    // 5 rows read each block's codes together; 13 in a group of 8 and one of 5
    for rows in [5, 13] {
        for (bits, group_size) in [(4, 32), (8, 64)] {
            let q = Quantized::new(96, 576, group_size, bits, 9)?;
            let batch = randn(&[rows, 576], 13)?;
            for kernel in kernels() {
                let together = host(&cpu_qmm::matmul_with(&batch, q.packed(), kernel)?)?;
                for r in 0..rows {
                    let alone = batch.index(r..r + 1);
                    let alone = host(&cpu_qmm::matmul_with(&alone, q.packed(), kernel)?)?;
                    assert_eq!(
                        alone,
                        together[r as usize * 96..(r as usize + 1) * 96],
                        "{kernel:?} bits {bits} row {r} of {rows}"
                    );
                }
            }
        }
    }
    Ok(())
}

#[test]
fn refuses_what_it_does_not_handle() -> R<()> {
    Device::set_default(&Device::cpu());
    let q = Quantized::new(32, 128, 32, 4, 1)?;
    let x = randn(&[1, 128], 2)?;
    assert!(cpu_qmm::handles(&x, &q.packed(), 1));
    assert!(!cpu_qmm::handles(
        &x.as_dtype(mlx_rs::Dtype::Bfloat16)?,
        &q.packed(),
        1
    ));
    assert!(!cpu_qmm::handles(&x, &q.packed(), cpu_qmm::MAX_ROWS + 1));
    let five = Quantized::new(32, 128, 32, 5, 1)?;
    assert!(cpu_qmm::handles(&x, &five.packed(), cpu_qmm::MAX_ROWS + 1));
    assert!(!cpu_qmm::handles(
        &x,
        &five.packed(),
        cpu_qmm::MAX_ROWS_ODD_BITS + 1
    ));
    let mxfp4 = Packed {
        mode: Mode::Mxfp4,
        biases: None,
        ..q.packed()
    };
    assert!(!cpu_qmm::handles(&x, &mxfp4, 1));
    Ok(())
}

#[test]
fn a_packed_weight_that_does_not_add_up_is_an_error() -> R<()> {
    Device::set_default(&Device::cpu());
    let q = Quantized::new(32, 128, 32, 4, 1)?;
    let other = Quantized::new(64, 128, 32, 4, 2)?;
    let x = randn(&[1, 128], 3)?;
    let mismatched = Packed {
        scales: &other.scales,
        biases: Some(&other.biases),
        ..q.packed()
    };
    let e = cpu_qmm::matmul(&x, mismatched).expect_err("refused");
    assert!(e.to_string().contains("does not hold"), "{e}");
    Ok(())
}

/// The host dequantization that CPU products of many rows multiply with BLAS gives MLX's own
/// values: `scale * code + bias` (MLX rounds after the product and the sum), equal to the bit, for every
/// width and group size, and a weight whose feature count is not a multiple of the task size.
#[test]
fn host_dequantization_equals_mlx_dequantization() -> R<()> {
    Device::set_default(&Device::cpu());
    for bits in [2, 3, 4, 5, 6, 8] {
        for group_size in [32, 64, 128] {
            let q = Quantized::new(37, 384, group_size, bits, 13)?;
            assert!(cpu_qmm::dequantizes(&q.packed()));
            let ours = cpu_qmm::dequantize(q.packed())?;
            assert_eq!(ours.shape(), &[37, 384]);
            let ours = host(&ours)?;
            let mlx = host(&gmlx_mlx::qmm::dequantize(q.packed())?)?;
            let differing: Vec<(usize, f32, f32)> = ours
                .iter()
                .zip(&mlx)
                .enumerate()
                .filter(|(_, (a, b))| a != b)
                .map(|(i, (a, b))| (i, *a, *b))
                .collect();
            assert!(
                differing.is_empty(),
                "bits {bits} group {group_size}: {} differ, first {:?}",
                differing.len(),
                &differing[..differing.len().min(4)]
            );
        }
    }
    Ok(())
}
