//! Plain scalar types: F32, F16, BF16, F64 and the integers, converted to f32.
//!
//! F64 and the 32/64-bit integers round to nearest f32, as NumPy's `astype(np.float32)` does.

use super::blocks;

pub(crate) fn f32(src: &[u8], dst: &mut [f32]) {
    blocks::<4, 1>(src, dst, |s, d| d[0] = f32::from_le_bytes(*s));
}

pub(crate) fn f16(src: &[u8], dst: &mut [f32]) {
    blocks::<2, 1>(src, dst, |s, d| {
        d[0] = half::f16::from_bits(u16::from_le_bytes(*s)).to_f32()
    });
}

/// BF16 is the top half of an f32.
pub(crate) fn bf16(src: &[u8], dst: &mut [f32]) {
    blocks::<2, 1>(src, dst, |s, d| {
        d[0] = f32::from_bits(u32::from(u16::from_le_bytes(*s)) << 16)
    });
}

pub(crate) fn f64(src: &[u8], dst: &mut [f32]) {
    blocks::<8, 1>(src, dst, |s, d| d[0] = f64::from_le_bytes(*s) as f32);
}

pub(crate) fn i8(src: &[u8], dst: &mut [f32]) {
    blocks::<1, 1>(src, dst, |s, d| d[0] = f32::from(s[0] as i8));
}

pub(crate) fn i16(src: &[u8], dst: &mut [f32]) {
    blocks::<2, 1>(src, dst, |s, d| d[0] = f32::from(i16::from_le_bytes(*s)));
}

pub(crate) fn i32(src: &[u8], dst: &mut [f32]) {
    blocks::<4, 1>(src, dst, |s, d| d[0] = i32::from_le_bytes(*s) as f32);
}

pub(crate) fn i64(src: &[u8], dst: &mut [f32]) {
    blocks::<8, 1>(src, dst, |s, d| d[0] = i64::from_le_bytes(*s) as f32);
}
