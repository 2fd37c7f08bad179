//! Attention of one decoded token on CUDA (`kernels/attend_decode.cu`): the token's query
//! against its layer's cached keys and values and its own, the token's key and value written
//! into the caches in the same launch. On MLX's operations that step is six: two cache writes,
//! two views of the filled part, the attention, a reshape; a decode step on the GPU is bound
//! by its operations' count (`docs/performance.md`), and with this kernel a dense block's is
//! five.
//!
//! MLX's custom kernels have no output that aliases an input, so the kernel writes the caches
//! in place through their input pointers, at the token's position only, which nothing in the
//! launch reads from them. The caller must therefore hold the caches' buffers alone (a forked
//! sequence copies them first: [`decode`] says what else it needs). Positions before the token's
//! are never written, so views of the filled part taken earlier keep their values.
//!
//! A thread block takes one key/value head with all its query heads, and a range of the keys:
//! at most [`TARGET_BLOCKS`] blocks per launch, unless `GMLX_CUDA_ATTENTION_BLOCKS` says
//! otherwise (a decode step has few; each issues all of a pass's loads before it uses any).
//! Where a head has several ranges, each block leaves its partial sums and the last one to
//! finish combines them (a per-head counter, kept in a small array of this thread's that every
//! launch leaves at zero). `GMLX_CUDA_ATTENTION=0` turns the kernel off.
use std::sync::OnceLock;

use mlx_rs::{Array, Dtype};

use crate::cuda_kernel::{self, Spec};
use crate::cuda_warm::{self, WarmSet};
use crate::error::Result;

/// The environment variable that turns the kernel off (`0`).
pub const SWITCH_VAR: &str = "GMLX_CUDA_ATTENTION";

/// The environment variable that sets the key rows each thread reads per pass ([`per`]).
pub const PER_VAR: &str = "GMLX_CUDA_ATTENTION_PER";

/// Key rows each thread reads per pass: `GMLX_CUDA_ATTENTION_PER` (2, 4 or 8), 8 by default.
/// NVRTC's sm_90 code for the Llama-3-8B shape holds 191 registers a thread with 8, two blocks
/// of 128 threads a multiprocessor, and 128 with 4, four blocks, each pass half as long
/// (`tools/bench/device/nvrtc_check.py`); not yet measured on a GPU.
pub(crate) fn per() -> i32 {
    static PER: OnceLock<i32> = OnceLock::new();
    *PER.get_or_init(|| match cuda_kernel::int_setting(PER_VAR, 2..=8, 8) {
        n @ (2 | 4 | 8) => n,
        _ => 8,
    })
}

const THREADS: i32 = 128;

/// Thread blocks a launch aims at by default (two per streaming multiprocessor of an H100).
pub const TARGET_BLOCKS: i32 = 264;

/// The environment variable that sets the blocks a launch aims at ([`target_blocks`]).
pub const BLOCKS_VAR: &str = "GMLX_CUDA_ATTENTION_BLOCKS";

/// Thread blocks a launch aims at: `GMLX_CUDA_ATTENTION_BLOCKS` (8 to 8 192), else
/// [`TARGET_BLOCKS`]. After 8 000 tokens of the Llama-3-8B shape the default gives 256 blocks of
/// four passes each (`docs/performance.md`); more blocks take fewer passes each and leave more
/// partial sums for the last block of each head to combine.
fn target_blocks() -> i32 {
    static BLOCKS: OnceLock<i32> = OnceLock::new();
    *BLOCKS.get_or_init(|| cuda_kernel::int_setting(BLOCKS_VAR, 8..=8192, TARGET_BLOCKS))
}

/// Key/value heads the counters serve.
const MAX_KV_HEADS: i32 = 4096;

/// Query heads per key/value head a block takes at most.
const MAX_GROUP: i32 = 8;

/// Keys per pass of a block for heads of `head_dim` values ([`per`] 8-value rows a thread).
pub fn chunk(head_dim: i32) -> i32 {
    chunk_of(per(), head_dim)
}

/// Keys per pass for heads of `head_dim` values, `per` 8-value rows a thread.
fn chunk_of(per: i32, head_dim: i32) -> i32 {
    per * THREADS * 8 / head_dim.max(1)
}

/// The largest static shared memory a kernel may declare.
pub(crate) const SHARED_BYTES: i32 = 48 * 1024;

/// The kernel's shared memory for `group` query heads of `head_dim` values, `chunk` keys a pass:
/// each head's scores for a pass, each row group's partial sums, three statistics per head, one
/// flag.
fn shared_bytes(chunk: i32, head_dim: i32, group: i32) -> i32 {
    let rows = THREADS * 8 / head_dim.max(1);
    4 * (group * chunk + rows * group * head_dim + 3 * group) + 4
}

/// Thread blocks per key/value head for `keys` keys, `chunk` a pass: ranges of whole passes, as
/// even as they come, at most `target` blocks in all ([`target_blocks`]).
fn splits(keys: i32, chunk: i32, kv_heads: i32, target: i32) -> i32 {
    let passes = (keys + chunk - 1) / chunk;
    let most = (target / kv_heads).max(1);
    let per_split = (passes + most - 1) / most;
    (passes + per_split - 1) / per_split
}

static SPEC: Spec = Spec {
    name: "gmlx_attend_decode",
    source: include_str!("kernels/attend_decode.cu"),
    header: include_str!("kernels/attend.cuh"),
    inputs: &["q", "k", "v", "kc", "vc", "pos", "counters"],
    outputs: &["out", "part"],
};

static WARM_SPEC: Spec = Spec {
    name: "gmlx_attend_decode_warm",
    source: concat!(
        include_str!("kernels/warm_blocks.cu"),
        include_str!("kernels/attend_decode_warm.cu")
    ),
    header: concat!(
        include_str!("kernels/attend.cuh"),
        include_str!("kernels/warm.cuh")
    ),
    inputs: &[
        "q", "k", "v", "kc", "vc", "pos", "counters", "n0", "n1", "n2", "n3", "n4", "n5", "n6",
        "n7", "n8",
    ],
    outputs: &["out", "part"],
};

/// The environment variable that turns on (`1`) pulling the next launch's matrix into L2
/// ([`warming`]).
pub const WARM_VAR: &str = "GMLX_CUDA_ATTENTION_WARM";

/// Whether a launch given [`Decode::next`] adds [`crate::cuda_warm`]'s blocks that pull it
/// into the GPU's L2 cache while its other blocks attend (`GMLX_CUDA_ATTENTION_WARM=1`; off by
/// default, until measured on a GPU). The attention of a short context reads little: the 8B
/// shape's caches after 512 tokens are 2 MB a layer, and in a profile of a 16-token prompt on
/// an H100 a launch took 7.8 us while the output projection's 9.5 MB took 9.6 us from memory
/// (`bench/runs/2026-12-07-h100-3/ncu-decode-call5-summary.md`).
pub fn warming() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| cuda_kernel::opted_in(WARM_VAR))
}

/// The environment variable that turns on (`1`) loading a pass's values with its keys
/// ([`values_early`]).
pub const VALUES_EARLY_VAR: &str = "GMLX_CUDA_ATTENTION_V_EARLY";

/// Whether each pass loads its value rows together with its key rows, into registers of their
/// own, so that a pass waits on memory once instead of twice (`GMLX_CUDA_ATTENTION_V_EARLY=1`).
/// Off by default: on an H100 it changed neither the 8B decode after 8 000 tokens (203.2 / 209.4
/// against 203.3 / 209.6 tok/s) nor SmolLM2's (`bench/runs/2026-12-07-h100-2/`).
fn values_early() -> bool {
    static EARLY: OnceLock<bool> = OnceLock::new();
    *EARLY.get_or_init(|| cuda_kernel::opted_in(VALUES_EARLY_VAR))
}

/// The environment variable that turns off (`0`) the decode position's copy into the GPU's
/// memory ([`position_array`]).
pub const POSITION_COPY_VAR: &str = "GMLX_CUDA_POSITION_COPY";

/// A decode step's position as the fused kernels read it (int32, its first value: this
/// kernel's and [`crate::cuda_qmv::norm_rope_matmul_three`]'s): on CUDA [`copied_position`],
/// else (or with `GMLX_CUDA_POSITION_COPY=0`) `[1]` made on the host. MLX keeps arrays of 8
/// bytes or less in host memory that the GPU reads across the bus (its scalar pool), where each
/// kernel reading the position waits for it: the q k v kernel of the 8B shape took 34.3 us
/// reading it there and 26.6 us from the copy (`bench/runs/2026-12-07-h100/`).
pub fn position_array(position: i32) -> Array {
    static COPY: OnceLock<bool> = OnceLock::new();
    let copy =
        *COPY.get_or_init(|| cuda_kernel::switched_on(POSITION_COPY_VAR) && cuda_kernel::on_cuda());
    copy.then(|| copied_position(position).ok())
        .flatten()
        .unwrap_or_else(|| Array::from_slice(&[position], &[1]))
}

/// `position` four times, int32 `[4]`, written by an operation on the default stream: on the
/// GPU a 16-byte array in the GPU's memory (one launch reads the host's value once).
pub fn copied_position(position: i32) -> Result<Array> {
    let host = Array::from_slice(&[position], &[1]);
    Ok(mlx_rs::ops::broadcast_to(&host, &[4])?.contiguous()?)
}

/// Whether the kernel is on: MLX's CUDA backend, `GMLX_CUDA_ATTENTION` not `0`.
pub fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| cuda_kernel::switched_on(SWITCH_VAR) && cuda_kernel::on_cuda())
}

/// Whether `attend.cuh` takes `heads` query heads over `kv_heads` key/value heads of `dim`
/// values: whole groups of at most [`MAX_GROUP`], at most [`MAX_KV_HEADS`] key/value heads (one
/// counter each), a head of 8 to 256 values, a power of two. Its shared memory is the caller's
/// to check (it depends on the block's threads).
pub(crate) fn heads_fit(heads: i32, kv_heads: i32, dim: i32) -> bool {
    kv_heads > 0
        && heads > 0
        && heads % kv_heads == 0
        && heads / kv_heads <= MAX_GROUP
        && kv_heads <= MAX_KV_HEADS
        && (8..=256).contains(&dim)
        && (dim as u32).is_power_of_two()
}

/// One token's attention: `q [1, H, 1, D]`, its key and value `k`, `v [1, HKV, 1, D]`, the
/// layer's caches `keys`, `values [1, HKV, capacity, D]` whose first `len` positions are
/// filled, `position` (int32, its first value `len`: [`position_array`]; the kernel writes the
/// caches there).
///
/// The caches must be whole row-contiguous arrays (MLX would hand the kernel a copy of any
/// other, and the writes would be lost), held by the caller alone. MLX sees them as the
/// launch's inputs only: nothing orders a later reader of the same buffers in the same
/// evaluation after the launch, nor two launches that do not depend on each other through
/// their data (they would share the counters). gmlx's decode evaluates every step, whose
/// layers' launches are chained by their data.
#[derive(Clone, Copy)]
pub struct Decode<'a> {
    pub q: &'a Array,
    pub k: &'a Array,
    pub v: &'a Array,
    pub keys: &'a Array,
    pub values: &'a Array,
    pub position: &'a Array,
    pub len: i32,
    pub scale: f32,
    /// The matrix the next launch multiplies (the layer's output projection), which blocks
    /// added to this launch pull into L2 (where [`warming`]).
    pub next: Option<&'a WarmSet>,
}

/// Whether [`decode`] takes `d`: the shapes above with room for the token (`len < capacity`),
/// one dtype of bfloat16, float16 or float32 for the five arrays, whole groups of at most
/// eight query heads per key head, a head of 8 to 256 values, a power of two, whose shared
/// memory fits a block, and a positive scale.
pub fn fits(d: &Decode<'_>) -> bool {
    let qs = d.q.shape();
    let (ks, cs) = (d.k.shape(), d.keys.shape());
    if qs.len() != 4 || ks.len() != 4 || cs.len() != 4 {
        return false;
    }
    let (heads, kv_heads, dim) = (qs[1], ks[1], qs[3]);
    let dtype = d.q.dtype();
    qs[0] == 1
        && qs[2] == 1
        && ks == [1, kv_heads, 1, dim]
        && d.v.shape() == ks
        && cs[..2] == [1, kv_heads]
        && cs[3] == dim
        && d.values.shape() == cs
        && (0..cs[2]).contains(&d.len)
        && heads_fit(heads, kv_heads, dim)
        && shared_bytes(chunk(dim), dim, heads / kv_heads) <= SHARED_BYTES
        && matches!(dtype, Dtype::Bfloat16 | Dtype::Float16 | Dtype::Float32)
        && [d.k, d.v, d.keys, d.values]
            .iter()
            .all(|a| a.dtype() == dtype)
        && d.position.dtype() == Dtype::Int32
        && d.position.size() >= 1
        && d.scale.is_finite()
        && d.scale > 0.0
        && enabled()
}

/// `softmax(q K^T * scale) V` over the `len` cached keys and values and the token's own, as
/// `[1, 1, H * D]` in `q`'s dtype; the token's key and value are written into the caches at
/// `len` (the caller holds their buffers alone, each a whole array that was evaluated or is
/// computed before this launch). The caller checks [`fits`].
pub fn decode(d: Decode<'_>) -> Result<Array> {
    if !fits(&d) {
        return Err(cuda_kernel::error(
            &SPEC,
            "operands the kernel does not take",
        ));
    }
    let (heads, kv_heads, dim) = (d.q.shape()[1], d.k.shape()[1], d.q.shape()[3]);
    let group = heads / kv_heads;
    let splits = splits(d.len + 1, chunk(dim), kv_heads, target_blocks());
    let width = [1, 1, heads * dim];
    let part = [kv_heads * splits * group * (dim + 2)];
    let mut inputs = vec![
        d.q.clone(),
        d.k.clone(),
        d.v.clone(),
        d.keys.clone(),
        d.values.clone(),
        d.position.clone(),
        counters()?,
    ];
    let mut ints = vec![
        (c"D", dim),
        (c"G", group),
        (c"HKV", kv_heads),
        (c"PER", per()),
        (c"BLOCK", THREADS),
        (c"SCALE", d.scale.to_bits() as i32),
        (c"VE", i32::from(values_early())),
    ];
    let mut blocks = kv_heads * splits;
    let spec = match d.next.filter(|_| warming()) {
        Some(next) => {
            let (more, constants) = next.operands(&WARM_SPEC, d.q)?;
            inputs.extend(more);
            ints.extend(constants);
            blocks += cuda_warm::blocks();
            &WARM_SPEC
        }
        None => &SPEC,
    };
    let outputs = cuda_kernel::launch(
        spec,
        &inputs,
        &[(&width, d.q.dtype()), (&part, Dtype::Float32)],
        &[(c"T", d.q.dtype())],
        &ints,
        (blocks * THREADS, THREADS),
    )?;
    outputs
        .into_iter()
        .next()
        .ok_or_else(|| cuda_kernel::error(spec, "MLX returned no output"))
}

/// This thread's counters (uint32 zeros, evaluated once): every launch leaves them at zero,
/// and a thread's launches run in order on its stream.
pub(crate) fn counters() -> Result<Array> {
    thread_local! {
        static COUNTERS: OnceLock<Array> = const { OnceLock::new() };
    }
    cuda_kernel::thread_words(&COUNTERS, MAX_KV_HEADS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_split_the_keys_evenly_within_the_target() {
        // Llama-3-8B's attention: 8 key/value heads of 128 values, 64 keys a pass by default
        let c = chunk_of(8, 128);
        assert_eq!(c, 64);
        let t = TARGET_BLOCKS;
        assert_eq!(splits(1, c, 8, t), 1);
        assert_eq!(splits(640, c, 8, t), 10);
        assert_eq!(splits(8193, c, 8, t), 33);
        // 34 passes over at most 33 blocks: two passes each, none left empty
        assert_eq!(splits(33 * 64 + 6, c, 8, t), 17);
        assert_eq!(splits(100_000, chunk_of(8, 64), 3, t), 87);
        // after 8 000 tokens: 126 passes, four per block by default, one each from 1 008 blocks
        assert_eq!(splits(8001, c, 8, t), 32);
        assert_eq!(splits(8001, c, 8, 1008), 126);
        assert_eq!(splits(8001, c, 8, 512), 63);
        // fewer blocks than heads: one block per head
        assert_eq!(splits(8001, c, 8, 4), 1);
        // 4 rows a thread: 32 keys a pass, 251 passes after 8 000 tokens, 8 a block at 264
        assert_eq!(chunk_of(4, 128), 32);
        assert_eq!(splits(8001, chunk_of(4, 128), 8, t), 32);
        assert_eq!(splits(8001, chunk_of(4, 128), 8, 528), 63);
    }

    #[test]
    fn shared_memory_bounds_the_groups_of_small_heads() {
        let bytes = |per, d, g| shared_bytes(chunk_of(per, d), d, g);
        assert!(bytes(8, 128, 8) <= SHARED_BYTES);
        assert!(bytes(8, 64, 8) <= SHARED_BYTES);
        assert!(bytes(8, 256, 8) <= SHARED_BYTES);
        // 1 024 keys a pass for heads of 8 values: six heads' scores overflow
        assert!(bytes(8, 8, 5) <= SHARED_BYTES);
        assert!(bytes(8, 8, 6) > SHARED_BYTES);
        assert!(bytes(8, 16, 8) > SHARED_BYTES);
        // shorter passes leave room for them
        assert!(bytes(4, 8, 6) <= SHARED_BYTES);
        assert!(bytes(4, 16, 8) <= SHARED_BYTES);
    }

    #[test]
    fn a_copied_position_holds_the_position_first() {
        let copied = copied_position(8_191).expect("copied");
        assert_eq!(copied.dtype(), Dtype::Int32);
        assert_eq!(copied.as_slice::<i32>(), [8_191; 4]);
        // without the setting the host's one value
        assert_eq!(position_array(5).as_slice::<i32>(), [5]);
    }
}
