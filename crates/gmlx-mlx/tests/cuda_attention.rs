//! gmlx's CUDA decode attention (`gmlx_mlx::cuda_attention`) against softmax attention summed
//! in float64 on the host, for bfloat16, float16 and float32, groups of 1 to 8 query heads of
//! 64, 128 and 256 values, and cache lengths on both sides of a pass (a thread block's keys at
//! once) up to many passes per block and blocks left without keys; and the caches it writes in
//! place: the token's key and value at its position, every other position as it was, and a
//! second token after it in the same buffers (the per-head counters back at zero); the second
//! token's launch with blocks added that pull a matrix into L2 (`GMLX_CUDA_ATTENTION_WARM`),
//! which must change nothing of the attention. Runs where
//! MLX's CUDA backend is loaded (the rented GPU machine); elsewhere it says so and passes, as
//! the kernel is never taken there.
mod common;

use common::{host_values as host, tolerance, worst, Lcg};
use gmlx_mlx::cuda_attention::{self, Decode};
use gmlx_mlx::cuda_warm::WarmSet;
use gmlx_mlx::qmm::{Mode, Packed};
use gmlx_mlx::runtime::{backend, Backend};
use gmlx_mlx::{device, Array, Dtype};

/// An array of `shape` in `dtype` from `values`, evaluated, and the values as it holds them.
fn array(values: &[f32], shape: &[i32], dtype: Dtype) -> (Array, Vec<f32>) {
    let a = Array::from_slice(values, shape)
        .as_dtype(dtype)
        .expect("cast");
    a.eval().expect("eval");
    let held = host(&a);
    (a, held)
}

/// The shape of one case: query heads, key/value heads, head size.
#[derive(Clone, Copy, Debug)]
struct Heads {
    h: i32,
    hkv: i32,
    d: i32,
}

/// `softmax(q k^T * scale) v` per query head over `keys` positions of the token-major rows
/// `k`, `v` (`[hkv, cap, d]`), in float64.
fn reference(q: &[f32], k: &[f32], v: &[f32], cap: i32, keys: i32, s: Heads) -> Vec<f64> {
    let (d, g) = (s.d as usize, (s.h / s.hkv) as usize);
    let scale = 1.0 / (s.d as f64).sqrt();
    let mut out = vec![0.0f64; s.h as usize * d];
    for h in 0..s.h as usize {
        let kv = (h / g) * cap as usize * d;
        let scores: Vec<f64> = (0..keys as usize)
            .map(|j| {
                (0..d)
                    .map(|i| q[h * d + i] as f64 * k[kv + j * d + i] as f64)
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = scores.iter().map(|x| (x - top).exp()).collect();
        let total: f64 = weights.iter().sum();
        for (j, w) in weights.iter().enumerate() {
            for i in 0..d {
                out[h * d + i] += w / total * v[kv + j * d + i] as f64;
            }
        }
    }
    out
}

/// A 4-bit matrix of 1 024 rows of 4 096 columns (codes, scales, biases) for a launch to pull
/// into L2: its values matter to no one.
fn next_matrix(rng: &mut Lcg) -> [Array; 3] {
    let (rows, cols) = (1024, 4096);
    let words = vec![0x89ab_cdefu32; (rows * cols / 8) as usize];
    let codes = Array::from_slice(&words, &[rows, cols / 8]);
    let side = |rng: &mut Lcg| {
        let shape = [rows, cols / 32];
        array(&rng.values(rows * cols / 32, 1.0), &shape, Dtype::Bfloat16).0
    };
    [codes, side(rng), side(rng)]
}

/// Decodes two tokens after `len` cached positions (in buffers of room for them) and checks
/// both outputs and the caches.
fn check(s: Heads, len: i32, dtype: Dtype, rng: &mut Lcg) {
    let cap = len + 2 + len % 7;
    let cache = [1, s.hkv, cap, s.d];
    let n = s.hkv * cap * s.d;
    // positions from `len` on hold garbage, which the kernel must neither read nor keep
    let (keys, mut want_k) = array(&rng.values(n, 2.0), &cache, dtype);
    let (values, mut want_v) = array(&rng.values(n, 2.0), &cache, dtype);
    for step in 0..2 {
        let position = len + step;
        let (q, qs) = array(&rng.values(s.h * s.d, 6.0), &[1, s.h, 1, s.d], dtype);
        let (k, ks) = array(&rng.values(s.hkv * s.d, 2.0), &[1, s.hkv, 1, s.d], dtype);
        let (v, vs) = array(&rng.values(s.hkv * s.d, 2.0), &[1, s.hkv, 1, s.d], dtype);
        for g in 0..s.hkv as usize {
            let at = (g * cap as usize + position as usize) * s.d as usize;
            let row = g * s.d as usize..(g + 1) * s.d as usize;
            want_k[at..at + s.d as usize].copy_from_slice(&ks[row.clone()]);
            want_v[at..at + s.d as usize].copy_from_slice(&vs[row]);
        }
        // the position as the host makes it, then as the GPU copies it (GMLX_CUDA_POSITION_COPY)
        let pos = if step == 0 {
            Array::from_slice(&[position], &[1])
        } else {
            cuda_attention::copied_position(position).expect("copied")
        };
        // the second token's launch pulls a matrix into L2 meanwhile
        let next = next_matrix(rng);
        let set = WarmSet::of(&[Packed {
            w: &next[0],
            scales: &next[1],
            biases: Some(&next[2]),
            group_size: 32,
            bits: 4,
            mode: Mode::Affine,
            centered: false,
        }])
        .expect("one matrix");
        let d = Decode {
            q: &q,
            k: &k,
            v: &v,
            keys: &keys,
            values: &values,
            position: &pos,
            len: position,
            scale: 1.0 / (s.d as f32).sqrt(),
            next: (step == 1).then_some(&set),
        };
        assert!(cuda_attention::fits(&d), "{s:?} at {position} is taken");
        let out = cuda_attention::decode(d).expect("decode");
        assert_eq!(out.shape(), [1, 1, s.h * s.d]);
        let got = host(&out);
        let want = reference(&qs, &want_k, &want_v, cap, position + 1, s);
        let err = worst(&got, &want);
        println!("{s:?} {dtype:?} after {position}: {err:.2e}");
        assert!(
            err < tolerance(dtype),
            "{s:?} {dtype:?} after {position}: {err}"
        );
        assert_eq!(host(&keys), want_k, "{s:?} {dtype:?}: the keys written");
        assert_eq!(host(&values), want_v, "{s:?} {dtype:?}: the values written");
    }
}

#[test]
fn the_cuda_decode_attention_matches_the_reference() {
    if backend().ok() != Some(Backend::Cuda) {
        eprintln!("skipped: the MLX runtime in use has no CUDA backend");
        return;
    }
    std::env::remove_var(cuda_attention::SWITCH_VAR);
    std::env::set_var(cuda_attention::WARM_VAR, "1");
    device::use_device(device::DeviceChoice::Gpu).expect("gpu");
    assert!(
        cuda_attention::warming(),
        "the second tokens' launches warm L2"
    );
    let mut rng = Lcg(11);
    for dtype in [Dtype::Bfloat16, Dtype::Float16, Dtype::Float32] {
        for s in [
            Heads {
                h: 9,
                hkv: 3,
                d: 64,
            },
            Heads {
                h: 32,
                hkv: 8,
                d: 128,
            },
        ] {
            let chunk = cuda_attention::chunk(s.d);
            for len in [0, 5, chunk - 1, chunk, chunk + 1, 3 * chunk + 17] {
                check(s, len, dtype, &mut rng);
            }
        }
        check(
            Heads {
                h: 4,
                hkv: 4,
                d: 256,
            },
            700,
            dtype,
            &mut rng,
        );
        check(
            Heads {
                h: 64,
                hkv: 8,
                d: 128,
            },
            300,
            dtype,
            &mut rng,
        );
    }
    // more passes than blocks: each block loops over several (with 8 rows a thread, 129 passes
    // over 33 blocks and 34 over 17; with fewer, more passes)
    let s = Heads {
        h: 32,
        hkv: 8,
        d: 128,
    };
    assert_eq!(cuda_attention::TARGET_BLOCKS / s.hkv, 33);
    let chunk = cuda_attention::chunk(s.d);
    check(s, 8200, Dtype::Bfloat16, &mut rng);
    check(s, 33 * chunk + 5, Dtype::Float32, &mut rng);
}
