//! CPU quantized matmul strategies on one SmolLM2-sized projection (1536 x 576, 4-bit,
//! group 32): MLX's `quantized_matmul` next to dequantize-then-BLAS, at decode (M = 1) and
//! prefill (M = 128) shapes. `cargo bench -p gmlx-mlx --bench qmm`.
use std::time::Instant;

use gmlx_mlx::mlx_rs::{self, random, Device};
use gmlx_mlx::{ops, Array};

fn time(reps: usize, f: impl Fn() -> Array) -> f64 {
    f().eval().ok();
    let t = Instant::now();
    for _ in 0..reps {
        f().eval().ok();
    }
    t.elapsed().as_secs_f64() / reps as f64 * 1e3
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    Device::set_default(&Device::cpu());
    let (n, k) = (1536, 576);
    let w = random::normal::<f32>(&[n, k], None, None, &random::key(1)?)?;
    let (wq, s, b) = ops::quantize(&w, 32, 4)?;
    println!(
        "{:>6} {:>18} {:>22}",
        "M", "quantized_matmul ms", "dequantize+matmul ms"
    );
    for m in [1, 16, 128] {
        let x = random::normal::<f32>(&[m, k], None, None, &random::key(2)?)?;
        let reps = if m == 1 { 200 } else { 20 };
        let q = time(reps, || {
            ops::quantized_matmul(&x, &wq, &s, &b, true, 32, 4).expect("qmm")
        });
        let d = time(reps, || {
            let wd = ops::dequantize(&wq, &s, &b, 32, 4).expect("dequantize");
            x.matmul(wd.t()).expect("matmul")
        });
        println!("{m:>6} {q:>18.3} {d:>22.3}");
    }
    let _ = mlx_rs::memory::clear_cache();
    Ok(())
}
