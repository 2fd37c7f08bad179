//! The MLX operations gmlx stands on, run on the default device (`auto`: the GPU when the
//! loaded MLX has one, so the same test binary is the GPU smoke test on a CUDA machine) and
//! compared with plain host loops.
mod common;

use common::{host, host_matmul_t};
use gmlx_mlx::device::{self, DeviceChoice};
use gmlx_mlx::mlx_rs::{error::Exception, fast, random, transforms};
use gmlx_mlx::{ops, Array};

type R<T> = Result<T, Exception>;

fn setup() {
    device::use_device(DeviceChoice::Auto).expect("select the default device");
}

fn randn(shape: &[i32], seed: u64) -> R<Array> {
    random::normal::<f32>(shape, None, None, &random::key(seed)?)
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn matmul_matches_host() -> R<()> {
    setup();
    let (m, n, k) = (64, 48, 96);
    let x = randn(&[m, k], 1)?;
    let w = randn(&[n, k], 2)?;
    let y = x.matmul(&w.transpose()?)?;
    let expected = host_matmul_t(&host(&x)?, &host(&w)?, m as usize, n as usize, k as usize);
    let d = max_abs_diff(&host(&y)?, &expected);
    // float32 accumulation over k=96 of O(1) terms; TF32 would give ~1e-2 here.
    assert!(d < 1e-3, "max |matmul - host| = {d}");
    Ok(())
}

#[test]
fn quantized_matmul_matches_dequantized_weights() -> R<()> {
    setup();
    let (m, n, k) = (8, 96, 256);
    for (bits, group) in [(4, 32), (4, 64), (8, 64), (6, 128)] {
        let w = randn(&[n, k], 3)?;
        let x = randn(&[m, k], 4)?;
        let (wq, scales, biases) = ops::quantize(&w, group, bits)?;
        let y = ops::quantized_matmul(&x, &wq, &scales, &biases, true, group, bits)?;
        let wd = ops::dequantize(&wq, &scales, &biases, group, bits)?;
        let expected = host_matmul_t(&host(&x)?, &host(&wd)?, m as usize, n as usize, k as usize);
        let d = max_abs_diff(&host(&y)?, &expected);
        assert!(
            d < 2e-3,
            "bits {bits} group {group}: max |qmm - host| = {d}"
        );
    }
    Ok(())
}

#[test]
fn causal_sdpa_matches_host_softmax() -> R<()> {
    setup();
    let (h, l, dh) = (2usize, 9usize, 16usize);
    let shape = [1, h as i32, l as i32, dh as i32];
    let (q, k, v) = (randn(&shape, 5)?, randn(&shape, 6)?, randn(&shape, 7)?);
    let scale = 1.0 / (dh as f32).sqrt();
    let o = fast::scaled_dot_product_attention(
        &q,
        &k,
        &v,
        scale,
        fast::ScaledDotProductAttentionMask::Causal,
        None,
    )?;
    let (hq, hk, hv, ho) = (host(&q)?, host(&k)?, host(&v)?, host(&o)?);
    let mut expected = vec![0f32; h * l * dh];
    for head in 0..h {
        let base = head * l * dh;
        for i in 0..l {
            let scores: Vec<f32> = (0..=i)
                .map(|j| {
                    (0..dh)
                        .map(|d| hq[base + i * dh + d] * hk[base + j * dh + d])
                        .sum::<f32>()
                        * scale
                })
                .collect();
            let max = scores.iter().copied().fold(f32::MIN, f32::max);
            let weights: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
            let z: f32 = weights.iter().sum();
            for d in 0..dh {
                expected[base + i * dh + d] = (0..=i)
                    .map(|j| weights[j] / z * hv[base + j * dh + d])
                    .sum();
            }
        }
    }
    let d = max_abs_diff(&ho, &expected);
    assert!(d < 1e-4, "max |sdpa - host| = {d}");
    Ok(())
}

#[test]
fn value_and_grad_matches_analytic_gradient() -> R<()> {
    setup();
    // f(w) = sum((x @ w)^2) / 2  =>  df/dw = x^T (x @ w)
    let x = randn(&[16, 8], 8)?;
    let w = randn(&[8, 4], 9)?;
    let x_for_loss = x.clone();
    let loss = move |params: &[Array]| -> R<Vec<Array>> {
        let y = x_for_loss.matmul(&params[0])?;
        Ok(vec![y
            .square()?
            .sum(None)?
            .multiply(Array::from_f32(0.5))?])
    };
    let mut value_and_grad = transforms::value_and_grad(loss);
    let (values, grads) = value_and_grad(std::slice::from_ref(&w))?;
    let expected_value = x
        .matmul(&w)?
        .square()?
        .sum(None)?
        .multiply(Array::from_f32(0.5))?;
    let expected_grad = x.transpose()?.matmul(&x.matmul(&w)?)?;
    let dv = max_abs_diff(&host(&values[0])?, &host(&expected_value)?);
    let dg = max_abs_diff(&host(&grads[0])?, &host(&expected_grad)?);
    assert!(dv < 1e-3 && dg < 1e-3, "value diff {dv}, grad diff {dg}");
    Ok(())
}

#[test]
fn gather_qmm_picks_each_rows_expert() -> R<()> {
    setup();
    let (experts, n, k) = (4, 32, 128);
    let w = randn(&[experts, n, k], 10)?;
    let x = randn(&[3, 1, k], 11)?;
    let picks = [0usize, 2, 3];
    let indices = Array::from_slice(&[0u32, 2, 3], &[3]);
    let (wq, s, b) = ops::quantize(&w, 64, 4)?;
    let y = ops::gather_qmm(&x, &wq, &s, &b, None, &indices, true, 64, 4, false)?;
    let wd = host(&ops::dequantize(&wq, &s, &b, 64, 4)?)?;
    let hx = host(&x)?;
    let (n, k) = (n as usize, k as usize);
    let mut expected = Vec::new();
    for (row, &e) in picks.iter().enumerate() {
        let we = &wd[e * n * k..(e + 1) * n * k];
        expected.extend(host_matmul_t(&hx[row * k..(row + 1) * k], we, 1, n, k));
    }
    let d = max_abs_diff(&host(&y)?, &expected);
    assert!(d < 2e-3, "max |gather_qmm - host| = {d}");
    Ok(())
}

#[test]
fn slice_and_slice_update_address_the_same_region() -> R<()> {
    setup();
    let a = Array::from_slice(&(0..24).map(|v| v as f32).collect::<Vec<_>>(), &[2, 3, 4]);
    let s = gmlx_mlx::slicing::slice(&a, &[1, 0, 1], &[2, 2, 3]).expect("slice");
    assert_eq!(s.shape(), &[1, 2, 2]);
    assert_eq!(host(&s)?, vec![13.0, 14.0, 17.0, 18.0]);
    let update = Array::from_slice(&[-1.0f32, -2.0, -3.0, -4.0], &[1, 2, 2]);
    let b = gmlx_mlx::slicing::slice_update(&a, &update, &[1, 0, 1], &[2, 2, 3]).expect("update");
    let hb = host(&b)?;
    assert_eq!(
        (hb[13], hb[14], hb[17], hb[18], hb[12]),
        (-1.0, -2.0, -3.0, -4.0, 12.0)
    );
    assert_eq!(host(&a)?[13], 13.0, "the source is unchanged");
    Ok(())
}
