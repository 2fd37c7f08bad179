//! Exact repacking of ggml codecs into MLX's affine quantized layout.
//!
//! # The MLX affine layout
//!
//! A weight matrix of `rows x cols` (row-major; `cols = dims[0]` in ggml order) is cut into
//! groups of `group_size` consecutive elements along a row. Element `w[r][c]` is
//!
//! ```text
//! w[r][c] = scales[r][c / group_size] * q[r][c] + biases[r][c / group_size]
//! ```
//!
//! with `q` an unsigned integer of `bits` bits. Each row's `q` values are packed into
//! `cols * bits / 32` little-endian `u32` words as one bit stream, least significant bit first:
//! element `c` occupies bits `[c * bits, (c + 1) * bits)` of the row's stream, and stream bit `k`
//! is bit `k % 32` of word `k / 32`. For bits 2, 4 and 8 no value crosses a word; for 3, 5 and 6
//! values straddle words (e.g. 3 bits: element 10 is bits 30..33, the top two bits of word 0 and
//! the low bit of word 1). This is MLX's own order: its CPU `quantize` packs `el_per_int`
//! elements LSB-first into a u32 (2/4/8 bits) or into a 3-byte little-endian unit (3/6 bits),
//! which is the same bit stream. `scales` and `biases` are `rows x cols / group_size`, kept in
//! f32 here; callers cast.
//!
//! # Which codecs map exactly
//!
//! | codec | bits | group | scale | bias |
//! |---|---|---|---|---|
//! | Q4_0 | 4 | 32 | `d` | `-8 d` |
//! | Q4_1 | 4 | 32 | `d` | `m` |
//! | Q5_0 | 5 | 32 | `d` | `-16 d` |
//! | Q5_1 | 5 | 32 | `d` | `m` |
//! | Q8_0 | 8 | 32 | `d` | `-128 d` (q stored as `q + 128`) |
//! | Q4_K | 4 | 32 | `d * sc` | `-(dmin * m)` |
//! | Q5_K | 5 | 32 | `d * sc` | `-(dmin * m)` |
//! | Q2_0 | 2 | 64 | `d` | `-d` |
//! | Q1_0 | 2 | 128 | `2 d` | `-d` (q is 0 or 1) |
//!
//! Every product above is exact in f32 (an f16 times a small integer), so `scale * q + bias`
//! in f32 equals the reference dequantization exactly (as f32 values: a `-0.0` of the reference
//! may come out as `+0.0`), with or without fused multiply-add. Casting the f32 scales or
//! biases to f16/bf16 can round them (`d * sc` of the K-quants needs 17 significant bits) and
//! `-8 d`, `-128 d` can overflow f16 for huge `d`; keep f32 scales for exactness.
//!
//! Codecs that cannot map:
//! - Q2_K, Q3_K, Q6_K: sub-blocks of 16 elements each have their own scale, and MLX's smallest
//!   group is 32, so one group would need two scales.
//! - IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S: values come from codebooks (grids of
//!   8 or 4 magnitudes with sign patterns), not from `scale * integer + bias`.
//! - IQ4_NL, IQ4_XS: the 16 levels of `kvalues_iq4nl` are not evenly spaced.
//! - MXFP4, NVFP4: E2M1 levels (0, 0.5, 1, 1.5, 2, 3, 4, 6) are not evenly spaced (NVFP4 also
//!   has 16-wide scales).
//! - TQ1_0 packs 5 trits per byte in base 3. TQ2_0 (`d * (q - 1)`, 2-bit) is affine with
//!   group 256, wider than MLX's largest group, and its element order interleaves bytes.
//! - Float and integer types are dense, not quantized; Q8_1 and Q8_K are not supported.

use rayon::prelude::*;

use crate::codec::{f16_at, u32_at};
use crate::error::{Error, Result};
use crate::ggml_type::GgmlType;

/// Bits and group size of an MLX affine layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AffineLayout {
    /// Bits per value: 2, 3, 4, 5, 6 or 8.
    pub bits: u32,
    /// Elements per scale/bias group: 32, 64 or 128.
    pub group_size: usize,
}

/// A matrix in MLX affine layout (see the module docs for the exact convention).
#[derive(Debug, Clone, PartialEq)]
pub struct AffineWeights {
    pub layout: AffineLayout,
    /// Number of rows (product of all ggml dims but the first).
    pub rows: usize,
    /// Elements per row (ggml `dims[0]`).
    pub cols: usize,
    /// `rows x (cols * bits / 32)` packed words.
    pub q: Vec<u32>,
    /// `rows x (cols / group_size)`.
    pub scales: Vec<f32>,
    /// `rows x (cols / group_size)`.
    pub biases: Vec<f32>,
}

/// The exact affine layout of a codec, or why it has none.
pub fn affine_layout(ty: GgmlType) -> Result<AffineLayout> {
    use GgmlType as T;
    let l = |bits, group_size| Ok(AffineLayout { bits, group_size });
    let no = |reason| Err(Error::NotAffine { ty, reason });
    match ty {
        T::Q4_0 | T::Q4_1 | T::Q4_K => l(4, 32),
        T::Q5_0 | T::Q5_1 | T::Q5_K => l(5, 32),
        T::Q8_0 => l(8, 32),
        T::Q2_0 => l(2, 64),
        T::Q1_0 => l(2, 128),
        T::Q2_K | T::Q3_K | T::Q6_K => {
            no("its 16-element sub-blocks each have a scale; MLX groups are at least 32 wide")
        }
        T::IQ1_S | T::IQ1_M | T::IQ2_XXS | T::IQ2_XS | T::IQ2_S | T::IQ3_XXS | T::IQ3_S => {
            no("its values come from a codebook grid, not scale * integer + bias")
        }
        T::IQ4_NL | T::IQ4_XS => no("its 16 levels (kvalues_iq4nl) are not evenly spaced"),
        T::MXFP4 | T::NVFP4 => no("E2M1 levels are not evenly spaced"),
        T::F32 | T::F16 | T::BF16 | T::F64 | T::I8 | T::I16 | T::I32 | T::I64 => {
            no("it is a dense type, not a quantized one")
        }
        _ => no("the codec is not supported"),
    }
}

/// Decode one block into `q` (one value per element) and per-group scale/bias.
fn block_affine(ty: GgmlType, b: &[u8], q: &mut [u8], scales: &mut [f32], biases: &mut [f32]) {
    use GgmlType as T;
    match ty {
        T::Q4_0 | T::Q4_1 => {
            let d = f16_at(b, 0);
            let (bias, qs) = if ty == T::Q4_0 {
                (-8.0 * d, &b[2..18])
            } else {
                (f16_at(b, 2), &b[4..20])
            };
            for j in 0..16 {
                q[j] = qs[j] & 0xF;
                q[j + 16] = qs[j] >> 4;
            }
            scales[0] = d;
            biases[0] = bias;
        }
        T::Q5_0 | T::Q5_1 => {
            let d = f16_at(b, 0);
            let (bias, at) = if ty == T::Q5_0 {
                (-16.0 * d, 2)
            } else {
                (f16_at(b, 2), 4)
            };
            let qh = u32_at(b, at);
            let qs = &b[at + 4..at + 20];
            for j in 0..16 {
                q[j] = (qs[j] & 0xF) | ((((qh >> j) & 1) as u8) << 4);
                q[j + 16] = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
            }
            scales[0] = d;
            biases[0] = bias;
        }
        T::Q8_0 => {
            let d = f16_at(b, 0);
            for j in 0..32 {
                q[j] = (b[2 + j] as i8 as i16 + 128) as u8;
            }
            scales[0] = d;
            biases[0] = -128.0 * d;
        }
        T::Q4_K | T::Q5_K => {
            let d = f16_at(b, 0);
            let dmin = f16_at(b, 2);
            let sc = &b[4..16];
            let (qh, qs) = if ty == T::Q5_K {
                (Some(&b[16..48]), &b[48..176])
            } else {
                (None, &b[16..144])
            };
            for s in 0..8 {
                let (scale, min) = if s < 4 {
                    (sc[s] & 63, sc[s + 4] & 63)
                } else {
                    (
                        (sc[s + 4] & 0xF) | ((sc[s - 4] >> 6) << 4),
                        (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4),
                    )
                };
                scales[s] = d * f32::from(scale);
                biases[s] = -(dmin * f32::from(min));
                for l in 0..32 {
                    let mut v = (qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 0xF;
                    if let Some(qh) = qh {
                        v |= ((qh[l] >> s) & 1) << 4;
                    }
                    q[32 * s + l] = v;
                }
            }
        }
        T::Q2_0 => {
            let d = f16_at(b, 0);
            for j in 0..64 {
                q[j] = (b[2 + j / 4] >> (2 * (j % 4))) & 3;
            }
            scales[0] = d;
            biases[0] = -d;
        }
        T::Q1_0 => {
            let d = f16_at(b, 0);
            for j in 0..128 {
                q[j] = (b[2 + j / 8] >> (j % 8)) & 1;
            }
            scales[0] = 2.0 * d;
            biases[0] = -d;
        }
        _ => {}
    }
}

/// Pack `values` (each below `1 << bits`) into little-endian u32 words as one LSB-first bit
/// stream: value `i` occupies stream bits `[i * bits, (i + 1) * bits)`. `out` should hold
/// `ceil(values.len() * bits / 32)` words and start zeroed; bits beyond it are dropped.
pub fn pack_bits(values: &[u8], bits: u32, out: &mut [u32]) {
    for (i, &v) in values.iter().enumerate() {
        let p = i * bits as usize;
        let (w, off) = (p / 32, (p % 32) as u32);
        let v = u32::from(v);
        if let Some(word) = out.get_mut(w) {
            *word |= v << off;
        }
        if off + bits > 32 {
            if let Some(word) = out.get_mut(w + 1) {
                *word |= v >> (32 - off);
            }
        }
    }
}

/// Inverse of [`pack_bits`]: `n` values of `bits` bits.
pub fn unpack_bits(words: &[u32], bits: u32, n: usize) -> Vec<u8> {
    let mask = (1u64 << bits) - 1;
    (0..n)
        .map(|i| {
            let p = i * bits as usize;
            let (w, off) = (p / 32, p % 32);
            let lo = words.get(w).copied().map(u64::from).unwrap_or(0);
            let hi = words.get(w + 1).copied().map(u64::from).unwrap_or(0);
            (((lo | (hi << 32)) >> off) & mask) as u8
        })
        .collect()
}

/// Repack a tensor of codec `ty` (`bytes`, `dims` in ggml order) into MLX affine layout,
/// exactly. Fails with [`Error::NotAffine`] for codecs that cannot map (see module docs).
pub fn repack_affine(ty: GgmlType, bytes: &[u8], dims: &[u64]) -> Result<AffineWeights> {
    let layout = affine_layout(ty)?;
    let n_elements = dims
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .unwrap_or(u64::MAX);
    let expected = ty.bytes_for(n_elements).unwrap_or(u64::MAX);
    let cols = dims.first().copied().unwrap_or(1);
    if cols % ty.block_size() as u64 != 0 || expected != bytes.len() as u64 {
        return Err(Error::ByteLength {
            ty,
            n_elements,
            expected,
            found: bytes.len() as u64,
        });
    }
    if n_elements == 0 {
        // An empty tensor (some dim is 0): nothing to pack, whatever the other dims say.
        return Ok(AffineWeights {
            layout,
            rows: 0,
            cols: 0,
            q: Vec::new(),
            scales: Vec::new(),
            biases: Vec::new(),
        });
    }
    // n_elements <= bytes.len() * (elements per byte) fits in memory, and so do these.
    let cols = cols as usize;
    let rows = (n_elements / cols as u64) as usize;
    let bits = layout.bits as usize;
    let words_per_row = cols * bits / 32;
    let groups_per_row = cols / layout.group_size;
    let bs = ty.block_size();
    let ts = ty.type_size();
    // Every mapped codec has group_size <= block size: a block holds whole groups.
    let groups_per_block = bs / layout.group_size;
    let row_bytes = cols / bs * ts;

    let mut q = vec![0u32; rows * words_per_row];
    let mut scales = vec![0f32; rows * groups_per_row];
    let mut biases = vec![0f32; rows * groups_per_row];
    q.par_chunks_mut(words_per_row)
        .zip(scales.par_chunks_mut(groups_per_row))
        .zip(biases.par_chunks_mut(groups_per_row))
        .zip(bytes.par_chunks(row_bytes))
        .for_each(|(((qw, sc), bi), src)| {
            let mut vals = vec![0u8; cols];
            for (k, blk) in src.chunks_exact(ts).enumerate() {
                let g = k * groups_per_block..(k + 1) * groups_per_block;
                block_affine(
                    ty,
                    blk,
                    &mut vals[k * bs..(k + 1) * bs],
                    &mut sc[g.clone()],
                    &mut bi[g],
                );
            }
            pack_bits(&vals, layout.bits, qw);
        });
    Ok(AffineWeights {
        layout,
        rows,
        cols,
        q,
        scales,
        biases,
    })
}

impl AffineWeights {
    /// Reference decode of the affine form: `scale * q + bias` in f32 (no fused multiply-add),
    /// row-major. What `mlx::dequantize` computes with f32 scales and biases.
    pub fn dequantize(&self) -> Vec<f32> {
        let words_per_row = self.cols * self.layout.bits as usize / 32;
        let groups_per_row = self.cols / self.layout.group_size;
        let mut out = Vec::with_capacity(self.rows * self.cols);
        for r in 0..self.rows {
            let vals = unpack_bits(
                &self.q[r * words_per_row..(r + 1) * words_per_row],
                self.layout.bits,
                self.cols,
            );
            for (c, v) in vals.iter().enumerate() {
                let g = r * groups_per_row + c / self.layout.group_size;
                out.push(self.scales[g] * f32::from(*v) + self.biases[g]);
            }
        }
        out
    }
}

/// An MXFP4 matrix in MLX's `mxfp4` quantization mode: `rows x cols/8` words of eight 4-bit
/// E2M1 codes, element `c` in bits `4 (c % 8)` of word `c / 8` (LSB first), and one E8M0
/// exponent byte per 32 elements. ggml's codes index `kvalues_mxfp4`, which doubles E2M1, and
/// its scale halves `2^(e - 127)`: the code and the exponent byte carry over unchanged; only
/// the nibble order differs (ggml puts element `j + 16` of a block in the high nibble of
/// byte `j`).
#[derive(Debug, Clone, PartialEq)]
pub struct Mxfp4Weights {
    pub rows: usize,
    pub cols: usize,
    pub q: Vec<u32>,
    /// `rows x cols / 32` exponent bytes.
    pub scales: Vec<u8>,
}

/// Repacks an MXFP4 tensor (`dims` in ggml order) for MLX's `mxfp4` mode, exactly.
pub fn repack_mxfp4(bytes: &[u8], dims: &[u64]) -> Result<Mxfp4Weights> {
    let ty = GgmlType::MXFP4;
    let n_elements = dims
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .unwrap_or(u64::MAX);
    let expected = ty.bytes_for(n_elements).unwrap_or(u64::MAX);
    let cols = dims.first().copied().unwrap_or(1);
    if cols % 32 != 0 || expected != bytes.len() as u64 {
        return Err(Error::ByteLength {
            ty,
            n_elements,
            expected,
            found: bytes.len() as u64,
        });
    }
    let blocks = bytes.len() / 17;
    let mut q = vec![0u32; blocks * 4];
    let mut scales = vec![0u8; blocks];
    q.par_chunks_mut(4)
        .zip(scales.par_chunks_mut(1))
        .zip(bytes.par_chunks(17))
        .for_each(|((words, scale), block)| {
            scale[0] = block[0];
            let mut codes = [0u8; 32];
            for j in 0..16 {
                codes[j] = block[1 + j] & 0xF;
                codes[j + 16] = block[1 + j] >> 4;
            }
            pack_bits(&codes, 4, words);
        });
    let cols = cols as usize;
    Ok(Mxfp4Weights {
        rows: (n_elements as usize).checked_div(cols).unwrap_or(0),
        cols,
        q,
        scales,
    })
}
