//! Peak memory of one training attention layer, forward and backward, on a long row: the
//! blocked path (`gmlx_models::blocks::blocked_attention`, blocks of 256 queries under a custom VJP)
//! next to MLX's whole-row attention, measured in the same run on the same inputs. Default
//! shape: a Qwen3.5-9B attention layer (16 query heads, 4 key/value heads of 256) at 4096
//! tokens, float32. `cargo xtask bench train-attention` runs it and keeps the JSON line.
//!
//! Options: `--tokens N --heads N --kv-heads N --dim N --block N --device cpu|gpu|auto`.
use std::time::Instant;

use gmlx_mlx::mlx_rs::error::Exception;
use gmlx_mlx::mlx_rs::transforms::value_and_grad_with_argnums;
use gmlx_mlx::Array;
use gmlx_models::blocks::blocked_attention::{self, BLOCK};
use gmlx_models::cache::KeyMask;

fn noise(seed: u64, shape: &[i32]) -> Array {
    let key = gmlx_mlx::mlx_rs::random::key(seed).expect("key");
    gmlx_mlx::mlx_rs::random::normal::<f32>(shape, None, None, &key).expect("normal")
}

fn option(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_owned())
}

struct Measured {
    peak_bytes: usize,
    seconds: f64,
    loss: f32,
    grads: Vec<Array>,
}

/// Forward and backward of `sum(attention(q, k, v) · w)`; the peak is above what was live
/// before (the inputs).
fn measure(blocked: Option<i32>, qkv: &[Array], w: &Array, scale: f32) -> Measured {
    gmlx_mlx::memory::clear_cache().expect("clear cache");
    let before = gmlx_mlx::memory::stats().expect("stats").active_bytes;
    gmlx_mlx::memory::reset_peak().expect("reset peak");
    let w = w.clone();
    let mut f = value_and_grad_with_argnums(
        move |xs: &[Array]| -> Result<Vec<Array>, Exception> {
            let out = if let Some(block) = blocked {
                blocked_attention::blocked(
                    &xs[0],
                    &xs[1],
                    &xs[2],
                    scale,
                    &KeyMask::Causal,
                    None,
                    block,
                )
            } else {
                blocked_attention::whole(&xs[0], &xs[1], &xs[2], scale, &KeyMask::Causal, None)
            }
            .map_err(|e| Exception::custom(e.to_string()))?;
            Ok(vec![out.multiply(&w)?.sum(None)?])
        },
        &[0, 1, 2][..],
    );
    let start = Instant::now();
    let (loss, grads) = f(qkv).expect("value and grad");
    let mut all = grads.clone();
    all.push(loss[0].clone());
    gmlx_mlx::mlx_rs::transforms::eval(&all).expect("eval");
    let seconds = start.elapsed().as_secs_f64();
    let peak = gmlx_mlx::memory::stats().expect("stats").peak_bytes;
    Measured {
        peak_bytes: peak.saturating_sub(before),
        seconds,
        loss: loss[0].item_exact::<f32>(),
        grads,
    }
}

fn max_rel(a: &Array, b: &Array) -> f32 {
    let diff = a
        .subtract(b)
        .expect("sub")
        .abs()
        .expect("abs")
        .max(None)
        .expect("max");
    let scale = b.abs().expect("abs").max(None).expect("max");
    diff.item_exact::<f32>() / scale.item_exact::<f32>().max(1e-12)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |name: &str, default: &str| -> i32 {
        option(&args, name, default)
            .parse()
            .unwrap_or_else(|_| panic!("{name} takes a number"))
    };
    let (tokens, heads, kv_heads, dim) = (
        num("--tokens", "4096"),
        num("--heads", "16"),
        num("--kv-heads", "4"),
        num("--dim", "256"),
    );
    let device: gmlx_mlx::device::DeviceChoice = option(&args, "--device", "auto")
        .parse()
        .expect("--device cpu|gpu|auto");
    let kind = gmlx_mlx::device::use_device(device).expect("device");
    let qkv = [
        noise(1, &[1, heads, tokens, dim]),
        noise(2, &[1, kv_heads, tokens, dim]),
        noise(3, &[1, kv_heads, tokens, dim]),
    ];
    let w = noise(4, &[1, heads, tokens, dim]);
    gmlx_mlx::mlx_rs::transforms::eval(qkv.iter().chain([&w])).expect("eval inputs");
    let scale = 1.0 / (dim as f32).sqrt();
    let block = num("--block", &BLOCK.to_string());
    let blocked = measure(Some(block), &qkv, &w, scale);
    let whole = measure(None, &qkv, &w, scale);
    let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
    println!(
        "training attention, forward + backward, {tokens} tokens, {heads}/{kv_heads} heads of {dim}, float32, {kind:?}"
    );
    println!(
        "{:>28} {:>12} {:>10} {:>14}",
        "path", "peak MiB", "seconds", "loss"
    );
    for (name, m) in [
        (format!("blocked ({block} queries)"), &blocked),
        ("MLX whole row".to_owned(), &whole),
    ] {
        println!(
            "{name:>28} {:>12.1} {:>10.2} {:>14.6}",
            mib(m.peak_bytes),
            m.seconds,
            m.loss
        );
    }
    let rel: Vec<f32> = blocked
        .grads
        .iter()
        .zip(&whole.grads)
        .map(|(a, b)| max_rel(a, b))
        .collect();
    println!(
        "blocked / whole peak: {:.3}; gradients' largest relative difference: dq {:.2e}, dk {:.2e}, dv {:.2e}",
        blocked.peak_bytes as f64 / whole.peak_bytes.max(1) as f64,
        rel[0],
        rel[1],
        rel[2]
    );
    println!(
        "json: {{\"bench\":\"train-attention\",\"device\":\"{kind:?}\",\"tokens\":{tokens},\"heads\":{heads},\"kv_heads\":{kv_heads},\"dim\":{dim},\"block\":{block},\
         \"blocked\":{{\"peak_bytes\":{},\"seconds\":{:.3},\"loss\":{}}},\"whole\":{{\"peak_bytes\":{},\"seconds\":{:.3},\"loss\":{}}},\
         \"grad_rel_diff\":[{:e},{:e},{:e}]}}",
        blocked.peak_bytes, blocked.seconds, blocked.loss, whole.peak_bytes, whole.seconds, whole.loss, rel[0], rel[1], rel[2]
    );
}
