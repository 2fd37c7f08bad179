//! 4-bit matrix-vector products on CUDA (`kernels/qmv4*.cu`), through MLX's custom-kernel API:
//! one activation row times MLX affine 4-bit matrices in groups of 32 (the in-memory form of
//! Q4_0, Q4_1 and Q4_K), the decode step's products. MLX's own `qmv` reads such a matrix at
//! about 814 GB/s on an H100 (`docs/performance.md`); these kernels keep several 16-byte loads
//! of codes in flight per lane, convert each activation once for all of a warp's rows, and turn
//! nibbles into floats without conversion instructions (`kernels/qmv4.cuh`). Their error
//! against the reference dequantization is a quarter of MLX's (`tests/cuda_qmv.rs`), and they
//! read a row at any offset (MLX 0.32.2's `qmv` faults on a bfloat16 row that starts 2 bytes off
//! a 4-byte boundary).
//!
//! The products: [`matmul`] (one matrix), [`matmul_three`] (three matrices of one input, as a
//! block's query, key and value projections, in one launch), [`silu_glu`] (`silu(G x) * (U
//! x)`, a gated MLP's gate, up and SwiGLU in one launch), and forms that take a block's other
//! small operations into those launches: [`norm_matmul_three`] and [`norm_silu_glu`] apply the
//! RMSNorm before the products (each thread block norms the row for itself),
//! [`norm_rope_matmul_three`] also rotates the queries and keys and writes all three in the
//! heads' layout, [`matmul_add`] adds the residual after the product. A decode step is a few
//! hundred small operations, each with its launch and MLX's work on the host to build and
//! submit it: with all of them a dense block's attention half is one launch before attention
//! and one after, its feed-forward half two.
//!
//! Rows of 16 bits are rounded to 8 bits per value first, as llama.cpp's CUDA products round
//! theirs, and multiplied with integer dot products ([`q8_activations`],
//! [`one_matrix_rounds_row`]; `GMLX_CUDA_QMV_Q8=0` keeps the exact products). Where a row is too
//! wide for each block to round it, a launch of its own may round it once for all
//! ([`row_rounded_apart`]: [`round_row`], then the rounded forms of [`matmul`] and
//! [`matmul_add`]).
//!
//! [`applies`] says when [`QuantWeight::matmul`](crate::QuantWeight::matmul) takes them: MLX's
//! CUDA backend on the GPU, one row, not training (the products have no VJP), unless
//! `GMLX_CUDA_QMV=0`; `GMLX_CUDA_QMV_FUSE=0` keeps [`matmul`] and turns the fused ones off,
//! `GMLX_CUDA_QMV_FUSE_NORM_ADD=0` only those with a norm, rotation or residual.
use std::ffi::CStr;
use std::sync::OnceLock;

use mlx_rs::{Array, Dtype};

use crate::cuda_kernel::{self, switched_on, Spec};
use crate::cuda_warm::{self, WarmSet};
use crate::error::{Error, Result};
use crate::qmm::{Mode, Packed};

/// The environment variable that turns the kernels off (`0`).
pub const SWITCH_VAR: &str = "GMLX_CUDA_QMV";
/// The environment variable that turns the fused kernels off (`0`).
pub const FUSE_VAR: &str = "GMLX_CUDA_QMV_FUSE";
/// The environment variable that turns off (`0`) the fused kernels' RMSNorm before and residual
/// add after ([`norm_matmul_three`], [`norm_silu_glu`], [`matmul_add`]), leaving the rest.
pub const FUSE_NORM_ADD_VAR: &str = "GMLX_CUDA_QMV_FUSE_NORM_ADD";

/// Warps per thread block of the normed kernels: `GMLX_CUDA_QMV_NORM_WARPS` (4, 8 or 16), 8 by
/// default. The Llama-3-8B q k v launch is 384 blocks of 8 warps, 1.45 waves at the two blocks
/// a multiprocessor holds on an H100 (`docs/performance.md`); 4 warps make 768 blocks, five a
/// multiprocessor, each norming the row for half as many rows.
fn norm_warps() -> i32 {
    static WARPS: OnceLock<i32> = OnceLock::new();
    *WARPS.get_or_init(
        || match cuda_kernel::int_setting("GMLX_CUDA_QMV_NORM_WARPS", 4..=16, 8) {
            n @ (4 | 8 | 16) => n,
            _ => 8,
        },
    )
}

/// The environment variable that turns off (`0`) deriving centered matrices' biases in the
/// kernels ([`derived_biases`]).
pub const CENTERED_VAR: &str = "GMLX_CUDA_QMV_CENTERED";

/// `B8` of a launch over matrices `p`: 1 where every one is [`Packed::centered`] (Q4_0's biases,
/// -8 times the scales) unless `GMLX_CUDA_QMV_CENTERED=0`: the kernels compute the biases from
/// the scales instead of reading them, a tenth of a 4-bit matrix's bytes a product (the 8B Q4_0
/// decode 5 % faster on an H100, `bench/runs/2026-12-07-h100-2/`).
pub(crate) fn derived_biases(p: &[Packed<'_>]) -> i32 {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    let on = *ENABLED.get_or_init(|| switched_on(CENTERED_VAR));
    i32::from(on && p.iter().all(|m| m.centered))
}

/// The environment variable that sets the warps sharing a row of a one-matrix product
/// ([`split_for`]).
pub const SPLIT_VAR: &str = "GMLX_CUDA_QMV_SPLIT";

/// The environment variable that sets (`1`, `0`) the normed kernels' early weight loads
/// ([`early_loads`]).
pub const EARLY_VAR: &str = "GMLX_CUDA_QMV_EARLY";

pub(crate) const HEADER: &str = include_str!("kernels/qmv4.cuh");

/// Rows of the matrix per warp (each activation converted once serves them all):
/// `GMLX_CUDA_QMV_ROWS` (1 to 16), 2 by default. [`silu_glu`] takes half as many rows of each
/// of its two matrices (at least one).
fn rows_per_warp() -> i32 {
    static ROWS: OnceLock<i32> = OnceLock::new();
    *ROWS.get_or_init(|| cuda_kernel::int_setting("GMLX_CUDA_QMV_ROWS", 1..=16, 2))
}

fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| switched_on(SWITCH_VAR) && cuda_kernel::on_cuda())
}

/// Whether the fused kernels ([`matmul_three`], [`silu_glu`]) are on: the kernels are
/// (`GMLX_CUDA_QMV`, MLX's CUDA backend) and `GMLX_CUDA_QMV_FUSE` is not `0`.
pub fn fusion_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| enabled() && switched_on(FUSE_VAR))
}

/// Whether the kernels that take a block's norm or residual add are on: the fused kernels
/// are ([`fusion_enabled`]) and `GMLX_CUDA_QMV_FUSE_NORM_ADD` is not `0`.
pub fn norm_add_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| fusion_enabled() && switched_on(FUSE_NORM_ADD_VAR))
}

/// Whether [`matmul`] computes `x @ W^T` for these operands now (see the module's text); each
/// matrix of [`matmul_three`] and [`silu_glu`] must pass it too.
pub fn applies(x: &Array, p: &Packed<'_>, rows: usize) -> bool {
    rows == 1
        && form_fits(p)
        && matches!(x.dtype(), Dtype::Bfloat16 | Dtype::Float16 | Dtype::Float32)
        && x.shape().last().is_some_and(|&k| k > 0 && k % 32 == 0)
        && p.w.shape()[1] * 8 == x.shape()[x.ndim() - 1]
        && enabled()
}

/// Whether the kernels read matrix `p`: an MLX affine 4-bit matrix in groups of 32, with biases.
fn form_fits(p: &Packed<'_>) -> bool {
    p.mode == Mode::Affine
        && p.bits == 4
        && p.group_size == 32
        && p.w.ndim() == 2
        && p.biases.is_some()
}

/// The kernels, in the order of [`Kernel::spec`].
#[derive(Clone, Copy)]
enum Kernel {
    One,
    Three,
    Silu,
    Add,
    NormThree,
    NormSilu,
    NormRopeThree,
    Rounded,
    AddRounded,
    RoundRow,
    AddWarm,
    NormSiluRound,
}

impl Kernel {
    fn spec(self) -> &'static Spec {
        const THREE: &[&str] = &["y0", "y1", "y2"];
        const ONE: &[&str] = &["y"];
        static SPECS: [Spec; 12] = [
            Spec {
                name: "gmlx_qmv4",
                source: include_str!("kernels/qmv4.cu"),
                header: HEADER,
                inputs: &["w", "scales", "biases", "x"],
                outputs: ONE,
            },
            Spec {
                name: "gmlx_qmv4_three",
                source: include_str!("kernels/qmv4_three.cu"),
                header: HEADER,
                inputs: &["w0", "s0", "b0", "w1", "s1", "b1", "w2", "s2", "b2", "x"],
                outputs: THREE,
            },
            Spec {
                name: "gmlx_qmv4_silu",
                source: include_str!("kernels/qmv4_silu.cu"),
                header: HEADER,
                inputs: &["wg", "sg", "bg", "wu", "su", "bu", "x"],
                outputs: ONE,
            },
            Spec {
                name: "gmlx_qmv4_add",
                source: include_str!("kernels/qmv4_add.cu"),
                header: HEADER,
                inputs: &["w", "scales", "biases", "x", "r"],
                outputs: ONE,
            },
            Spec {
                name: "gmlx_qmv4_norm_three",
                source: include_str!("kernels/qmv4_norm_three.cu"),
                header: HEADER,
                inputs: &[
                    "nw", "w0", "s0", "b0", "w1", "s1", "b1", "w2", "s2", "b2", "x",
                ],
                outputs: THREE,
            },
            Spec {
                name: "gmlx_qmv4_norm_silu",
                source: include_str!("kernels/qmv4_norm_silu.cu"),
                header: HEADER,
                inputs: &["nw", "wg", "sg", "bg", "wu", "su", "bu", "x"],
                outputs: ONE,
            },
            Spec {
                name: "gmlx_qmv4_norm_rope_three",
                source: include_str!("kernels/qmv4_norm_rope_three.cu"),
                header: HEADER,
                inputs: &[
                    "nw", "w0", "s0", "b0", "w1", "s1", "b1", "w2", "s2", "b2", "x", "inv_freq",
                    "pos",
                ],
                outputs: THREE,
            },
            Spec {
                name: "gmlx_qmv4_rounded",
                source: include_str!("kernels/qmv4_rounded.cu"),
                header: HEADER,
                inputs: &["w", "scales", "biases", "xq"],
                outputs: ONE,
            },
            Spec {
                name: "gmlx_qmv4_add_rounded",
                source: include_str!("kernels/qmv4_add_rounded.cu"),
                header: HEADER,
                inputs: &["w", "scales", "biases", "xq", "r"],
                outputs: ONE,
            },
            Spec {
                name: "gmlx_q8_round",
                source: include_str!("kernels/q8_round.cu"),
                header: HEADER,
                inputs: &["x"],
                outputs: &["xq"],
            },
            Spec {
                name: "gmlx_qmv4_add_warm",
                source: concat!(
                    include_str!("kernels/warm_blocks.cu"),
                    include_str!("kernels/qmv4_add.cu")
                ),
                header: concat!(
                    include_str!("kernels/qmv4.cuh"),
                    include_str!("kernels/warm.cuh")
                ),
                inputs: &[
                    "w", "scales", "biases", "x", "r", "n0", "n1", "n2", "n3", "n4", "n5", "n6",
                    "n7", "n8",
                ],
                outputs: ONE,
            },
            Spec {
                name: "gmlx_qmv4_norm_silu_round",
                source: include_str!("kernels/qmv4_norm_silu_round.cu"),
                header: HEADER,
                inputs: &["nw", "wg", "sg", "bg", "wu", "su", "bu", "x"],
                outputs: &["xq"],
            },
        ];
        &SPECS[self as usize]
    }

    /// Warps per thread block: the normed kernels norm the row once per block, so theirs
    /// are larger ([`norm_warps`]).
    fn warps_per_block(self) -> i32 {
        match self {
            Kernel::NormThree | Kernel::NormSilu | Kernel::NormRopeThree => norm_warps(),
            // at least the normed kernels' warps (its row normed as theirs is)
            Kernel::NormSiluRound => silu_round_warps().max(norm_warps()),
            _ => 4,
        }
    }
}

/// An RMSNorm a fused kernel applies to its row first: `x * rsqrt(mean(x^2) + eps) * weight`.
#[derive(Clone, Copy)]
pub struct Norm<'a> {
    pub weight: &'a Array,
    pub eps: f32,
}

/// The rotation [`norm_rope_matmul_three`] gives the first two products' rows (queries and
/// keys) of one token: MLX's `traditional` rotary embedding (adjacent rows 2i, 2i + 1 of each
/// head of `head_dim` rows, the first `dims` of them), angle `position * position_scale *
/// inv_freqs[i]`.
#[derive(Clone, Copy)]
pub struct Rotation<'a> {
    /// float32 `[dims / 2]`.
    pub inv_freqs: &'a Array,
    /// int32, its first value ([`crate::cuda_attention::position_array`]).
    pub position: &'a Array,
    pub head_dim: i32,
    pub dims: i32,
    pub position_scale: f32,
}

/// Whether [`norm_rope_matmul_three`] rotates the products of `p` (queries, keys, values) of
/// one token `x [..., 1, K]` by `rope`: whole heads in each product, an even head of at most as
/// many rotated rows, and an even number of rows per warp (a warp holds whole pairs).
pub fn rotation_fits(x: &Array, rope: Rotation<'_>, p: &[Packed<'_>; 3]) -> bool {
    let d = rope.head_dim;
    d > 0
        && d % 2 == 0
        && rope.dims % 2 == 0
        && (2..=d).contains(&rope.dims)
        && rows_per_warp() % 2 == 0
        && x.ndim() >= 2
        && x.shape()[x.ndim() - 2] == 1
        && p.iter().all(|m| m.w.shape()[0] % d == 0)
        && rope.inv_freqs.dtype() == Dtype::Float32
        && rope.inv_freqs.shape() == [rope.dims / 2]
        && rope.position.dtype() == Dtype::Int32
        && rope.position.size() >= 1
        && rope.position_scale.is_finite()
}

/// The largest row, in bytes, a normed kernel keeps in a block's shared memory.
const NORMED_ROW_BYTES: usize = 32 * 1024;

/// Whether the normed kernels ([`norm_matmul_three`], [`norm_silu_glu`]) take row `x` with
/// `norm`: a weight of `x`'s width and dtype (a wider weight would make MLX's `rms_norm`
/// promote its result), and a row that fits a block's shared memory.
pub fn norm_fits(x: &Array, norm: Norm<'_>) -> bool {
    if !norm_add_enabled() {
        return false;
    }
    let k = x.shape().last().copied().unwrap_or(0);
    norm.weight.shape() == [k]
        && norm.weight.dtype() == x.dtype()
        && k as usize * x.item_size() <= NORMED_ROW_BYTES
        && norm.eps.is_finite()
}

/// `[..., K]` with the last dimension `n`.
fn out_shape(x: &Array, n: i32) -> Vec<i32> {
    let mut shape = x.shape().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = n;
    }
    shape
}

/// `[..., n / head_dim, 1, head_dim]` for one token `x [..., 1, K]`.
fn heads_shape(x: &Array, n: i32, head_dim: i32) -> Vec<i32> {
    let lead = &x.shape()[..x.ndim().saturating_sub(2)];
    lead.iter()
        .copied()
        .chain([n / head_dim, 1, head_dim])
        .collect()
}

/// The operands of one matrix: codes, scales, biases.
pub(crate) fn operands(p: &Packed<'_>) -> Result<[Array; 3]> {
    let Some(biases) = p.biases else {
        return Err(kernel_error("an affine matrix without biases"));
    };
    Ok([p.w.clone(), p.scales.clone(), biases.clone()])
}

/// `(threads in all, threads per block)` for `warps` warps of kernel `which`.
fn grid(which: Kernel, warps: i32) -> (i32, i32) {
    let per_block = which.warps_per_block();
    let blocks = (warps + per_block - 1) / per_block;
    let threads = 32 * per_block;
    (blocks * threads, threads)
}

/// The launch of a one-matrix kernel for `n` rows in warps of `rows` rows: with `split` 1 a
/// warp per `rows` rows ([`grid`]), else a block of `split` warps per `rows` rows.
fn split_grid(which: Kernel, n: i32, rows: i32, split: i32) -> (i32, i32) {
    if split == 1 {
        return grid(which, (n + rows - 1) / rows);
    }
    let threads = 32 * split;
    ((n + rows - 1) / rows * threads, threads)
}

/// A count of warps to share a row from `var`: 1, 2, 4 or 8 (1 when unset or otherwise).
fn warps_setting(var: &str) -> i32 {
    let n = cuda_kernel::int_setting(var, 1..=8, 1);
    if n.count_ones() == 1 {
        n
    } else {
        1
    }
}

/// `split` where `k` is a multiple of `unit` times it (each warp's part of a row a whole number
/// of units), else 1.
fn dividing(split: i32, k: i32, unit: i32) -> i32 {
    if k % (unit * split) == 0 {
        split
    } else {
        1
    }
}

/// Warps that share each row of a one-matrix product of `k` columns: `GMLX_CUDA_QMV_SPLIT`
/// (1, 2, 4 or 8; 1 by default: a warp per row) where `k` is a multiple of 32 times it, else 1.
/// A warp reads its row's groups 128 at a time (32 lanes, four groups each in flight), waiting
/// for each round before the next: the Llama-3-8B down product (`k` = 14 336) waits on four.
fn split_for(k: i32) -> i32 {
    static SPLIT: OnceLock<i32> = OnceLock::new();
    dividing(*SPLIT.get_or_init(|| warps_setting(SPLIT_VAR)), k, 32)
}

/// Warps that share each row of a product whose row was rounded apart ([`row_rounded_apart`]):
/// `GMLX_CUDA_QMV_Q8_SPLIT` (1, 2, 4 or 8; 1 by default, until measured on a GPU) where `k` is
/// a multiple of 256 times it (each warp's part of the rounded row starts at a multiple of 8
/// groups, where the order of its codes repeats), else 1. On an H100 the 8B down product so
/// read 1.4 TB/s with a warp a row, each warp waiting on four rounds of loads in turn, where the
/// gate-up kernel (one round a warp) read 2.3 (`bench/runs/2026-12-07-h100-6/`).
fn rounded_split_for(k: i32) -> i32 {
    static SPLIT: OnceLock<i32> = OnceLock::new();
    dividing(*SPLIT.get_or_init(|| warps_setting(Q8_SPLIT_VAR)), k, 256)
}

/// The environment variable that sets the warps sharing a row of a product whose row was
/// rounded apart ([`rounded_split_for`]).
pub const Q8_SPLIT_VAR: &str = "GMLX_CUDA_QMV_Q8_SPLIT";

/// `x @ W^T` for one row `x [..., K]` and a 4-bit affine matrix `W [N, K]`: `[..., N]` in
/// `x`'s dtype. The caller checks [`applies`].
pub fn matmul(x: &Array, p: Packed<'_>) -> Result<Array> {
    one_matrix(x, p, None)
}

/// `residual + x @ W^T` for one row `x [..., K]`, a 4-bit affine matrix `W [N, K]` and
/// `residual [..., N]` of `x`'s dtype, in one launch: the product rounded to the dtype, then
/// added as MLX adds. The caller checks [`applies`].
/// `next`, where given, are the matrices the next launch multiplies, which blocks added to
/// this one pull into the GPU's L2 cache ([`crate::cuda_warm`]; not where the row is rounded
/// by a launch of its own, [`row_rounded_apart`]).
pub fn matmul_add(
    x: &Array,
    p: Packed<'_>,
    residual: &Array,
    next: Option<&WarmSet>,
) -> Result<Array> {
    if !residual_fits(x, &p, residual) {
        return Err(kernel_error(
            "a residual of another shape or dtype than the product",
        ));
    }
    one_matrix(x, p, Some((residual, next)))
}

/// The environment variable that turns on (`1`) the down product's warming of the next
/// block's q k v matrices ([`warming`]).
pub const WARM_VAR: &str = "GMLX_CUDA_QMV_WARM";

/// Whether a decoder block's last product (its down product and residual add, [`matmul_add`])
/// pulls the next block's q k v matrices into L2 while it runs (`GMLX_CUDA_QMV_WARM=1`; off by
/// default, until measured on a GPU): on an H100 the 8B down product read 1.4 TB/s and the q
/// k v kernel after it 0.8-1.0 TB/s from memory, the gate-up kernel 2.1
/// (`bench/runs/2026-12-07-h100-2/`, `-3/`, their `ncu-decode-*-summary.md`).
pub fn warming() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| cuda_kernel::opted_in(WARM_VAR))
}

/// [`matmul`], or [`matmul_add`] given a residual: one launch of the one-matrix kernel or its
/// residual form, with the same constants (their products agree bit for bit).
fn one_matrix(x: &Array, p: Packed<'_>, add: Option<(&Array, Option<&WarmSet>)>) -> Result<Array> {
    let n = p.w.shape()[0];
    let k = p.w.shape()[1] * 8;
    let residual = add.map(|(r, _)| r);
    if row_rounded_apart(x.dtype(), k) {
        return rounded_one_matrix(x, p, residual);
    }
    let rows = rows_per_warp();
    let q8 = one_matrix_rounds_row(x.dtype(), k);
    let split = if q8 { 1 } else { split_for(k) };
    let which = match residual {
        Some(_) => Kernel::Add,
        None => Kernel::One,
    };
    let ints = [
        (c"K", k),
        (c"N", n),
        (c"ROWS", rows),
        (c"SPLIT", split),
        (c"B8", derived_biases(&[p])),
        (c"Q8", i32::from(q8)),
        (c"BLOCK", 32 * which.warps_per_block()),
    ];
    let grid = split_grid(which, n, rows, split);
    if let Some((r, Some(next))) = add {
        return warming_add(x, p, r, next, &ints, grid);
    }
    let tail = residual.map_or(&[][..], std::slice::from_ref);
    launch_one(which, x, x.clone(), p, tail, &ints, grid)
}

/// The residual form of the one-matrix kernel with [`crate::cuda_warm`]'s blocks after its
/// own, pulling `next` into L2.
fn warming_add(
    x: &Array,
    p: Packed<'_>,
    residual: &Array,
    next: &WarmSet,
    ints: &[(&'static CStr, i32)],
    (threads, block): (i32, i32),
) -> Result<Array> {
    let (more, constants) = next.operands(Kernel::AddWarm.spec(), x)?;
    let tail: Vec<Array> = std::iter::once(residual.clone()).chain(more).collect();
    let ints: Vec<_> = ints.iter().copied().chain(constants).collect();
    let grid = (threads + cuda_warm::blocks() * block, block);
    launch_one(Kernel::AddWarm, x, x.clone(), p, &tail, &ints, grid)
}

/// [`one_matrix`] with the row rounded to 8-bit activations first, in a launch of its own
/// ([`round_row`]), which every warp then reads where it lies ([`row_rounded_apart`]).
fn rounded_one_matrix(x: &Array, p: Packed<'_>, residual: Option<&Array>) -> Result<Array> {
    let k = p.w.shape()[1] * 8;
    product_of_rounded(x, round_row(x, k)?, p, residual)
}

/// The one-matrix product of row `xq`, rounded to 8-bit activations ([`round_row`]'s layout),
/// and `p`, plus `residual` where given: `[..., N]` in the dtype and leading shape of `x` (the
/// row before it was rounded, or the block input it was made from).
fn product_of_rounded(
    x: &Array,
    xq: Array,
    p: Packed<'_>,
    residual: Option<&Array>,
) -> Result<Array> {
    let n = p.w.shape()[0];
    let k = p.w.shape()[1] * 8;
    let rows = rows_per_warp();
    let which = match residual {
        Some(_) => Kernel::AddRounded,
        None => Kernel::Rounded,
    };
    let split = rounded_split_for(k);
    let ints = [
        (c"K", k),
        (c"N", n),
        (c"ROWS", rows),
        (c"SPLIT", split),
        (c"B8", derived_biases(&[p])),
    ];
    let grid = split_grid(which, n, rows, split);
    let tail = residual.map_or(&[][..], std::slice::from_ref);
    launch_one(which, x, xq, p, tail, &ints, grid)
}

/// One launch of a one-matrix kernel `which` on `row` (`x`, or what was made of it), with the
/// inputs after the row in `tail` (the residual where given, then any warming arrays): its
/// product `[..., N]` in `x`'s dtype.
fn launch_one(
    which: Kernel,
    x: &Array,
    row: Array,
    p: Packed<'_>,
    tail: &[Array],
    ints: &[(&CStr, i32)],
    grid: (i32, i32),
) -> Result<Array> {
    let mut inputs = operands(&p)?.to_vec();
    inputs.push(row);
    inputs.extend_from_slice(tail);
    let shape = out_shape(x, p.w.shape()[0]);
    let outputs = launch(
        which,
        &inputs,
        &[&shape],
        &types(x, p.scales.dtype(), None),
        ints,
        grid,
    )?;
    cuda_kernel::single(Kernel::One.spec(), outputs)
}

/// The row `x [..., K]` (16-bit) rounded to 8-bit activations as the kernels round it, laid
/// out as they read it (`qmv4.cuh`'s `gmlx_q8_round_row`): `K / 4` words of codes, then each
/// group's scale and the scale times its codes' sum, `K / 32` floats each.
pub fn round_row(x: &Array, k: i32) -> Result<Array> {
    let spec = Kernel::RoundRow.spec();
    let threads = 32 * Kernel::RoundRow.warps_per_block();
    let blocks = (k / 8 + threads - 1) / threads;
    let words = [k / 4 + k / 16];
    let outputs = cuda_kernel::launch(
        spec,
        std::slice::from_ref(x),
        &[(&words, Dtype::Uint32)],
        &[(c"T", x.dtype())],
        &[(c"K", k)],
        (blocks * threads, threads),
    )?;
    cuda_kernel::single(spec, outputs)
}

/// Whether [`matmul_add`] adds `residual` to the product of `x` and `p`: the product's shape
/// and `x`'s dtype.
pub fn residual_fits(x: &Array, p: &Packed<'_>, residual: &Array) -> bool {
    residual.shape() == out_shape(x, p.w.shape()[0]).as_slice() && residual.dtype() == x.dtype()
}

/// `[x @ W0^T, x @ W1^T, x @ W2^T]` for one row `x [..., K]` in one launch. The caller checks
/// [`applies`] for each matrix; their scales share one dtype.
pub fn matmul_three(x: &Array, p: [Packed<'_>; 3]) -> Result<[Array; 3]> {
    three(x, None, None, p)
}

/// [`matmul_three`] of `norm(x)`, the norm applied in the same launch (its row rounded to
/// `x`'s dtype as MLX's `rms_norm` rounds it). The caller checks [`applies`] for each matrix
/// and [`norm_fits`].
pub fn norm_matmul_three(x: &Array, norm: Norm<'_>, p: [Packed<'_>; 3]) -> Result<[Array; 3]> {
    three(x, Some(norm), None, p)
}

/// [`norm_matmul_three`] with the first two products (a block's queries and keys) rotated by
/// `rope` in the same launch (each product rounded to `x`'s dtype before, as MLX's `rope`
/// reads it), the three outputs in the heads' layout attention reads: `x [..., 1, K]` gives
/// `[..., N / head_dim, 1, head_dim]` (the same values in the same order as `[..., 1, N]`).
/// The caller checks [`applies`], [`norm_fits`] and [`rotation_fits`].
pub fn norm_rope_matmul_three(
    x: &Array,
    norm: Norm<'_>,
    rope: Rotation<'_>,
    p: [Packed<'_>; 3],
) -> Result<[Array; 3]> {
    if !rotation_fits(x, rope, &p) {
        return Err(kernel_error("a rotation the kernel does not apply"));
    }
    three(x, Some(norm), Some(rope), p)
}

fn three(
    x: &Array,
    norm: Option<Norm<'_>>,
    rope: Option<Rotation<'_>>,
    p: [Packed<'_>; 3],
) -> Result<[Array; 3]> {
    let k = x.shape()[x.ndim() - 1];
    let rows = rows_per_warp();
    let ns = p.each_ref().map(|p| p.w.shape()[0]);
    let mut inputs = Vec::with_capacity(11);
    inputs.extend(norm.map(|n| n.weight.clone()));
    for m in &p {
        inputs.extend(operands(m)?);
    }
    inputs.push(x.clone());
    if let Some(r) = rope {
        inputs.extend([r.inv_freqs.clone(), r.position.clone()]);
    }
    let shapes = ns.map(|n| match rope {
        Some(r) => heads_shape(x, n, r.head_dim),
        None => out_shape(x, n),
    });
    let warps: i32 = ns.iter().map(|n| (n + rows - 1) / rows).sum();
    let which = match (norm.is_some(), rope.is_some()) {
        (true, true) => Kernel::NormRopeThree,
        (true, false) => Kernel::NormThree,
        (false, false) => Kernel::Three,
        (false, true) => return Err(kernel_error("a rotation without a norm")),
    };
    let mut ints = vec![
        (c"K", k),
        (c"N0", ns[0]),
        (c"N1", ns[1]),
        (c"N2", ns[2]),
        (c"ROWS", rows),
        (c"B8", derived_biases(&p)),
    ];
    ints.extend(
        norm.into_iter()
            .flat_map(|n| norm_constants(which, n, x.dtype())),
    );
    if let Some(r) = rope {
        ints.extend([
            (c"D", r.head_dim),
            (c"RD", r.dims),
            (c"PSCALE", r.position_scale.to_bits() as i32),
        ]);
    }
    let outputs = launch(
        which,
        &inputs,
        &[&shapes[0], &shapes[1], &shapes[2]],
        &types(x, side_dtype(&p)?, norm),
        &ints,
        grid(which, warps),
    )?;
    <[Array; 3]>::try_from(outputs).map_err(|_| kernel_error("MLX returned other than 3 outputs"))
}

/// `silu(x @ G^T) * (x @ U^T)` for one row `x [..., K]` and two matrices of the same shape, in
/// one launch, in `x`'s dtype (the product rounded once, from float). The caller checks
/// [`applies`] for both; their scales share one dtype.
pub fn silu_glu(x: &Array, gate: Packed<'_>, up: Packed<'_>) -> Result<Array> {
    silu(x, None, gate, up)
}

/// [`silu_glu`] of `norm(x)`, the norm applied in the same launch (as [`norm_matmul_three`]).
pub fn norm_silu_glu(x: &Array, norm: Norm<'_>, gate: Packed<'_>, up: Packed<'_>) -> Result<Array> {
    silu(x, Some(norm), gate, up)
}

/// The environment variable that turns on the gate-up kernel's rounding of its SwiGLU for the
/// down product ([`silu_round_fits`]) and sets its warps a block ([`silu_round_warps`]).
pub const SILU_ROUND_VAR: &str = "GMLX_CUDA_QMV_SILU_ROUND";

/// Warps a block of the rounding gate-up kernel ([`norm_silu_rounded`]): `GMLX_CUDA_QMV_SILU_ROUND`
/// (8, 16 or 32; 0, off, when unset or otherwise; the kernel takes at least the normed
/// kernels' [`norm_warps`]), each warp taking 32 / that rows of the gate and of the up matrix, a
/// block one group of the rounded row. Its first [`norm_warps`] warps norm the row, so that the
/// normed row is the plain gate-up kernel's to the bit (the sum of squares is added in the
/// order of its block). NVRTC's sm_90 code for the 8B gate-up kernel: 112-120 registers at 8
/// (2 blocks of 256 threads a multiprocessor), 66-72 at 16 (1 of 512), 55-64 at 32 (1 of 1 024),
/// where the kernel it replaces is 54-56 at 1 row a warp (`bench/runs/2026-12-08-nvrtc/`).
fn silu_round_warps() -> i32 {
    static WARPS: OnceLock<i32> = OnceLock::new();
    *WARPS.get_or_init(
        || match cuda_kernel::int_setting(SILU_ROUND_VAR, 0..=32, 0) {
            n @ (8 | 16 | 32) => n,
            _ => 0,
        },
    )
}

/// Whether the rounding gate-up kernel is on ([`silu_round_warps`] set): a decode step asks
/// before it looks at a block's matrices.
pub fn silu_round_enabled() -> bool {
    silu_round_warps() > 0
}

/// Whether [`norm_silu_down_add`] takes a block's feed-forward half: [`silu_round_enabled`]
/// (off by default, until measured on a GPU), a `down` matrix the kernels read whose row (the
/// SwiGLU, as long as `gate`'s products) is rounded by a launch of its own otherwise
/// ([`row_rounded_apart`]), and a `residual` of its product's shape and `x`'s dtype. The
/// caller checks [`applies`] for `gate` and `up` and [`norm_fits`]. That launch is 3.29 us
/// of the Llama-3-8B Q4_0 decode's 84.4 a block on an H100 (`bench/runs/2026-12-07-h100-6/`,
/// `call8-ncu-summary.txt`).
pub fn silu_round_fits(x: &Array, gate: &Packed<'_>, down: &Packed<'_>, residual: &Array) -> bool {
    let k = gate.w.shape()[0];
    silu_round_enabled()
        && form_fits(down)
        && down.w.shape()[1] * 8 == k
        && k % SILU_ROUND_BLOCK_ROWS == 0
        && row_rounded_apart(x.dtype(), k)
        && residual.shape() == out_shape(x, down.w.shape()[0]).as_slice()
        && residual.dtype() == x.dtype()
}

/// The gate and up rows a block of the rounding gate-up kernel takes: one group of the
/// rounded row (its block rounds the group once all its warps have their rows).
const SILU_ROUND_BLOCK_ROWS: i32 = 32;

/// `residual + (silu(norm(x) @ G^T) * (norm(x) @ U^T)) @ D^T` (a block's feed-forward half) in
/// two launches: the gate-up kernel writes its SwiGLU rounded to 8-bit activations as
/// [`round_row`] rounds it, which the down product reads ([`product_of_rounded`]); the same
/// values as [`norm_silu_glu`], then [`matmul_add`]. The caller checks [`silu_round_fits`].
pub fn norm_silu_down_add(
    x: &Array,
    norm: Norm<'_>,
    gate: Packed<'_>,
    up: Packed<'_>,
    down: Packed<'_>,
    residual: &Array,
) -> Result<Array> {
    let warps = Kernel::NormSiluRound.warps_per_block();
    let xq = norm_silu_rounded(x, norm, gate, up, warps)?;
    product_of_rounded(x, xq, down, Some(residual))
}

/// [`norm_silu_glu`]'s SwiGLU rounded to 8-bit activations in the same launch, in
/// [`round_row`]'s layout; each block takes [`SILU_ROUND_BLOCK_ROWS`] rows in `warps` warps (8,
/// 16 or 32, at least the normed kernels' [`norm_warps`], whose first warps norm the row; the
/// model's launch takes [`silu_round_warps`]), without weight loads issued before the norm
/// (with them, 1 024 threads would need more registers than a multiprocessor has).
pub fn norm_silu_rounded(
    x: &Array,
    norm: Norm<'_>,
    gate: Packed<'_>,
    up: Packed<'_>,
    warps: i32,
) -> Result<Array> {
    let n = gate.w.shape()[0];
    let inputs = silu_inputs(x, Some(norm), gate, up)?;
    if n % SILU_ROUND_BLOCK_ROWS != 0 {
        return Err(kernel_error("gate and up rows not in whole groups of 32"));
    }
    if !matches!(warps, 8 | 16 | 32) || warps < norm_warps() {
        return Err(kernel_error(
            "a rounding gate-up block of other than 8, 16 or 32 warps, or fewer than the norm's",
        ));
    }
    let which = Kernel::NormSiluRound;
    let rows = SILU_ROUND_BLOCK_ROWS / warps;
    let k = x.shape()[x.ndim() - 1];
    let ints = [
        (c"K", k),
        (c"N", n),
        (c"ROWS", rows),
        (c"EPS", norm.eps.to_bits() as i32),
        (c"BLOCK", 32 * warps),
        (c"B8", derived_biases(&[gate, up])),
        (c"NB", 32 * norm_warps()),
    ];
    let words = [n / 4 + n / 16];
    let outputs = cuda_kernel::launch(
        which.spec(),
        &inputs,
        &[(&words, Dtype::Uint32)],
        &types(x, side_dtype(&[gate, up])?, Some(norm)),
        &ints,
        (n / rows * 32, 32 * warps),
    )?;
    cuda_kernel::single(which.spec(), outputs)
}

/// The inputs of a gate-up kernel, in its signature's order: the norm weight where given, the
/// gate's and the up matrix's operands, the row.
fn silu_inputs(
    x: &Array,
    norm: Option<Norm<'_>>,
    gate: Packed<'_>,
    up: Packed<'_>,
) -> Result<Vec<Array>> {
    if up.w.shape() != gate.w.shape() {
        return Err(kernel_error("gate and up matrices of different shapes"));
    }
    let mut inputs: Vec<Array> = norm.iter().map(|n| n.weight.clone()).collect();
    inputs.extend(operands(&gate)?);
    inputs.extend(operands(&up)?);
    inputs.push(x.clone());
    Ok(inputs)
}

fn silu(x: &Array, norm: Option<Norm<'_>>, gate: Packed<'_>, up: Packed<'_>) -> Result<Array> {
    let n = gate.w.shape()[0];
    let inputs = silu_inputs(x, norm, gate, up)?;
    let k = x.shape()[x.ndim() - 1];
    let rows = (rows_per_warp() / 2).max(1);
    let shape = out_shape(x, n);
    let which = if norm.is_some() {
        Kernel::NormSilu
    } else {
        Kernel::Silu
    };
    let mut ints = vec![
        (c"K", k),
        (c"N", n),
        (c"ROWS", rows),
        (c"B8", derived_biases(&[gate, up])),
    ];
    ints.extend(
        norm.into_iter()
            .flat_map(|n| norm_constants(which, n, x.dtype())),
    );
    let outputs = launch(
        which,
        &inputs,
        &[&shape],
        &types(x, side_dtype(&[gate, up])?, norm),
        &ints,
        grid(which, (n + rows - 1) / rows),
    )?;
    cuda_kernel::single(Kernel::One.spec(), outputs)
}

/// A normed kernel's constants for a row of `dtype`: `EPS` (the epsilon's float bits), `BLOCK`
/// (threads per block, over which the kernel norms its row), `EARLY` ([`early_loads`]), `SWZ`
/// ([`swizzled_row`]) and `Q8` ([`q8_activations`]).
fn norm_constants(which: Kernel, norm: Norm<'_>, dtype: Dtype) -> [(&'static CStr, i32); 5] {
    [
        (c"EPS", norm.eps.to_bits() as i32),
        (c"BLOCK", 32 * which.warps_per_block()),
        (c"EARLY", i32::from(early_loads(dtype))),
        (c"SWZ", i32::from(swizzled_row())),
        (c"Q8", i32::from(q8_activations(dtype))),
    ]
}

/// The environment variable that turns off (`0`) 8-bit activations in the normed and the
/// one-matrix kernels ([`q8_activations`]).
pub const Q8_VAR: &str = "GMLX_CUDA_QMV_Q8";

/// Whether the normed kernels ([`norm_silu_glu`], [`norm_matmul_three`],
/// [`norm_rope_matmul_three`]) quantize their normed row of `dtype` to 8 bits per value in
/// groups of 32, as llama.cpp rounds its q8_1 rows (`d = max|x| / 127`, `q = round(x * (1 /
/// d))`; `d` kept in float32 here), and multiply 4 codes at a time with `__dp4a` (16-bit rows;
/// on unless `GMLX_CUDA_QMV_Q8=0`). The exact product spends about 3 instructions a weight
/// (NVRTC's sm_90 code for the Llama-3-8B gate-up kernel: 2 216 instructions a lane against
/// 1 224 with it, `bench/runs/2026-12-07-nvrtc/`). On an H100 the 8B Q4_0 decode went from
/// 278.8-280.0 to 310.7-311.2 tok/s and its gate-up kernel from 46.28 to 31.20 us
/// (`bench/runs/2026-12-07-h100-3/`). The products differ from the exact ones by the row's
/// rounding to 8 bits, as llama.cpp's do.
pub fn q8_activations(dtype: Dtype) -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    let on = *ENABLED.get_or_init(|| cuda_kernel::switched_on(Q8_VAR));
    on && matches!(dtype, Dtype::Bfloat16 | Dtype::Float16)
}

/// The widest row the one-matrix kernels round to 8 bits.
const ONE_MATRIX_Q8_COLUMNS: i32 = 4096;

/// Whether the one-matrix kernels ([`matmul`], [`matmul_add`]) round their row of `k` values
/// of `dtype` as the normed ones do ([`q8_activations`]): rows of up to
/// [`ONE_MATRIX_Q8_COLUMNS`], and those that a launch of their own rounds
/// ([`row_rounded_apart`]). Otherwise a block of warps, a warp a row, rounds the whole row
/// itself before its first product. On an H100 that paid for the 8B attention output (K =
/// 4 096: 9.61 us a launch, 10.48 exact) and not for its down matrix (K = 14 336: 32.58 us,
/// 23.26 exact; `bench/runs/2026-12-07-h100-3/`).
pub fn one_matrix_rounds_row(dtype: Dtype, k: i32) -> bool {
    q8_activations(dtype) && k <= ONE_MATRIX_Q8_COLUMNS || row_rounded_apart(dtype, k)
}

/// The environment variable that sets the narrowest row the one-matrix kernels take rounded
/// by a launch of its own ([`row_rounded_apart`]).
pub const Q8_APART_VAR: &str = "GMLX_CUDA_QMV_Q8_APART";

/// Whether a one-matrix product of a row of `k` values of `dtype` takes it rounded to 8-bit
/// activations by a launch of its own (1 792 threads for the 8B down product), its warps
/// reading the rounded row from global memory: rows of at least `GMLX_CUDA_QMV_Q8_APART`
/// values (up to 1 048 576; 0: none; 4 097 by default, the 8B down product's 14 336 and not its
/// output projection's 4 096), with [`q8_activations`]. That down kernel is 80 registers in
/// NVRTC's sm_90 code where rounding the row in each block made it 167
/// (`bench/runs/2026-12-07-nvrtc-2/`); on an H100 it took 23.58 us a launch against 32.58, and
/// with [`early_loads`] off under 8-bit activations the 8B Q4_0 decode went from 336.4-337.9 to
/// 360.9-363.5 tok/s (`bench/runs/2026-12-07-h100-6/`). `4096` (the output projection too)
/// measured the same, 367.9 against 361.5-370.0.
fn row_rounded_apart(dtype: Dtype, k: i32) -> bool {
    static NARROWEST: OnceLock<i32> = OnceLock::new();
    let narrowest =
        *NARROWEST.get_or_init(|| cuda_kernel::int_setting(Q8_APART_VAR, 0..=1 << 20, 4097));
    narrowest > 0 && k >= narrowest && q8_activations(dtype)
}

/// The environment variable that turns on (`1`) the normed kernels' swizzled row
/// ([`swizzled_row`]).
pub const SWIZZLE_VAR: &str = "GMLX_CUDA_QMV_SWIZZLE";

/// Whether a normed kernel holds its block's normed row in shared memory with each group's
/// 16-byte chunks permuted (`qmv4.cuh`'s `gmlx_xn_chunk`) and reads the norm weight 16 bytes
/// per load (`GMLX_CUDA_QMV_SWIZZLE=1`; off by default: it changes only the exact path, which
/// 16-bit rows leave for [`q8_activations`], and made that 2.6 % faster on an H100). Lane l of a
/// warp reads group l of the row, so in order the 8 lanes of a quarter-warp read the same few
/// shared-memory banks: Nsight Compute counted 14.5-way conflicts on the gate-up kernel's loads
/// of the row (71 % of its shared wavefronts) and half of each sector of its 2-byte norm-weight
/// loads wasted on an H100 (`bench/runs/2026-12-07-h100/ncu-detail-call3-position-copy.txt`).
/// The values and their order of summation are the same either way.
fn swizzled_row() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| cuda_kernel::opted_in(SWIZZLE_VAR))
}

/// Whether a normed kernel over a row of `dtype` has its warps issue their first weight loads
/// before the block's norm, so that they are in flight while it runs: by default for rows kept
/// exact (the 8B Q4_0 decode 8 % faster on an H100, `bench/runs/2026-12-07-h100-2/`) and not
/// under [`q8_activations`], where the loads cost registers: without them the 8B q k v kernel
/// holds 62-72 against 95 and the gate-up kernel 54-56 against 90 (NVRTC,
/// `bench/runs/2026-12-07-nvrtc-2/`), and on an H100 the q k v launch took 11.21 us
/// (`bench/runs/2026-12-07-h100-6/`, with [`row_rounded_apart`]) against 13.99 with them
/// (`bench/runs/2026-12-07-h100-3/`). `GMLX_CUDA_QMV_EARLY=1`
/// or `0` sets it for every row. Its L2-prefetch form (`prefetch.global.L2` before the norm)
/// made the 8B decode 2.6 % slower on an H100 (`bench/runs/2026-12-06-h100-8/`) and was removed.
fn early_loads(dtype: Dtype) -> bool {
    static SETTING: OnceLock<Option<bool>> = OnceLock::new();
    let setting = *SETTING.get_or_init(|| std::env::var(EARLY_VAR).ok().map(|v| v.trim() != "0"));
    setting.unwrap_or(!q8_activations(dtype))
}

/// The kernels' template types: `T` (the row's and outputs' dtype), `S` (the matrices'
/// scales and biases) and, for a normed kernel, `W` (the norm weight's). The kernels deduce
/// `S` and `W` from their arguments; they are named so that they enter the compiled kernel's
/// name with `T` (MLX keys its compiled kernels by name and template values).
fn types(x: &Array, side: Dtype, norm: Option<Norm<'_>>) -> Vec<(&'static CStr, Dtype)> {
    let mut types = vec![(c"T", x.dtype()), (c"S", side)];
    types.extend(norm.map(|n| (c"W", n.weight.dtype())));
    types
}

/// The one dtype of the matrices' scales and biases, `None` where they differ (a fused
/// kernel takes only such matrices).
pub fn shared_side_dtype(p: &[Packed<'_>]) -> Option<Dtype> {
    let d = p.first()?.scales.dtype();
    p.iter().all(|m| m.scales.dtype() == d).then_some(d)
}

fn side_dtype(p: &[Packed<'_>]) -> Result<Dtype> {
    shared_side_dtype(p).ok_or_else(|| kernel_error("matrices whose scales differ in type"))
}

fn kernel_error(reason: &str) -> Error {
    cuda_kernel::error(Kernel::One.spec(), reason)
}

/// Applies kernel `which` to `inputs` with outputs of `shapes`, all of the first template
/// type's dtype, the template types `types` (see [`types`]), integer constants `ints`, over
/// `(threads in all, threads per block)`.
fn launch(
    which: Kernel,
    inputs: &[Array],
    shapes: &[&[i32]],
    types: &[(&CStr, Dtype)],
    ints: &[(&CStr, i32)],
    grid: (i32, i32),
) -> Result<Vec<Array>> {
    let Some(&(_, dtype)) = types.first() else {
        return Err(kernel_error("no output type"));
    };
    let outputs: Vec<cuda_kernel::Output<'_>> = shapes.iter().map(|s| (*s, dtype)).collect();
    cuda_kernel::launch(which.spec(), inputs, &outputs, types, ints, grid)
}
