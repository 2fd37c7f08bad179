//! Reference dequantization of every ggml codec to f32, one file per codec family.
//!
//! Each kernel decodes a run of whole blocks; [`dequantize`] splits a tensor into runs and
//! decodes them in parallel with rayon. The arithmetic follows llama.cpp's
//! `ggml/src/ggml-quants.c` (and the `gguf` Python package) operation by operation, in f32 with
//! no fused multiply-add, so results are bit-identical to `gguf.quants.dequantize`.
//!
//! | family | file | types |
//! |---|---|---|
//! | plain scalars | `float.rs` | F32, F16, BF16, F64, I8, I16, I32, I64 |
//! | legacy 32-blocks | `legacy.rs` | Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q1_0, Q2_0 |
//! | K-quants | `kquant.rs` | Q2_K, Q3_K, Q4_K, Q5_K, Q6_K |
//! | FP4 | `fp4.rs` | MXFP4, NVFP4 |
//! | IQ | `iq.rs` | IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS |
//! | ternary | `ternary.rs` | TQ1_0, TQ2_0 |
//!
//! Not decoded (refused with [`Error::UnsupportedCodec`]): the dot-product-only Q8_1, Q8_K.

mod float;
mod fp4;
mod iq;
#[rustfmt::skip]
mod iq_tables;
mod kquant;
mod legacy;
mod ternary;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ggml_type::GgmlType;

/// Decodes `src.len() / type_size` whole blocks into `dst` (`block_size` values per block).
pub(crate) type Kernel = fn(&[u8], &mut [f32]);

/// The kernel for a type, if it has one.
pub(crate) fn kernel(ty: GgmlType) -> Option<Kernel> {
    use GgmlType as T;
    Some(match ty {
        T::F32 => float::f32,
        T::F16 => float::f16,
        T::BF16 => float::bf16,
        T::F64 => float::f64,
        T::I8 => float::i8,
        T::I16 => float::i16,
        T::I32 => float::i32,
        T::I64 => float::i64,
        T::Q4_0 => legacy::q4_0,
        T::Q4_1 => legacy::q4_1,
        T::Q5_0 => legacy::q5_0,
        T::Q5_1 => legacy::q5_1,
        T::Q8_0 => legacy::q8_0,
        T::Q1_0 => legacy::q1_0,
        T::Q2_0 => legacy::q2_0,
        T::Q2_K => kquant::q2_k,
        T::Q3_K => kquant::q3_k,
        T::Q4_K => kquant::q4_k,
        T::Q5_K => kquant::q5_k,
        T::Q6_K => kquant::q6_k,
        T::MXFP4 => fp4::mxfp4,
        T::NVFP4 => fp4::nvfp4,
        T::IQ2_XXS => iq::iq2_xxs,
        T::IQ2_XS => iq::iq2_xs,
        T::IQ2_S => iq::iq2_s,
        T::IQ3_XXS => iq::iq3_xxs,
        T::IQ3_S => iq::iq3_s,
        T::IQ1_S => iq::iq1_s,
        T::IQ1_M => iq::iq1_m,
        T::IQ4_NL => iq::iq4_nl,
        T::IQ4_XS => iq::iq4_xs,
        T::TQ1_0 => ternary::tq1_0,
        T::TQ2_0 => ternary::tq2_0,
        T::Q8_1 | T::Q8_K => return None,
    })
}

/// Elements decoded per rayon task (rounded to whole blocks).
const ELEMENTS_PER_TASK: usize = 1 << 15;

/// Dequantize `n_elements` values of type `ty` from `bytes` (exactly their size) to f32.
pub fn dequantize(ty: GgmlType, bytes: &[u8], n_elements: u64) -> Result<Vec<f32>> {
    check_len(ty, bytes, n_elements)?;
    let n = usize::try_from(n_elements).map_err(|_| Error::ByteLength {
        ty,
        n_elements,
        expected: 0,
        found: bytes.len() as u64,
    })?;
    let mut out = vec![0f32; n];
    dequantize_into(ty, bytes, &mut out)?;
    Ok(out)
}

/// Dequantize into `out`, whose length is the element count.
pub fn dequantize_into(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    check_len(ty, bytes, out.len() as u64)?;
    let k = kernel(ty).ok_or(Error::UnsupportedCodec { ty, tensors: 1 })?;
    let bs = ty.block_size();
    let ts = ty.type_size();
    let blocks_per_task = (ELEMENTS_PER_TASK / bs).max(1);
    out.par_chunks_mut(blocks_per_task * bs)
        .zip(bytes.par_chunks(blocks_per_task * ts))
        .for_each(|(dst, src)| k(src, dst));
    Ok(())
}

fn check_len(ty: GgmlType, bytes: &[u8], n_elements: u64) -> Result<()> {
    let bs = ty.block_size() as u64;
    if !n_elements.is_multiple_of(bs) {
        return Err(Error::NotBlockMultiple {
            ty,
            n_elements,
            block_size: bs,
        });
    }
    let expected = ty.bytes_for(n_elements).unwrap_or(u64::MAX);
    if expected != bytes.len() as u64 {
        return Err(Error::ByteLength {
            ty,
            n_elements,
            expected,
            found: bytes.len() as u64,
        });
    }
    Ok(())
}

/// Little-endian f16 at `at`, widened exactly to f32.
#[inline]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

#[inline]
pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline]
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Split `src`/`dst` into blocks of `T` bytes / `B` values and decode each with `f`.
#[inline]
pub(crate) fn blocks<const T: usize, const B: usize>(
    src: &[u8],
    dst: &mut [f32],
    f: impl Fn(&[u8; T], &mut [f32; B]),
) {
    for (s, d) in src.chunks_exact(T).zip(dst.chunks_exact_mut(B)) {
        if let (Ok(s), Ok(d)) = (<&[u8; T]>::try_from(s), <&mut [f32; B]>::try_from(d)) {
            f(s, d);
        }
    }
}
