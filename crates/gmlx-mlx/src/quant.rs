//! `QuantWeight`: a GGUF tensor kept in a form MLX multiplies directly.
//!
//! Codecs whose math maps exactly onto MLX's affine quantization (Q4_0, Q4_1, Q5_0, Q5_1,
//! Q8_0, Q4_K, Q5_K; see `gmlx_gguf::repack`) stay quantized: a 4-bit file stays about 4 bits
//! per weight in memory. MXFP4 stays MXFP4 (MLX's `mxfp4` mode). Every other codec is
//! dequantized at load to the activation dtype.
//!
//! A 3-D tensor (GGUF dims `[in, out, experts]`) is a stack of expert matrices, multiplied
//! per row with [`QuantWeight::gather_matmul`].
//!
//! On MLX's CUDA backend a Q6_K matrix keeps the file's own blocks ([`crate::cuda_q6k`]; unless
//! `GMLX_CUDA_Q6K=0`).
use gmlx_gguf::{GgmlType, GgufFile, TensorInfo};
use mlx_rs::{ops, Array, Dtype};

use crate::error::{Error, Result};
use crate::qmm::{self, Mode, Packed};

/// How a [`QuantWeight`] is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// MLX affine: packed `u32` codes with one scale and bias per group.
    Affine { bits: i32, group_size: i32 },
    /// MLX `mxfp4`: E2M1 codes with one E8M0 exponent per 32.
    Mxfp4,
    /// A plain float array in the activation dtype.
    Dense,
    /// The file's own Q6_K blocks, read by gmlx's CUDA kernels ([`crate::cuda_q6k`]).
    Q6K,
}

#[derive(Debug, Clone)]
enum Data {
    Packed {
        w: Array,
        scales: Array,
        biases: Option<Array>,
        group_size: i32,
        bits: i32,
        mode: Mode,
        /// Float16 scales and biases of a float32 weight (every value exactly a float16):
        /// widened for MLX's kernels, read as they are by the host kernel.
        compact: bool,
        /// 4-bit biases that are -8 times their scales ([`Packed::centered`]).
        centered: bool,
    },
    Dense(Array),
    /// Q6_K blocks `[..., rows, cols / 256 * 210]` of `u8` ([`crate::cuda_q6k`]); `dtype` is
    /// the activation dtype their dequantized form takes.
    Q6K {
        blocks: Array,
        dtype: Dtype,
    },
}

impl Data {
    /// The same codes, scales and biases (or dense matrix), each mapped by `f`.
    fn map(&self, f: impl Fn(&Array) -> Result<Array>) -> Result<Data> {
        Ok(match self {
            Data::Packed {
                w,
                scales,
                biases,
                group_size,
                bits,
                mode,
                compact,
                centered,
            } => Data::Packed {
                w: f(w)?,
                scales: f(scales)?,
                biases: biases.as_ref().map(&f).transpose()?,
                group_size: *group_size,
                bits: *bits,
                mode: *mode,
                compact: *compact,
                centered: *centered,
            },
            Data::Dense(a) => Data::Dense(f(a)?),
            Data::Q6K { blocks, dtype } => Data::Q6K {
                blocks: f(blocks)?,
                dtype: *dtype,
            },
        })
    }
}

/// Rows of activations from which a CPU product dequantizes the weight and uses BLAS.
pub const CPU_DENSE_MIN_ROWS: usize = 4;

/// Rows of activations from which a GPU product in inference dequantizes the weight for this
/// product and multiplies with the dense GEMM, unless `GMLX_GPU_DENSE_ROWS` says otherwise.
/// MLX's quantized GEMM reached 0.61-0.69x llama.cpp's pp512 on the H100; this 1.53-1.76x
/// (`bench/runs/2026-12-06-h100-4/`; 16 and 128 rows measured the same).
pub const GPU_DENSE_MIN_ROWS: usize = 32;

/// [`GPU_DENSE_MIN_ROWS`], or `GMLX_GPU_DENSE_ROWS` where set (0: never, MLX's quantized GEMM
/// for every product). Read once per process.
pub fn gpu_dense_min_rows() -> usize {
    static ROWS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *ROWS.get_or_init(|| {
        match std::env::var("GMLX_GPU_DENSE_ROWS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
        {
            Some(0) => usize::MAX,
            Some(rows) => rows,
            None => GPU_DENSE_MIN_ROWS,
        }
    })
}

thread_local! {
    static TRAINING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static HOST_PRODUCTS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// While alive, sets a thread-local product policy; restores the previous one when dropped.
#[must_use = "the policy holds only while the guard is alive"]
pub struct ProductsGuard {
    flag: &'static std::thread::LocalKey<std::cell::Cell<bool>>,
    previous: bool,
}

impl ProductsGuard {
    fn set(flag: &'static std::thread::LocalKey<std::cell::Cell<bool>>) -> ProductsGuard {
        ProductsGuard {
            flag,
            previous: flag.with(|f| f.replace(true)),
        }
    }
}

impl Drop for ProductsGuard {
    fn drop(&mut self) {
        self.flag.with(|f| f.set(self.previous));
    }
}

/// Products for a differentiated graph on this thread until the guard drops: they keep no
/// float copy of a weight for the backward pass. Training holds one around the differentiated
/// forward pass, whose graph would otherwise keep every dequantized weight alive until the
/// backward pass: on a GPU, and for few rows, the product is MLX's quantized matmul; on the
/// CPU from [`CPU_DENSE_MIN_ROWS`] rows it is dequantize-then-BLAS inside MLX's checkpoint
/// transform, so the float weight is transient in the forward pass and rebuilt for the
/// backward one (MLX's CPU quantized matmul costs about 20x more at training row counts).
pub fn training_products() -> ProductsGuard {
    ProductsGuard::set(&TRAINING)
}

/// Whether a [`training_products`] guard is alive on this thread (the forward pass being
/// built will be differentiated).
pub fn training() -> bool {
    TRAINING.with(|f| f.get())
}

/// Allows CPU products of few rows on this thread to use the host kernel of
/// [`crate::cpu_qmm`] until the guard drops. That kernel evaluates its input: hold one only
/// around inference, never around a graph that will be differentiated. A
/// [`training_products`] guard wins.
pub fn host_products() -> ProductsGuard {
    ProductsGuard::set(&HOST_PRODUCTS)
}

/// Whether host computation may cut the graph being built on this thread: a [`host_products`]
/// guard is alive and no [`training_products`] one (the pass is inference), on the CPU.
pub fn host_work_allowed() -> bool {
    HOST_PRODUCTS.with(|f| f.get())
        && !training()
        && crate::device::current() == Some(crate::device::DeviceKind::Cpu)
}

/// How a product of a packed weight is computed.
enum Route {
    /// MLX's quantized matmul.
    Quantized,
    /// The host kernel of [`crate::cpu_qmm`].
    Host,
    /// Dequantize for this product, then BLAS.
    Dense,
    /// One row on CUDA: gmlx's 4-bit matrix-vector kernel ([`crate::cuda_qmv`]).
    CudaVector,
    /// [`Route::Dense`] under MLX's checkpoint transform: nothing kept for the backward pass.
    DenseRecomputed,
}

fn route(x: &Array, p: &Packed<'_>) -> Result<Route> {
    let rows = rows_of(x);
    if crate::device::current() != Some(crate::device::DeviceKind::Cpu) {
        let training = TRAINING.with(|f| f.get());
        return Ok(if !training && crate::cuda_qmv::applies(x, p, rows) {
            Route::CudaVector
        } else if !training && p.mode == Mode::Affine && rows >= gpu_dense_min_rows() {
            Route::Dense
        } else {
            Route::Quantized
        });
    }
    if TRAINING.with(|f| f.get()) {
        return Ok(if rows >= CPU_DENSE_MIN_ROWS {
            Route::DenseRecomputed
        } else {
            Route::Quantized
        });
    }
    if HOST_PRODUCTS.with(|f| f.get()) && crate::cpu_qmm::handles(x, p, rows) {
        Ok(Route::Host)
    } else if rows >= CPU_DENSE_MIN_ROWS {
        Ok(Route::Dense)
    } else {
        Ok(Route::Quantized)
    }
}

/// `x @ W^T` through a float32 copy of `W` made for this product on the host over both cores
/// (on the CPU in inference, [`host_work_allowed`], for float32 `x` and a weight
/// [`crate::cpu_qmm::dequantizes`]; others go through MLX's `dequantize`). The product is
/// evaluated at once so that one dequantized weight at a time is alive (a whole prefill's graph
/// would otherwise hold every layer's).
fn host_dense_product(x: &Array, p: Packed<'_>) -> Result<Array> {
    let y = x.matmul(crate::cpu_qmm::dequantize(p)?.t())?;
    y.eval()?;
    Ok(y)
}

fn rows_of(x: &Array) -> usize {
    let shape = x.shape();
    shape[..shape.len().saturating_sub(1)]
        .iter()
        .map(|&d| d.max(0) as usize)
        .product()
}

/// `x @ dequantize(W)^T` as one checkpointed function of `x`: MLX keeps only `x` (and the
/// packed weight it already holds) for the backward pass.
fn recomputed_dense(x: &Array, p: Packed<'_>) -> Result<Array> {
    let (w, scales, biases) = (p.w.clone(), p.scales.clone(), p.biases.cloned());
    let (group_size, bits, mode, centered) = (p.group_size, p.bits, p.mode, p.centered);
    let product = crate::checkpoint::Checkpointed::new(move |xs: &[Array]| {
        let packed = Packed {
            w: &w,
            scales: &scales,
            biases: biases.as_ref(),
            group_size,
            bits,
            mode,
            centered,
        };
        let dense = qmm::dequantize(packed).map_err(Error::into_exception)?;
        Ok(vec![xs[0].matmul(dense.t())?])
    })?;
    product
        .apply(std::slice::from_ref(x))?
        .pop()
        .ok_or(Error::Ffi {
            call: "mlx_closure_apply",
            code: 0,
        })
}

/// One matrix (or a stack of them) decoded on the host into the form a [`QuantWeight`] keeps:
/// plain data, `Send`, so a thread other than MLX's can read and decode it (expert streaming).
#[derive(Debug, Clone, PartialEq)]
pub enum HostMatrix {
    /// MLX affine codes with their per-group scales and biases.
    Affine {
        q: Vec<u32>,
        scales: Vec<f32>,
        biases: Vec<f32>,
        bits: i32,
        group_size: i32,
    },
    /// MXFP4 codes with one exponent byte per 32 values.
    Mxfp4 { q: Vec<u32>, scales: Vec<u8> },
    /// Dequantized values.
    Dense(Vec<f32>),
}

/// Whether every bias is -8 times its scale (Q4_0's `d * (q - 8)`) as both are held: rounded
/// to `side` (where -8 times a large float16 scale overflows, the stored bias is infinite and
/// no longer -8 times the scale).
fn centered(scales: &[f32], biases: &[f32], side: Dtype) -> bool {
    let held = |v: f32| -> f32 {
        match side {
            Dtype::Float16 => half::f16::from_f32(v).to_f32(),
            Dtype::Bfloat16 => half::bf16::from_f32(v).to_f32(),
            _ => v,
        }
    };
    !scales.is_empty()
        && scales.len() == biases.len()
        && matches!(side, Dtype::Float16 | Dtype::Bfloat16 | Dtype::Float32)
        && scales
            .iter()
            .zip(biases)
            .all(|(s, b)| held(*b) == -8.0 * held(*s))
}

impl HostMatrix {
    /// Decodes a tensor of codec `ty` from its bytes (`dims` in ggml order): kept quantized
    /// where MLX's affine or mxfp4 layout holds the codec exactly, else dequantized.
    pub fn decode(ty: GgmlType, bytes: &[u8], dims: &[u64]) -> gmlx_gguf::Result<HostMatrix> {
        let matrix = dims.len() >= 2;
        if matrix && gmlx_gguf::repack::affine_layout(ty).is_ok() {
            let a = gmlx_gguf::repack_affine(ty, bytes, dims)?;
            Ok(HostMatrix::Affine {
                q: a.q,
                scales: a.scales,
                biases: a.biases,
                bits: a.layout.bits as i32,
                group_size: a.layout.group_size as i32,
            })
        } else if matrix && ty == GgmlType::MXFP4 {
            let m = gmlx_gguf::repack_mxfp4(bytes, dims)?;
            Ok(HostMatrix::Mxfp4 {
                q: m.q,
                scales: m.scales,
            })
        } else {
            let n: u64 = dims.iter().product();
            Ok(HostMatrix::Dense(gmlx_gguf::dequantize(ty, bytes, n)?))
        }
    }

    /// The storage this form becomes.
    pub fn storage(&self) -> Storage {
        match self {
            HostMatrix::Affine {
                bits, group_size, ..
            } => Storage::Affine {
                bits: *bits,
                group_size: *group_size,
            },
            HostMatrix::Mxfp4 { .. } => Storage::Mxfp4,
            HostMatrix::Dense(_) => Storage::Dense,
        }
    }

    /// Several matrices of one form, one after the other (a stack in this order).
    pub fn concat(parts: &[HostMatrix]) -> Option<HostMatrix> {
        let first = parts.first()?;
        let mut out = first.clone();
        for part in &parts[1..] {
            match (&mut out, part) {
                (
                    HostMatrix::Affine {
                        q, scales, biases, ..
                    },
                    HostMatrix::Affine {
                        q: q2,
                        scales: s2,
                        biases: b2,
                        ..
                    },
                ) => {
                    q.extend_from_slice(q2);
                    scales.extend_from_slice(s2);
                    biases.extend_from_slice(b2);
                }
                (HostMatrix::Mxfp4 { q, scales }, HostMatrix::Mxfp4 { q: q2, scales: s2 }) => {
                    q.extend_from_slice(q2);
                    scales.extend_from_slice(s2);
                }
                (HostMatrix::Dense(v), HostMatrix::Dense(v2)) => v.extend_from_slice(v2),
                _ => return None,
            }
        }
        Some(out)
    }

    /// The MLX arrays, each with `lead` (`[experts, rows]`, `[rows]`, or `[]` for a vector) in
    /// front of its per-row data of a matrix with `cols` inputs. Dense values and half-precision
    /// side data take `dtype`; under float32 the affine scales and biases stay float32 (exact),
    /// or with `compact` become float16 where every one of them is exactly a float16 (the
    /// legacy quants' and 8-bit's: the file's own bytes).
    fn to_data(&self, lead: &[i32], cols: i32, dtype: Dtype, compact: bool) -> Result<Data> {
        let shaped = |last: i32| -> Vec<i32> { lead.iter().copied().chain([last]).collect() };
        Ok(match self {
            HostMatrix::Affine {
                q,
                scales,
                biases,
                bits,
                group_size,
            } => {
                let groups = cols / group_size;
                let compact = compact
                    && dtype == Dtype::Float32
                    && exactly_half(scales)
                    && exactly_half(biases);
                let side = if compact { Dtype::Float16 } else { dtype };
                Data::Packed {
                    w: Array::from_slice(q, &shaped(cols * bits / 32)),
                    scales: Array::from_slice(scales, &shaped(groups)).as_dtype(side)?,
                    biases: Some(Array::from_slice(biases, &shaped(groups)).as_dtype(side)?),
                    group_size: *group_size,
                    bits: *bits,
                    mode: Mode::Affine,
                    compact,
                    centered: *bits == 4 && centered(scales, biases, side),
                }
            }
            HostMatrix::Mxfp4 { q, scales } => Data::Packed {
                w: Array::from_slice(q, &shaped(cols / 8)),
                scales: Array::from_slice(scales, &shaped(cols / 32)),
                biases: None,
                group_size: 32,
                bits: 4,
                mode: Mode::Mxfp4,
                compact: false,
                centered: false,
            },
            HostMatrix::Dense(values) => {
                Data::Dense(Array::from_slice(values, &shaped(cols)).as_dtype(dtype)?)
            }
        })
    }
}

/// A Q6_K matrix's blocks as an MLX array `[rows, cols / 256 * 210]` where it stays in them
/// ([`crate::cuda_q6k::enabled`]); `None` for every other tensor, or bytes of another size (the
/// dense path then reports them).
fn q6k_blocks(info: &TensorInfo, bytes: &[u8], rows: i32, cols: i32) -> Option<Array> {
    let row_bytes = cols / 256 * crate::cuda_q6k::BLOCK_BYTES;
    let whole = cols % 256 == 0 && bytes.len() == rows as usize * row_bytes as usize;
    if info.ggml_type != GgmlType::Q6_K
        || info.dims.len() != 2
        || !whole
        || !crate::cuda_q6k::enabled()
    {
        return None;
    }
    Some(Array::from_slice(bytes, &[rows, row_bytes]))
}

/// Whether every value is exactly a float16.
fn exactly_half(values: &[f32]) -> bool {
    values
        .iter()
        .all(|&v| half::f16::from_f32(v).to_f32().to_bits() == v.to_bits())
}

/// The packed views of `weights` where a fused CUDA kernel takes every one's product with
/// `x` now ([`QuantWeight::fused_cuda_view`]) and their scales share one dtype; `None`
/// otherwise.
fn fused_views<'w, const N: usize>(
    x: &Array,
    weights: [&'w QuantWeight; N],
) -> Result<Option<[Packed<'w>; N]>> {
    let mut views = Vec::with_capacity(N);
    for w in weights {
        match w.fused_cuda_view(x)? {
            Some(p) => views.push(p),
            None => return Ok(None),
        }
    }
    if crate::cuda_qmv::shared_side_dtype(&views).is_none() {
        return Ok(None);
    }
    Ok(<[Packed<'w>; N]>::try_from(views).ok())
}

/// Borrowed access to either form.
enum View<'a> {
    Packed(Packed<'a>),
    Dense(&'a Array),
    /// Q6_K blocks ([`Data::Q6K`]).
    Q6K {
        blocks: &'a Array,
        dtype: Dtype,
    },
}

/// A weight matrix `[rows, cols]` (GGUF `dims = [cols, rows]`), a stack of them
/// `[experts, rows, cols]`, or a vector.
#[derive(Debug, Clone)]
pub struct QuantWeight {
    name: String,
    codec: GgmlType,
    data: Data,
    rows: i32,
    cols: i32,
    experts: Option<i32>,
}

fn dim(name: &str, value: u64) -> Result<i32> {
    i32::try_from(value).map_err(|_| Error::TensorTooLarge {
        tensor: name.to_owned(),
    })
}

impl QuantWeight {
    /// Builds the weight straight from the file's memory map. `dtype` is the activation dtype:
    /// dense weights are stored in it; affine scales and biases stay float32 when it is
    /// float32 (exact), else take it. A float32 matrix on the CPU whose scales and biases are
    /// all exactly float16 (the legacy quants' and Q8_0's: the file's own values) keeps them as
    /// float16, so it holds no more bytes than the file; MLX's kernels get them widened.
    pub fn from_gguf(file: &GgufFile, info: &TensorInfo, dtype: Dtype) -> Result<QuantWeight> {
        let name = info.name.clone();
        let cols = dim(&name, info.row_len())?;
        let rows = dim(&name, info.dims.get(1).copied().unwrap_or(1))?;
        let experts = match info.dims.len() {
            0..=2 => None,
            3 => Some(dim(&name, info.dims[2])?),
            _ => {
                return Err(Error::TensorRank {
                    tensor: name,
                    dims: info.dims.len(),
                })
            }
        };
        // [experts, rows] or [rows] in front of the per-row data; nothing for a vector
        let lead: Vec<i32> = if info.dims.len() >= 2 {
            experts.into_iter().chain([rows]).collect()
        } else {
            Vec::new()
        };
        if let Some(blocks) = q6k_blocks(info, file.tensor_data(info), rows, cols) {
            return Ok(QuantWeight {
                name,
                codec: info.ggml_type,
                data: Data::Q6K { blocks, dtype },
                rows,
                cols,
                experts,
            });
        }
        let host = HostMatrix::decode(info.ggml_type, file.tensor_data(info), &info.dims).map_err(
            |source| Error::Gguf {
                tensor: info.name.clone(),
                source,
            },
        )?;
        // a matrix on the CPU keeps exact float16 side data (the host kernel reads it)
        let compact = experts.is_none()
            && lead.len() == 1
            && crate::device::current() == Some(crate::device::DeviceKind::Cpu);
        let data = host.to_data(&lead, cols, dtype, compact)?;
        Ok(QuantWeight {
            name,
            codec: info.ggml_type,
            data,
            rows,
            cols,
            experts,
        })
    }

    /// A stack of `experts` matrices `[rows, cols]` from host data (all of them, in order).
    pub fn from_host(
        name: impl Into<String>,
        codec: GgmlType,
        host: &HostMatrix,
        experts: i32,
        (rows, cols): (i32, i32),
        dtype: Dtype,
    ) -> Result<QuantWeight> {
        Ok(QuantWeight {
            name: name.into(),
            codec,
            data: host.to_data(&[experts, rows], cols, dtype, false)?,
            rows,
            cols,
            experts: Some(experts),
        })
    }

    /// A stack of `slots` zeroed matrices `[rows, cols]` in the form codec `codec` takes (see
    /// [`HostMatrix::decode`]), to bind experts into with [`QuantWeight::bind_expert`].
    pub fn empty_stack(
        name: impl Into<String>,
        codec: GgmlType,
        slots: i32,
        (rows, cols): (i32, i32),
        dtype: Dtype,
    ) -> Result<QuantWeight> {
        let zeros = |last: i32, dt: Dtype| -> Result<Array> {
            Ok(ops::zeros_dtype(&[slots, rows, last], dt)?)
        };
        let data = if let Ok(layout) = gmlx_gguf::repack::affine_layout(codec) {
            let (bits, group_size) = (layout.bits as i32, layout.group_size as i32);
            Data::Packed {
                w: zeros(cols * bits / 32, Dtype::Uint32)?,
                scales: zeros(cols / group_size, dtype)?,
                biases: Some(zeros(cols / group_size, dtype)?),
                group_size,
                bits,
                mode: Mode::Affine,
                compact: false,
                centered: false,
            }
        } else if codec == GgmlType::MXFP4 {
            Data::Packed {
                w: zeros(cols / 8, Dtype::Uint32)?,
                scales: zeros(cols / 32, Dtype::Uint8)?,
                biases: None,
                group_size: 32,
                bits: 4,
                mode: Mode::Mxfp4,
                compact: false,
                centered: false,
            }
        } else {
            Data::Dense(zeros(cols, dtype)?)
        };
        Ok(QuantWeight {
            name: name.into(),
            codec,
            data,
            rows,
            cols,
            experts: Some(slots),
        })
    }

    /// Writes one expert matrix into slot `slot` of this stack, in place where MLX can reuse
    /// the buffer (no other array holds it), and evaluates the write.
    pub fn bind_expert(&mut self, slot: i32, host: &HostMatrix) -> Result<()> {
        let (rows, cols) = (self.rows, self.cols);
        let dtype = match &self.data {
            Data::Packed { scales, .. } => scales.dtype(),
            Data::Dense(a) => a.dtype(),
            Data::Q6K { .. } => {
                return Err(Error::SlotForm {
                    tensor: self.name.clone(),
                })
            }
        };
        let update = host.to_data(&[1, rows], cols, dtype, false)?;
        let put = |stack: &Array, part: &Array| -> Result<Array> {
            let shape = stack.shape();
            let stop = [slot + 1, shape[1], shape[2]];
            crate::slicing::slice_update(stack, part, &[slot, 0, 0], &stop)
        };
        let mismatch = || Error::SlotForm {
            tensor: self.name.clone(),
        };
        // the stack's arrays are taken out of `self` for the update, so that the update's
        // input is held by nothing else and MLX writes the slot in place
        let placeholder = || Array::from_f32(0.0);
        let mut taken: Vec<Array> = match &mut self.data {
            Data::Packed {
                w, scales, biases, ..
            } => {
                let mut out = vec![
                    std::mem::replace(w, placeholder()),
                    std::mem::replace(scales, placeholder()),
                ];
                if let Some(b) = biases {
                    out.push(std::mem::replace(b, placeholder()));
                }
                out
            }
            Data::Dense(a) => vec![std::mem::replace(a, placeholder())],
            Data::Q6K { blocks, .. } => vec![std::mem::replace(blocks, placeholder())],
        };
        let parts: Vec<&Array> = match (&self.data, &update) {
            (
                Data::Packed {
                    biases,
                    bits,
                    group_size,
                    mode,
                    ..
                },
                Data::Packed {
                    w: w2,
                    scales: s2,
                    biases: b2,
                    bits: bits2,
                    group_size: g2,
                    mode: m2,
                    ..
                },
            ) if (bits, group_size, mode) == (bits2, g2, m2)
                && biases.is_some() == b2.is_some() =>
            {
                [Some(w2), Some(s2), b2.as_ref()]
                    .into_iter()
                    .flatten()
                    .collect()
            }
            (Data::Dense(_), Data::Dense(a2)) => vec![a2],
            _ => Vec::new(),
        };
        let written: Result<Vec<Array>> = if parts.len() == taken.len() {
            taken
                .iter()
                .zip(&parts)
                .map(|(stack, part)| put(stack, part))
                .collect()
        } else {
            Err(mismatch())
        };
        let written = match written {
            Ok(w) => {
                drop(std::mem::take(&mut taken));
                mlx_rs::transforms::eval(w.iter())?;
                if let (
                    Data::Packed { centered, .. },
                    Data::Packed {
                        centered: update_centered,
                        ..
                    },
                ) = (&mut self.data, &update)
                {
                    *centered &= *update_centered;
                }
                w
            }
            // put the stack back as it was
            Err(e) => {
                self.restore(taken);
                return Err(e);
            }
        };
        self.restore(written);
        Ok(())
    }

    /// Puts arrays taken out of `self.data` by [`QuantWeight::bind_expert`] back, in order.
    fn restore(&mut self, arrays: Vec<Array>) {
        let mut arrays = arrays.into_iter();
        let mut next = |slot: &mut Array| {
            if let Some(a) = arrays.next() {
                *slot = a;
            }
        };
        match &mut self.data {
            Data::Packed {
                w, scales, biases, ..
            } => {
                next(w);
                next(scales);
                if let Some(b) = biases {
                    next(b);
                }
            }
            Data::Dense(a) | Data::Q6K { blocks: a, .. } => next(a),
        }
    }

    /// A matrix `[groups · rows, cols]` seen as a stack of `groups` matrices `[rows, cols]`
    /// (row block `g` is matrix `g`), for block-diagonal products through
    /// [`QuantWeight::gather_matmul`]. Nothing is copied.
    pub fn into_groups(self, groups: i32) -> Result<QuantWeight> {
        if self.experts.is_some() || groups <= 0 || self.rows % groups != 0 {
            return Err(Error::TensorRank {
                tensor: self.name,
                dims: if self.experts.is_some() { 3 } else { 2 },
            });
        }
        let rows = self.rows / groups;
        let split = |a: &Array| -> Result<Array> {
            let last = a.shape()[a.ndim() - 1];
            Ok(a.reshape(&[groups, rows, last])?)
        };
        let data = self.data.map(split)?;
        Ok(QuantWeight {
            data,
            rows,
            experts: Some(groups),
            ..self
        })
    }

    /// Rows `[0, at)` and `[at, rows)` of the matrix (of every matrix of a stack) as two
    /// weights named `first` and `second`, each its own contiguous copy: a fused gate-up
    /// expert stack as its gate and up stacks.
    pub fn split_rows(
        &self,
        at: i32,
        first: &str,
        second: &str,
    ) -> Result<(QuantWeight, QuantWeight)> {
        if at <= 0 || at >= self.rows {
            return Err(Error::Mlx(mlx_rs::error::Exception::custom(format!(
                "{}: cannot split {} rows at row {at}",
                self.name, self.rows
            ))));
        }
        let part = |from: i32, to: i32, name: &str| -> Result<QuantWeight> {
            // the rows axis is the one before the columns (or packed columns, or groups)
            let data = self.data.map(|a| {
                let c = crate::slicing::slice_axis(a, -2, from, to)?.contiguous()?;
                c.eval()?;
                Ok(c)
            })?;
            Ok(QuantWeight {
                name: name.to_owned(),
                codec: self.codec,
                data,
                rows: to - from,
                cols: self.cols,
                experts: self.experts,
            })
        };
        Ok((part(0, at, first)?, part(at, self.rows, second)?))
    }

    /// A dense weight from an array `[rows, cols]` (or `[cols]`).
    pub fn dense(name: impl Into<String>, data: Array) -> QuantWeight {
        let shape = data.shape().to_vec();
        let cols = shape.last().copied().unwrap_or(1);
        let rows = if shape.len() >= 2 {
            shape[shape.len() - 2]
        } else {
            1
        };
        let experts = (shape.len() == 3).then(|| shape[0]);
        QuantWeight {
            name: name.into(),
            codec: GgmlType::F32,
            data: Data::Dense(data),
            rows,
            cols,
            experts,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The codec of the file's tensor.
    pub fn codec(&self) -> GgmlType {
        self.codec
    }

    pub fn storage(&self) -> Storage {
        match &self.data {
            Data::Packed {
                mode: Mode::Mxfp4, ..
            } => Storage::Mxfp4,
            Data::Packed {
                bits, group_size, ..
            } => Storage::Affine {
                bits: *bits,
                group_size: *group_size,
            },
            Data::Dense(_) => Storage::Dense,
            Data::Q6K { .. } => Storage::Q6K,
        }
    }

    /// `(rows, cols)`: output and input features of a matrix (of each expert's matrix).
    pub fn shape(&self) -> (i32, i32) {
        (self.rows, self.cols)
    }

    /// The number of stacked expert matrices, for a 3-D tensor.
    pub fn experts(&self) -> Option<i32> {
        self.experts
    }

    /// The dense array (vectors such as norm weights, and dense matrices).
    pub fn as_dense(&self) -> Option<&Array> {
        match &self.data {
            Data::Dense(a) => Some(a),
            Data::Packed { .. } | Data::Q6K { .. } => None,
        }
    }

    fn view(&self) -> View<'_> {
        match &self.data {
            Data::Packed {
                w,
                scales,
                biases,
                group_size,
                bits,
                mode,
                centered,
                ..
            } => View::Packed(Packed {
                w,
                scales,
                biases: biases.as_ref(),
                group_size: *group_size,
                bits: *bits,
                mode: *mode,
                centered: *centered,
            }),
            Data::Dense(a) => View::Dense(a),
            Data::Q6K { blocks, dtype } => View::Q6K {
                blocks,
                dtype: *dtype,
            },
        }
    }

    /// Whether the weight keeps float16 side data for float32 products ([`Data::Packed`]).
    fn compact(&self) -> bool {
        matches!(self.data, Data::Packed { compact: true, .. })
    }

    /// `f` on `p` (this weight's packed view, or part of it) as MLX's kernels take it: float16
    /// side data of a float32 weight ([`Data::Packed`]'s `compact`) widened in the graph.
    fn for_mlx<T>(&self, p: Packed<'_>, f: impl FnOnce(Packed<'_>) -> Result<T>) -> Result<T> {
        if !self.compact() {
            return f(p);
        }
        let scales = p.scales.as_dtype(Dtype::Float32)?;
        let biases = p.biases.map(|b| b.as_dtype(Dtype::Float32)).transpose()?;
        f(Packed {
            scales: &scales,
            biases: biases.as_ref(),
            ..p
        })
    }

    /// Bytes this weight holds in memory.
    pub fn nbytes(&self) -> usize {
        self.arrays().iter().map(|a| a.nbytes()).sum()
    }

    /// The arrays to evaluate to make the weight resident.
    pub fn arrays(&self) -> Vec<&Array> {
        match &self.data {
            Data::Packed {
                w, scales, biases, ..
            } => [Some(w), Some(scales), biases.as_ref()]
                .into_iter()
                .flatten()
                .collect(),
            Data::Dense(a) | Data::Q6K { blocks: a, .. } => vec![a],
        }
    }

    /// `x @ W^T`: `x [..., cols]` to `[..., rows]`.
    ///
    /// On the CPU, MLX's quantized matmul costs the same per row of `x` whatever their number
    /// (`benches/qmm.rs`: 0.8 ms per row on a 1536 x 576 4-bit matrix, 25x slower than
    /// dequantize-then-BLAS at 128 rows). So on the CPU, under a [`host_products`] guard, up
    /// to [`crate::cpu_qmm::max_rows`] rows go to the host kernel; from
    /// [`CPU_DENSE_MIN_ROWS`] rows otherwise, the weight is dequantized for this one product
    /// and multiplied by BLAS. Either way it stays quantized in memory.
    pub fn matmul(&self, x: &Array) -> Result<Array> {
        match self.view() {
            View::Packed(p) => match route(x, &p)? {
                Route::Host => crate::cpu_qmm::matmul(x, p),
                Route::Dense
                    if host_work_allowed()
                        && x.dtype() == Dtype::Float32
                        && crate::cpu_qmm::dequantizes(&p) =>
                {
                    host_dense_product(x, p)
                }
                route => self.for_mlx(p, |p| match route {
                    Route::CudaVector => crate::cuda_qmv::matmul(x, p),
                    Route::Dense => Ok(x.matmul(qmm::dequantize(p)?.t())?),
                    Route::DenseRecomputed => recomputed_dense(x, p),
                    _ => qmm::quantized_matmul(x, p, true),
                }),
            },
            View::Dense(w) => Ok(x.matmul(w.t())?),
            View::Q6K { blocks, .. } if crate::cuda_q6k::applies(x, self.cols) => {
                crate::cuda_q6k::matmul(x, blocks, self.cols)
            }
            // the weights as the dense form holds them (MLX's product promotes as it did)
            View::Q6K { blocks, dtype } => {
                let w = crate::cuda_q6k::dequantize(blocks, self.cols, dtype)?;
                Ok(x.matmul(w.t())?)
            }
        }
    }

    /// This weight's packed view where a fused CUDA kernel ([`crate::cuda_qmv`]) takes its
    /// product with `x` now: what [`QuantWeight::matmul`] would send to the one-matrix kernel,
    /// with the fused kernels on.
    fn fused_cuda_view(&self, x: &Array) -> Result<Option<Packed<'_>>> {
        let View::Packed(p) = self.view() else {
            return Ok(None);
        };
        if self.compact() || !crate::cuda_qmv::fusion_enabled() {
            return Ok(None);
        }
        Ok(matches!(route(x, &p)?, Route::CudaVector).then_some(p))
    }

    /// This weight's packed view for gmlx's CUDA decode kernels that take it as it is held:
    /// the decode-layer kernel ([`crate::cuda_layer`]) and a launch that pulls its bytes into L2
    /// before its product ([`crate::cuda_warm`]). On a GPU, not training, with the fused kernels
    /// on, a packed weight as it is held (not a compact one MLX would widen). The kernel checks
    /// the view's form and shape.
    pub fn decode_view(&self) -> Option<Packed<'_>> {
        let View::Packed(p) = self.view() else {
            return None;
        };
        let on_gpu = crate::device::current() != Some(crate::device::DeviceKind::Cpu);
        let training = TRAINING.with(|f| f.get());
        (on_gpu && !training && !self.compact() && crate::cuda_qmv::fusion_enabled()).then_some(p)
    }

    /// `[x @ W^T]` for three weights in one CUDA launch ([`crate::cuda_qmv::matmul_three`]), or
    /// `None` (nothing done) where that kernel does not take all three: the caller then
    /// multiplies each with [`QuantWeight::matmul`], which gives the same values.
    pub fn matmul_three(x: &Array, weights: [&QuantWeight; 3]) -> Result<Option<[Array; 3]>> {
        let Some(p) = fused_views(x, weights)? else {
            return Ok(None);
        };
        Ok(Some(crate::cuda_qmv::matmul_three(x, p)?))
    }

    /// `silu(x @ G^T) * (x @ U^T)` in one CUDA launch ([`crate::cuda_qmv::silu_glu`]), or
    /// `None` (nothing done) where that kernel does not take both.
    pub fn silu_glu(x: &Array, gate: &QuantWeight, up: &QuantWeight) -> Result<Option<Array>> {
        if gate.rows != up.rows {
            return Ok(None);
        }
        let Some([g, u]) = fused_views(x, [gate, up])? else {
            return Ok(None);
        };
        Ok(Some(crate::cuda_qmv::silu_glu(x, g, u)?))
    }

    /// [`QuantWeight::matmul_three`] of `norm(x)`, the RMSNorm applied in the same CUDA launch
    /// ([`crate::cuda_qmv::norm_matmul_three`]) and, given `rope`, the first two products
    /// rotated there too ([`crate::cuda_qmv::norm_rope_matmul_three`]); or `None` (nothing done)
    /// where that kernel does not take the three, the norm and the rotation: the caller then
    /// norms `x`, multiplies and rotates.
    pub fn norm_matmul_three(
        x: &Array,
        norm: crate::cuda_qmv::Norm<'_>,
        rope: Option<crate::cuda_qmv::Rotation<'_>>,
        weights: [&QuantWeight; 3],
    ) -> Result<Option<[Array; 3]>> {
        if !crate::cuda_qmv::norm_fits(x, norm) {
            return Ok(None);
        }
        let Some(p) = fused_views(x, weights)? else {
            return Ok(None);
        };
        Ok(Some(match rope {
            Some(r) if crate::cuda_qmv::rotation_fits(x, r, &p) => {
                crate::cuda_qmv::norm_rope_matmul_three(x, norm, r, p)?
            }
            Some(_) => return Ok(None),
            None => crate::cuda_qmv::norm_matmul_three(x, norm, p)?,
        }))
    }

    /// [`QuantWeight::silu_glu`] of `norm(x)` in one CUDA launch
    /// ([`crate::cuda_qmv::norm_silu_glu`]), or `None` (nothing done).
    pub fn norm_silu_glu(
        x: &Array,
        norm: crate::cuda_qmv::Norm<'_>,
        gate: &QuantWeight,
        up: &QuantWeight,
    ) -> Result<Option<Array>> {
        if gate.rows != up.rows || !crate::cuda_qmv::norm_fits(x, norm) {
            return Ok(None);
        }
        let Some([g, u]) = fused_views(x, [gate, up])? else {
            return Ok(None);
        };
        Ok(Some(crate::cuda_qmv::norm_silu_glu(x, norm, g, u)?))
    }

    /// `residual + silu_glu(norm(x)) @ D^T` (a block's feed-forward half) in two CUDA launches
    /// ([`crate::cuda_qmv::norm_silu_down_add`]: the gate-up kernel hands the down product its
    /// row rounded to 8-bit activations), or `None` (nothing done) where those kernels do not
    /// take it: the caller then goes through [`QuantWeight::norm_silu_glu`] and
    /// [`QuantWeight::matmul_add`], which give the same values.
    pub fn norm_silu_down_add(
        x: &Array,
        norm: crate::cuda_qmv::Norm<'_>,
        [gate, up, down]: [&QuantWeight; 3],
        residual: &Array,
    ) -> Result<Option<Array>> {
        // off (the default), every decoder block's step returns here before any other check
        if !crate::cuda_qmv::silu_round_enabled()
            || gate.rows != up.rows
            || !crate::cuda_qmv::norm_fits(x, norm)
        {
            return Ok(None);
        }
        let Some([g, u]) = fused_views(x, [gate, up])? else {
            return Ok(None);
        };
        let Some(d) = down.decode_view() else {
            return Ok(None);
        };
        if !crate::cuda_qmv::silu_round_fits(x, &g, &d, residual) {
            return Ok(None);
        }
        Ok(Some(crate::cuda_qmv::norm_silu_down_add(
            x, norm, g, u, d, residual,
        )?))
    }

    /// `residual + x @ W^T` in one CUDA launch ([`crate::cuda_qmv::matmul_add`]), or `None`
    /// (nothing done) where that kernel does not take it: the caller then multiplies and adds,
    /// which gives the same values. `next`: matrices the launch pulls into L2 for the next one
    /// ([`crate::cuda_warm`]).
    pub fn matmul_add(
        &self,
        x: &Array,
        residual: &Array,
        next: Option<&crate::cuda_warm::WarmSet>,
    ) -> Result<Option<Array>> {
        if !crate::cuda_qmv::norm_add_enabled() {
            return Ok(None);
        }
        let Some(p) = self.fused_cuda_view(x)? else {
            return Ok(None);
        };
        if !crate::cuda_qmv::residual_fits(x, &p, residual) {
            return Ok(None);
        }
        Ok(Some(crate::cuda_qmv::matmul_add(x, p, residual, next)?))
    }

    /// Whether [`QuantWeight::host_matmul`] takes `rows` rows now: on the CPU, under a
    /// [`host_products`] guard and no [`training_products`] one, a weight the host kernel reads.
    pub fn on_host(&self, rows: usize) -> bool {
        let View::Packed(p) = self.view() else {
            return false;
        };
        // a float16 weight's model computes in float16: not here
        let float32 = p.scales.dtype() == Dtype::Float32 || self.compact();
        host_work_allowed() && float32 && crate::cpu_qmm::handles_rows(&p, rows)
    }

    /// `x @ W^T` for `rows` row-major float32 rows on the host (the kernel of
    /// [`crate::cpu_qmm`]), row-major `[rows, output features]`; `None` where
    /// [`QuantWeight::on_host`] says no.
    pub fn host_matmul(&self, x: &[f32], rows: usize) -> Result<Option<Vec<f32>>> {
        match self.view() {
            View::Packed(p) if self.on_host(rows) => {
                Ok(Some(crate::cpu_qmm::matmul_rows(x, rows, p)?))
            }
            _ => Ok(None),
        }
    }

    /// For a stack of experts: `x [..., 1, cols]` times expert `indices[...]`, giving
    /// `[..., 1, rows]` (MLX's gather matmul; only the selected experts are touched).
    pub fn gather_matmul(&self, x: &Array, indices: &Array) -> Result<Array> {
        match self.view() {
            View::Packed(p) => self.for_mlx(p, |p| qmm::gather_qmm(x, p, indices, true)),
            View::Dense(w) => {
                let wt = w.swap_axes(-1, -2)?;
                Ok(ops::gather_mm(x, &wt, None, indices, None)?)
            }
            View::Q6K { blocks, dtype } => {
                let w = crate::cuda_q6k::dequantize(blocks, self.cols, dtype)?;
                Ok(ops::gather_mm(
                    x,
                    &w.swap_axes(-1, -2)?,
                    None,
                    indices,
                    None,
                )?)
            }
        }
    }

    /// Rows `ids` of the matrix, dequantized: the embedding lookup. Only the gathered rows are
    /// ever dequantized, never the whole table.
    pub fn rows(&self, ids: &Array) -> Result<Array> {
        let take = |a: &Array| a.take_axis(ids, 0);
        match self.view() {
            View::Packed(p) => {
                let (w, scales) = (take(p.w)?, take(p.scales)?);
                let biases = p.biases.map(take).transpose()?;
                let rows = Packed {
                    w: &w,
                    scales: &scales,
                    biases: biases.as_ref(),
                    ..p
                };
                self.for_mlx(rows, qmm::dequantize)
            }
            View::Dense(a) => Ok(take(a)?),
            View::Q6K { blocks, dtype } => {
                crate::cuda_q6k::dequantize(&take(blocks)?, self.cols, dtype)
            }
        }
    }

    /// The whole weight as floats (tests and reference paths only).
    pub fn dequantized(&self) -> Result<Array> {
        match self.view() {
            View::Packed(p) => self.for_mlx(p, qmm::dequantize),
            View::Dense(a) => Ok(a.clone()),
            View::Q6K { blocks, dtype } => crate::cuda_q6k::dequantize(blocks, self.cols, dtype),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a 2 x 32 matrix of codec `ty` whose rows are `block` loads as centered.
    fn loads_centered(ty: GgmlType, block: &[u8]) -> bool {
        let host = HostMatrix::decode(ty, &block.repeat(2), &[32, 2]).expect("decode");
        match host
            .to_data(&[2], 32, Dtype::Bfloat16, false)
            .expect("data")
        {
            Data::Packed { centered, .. } => centered,
            _ => panic!("{ty:?} did not load packed"),
        }
    }

    #[test]
    fn q4_0_loads_centered_and_q4_1_does_not() {
        let codes: Vec<u8> = (0..16).map(|i| (i * 37 + 5) as u8).collect();
        let d = half::f16::from_f32(0.0123).to_le_bytes();
        let q4_0 = [&d[..], &codes].concat();
        assert!(loads_centered(GgmlType::Q4_0, &q4_0));
        let min = half::f16::from_f32(-0.05).to_le_bytes();
        let q4_1 = [&d[..], &min, &codes].concat();
        assert!(!loads_centered(GgmlType::Q4_1, &q4_1));
        // the relation itself: every bias -8 times its scale
        assert!(centered(&[0.5, -0.25], &[-4.0, 2.0], Dtype::Bfloat16));
        assert!(!centered(&[0.5, -0.25], &[-4.0, 2.5], Dtype::Bfloat16));
        assert!(!centered(&[], &[], Dtype::Float32));
        // -8 x 8190 overflows float16: the held bias is infinite, not -8 times the scale
        assert!(centered(&[8190.0], &[-65520.0], Dtype::Float32));
        assert!(!centered(&[8190.0], &[-65520.0], Dtype::Float16));
    }
}
