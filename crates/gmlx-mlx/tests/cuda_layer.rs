//! gmlx's decode-layer CUDA kernel (`gmlx_mlx::cuda_layer`: a whole llama-shaped block of one
//! token in one launch) against the same block through gmlx's kernels of one stage each
//! (`cuda_qmv` with exact activations, `cuda_attention`), which `tests/cuda_qmv.rs` and
//! `tests/cuda_attention.rs` check against float64 references: the block's output, and the
//! token's key and value in the caches, for SmolLM2-135M's shape (576 wide, 9 query heads of
//! 64 over 3) from Q4_0 (biases derived from the scales) and Q4_1 weights, in bfloat16 and
//! float16, after 0 to 1 000 cached tokens (one to many attention ranges a head), three tokens
//! in a row in the same caches (the barrier's words and the attention's counters carried from
//! launch to launch); `GMLX_CUDA_LAYER_BLOCKS` sets the launch's thread blocks (the device
//! scripts run it with 8 too: every stage then taken in turns). Runs where MLX's CUDA backend is loaded (the rented GPU machine); elsewhere it says
//! so and passes, as the kernel is never taken there.
mod common;

use common::{host_values as host, tolerance, worst, Lcg};
use gmlx_gguf::{GgmlType, GgufFile, GgufWriter};
use gmlx_mlx::cuda_attention::{self, Decode};
use gmlx_mlx::cuda_layer::{self, Block};
use gmlx_mlx::cuda_qmv::{Norm, Rotation};
use gmlx_mlx::cuda_warm::WarmSet;
use gmlx_mlx::runtime::{backend, Backend};
use gmlx_mlx::{device, Array, Dtype, QuantWeight};

const HIDDEN: i32 = 576;
const HEADS: i32 = 9;
const KV_HEADS: i32 = 3;
const HEAD_DIM: i32 = 64;
const FFN: i32 = 1536;

/// Random blocks of a 4-bit legacy codec (Q4_0: a float16 scale; Q4_1: a scale and a
/// minimum) for `rows x cols` weights.
fn blocks(ty: GgmlType, rows: i32, cols: i32, rng: &mut Lcg) -> Vec<u8> {
    let n_blocks = (rows * cols) as usize / 32;
    let mut bytes = Vec::with_capacity(n_blocks * ty.type_size());
    for _ in 0..n_blocks {
        let d = half::f16::from_f32(0.004 + 0.01 * rng.next());
        bytes.extend_from_slice(&d.to_le_bytes());
        if ty == GgmlType::Q4_1 {
            let m = half::f16::from_f32(-0.06 * rng.next());
            bytes.extend_from_slice(&m.to_le_bytes());
        }
        bytes.extend((0..16).map(|_| (rng.next() * 256.0) as u8));
    }
    bytes
}

/// One block's seven matrices in codec `ty`, loaded for `dtype`.
struct Weights {
    q: QuantWeight,
    k: QuantWeight,
    v: QuantWeight,
    output: QuantWeight,
    gate: QuantWeight,
    up: QuantWeight,
    down: QuantWeight,
}

fn weights(ty: GgmlType, dtype: Dtype, rng: &mut Lcg) -> Weights {
    let shapes = [
        ("q", HEADS * HEAD_DIM, HIDDEN),
        ("k", KV_HEADS * HEAD_DIM, HIDDEN),
        ("v", KV_HEADS * HEAD_DIM, HIDDEN),
        ("o", HIDDEN, HEADS * HEAD_DIM),
        ("gate", FFN, HIDDEN),
        ("up", FFN, HIDDEN),
        ("down", HIDDEN, FFN),
    ];
    let dir = std::env::temp_dir().join(format!("gmlx-cuda-layer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join(format!("{ty:?}.gguf"));
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "llama").expect("kv");
    for (name, rows, cols) in shapes {
        let data = blocks(ty, rows, cols, rng);
        w.add_tensor(name, ty, &[cols as u64, rows as u64], data)
            .expect("tensor");
    }
    w.write_to_path(&path).expect("write");
    let file = GgufFile::open(&path).expect("open");
    let load = |name: &str| {
        let info = file.tensor(name).expect("tensor");
        QuantWeight::from_gguf(&file, info, dtype).expect("load")
    };
    let loaded = Weights {
        q: load("q"),
        k: load("k"),
        v: load("v"),
        output: load("o"),
        gate: load("gate"),
        up: load("up"),
        down: load("down"),
    };
    let _ = std::fs::remove_dir_all(&dir);
    loaded
}

/// `n` random values of `dtype` as an evaluated array of `shape`.
fn random(shape: &[i32], spread: f32, offset: f32, dtype: Dtype, rng: &mut Lcg) -> Array {
    let n = shape.iter().product();
    let values: Vec<f32> = rng.values(n, spread).iter().map(|v| v + offset).collect();
    let a = Array::from_slice(&values, shape)
        .as_dtype(dtype)
        .expect("cast");
    a.eval().expect("eval");
    a
}

/// A copy of `a` in a buffer of its own (the kernels write caches in place).
fn copy(a: &Array) -> Array {
    let c = a
        .multiply(Array::from_f32(1.0).as_dtype(a.dtype()).expect("one"))
        .expect("copy");
    c.eval().expect("eval");
    c
}

/// The block through gmlx's one-stage kernels, in its caches.
fn staged(b: &Block<'_>) -> Array {
    let [q, k, v] = QuantWeight::norm_matmul_three(b.x, b.attn_norm, Some(b.rope), [b.q, b.k, b.v])
        .expect("q k v")
        .expect("the q k v kernel takes it");
    // pulled into L2 by the attention's launch under GMLX_CUDA_ATTENTION_WARM=1
    let warm = b.output.decode_view().and_then(|p| WarmSet::of(&[p]));
    let attended = cuda_attention::decode(Decode {
        q: &q,
        k: &k,
        v: &v,
        keys: b.keys,
        values: b.values,
        position: b.rope.position,
        len: b.len,
        scale: b.scale,
        next: warm.as_ref(),
    })
    .expect("attention");
    let h = b
        .output
        .matmul_add(&attended, b.x, None)
        .expect("output")
        .expect("the output kernel takes it");
    let act = QuantWeight::norm_silu_glu(&h, b.ffn_norm, b.gate, b.up)
        .expect("gate up")
        .expect("the gate-up kernel takes it");
    b.down
        .matmul_add(&act, &h, None)
        .expect("down")
        .expect("the down kernel takes it")
}

/// The rows at position `at` of a cache `[1, HKV, cap, D]`.
fn position_rows(cache: &Array, at: i32) -> Vec<f32> {
    let cap = cache.shape()[2];
    let all = host(cache);
    (0..KV_HEADS)
        .flat_map(|g| {
            let start = ((g * cap + at) * HEAD_DIM) as usize;
            all[start..start + HEAD_DIM as usize].to_vec()
        })
        .collect()
}

/// Three tokens after `len` cached ones through the kernel and through the staged kernels,
/// each in caches of its own: outputs within the dtype's tolerance of each other, keys and
/// values written equal.
fn check(ty: GgmlType, dtype: Dtype, len: i32, rng: &mut Lcg) {
    let w = weights(ty, dtype, rng);
    let attn_norm = random(&[HIDDEN], 0.4, 1.0, dtype, rng);
    let ffn_norm = random(&[HIDDEN], 0.4, 1.0, dtype, rng);
    let inv: Vec<f32> = (0..HEAD_DIM / 2)
        .map(|i| 10000f32.powf(-2.0 * i as f32 / HEAD_DIM as f32))
        .collect();
    let inv_freqs = Array::from_slice(&inv, &[HEAD_DIM / 2]);
    let cap = len + 3 + 5;
    let cache = [1, KV_HEADS, cap, HEAD_DIM];
    let (keys, values) = (
        random(&cache, 2.0, 0.0, dtype, rng),
        random(&cache, 2.0, 0.0, dtype, rng),
    );
    let (staged_keys, staged_values) = (copy(&keys), copy(&values));
    for step in 0..3 {
        let at = len + step;
        let x = random(&[1, 1, HIDDEN], 2.0, 0.0, dtype, rng);
        let position = cuda_attention::position_array(at);
        let block = Block {
            x: &x,
            attn_norm: Norm {
                weight: &attn_norm,
                eps: 1e-5,
            },
            q: &w.q,
            k: &w.k,
            v: &w.v,
            rope: Rotation {
                inv_freqs: &inv_freqs,
                position: &position,
                head_dim: HEAD_DIM,
                dims: HEAD_DIM,
                position_scale: 1.0,
            },
            keys: &keys,
            values: &values,
            len: at,
            scale: 1.0 / (HEAD_DIM as f32).sqrt(),
            output: &w.output,
            ffn_norm: Norm {
                weight: &ffn_norm,
                eps: 1e-5,
            },
            gate: &w.gate,
            up: &w.up,
            down: &w.down,
        };
        let label = format!("{ty:?} {dtype:?} after {at} tokens");
        assert!(cuda_layer::fits(&block), "{label}: not taken");
        let ours = cuda_layer::decode(block).expect("kernel").expect("taken");
        let staged_block = Block {
            keys: &staged_keys,
            values: &staged_values,
            ..block
        };
        let reference = staged(&staged_block);
        let (got, want) = (host(&ours), host(&reference));
        let want: Vec<f64> = want.iter().map(|&v| v as f64).collect();
        let err = worst(&got, &want);
        eprintln!("{label}: worst error {err:.2e} against the staged kernels");
        assert!(err <= 2.0 * tolerance(dtype), "{label}: {err}");
        for (cache, staged) in [(&keys, &staged_keys), (&values, &staged_values)] {
            assert_eq!(
                position_rows(cache, at),
                position_rows(staged, at),
                "{label}: the token's cache rows"
            );
        }
    }
}

#[test]
fn the_decode_layer_kernel_matches_the_staged_kernels() {
    if backend().ok() != Some(Backend::Cuda) {
        eprintln!("skipped: the MLX runtime in use has no CUDA backend");
        return;
    }
    // the staged kernels' exact activations, as the layer kernel computes them (read once,
    // at their first launch)
    std::env::set_var("GMLX_CUDA_QMV_Q8", "0");
    std::env::set_var(cuda_layer::SWITCH_VAR, "1");
    device::use_device(device::DeviceChoice::Gpu).expect("gpu");
    // the default grid comes from the driver's multiprocessor count: without it the kernel is
    // off unless asked for
    let fit = cuda_layer::blocks_for_gpu().expect("the CUDA driver's multiprocessor count");
    assert!((1..=64).contains(&fit), "{fit} blocks for this GPU");
    eprintln!(
        "{} thread blocks a launch ({fit} for this GPU)",
        cuda_layer::blocks()
    );
    let mut rng = Lcg(29);
    for dtype in [Dtype::Bfloat16, Dtype::Float16] {
        for ty in [GgmlType::Q4_0, GgmlType::Q4_1] {
            for len in [0, 37, 1000] {
                check(ty, dtype, len, &mut rng);
            }
        }
    }
}
