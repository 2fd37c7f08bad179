//! The cost of batch-invariant products: a gate-shaped (`[32, 4096]`, the Qwen3.5-9B DeltaNet's
//! `ssm_alpha`/`ssm_beta`) and a router-shaped (`[256, 4096]`) float32 product over 512 rows,
//! ordinary (`Linear::forward`) next to batch-invariant (`Linear::forward_row_invariant`),
//! measured in the same run. `cargo xtask bench invariance` runs it and keeps the JSON line.
use std::time::Instant;

use gmlx_mlx::{Array, QuantWeight};
use gmlx_models::blocks::linear::Linear;

fn noise(seed: u64, shape: &[i32]) -> Array {
    let key = gmlx_mlx::mlx_rs::random::key(seed).expect("key");
    gmlx_mlx::mlx_rs::random::normal::<f32>(shape, None, None, &key).expect("normal")
}

/// Milliseconds per call of `f` on `x`, after one untimed call.
fn ms(f: &dyn Fn(&Array) -> Array, x: &Array, reps: usize) -> f64 {
    f(x).eval().expect("eval");
    let start = Instant::now();
    for _ in 0..reps {
        f(x).eval().expect("eval");
    }
    start.elapsed().as_secs_f64() * 1e3 / reps as f64
}

fn main() {
    gmlx_mlx::init();
    let rows = 512;
    let mut json = Vec::new();
    println!(
        "{:>14} {:>6} {:>12} {:>16} {:>8}",
        "product", "rows", "ordinary ms", "invariant ms", "ratio"
    );
    for (out, features) in [(32, 4096), (256, 4096)] {
        let linear = Linear::from(QuantWeight::dense(
            "blk.0.ssm_alpha.weight",
            noise(1, &[out, features]),
        ));
        let x = noise(2, &[rows, features]);
        let plain = ms(&|x| linear.forward(x).expect("forward"), &x, 10);
        let invariant = ms(
            &|x| linear.forward_row_invariant(x).expect("forward"),
            &x,
            10,
        );
        let name = format!("[{out}, {features}]");
        println!(
            "{name:>14} {rows:>6} {plain:>12.2} {invariant:>16.2} {:>8.1}",
            invariant / plain
        );
        json.push(format!(
            "{{\"out\":{out},\"in\":{features},\"rows\":{rows},\"ordinary_ms\":{plain:.3},\"invariant_ms\":{invariant:.3}}}"
        ));
    }
    println!(
        "json: {{\"bench\":\"invariance\",\"products\":[{}]}}",
        json.join(",")
    );
}
