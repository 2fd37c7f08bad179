//! A whole decoder block of one decoded token in one CUDA launch (`kernels/layer_decode.cu`):
//! the attention norm, the query, key and value products with the rotation, the attention over
//! the layer's caches (the token's key and value written into them), the output product and
//! residual add, the feed-forward norm, the gate and up products with SwiGLU, the down product
//! and residual add. A small model's decode step is bound by the host, which builds and submits
//! each launch (about 5 us each on an H100 through MLX, `docs/performance.md`), not by the GPU:
//! a llama-shaped block is five launches with gmlx's other kernels and one with this.
//!
//! The stages depend on each other's whole results, so the launch's thread blocks wait for each
//! other between them (four grid-wide barriers a block): the launch has no more blocks than the
//! GPU holds at once, [`blocks`] of [`THREADS`] threads (one a multiprocessor, at most 64). Each
//! stage computes what gmlx's kernel of its own computes with exact activations
//! ([`crate::cuda_qmv`] with `GMLX_CUDA_QMV_Q8=0`, [`crate::cuda_attention`]), from the same
//! device functions.
//!
//! Taken where [`enabled`] and [`fits`] takes the block (llama-shaped blocks of a hidden width
//! of at most [`MAX_HIDDEN`], 4-bit weights as the other kernels take them).
use std::sync::OnceLock;

use mlx_rs::{Array, Dtype};

use crate::cuda_attention;
use crate::cuda_kernel::{self, Spec};
use crate::cuda_qmv::{self, Norm, Rotation};
use crate::error::Result;
use crate::qmm::{Mode, Packed};
use crate::quant::QuantWeight;

/// The environment variable that turns the kernel off (`0`) or on where the GPU's
/// multiprocessors are unknown (`1`).
pub const SWITCH_VAR: &str = "GMLX_CUDA_LAYER";

/// The environment variable that sets the launch's thread blocks ([`blocks`]).
pub const BLOCKS_VAR: &str = "GMLX_CUDA_LAYER_BLOCKS";

/// Threads per block.
pub const THREADS: i32 = 256;

/// Rows of a matrix per warp task (the rotation needs whole pairs).
const ROWS: i32 = 2;

/// The widest hidden row the kernel takes: past it a decode step is bound by its products'
/// reads, which gmlx's per-stage kernels spread over the whole GPU.
pub const MAX_HIDDEN: i32 = 2048;

/// The launch's thread blocks: `GMLX_CUDA_LAYER_BLOCKS` (8 to 1 024), else one a
/// multiprocessor up to 64 (64 where the count is unknown). They must all be resident at once
/// (the barriers wait for every one): a larger number than the GPU holds stops the launch with
/// an error after seconds.
pub fn blocks() -> i32 {
    static BLOCKS: OnceLock<i32> = OnceLock::new();
    *BLOCKS.get_or_init(|| {
        let fit = blocks_for_gpu().unwrap_or(DEFAULT_BLOCKS);
        cuda_kernel::int_setting(BLOCKS_VAR, 8..=1024, fit)
    })
}

/// One thread block a multiprocessor the process may use, at most 64: `None` where the CUDA
/// driver does not give the count (off CUDA among them).
pub fn blocks_for_gpu() -> Option<i32> {
    let share = std::env::var(MPS_SHARE_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok());
    cuda_kernel::multiprocessors().map(|n| grid_for(n, share))
}

/// The variable under which CUDA's multi-process service limits a client to a percentage of
/// the GPU's multiprocessors (the driver still reports them all).
const MPS_SHARE_VAR: &str = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";

/// One block a multiprocessor of `multiprocessors`, or of their `share` percent (rounded down,
/// at least one) where a share below 100 is given; at most 64.
fn grid_for(multiprocessors: i32, share: Option<f64>) -> i32 {
    let usable = share
        .filter(|p| *p > 0.0 && *p < 100.0)
        .map_or(multiprocessors, |p| {
            ((f64::from(multiprocessors) * p / 100.0).floor() as i32).max(1)
        });
    usable.min(DEFAULT_BLOCKS)
}

/// The launch's thread blocks on a GPU of at least as many multiprocessors: of 32, 64 and 128
/// on an H100's SmolLM2-135M decode, 64 the fastest (`bench/runs/2026-12-07-h100-5/`).
const DEFAULT_BLOCKS: i32 = 64;

/// Whether the kernel is on: MLX's CUDA backend with gmlx's fused products and attention on,
/// and either `GMLX_CUDA_LAYER=1` or, unless it is `0`, a GPU whose multiprocessor count the
/// driver gives (so that the grid fits it).
pub fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        cuda_kernel::switched_on(SWITCH_VAR)
            && cuda_kernel::on_cuda()
            && cuda_qmv::fusion_enabled()
            && cuda_attention::enabled()
            && (cuda_kernel::opted_in(SWITCH_VAR) || blocks_for_gpu().is_some())
    })
}

/// One llama-shaped decoder block of one token: `x [1, 1, K]`, the norms, the products'
/// weights, the rotation of queries and keys (its position is the token's), the layer's
/// caches `keys`, `values [1, HKV, capacity, D]` whose first `len` positions are filled, and
/// the attention's scale. The caches' conditions are [`cuda_attention::Decode`]'s: whole
/// row-contiguous arrays the caller holds alone, with room for the token.
#[derive(Clone, Copy)]
pub struct Block<'a> {
    pub x: &'a Array,
    pub attn_norm: Norm<'a>,
    pub q: &'a QuantWeight,
    pub k: &'a QuantWeight,
    pub v: &'a QuantWeight,
    pub rope: Rotation<'a>,
    pub keys: &'a Array,
    pub values: &'a Array,
    pub len: i32,
    pub scale: f32,
    pub output: &'a QuantWeight,
    pub ffn_norm: Norm<'a>,
    pub gate: &'a QuantWeight,
    pub up: &'a QuantWeight,
    pub down: &'a QuantWeight,
}

/// A block's weights as the kernel reads them, and its sizes.
struct Parts<'a> {
    q: Packed<'a>,
    k: Packed<'a>,
    v: Packed<'a>,
    output: Packed<'a>,
    gate: Packed<'a>,
    up: Packed<'a>,
    down: Packed<'a>,
    hidden: i32,
    head_dim: i32,
    heads: i32,
    kv_heads: i32,
    ffn: i32,
}

/// Whether a weight's packed view is a 4-bit affine matrix of `rows` by `cols` in groups of
/// 32 with biases.
fn is_matrix(p: &Packed<'_>, rows: i32, cols: i32) -> bool {
    p.mode == Mode::Affine
        && p.bits == 4
        && p.group_size == 32
        && p.biases.is_some()
        && p.w.shape() == [rows, cols / 8]
}

/// The block's parts where the kernel takes it: see the module's text, and
/// [`cuda_attention::Decode`]'s conditions on heads and caches.
fn parts<'a>(b: &Block<'a>) -> Option<Parts<'a>> {
    if !enabled() {
        return None;
    }
    let xs = b.x.shape();
    let hidden = *xs.last()?;
    let dtype = b.x.dtype();
    let (q, k, v) = (b.q.decode_view()?, b.k.decode_view()?, b.v.decode_view()?);
    let (output, down) = (b.output.decode_view()?, b.down.decode_view()?);
    let (gate, up) = (b.gate.decode_view()?, b.up.decode_view()?);
    let head_dim = b.rope.head_dim;
    let cs = b.keys.shape();
    if xs != [1, 1, hidden] || cs.len() != 4 || head_dim <= 0 {
        return None;
    }
    let (nq, nkv, ffn) = (q.w.shape()[0], k.w.shape()[0], gate.w.shape()[0]);
    let parts = Parts {
        q,
        k,
        v,
        output,
        gate,
        up,
        down,
        hidden,
        head_dim,
        heads: nq / head_dim,
        kv_heads: nkv / head_dim,
        ffn,
    };
    let group = parts.heads / parts.kv_heads.max(1);
    let all = [q, k, v, output, gate, up, down];
    let shapes_fit = (32..=MAX_HIDDEN).contains(&hidden)
        && hidden % 32 == 0
        && nq % 32 == 0
        && ffn % 32 == 0
        && is_matrix(&q, nq, hidden)
        && is_matrix(&k, nkv, hidden)
        && is_matrix(&v, nkv, hidden)
        && is_matrix(&output, hidden, nq)
        && is_matrix(&gate, ffn, hidden)
        && is_matrix(&up, ffn, hidden)
        && is_matrix(&down, hidden, ffn)
        && cuda_qmv::shared_side_dtype(&all).is_some();
    let heads_fit = nq % head_dim == 0
        && nkv % head_dim == 0
        && cuda_attention::heads_fit(parts.heads, parts.kv_heads, head_dim)
        && cs == [1, parts.kv_heads, cs[2], head_dim]
        && b.values.shape() == cs
        && (0..cs[2]).contains(&b.len)
        && shared_bytes(hidden, head_dim, group, dtype) <= cuda_attention::SHARED_BYTES;
    let rope_fits = b.rope.dims % 2 == 0
        && (2..=head_dim).contains(&b.rope.dims)
        && b.rope.inv_freqs.dtype() == Dtype::Float32
        && b.rope.inv_freqs.shape() == [b.rope.dims / 2]
        && b.rope.position.dtype() == Dtype::Int32
        && b.rope.position.size() >= 1
        && b.rope.position_scale.is_finite();
    let norms_fit = [b.attn_norm, b.ffn_norm]
        .iter()
        .all(|n| n.weight.shape() == [hidden] && n.weight.dtype() == dtype && n.eps.is_finite());
    let types_fit = matches!(dtype, Dtype::Bfloat16 | Dtype::Float16 | Dtype::Float32)
        && b.keys.dtype() == dtype
        && b.values.dtype() == dtype
        && b.scale.is_finite()
        && b.scale > 0.0;
    (shapes_fit && heads_fit && rope_fits && norms_fit && types_fit).then_some(parts)
}

/// Whether [`decode`] takes block `b` (see the module's text).
pub fn fits(b: &Block<'_>) -> bool {
    parts(b).is_some()
}

/// The kernel's static shared memory: the normed row, the norm's partial sums, and the
/// attention's (`kernels/attend.cuh` with blocks of [`THREADS`]).
fn shared_bytes(hidden: i32, head_dim: i32, group: i32, dtype: Dtype) -> i32 {
    let row = hidden * if dtype == Dtype::Float32 { 4 } else { 2 };
    let rows = THREADS * 8 / head_dim;
    let chunk = rows * cuda_attention::per();
    row + 4 * (THREADS / 32) + 4 * (group * chunk + rows * group * head_dim + 3 * group) + 4
}

static SPEC: Spec = Spec {
    name: "gmlx_layer_decode",
    source: include_str!("kernels/layer_decode.cu"),
    header: concat!(
        include_str!("kernels/qmv4.cuh"),
        include_str!("kernels/attend.cuh"),
        include_str!("kernels/layer.cuh")
    ),
    inputs: &[
        "x", "an", "wq", "sq", "bq", "wk", "sk", "bk", "wv", "sv", "bv", "inv_freq", "pos", "kc",
        "vc", "counters", "wo", "so", "bo", "fw", "wg", "sg", "bg", "wu", "su", "bu", "wd", "sd",
        "bd", "sync",
    ],
    outputs: &["y", "q", "k", "v", "att", "h", "act", "part"],
};

/// Block `b` of one token: `x + attention + feed-forward` as `[1, 1, K]` in `x`'s dtype, the
/// token's key and value written into the caches at `len`; `None` (nothing done) where
/// [`fits`] says no.
pub fn decode(b: Block<'_>) -> Result<Option<Array>> {
    let Some(p) = parts(&b) else {
        return Ok(None);
    };
    let dtype = b.x.dtype();
    let group = p.heads / p.kv_heads;
    let blocks = blocks();
    let mut inputs = Vec::with_capacity(30);
    inputs.extend([b.x.clone(), b.attn_norm.weight.clone()]);
    for m in [&p.q, &p.k, &p.v] {
        inputs.extend(cuda_qmv::operands(m)?);
    }
    inputs.extend([
        b.rope.inv_freqs.clone(),
        b.rope.position.clone(),
        b.keys.clone(),
        b.values.clone(),
        cuda_attention::counters()?,
    ]);
    inputs.extend(cuda_qmv::operands(&p.output)?);
    inputs.push(b.ffn_norm.weight.clone());
    for m in [&p.gate, &p.up, &p.down] {
        inputs.extend(cuda_qmv::operands(m)?);
    }
    inputs.push(barrier_words()?);
    let nq = p.heads * p.head_dim;
    let nkv = p.kv_heads * p.head_dim;
    let part = [blocks.max(p.kv_heads) * group * (p.head_dim + 2)];
    let outputs = [
        (&[1, 1, p.hidden][..], dtype),
        (&[nq][..], dtype),
        (&[nkv][..], dtype),
        (&[nkv][..], dtype),
        (&[nq][..], dtype),
        (&[p.hidden][..], dtype),
        (&[p.ffn][..], dtype),
        (&part[..], Dtype::Float32),
    ];
    let side = p.q.scales.dtype();
    let ints = [
        (c"K", p.hidden),
        (c"NQ", nq),
        (c"NKV", nkv),
        (c"F", p.ffn),
        (c"D", p.head_dim),
        (c"G", group),
        (c"HKV", p.kv_heads),
        (c"RD", b.rope.dims),
        (c"ROWS", ROWS),
        (c"BLOCK", THREADS),
        (c"EPS", b.attn_norm.eps.to_bits() as i32),
        (c"FEPS", b.ffn_norm.eps.to_bits() as i32),
        (c"PSCALE", b.rope.position_scale.to_bits() as i32),
        (c"SCALE", b.scale.to_bits() as i32),
        (c"PER", cuda_attention::per()),
        (c"B8A", cuda_qmv::derived_biases(&[p.q, p.k, p.v])),
        (c"B8O", cuda_qmv::derived_biases(&[p.output])),
        (c"B8U", cuda_qmv::derived_biases(&[p.gate, p.up])),
        (c"B8D", cuda_qmv::derived_biases(&[p.down])),
        (c"GEN", GENERATION_AT),
    ];
    let types = [
        (c"T", dtype),
        (c"S", side),
        (c"W", b.attn_norm.weight.dtype()),
    ];
    let outputs = cuda_kernel::launch(
        &SPEC,
        &inputs,
        &outputs,
        &types,
        &ints,
        (blocks * THREADS, THREADS),
    )?;
    Ok(Some(cuda_kernel::single(&SPEC, outputs)?))
}

/// This thread's barrier words (uint32 zeros, evaluated once): an arrival count every barrier
/// leaves at zero and, [`GENERATION_AT`] words on, a generation, shared by the thread's launches,
/// which run in order on its stream.
fn barrier_words() -> Result<Array> {
    thread_local! {
        static WORDS: OnceLock<Array> = const { OnceLock::new() };
    }
    cuda_kernel::thread_words(&WORDS, 2 * GENERATION_AT)
}

/// Where the barrier's generation word lies after its count (the kernel's `GEN`): a 128-byte
/// line apart. The words' array is larger than 8 bytes on purpose too:
/// MLX's CUDA allocator puts arrays of at most 8 bytes in host-resident managed memory, where
/// every spin and atomic of the barrier crossed the bus (measured: 2.3 ms a launch of 64
/// blocks, each block's arrival about 5 us).
const GENERATION_AT: i32 = 32;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_fits_the_multiprocessors_the_process_may_use() {
        // an H100: 132, capped at 64; an A30's 56 and a MIG slice's 16 whole
        assert_eq!(grid_for(132, None), 64);
        assert_eq!(grid_for(56, None), 56);
        assert_eq!(grid_for(16, None), 16);
        // under MPS at 25 % of an H100: 33 multiprocessors; at 10 % of a MIG slice, one
        assert_eq!(grid_for(132, Some(25.0)), 33);
        assert_eq!(grid_for(16, Some(10.0)), 1);
        // shares that limit nothing
        assert_eq!(grid_for(132, Some(100.0)), 64);
        assert_eq!(grid_for(40, Some(0.0)), 40);
    }

    #[test]
    fn off_cuda_the_kernel_is_off_and_sizes_no_grid() {
        if cuda_kernel::on_cuda() {
            return;
        }
        assert_eq!(blocks_for_gpu(), None);
        assert!(!enabled());
    }

    #[test]
    fn shared_memory_takes_small_models_shapes() {
        let bf16 = Dtype::Bfloat16;
        // SmolLM2-135M: 576 wide, 9 heads of 64 over 3; 1.7B: 2 048, 32 over 32
        assert!(shared_bytes(576, 64, 3, bf16) <= cuda_attention::SHARED_BYTES);
        assert!(shared_bytes(2048, 64, 1, bf16) <= cuda_attention::SHARED_BYTES);
        // Qwen3-0.6B-shaped: 1 024 wide, 16 heads of 128 over 8
        assert!(shared_bytes(1024, 128, 2, bf16) <= cuda_attention::SHARED_BYTES);
        // eight heads of 64 a group hold 64 KiB of partial sums
        assert!(shared_bytes(576, 64, 8, bf16) > cuda_attention::SHARED_BYTES);
    }
}
