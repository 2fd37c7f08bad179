//! float32 matmul throughput on MLX's CPU device with the BLAS in use, next to the reference
//! BLAS bundled in the MLX wheel, measured in the same run: the reference figure comes from
//! this same binary re-run with the wheel's libblas/liblapack preloaded (`LD_PRELOAD` puts
//! them ahead of the OpenBLAS the build links).
//!
//! `cargo bench -p gmlx-mlx --bench matmul [-- --size 2048 --reps 3]`, or `cargo xtask bench mlx`.
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use gmlx_mlx::{blas, mlx_rs, runtime, Array};

const CHILD_VAR: &str = "GMLX_BENCH_MATMUL_CHILD";

struct Args {
    size: i32,
    reps: usize,
    /// `--gpu`: measure on the GPU instead (float32 with the TF32 policy, and bfloat16).
    gpu: bool,
}

fn parse_args() -> Args {
    let mut args = Args {
        size: 2048,
        reps: 3,
        gpu: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--size" => args.size = it.next().and_then(|v| v.parse().ok()).unwrap_or(args.size),
            "--reps" => args.reps = it.next().and_then(|v| v.parse().ok()).unwrap_or(args.reps),
            "--gpu" => args.gpu = true,
            _ => {} // cargo bench passes --bench
        }
    }
    args
}

/// Median GFLOP/s of `reps` evaluated `n`x`n` by `n`x`n` float32 matmuls on the CPU.
fn measure(n: i32, reps: usize) -> Result<f64, gmlx_mlx::Error> {
    mlx_rs::Device::set_default(&mlx_rs::Device::cpu());
    measure_on(n, reps, mlx_rs::Dtype::Float32)
}

fn measure_on(n: i32, reps: usize, dtype: mlx_rs::Dtype) -> Result<f64, gmlx_mlx::Error> {
    let key = mlx_rs::random::key(7)?;
    let a: Array = mlx_rs::random::normal::<f32>(&[n, n], None, None, &key)?.as_dtype(dtype)?;
    let b = a.transpose()?;
    a.matmul(&b)?.eval()?; // warm-up: thread pools, allocator
    let mut times: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let t = Instant::now();
            a.matmul(&b)
                .and_then(|c| c.eval())
                .map(|_| t.elapsed().as_secs_f64())
        })
        .collect::<Result<_, _>>()?;
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    Ok(2.0 * f64::from(n).powi(3) / median / 1e9)
}

/// The wheel's reference BLAS and LAPACK, next to the loaded libmlx.
fn reference_blas_preload() -> Option<String> {
    let libmlx = runtime::libmlx_path()?;
    let libs = Path::new(&libmlx).parent()?.join("../../mlx_cpu.libs");
    let mut found: Vec<String> = std::fs::read_dir(&libs)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            name.starts_with("libblas-") || name.starts_with("liblapack-")
        })
        .map(|p| p.display().to_string())
        .collect();
    found.sort();
    (!found.is_empty()).then(|| found.join(":"))
}

fn label(info: &blas::BlasInfo) -> String {
    format!(
        "{:?} ({})",
        info.kind,
        info.library.as_deref().unwrap_or("-")
    )
}

fn main() {
    let args = parse_args();
    let info = blas::blas_info();
    if std::env::var_os(CHILD_VAR).is_some() {
        match measure(args.size, args.reps) {
            Ok(gflops) => println!("{gflops:.3} {}", label(&info)),
            Err(e) => {
                eprintln!("reference measurement failed: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    if args.gpu {
        return gpu(&args);
    }
    let n = args.size;
    println!(
        "float32 matmul {n}x{n}x{n} on the MLX CPU device, median of {} runs",
        args.reps
    );
    let in_use = match measure(n, args.reps) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("matmul failed: {e}");
            std::process::exit(1);
        }
    };
    let reference = reference_blas_preload().and_then(|preload| {
        let exe = std::env::current_exe().ok()?;
        let out = Command::new(exe)
            .args(["--size", &n.to_string(), "--reps", &args.reps.to_string()])
            .env(CHILD_VAR, "1")
            .env("LD_PRELOAD", preload)
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (gflops, lib) = text.trim().split_once(' ')?;
        Some((gflops.parse::<f64>().ok()?, lib.to_owned()))
    });
    println!("{:<10} {:>12}  library", "blas", "GFLOP/s");
    println!("{:<10} {:>12.1}  {}", "in use", in_use, label(&info));
    match reference {
        Some((g, lib)) => {
            println!("{:<10} {:>12.1}  {lib}", "reference", g);
            println!(
                "speedup of the BLAS in use over the reference: {:.1}x",
                in_use / g
            );
            println!(
                "json: {{\"size\":{n},\"in_use_gflops\":{in_use:.3},\"reference_gflops\":{g:.3},\
                 \"blas\":\"{:?}\"}}",
                info.kind
            );
        }
        None => println!("reference BLAS: not measured (no mlx_cpu.libs next to libmlx)"),
    }
}

/// GPU throughput, float32 (under gmlx's TF32 policy) and bfloat16; no reference to compare.
fn gpu(args: &Args) {
    let policy = gmlx_mlx::init();
    if let Err(e) = gmlx_mlx::device::use_device(gmlx_mlx::device::DeviceChoice::Gpu) {
        eprintln!("{e}");
        std::process::exit(1);
    }
    let n = args.size;
    println!(
        "matmul {n}x{n}x{n} on the GPU, median of {} runs (TF32 {})",
        args.reps,
        if policy.tf32 { "on" } else { "off" }
    );
    for dtype in [mlx_rs::Dtype::Float32, mlx_rs::Dtype::Bfloat16] {
        match measure_on(n, args.reps, dtype) {
            Ok(g) => println!("{dtype:?}: {:.1} TFLOP/s", g / 1e3),
            Err(e) => println!("{dtype:?}: failed: {e}"),
        }
    }
}
