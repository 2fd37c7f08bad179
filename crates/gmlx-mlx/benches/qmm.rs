//! CPU quantized matmul strategies on one SmolLM2-sized projection (1536 x 576, 4- and
//! 8- and 5-bit, group 32): MLX's `quantized_matmul`, each host kernel of `gmlx_mlx::cpu_qmm`
//! this processor runs (the widest is "host"), and
//! dequantize-then-BLAS, from decode (M = 1) to prefill (M = 128) shapes, measured in the
//! same run. `cargo bench -p gmlx-mlx --bench qmm`.
use std::time::Instant;

use gmlx_mlx::cpu_qmm::{self, Kernel};
use gmlx_mlx::mlx_rs::{self, random, Device};
use gmlx_mlx::qmm::{Mode, Packed};
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
    for bits in [4, 8, 5] {
        let (wq, s, b) = ops::quantize(&w, 32, bits)?;
        let packed = Packed {
            w: &wq,
            scales: &s,
            biases: Some(&b),
            group_size: 32,
            bits,
            mode: Mode::Affine,
            centered: false,
        };
        println!("{bits}-bit, group 32");
        let kernels: Vec<Kernel> = Kernel::ALL.into_iter().filter(|k| k.available()).collect();
        print!("{:>5} {:>12} {:>12}", "M", "mlx qmm ms", "deq+BLAS ms");
        for k in &kernels {
            print!(" {:>12}", format!("{} ms", k.name()));
        }
        println!(" {:>14} {:>14}", "host vs mlx", "host vs BLAS");
        for m in [1, 2, 4, 8, 16, 24, 32, 128] {
            let x = random::normal::<f32>(&[m, k], None, None, &random::key(2)?)?;
            x.eval()?;
            let reps = if m <= 8 { 100 } else { 20 };
            let q = time(reps, || {
                ops::quantized_matmul(&x, &wq, &s, &b, true, 32, bits).expect("qmm")
            });
            let host: Vec<f64> = kernels
                .iter()
                .map(|&k| {
                    time(reps, || {
                        cpu_qmm::matmul_with(&x, packed, k).expect("host qmm")
                    })
                })
                .collect();
            let h = host[0];
            let d = time(reps, || {
                let wd = ops::dequantize(&wq, &s, &b, 32, bits).expect("dequantize");
                x.matmul(wd.t()).expect("matmul")
            });
            print!("{m:>5} {q:>12.3} {d:>12.3}");
            for t in &host {
                print!(" {t:>12.3}");
            }
            println!(" {:>13.2}x {:>13.2}x", q / h, d / h);
        }
    }
    let _ = mlx_rs::memory::clear_cache();
    Ok(())
}
