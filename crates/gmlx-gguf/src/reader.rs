//! Parsing and validation of a GGUF header (magic, metadata, tensor table) from bytes.
//!
//! Everything here works on a byte slice and never touches tensor data. Every count read from
//! the file is checked against [`Limits`] and against the bytes that remain before anything is
//! allocated, so the memory used is bounded by a small multiple of the file's size, and all
//! offset and size arithmetic is checked.

use std::collections::HashMap;

use crate::error::{Context, Error, Result, ShapeProblem};
use crate::ggml_type::GgmlType;
use crate::metadata::Metadata;
use crate::value::{Array, Value, ValueType};

/// `GGUF` in the first four bytes.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section and of each tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most dimensions a ggml tensor has (`GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;

/// Limits on what a header may declare. The defaults accept every published model and keep a
/// hostile header from allocating more than a small multiple of its own size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Most tensors in one file.
    pub max_tensors: u64,
    /// Most metadata entries in one file.
    pub max_kv: u64,
    /// Most elements in one metadata array.
    pub max_array_len: u64,
    /// Longest string (key, value or tensor name), in bytes.
    pub max_string_len: u64,
    /// Deepest nesting of arrays in arrays.
    pub max_array_depth: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_tensors: 1 << 20,
            max_kv: 1 << 20,
            max_array_len: 1 << 28,
            max_string_len: 1 << 26,
            max_array_depth: 8,
        }
    }
}

/// One entry of the tensor table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name (`blk.0.attn_q.weight`).
    pub name: String,
    /// Its ggml type.
    pub ggml_type: GgmlType,
    /// Dimensions in ggml order: `dims[0]` is the innermost (contiguous) one, the row length.
    /// A `[n_out, n_in]` PyTorch weight has `dims == [n_in, n_out]`.
    pub dims: Vec<u64>,
    /// Offset of its first byte from the start of the data section of its shard.
    pub offset: u64,
    /// Bytes of data, from its type and dims.
    pub n_bytes: u64,
    /// Index of the shard that holds it (0 for a single file).
    pub shard: usize,
}

impl TensorInfo {
    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        // Validated at parse time not to overflow.
        self.dims.iter().product()
    }

    /// Elements per row (`dims[0]`, 1 for a scalar).
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// Number of rows: the product of all dims but the first.
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }

    /// Shape in row-major (NumPy / MLX) order: the reverse of [`TensorInfo::dims`].
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }
}

/// A parsed and validated header.
#[derive(Debug, Clone)]
pub struct Header {
    /// 2 or 3.
    pub version: u32,
    /// All metadata entries.
    pub metadata: Metadata,
    /// The tensor table, in file order.
    pub tensors: Vec<TensorInfo>,
    /// `general.alignment`, or 32.
    pub alignment: u64,
    /// File offset of the data section.
    pub data_offset: u64,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, ctx: &dyn Fn() -> Context) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(Error::Truncated {
                context: ctx(),
                offset: self.pos as u64,
                needed: n,
                available: self.remaining(),
            });
        }
        // n <= remaining <= usize::MAX
        let n = n as usize;
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, ctx: &dyn Fn() -> Context) -> Result<[u8; N]> {
        let s = self.take(N as u64, ctx)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, ctx: &dyn Fn() -> Context) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(ctx)?))
    }

    fn u64(&mut self, ctx: &dyn Fn() -> Context) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(ctx)?))
    }

    /// Check `count` items of at least `min_size` bytes each can fit before allocating.
    fn check_count(
        &self,
        count: u64,
        min_size: u64,
        what: &'static str,
        limit: u64,
        ctx: &dyn Fn() -> Context,
    ) -> Result<()> {
        if count > limit {
            return Err(Error::LimitExceeded {
                context: ctx(),
                what,
                value: count,
                limit,
                offset: self.pos as u64,
            });
        }
        let needed = count.saturating_mul(min_size);
        if needed > self.remaining() {
            return Err(Error::Truncated {
                context: ctx(),
                offset: self.pos as u64,
                needed,
                available: self.remaining(),
            });
        }
        Ok(())
    }

    fn string(&mut self, limits: &Limits, ctx: &dyn Fn() -> Context) -> Result<String> {
        let len = self.u64(ctx)?;
        self.check_count(len, 1, "string length", limits.max_string_len, ctx)?;
        let at = self.pos as u64;
        let bytes = self.take(len, ctx)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => Err(Error::InvalidUtf8 {
                context: ctx(),
                offset: at,
            }),
        }
    }

    fn value_type(&mut self, ctx: &dyn Fn() -> Context) -> Result<ValueType> {
        let at = self.pos as u64;
        let id = self.u32(ctx)?;
        ValueType::from_id(id).ok_or_else(|| Error::UnknownValueType {
            context: ctx(),
            type_id: id,
            offset: at,
        })
    }

    fn value(
        &mut self,
        ty: ValueType,
        limits: &Limits,
        depth: u32,
        ctx: &dyn Fn() -> Context,
    ) -> Result<Value> {
        Ok(match ty {
            ValueType::U8 => Value::U8(u8::from_le_bytes(self.array(ctx)?)),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array(ctx)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(ctx)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(ctx)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(ctx)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(ctx)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(ctx)?)),
            ValueType::Bool => Value::Bool(self.array::<1>(ctx)?[0] != 0),
            ValueType::String => Value::String(self.string(limits, ctx)?),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(ctx)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(ctx)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(ctx)?)),
            ValueType::Array => Value::Array(self.array_value(limits, depth + 1, ctx)?),
        })
    }

    fn array_value(
        &mut self,
        limits: &Limits,
        depth: u32,
        ctx: &dyn Fn() -> Context,
    ) -> Result<Array> {
        if depth > limits.max_array_depth {
            return Err(Error::LimitExceeded {
                context: ctx(),
                what: "array nesting depth",
                value: depth.into(),
                limit: limits.max_array_depth.into(),
                offset: self.pos as u64,
            });
        }
        let elem = self.value_type(ctx)?;
        let n = self.u64(ctx)?;
        self.check_count(
            n,
            elem.min_size(),
            "array length",
            limits.max_array_len,
            ctx,
        )?;
        // Bounded by the check above: n * min_size <= remaining bytes.
        let n = n as usize;
        macro_rules! fixed {
            ($t:ty, $v:ident) => {{
                const W: usize = std::mem::size_of::<$t>();
                let bytes = self.take((n * W) as u64, ctx)?;
                Array::$v(
                    bytes
                        .chunks_exact(W)
                        .map(|c| {
                            let mut a = [0u8; W];
                            a.copy_from_slice(c);
                            <$t>::from_le_bytes(a)
                        })
                        .collect(),
                )
            }};
        }
        Ok(match elem {
            ValueType::U8 => fixed!(u8, U8),
            ValueType::I8 => fixed!(i8, I8),
            ValueType::U16 => fixed!(u16, U16),
            ValueType::I16 => fixed!(i16, I16),
            ValueType::U32 => fixed!(u32, U32),
            ValueType::I32 => fixed!(i32, I32),
            ValueType::F32 => fixed!(f32, F32),
            ValueType::U64 => fixed!(u64, U64),
            ValueType::I64 => fixed!(i64, I64),
            ValueType::F64 => fixed!(f64, F64),
            ValueType::Bool => {
                Array::Bool(self.take(n as u64, ctx)?.iter().map(|&b| b != 0).collect())
            }
            ValueType::String => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.string(limits, ctx)?);
                }
                Array::String(v)
            }
            ValueType::Array => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.array_value(limits, depth + 1, ctx)?);
                }
                Array::Array(v)
            }
        })
    }
}

/// Round `x` up to a multiple of `align` (a power of two); `None` on overflow.
pub(crate) fn align_up(x: u64, align: u64) -> Option<u64> {
    Some(x.checked_add(align - 1)? & !(align - 1))
}

/// Parse and validate a GGUF header from the start of `bytes` (the whole file, or at least its
/// header; tensor bounds are checked against `bytes.len()`). Never reads tensor data.
pub fn parse_header(bytes: &[u8], limits: &Limits) -> Result<Header> {
    let mut c = Cursor { buf: bytes, pos: 0 };
    let hdr = &|| Context::Header;
    let magic: [u8; 4] = c.array(hdr)?;
    if magic != MAGIC {
        return Err(Error::BadMagic { found: magic });
    }
    let version = c.u32(hdr)?;
    if version & 0xFFFF == 0 && version != 0 {
        return Err(Error::BigEndian {
            swapped: version.swap_bytes(),
        });
    }
    if version != 2 && version != 3 {
        return Err(Error::UnsupportedVersion { version });
    }
    let n_tensors = c.u64(hdr)?;
    let n_kv = c.u64(hdr)?;
    // A tensor-table entry takes at least 8 (name) + 4 + 8 (one dim) + 4 + 8 bytes; a metadata
    // entry at least 8 (key) + 4 + 1.
    c.check_count(n_kv, 13, "metadata entry count", limits.max_kv, hdr)?;
    c.check_count(n_tensors, 32, "tensor count", limits.max_tensors, hdr)?;

    let mut entries: Vec<(String, Value)> = Vec::with_capacity(n_kv as usize);
    let mut seen: HashMap<String, usize> = HashMap::with_capacity(n_kv as usize);
    for index in 0..n_kv {
        let key = c.string(limits, &|| Context::KeyOf { index })?;
        let vctx = || Context::ValueOf { key: key.clone() };
        let ty = c.value_type(&vctx)?;
        let value = c.value(ty, limits, 0, &vctx)?;
        if seen.insert(key.clone(), entries.len()).is_some() {
            return Err(Error::DuplicateKey { key });
        }
        entries.push((key, value));
    }
    let metadata = Metadata::new(entries);

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => {
            let a = v.as_integer().unwrap_or(0);
            if a <= 0 || a > 1 << 30 || (a & (a - 1)) != 0 {
                return Err(Error::BadAlignment {
                    value: u64::try_from(a).unwrap_or(0),
                });
            }
            a as u64
        }
    };

    let mut tensors = Vec::with_capacity(n_tensors as usize);
    let mut names: HashMap<String, ()> = HashMap::with_capacity(n_tensors as usize);
    for index in 0..n_tensors {
        let name = c.string(limits, &|| Context::TensorInfo { index, name: None })?;
        let tctx = || Context::TensorInfo {
            index,
            name: Some(name.clone()),
        };
        let n_dims = c.u32(&tctx)?;
        if n_dims > MAX_DIMS {
            return Err(Error::BadShape {
                tensor: name,
                dims: vec![],
                problem: ShapeProblem::TooManyDims {
                    n_dims,
                    max: MAX_DIMS,
                },
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(c.u64(&tctx)?);
        }
        let type_id = c.u32(&tctx)?;
        let offset = c.u64(&tctx)?;
        let Some(ggml_type) = GgmlType::from_id(type_id) else {
            return Err(Error::UnknownGgmlType {
                tensor: name,
                type_id,
            });
        };
        let n_bytes = tensor_bytes(&name, ggml_type, &dims)?;
        if names.insert(name.clone(), ()).is_some() {
            return Err(Error::DuplicateTensor { name });
        }
        tensors.push(TensorInfo {
            name,
            ggml_type,
            dims,
            offset,
            n_bytes,
            shard: 0,
        });
    }

    let end_of_table = c.pos as u64;
    let data_offset = align_up(end_of_table, alignment).ok_or(Error::Truncated {
        context: Context::Header,
        offset: end_of_table,
        needed: alignment,
        available: 0,
    })?;
    // A file without tensors may end before the padding; one with tensors (even empty ones)
    // must reach its data section.
    let file_len = bytes.len() as u64;
    let data_len = file_len.saturating_sub(data_offset);
    for t in &tensors {
        if data_offset > file_len {
            return Err(Error::TensorOutOfBounds {
                tensor: t.name.clone(),
                offset: t.offset,
                n_bytes: t.n_bytes,
                data_len: 0,
            });
        }
        if t.offset % alignment != 0 {
            return Err(Error::MisalignedTensor {
                tensor: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
        let end = t.offset.checked_add(t.n_bytes);
        if end.is_none_or(|e| e > data_len) {
            return Err(Error::TensorOutOfBounds {
                tensor: t.name.clone(),
                offset: t.offset,
                n_bytes: t.n_bytes,
                data_len,
            });
        }
    }

    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

/// Validate a shape for a type and return its byte size.
pub(crate) fn tensor_bytes(name: &str, ty: GgmlType, dims: &[u64]) -> Result<u64> {
    let bad = |problem| Error::BadShape {
        tensor: name.to_string(),
        dims: dims.to_vec(),
        problem,
    };
    if dims.len() > MAX_DIMS as usize {
        return Err(bad(ShapeProblem::TooManyDims {
            n_dims: dims.len() as u32,
            max: MAX_DIMS,
        }));
    }
    if dims.iter().any(|&d| d > i64::MAX as u64) {
        return Err(bad(ShapeProblem::NegativeOrZeroDims));
    }
    // The product of the dims with zeros counted as ones must fit in i64, so that every partial
    // product (rows, elements) of an empty tensor fits too.
    let mut n: u64 = 1;
    for &d in dims {
        n = n
            .checked_mul(d.max(1))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| bad(ShapeProblem::ElementCountOverflow))?;
    }
    if dims.contains(&0) {
        n = 0;
    }
    let row = dims.first().copied().unwrap_or(1);
    let bs = ty.block_size() as u64;
    if row % bs != 0 {
        return Err(bad(ShapeProblem::RowNotBlockMultiple {
            ty,
            block_size: bs,
        }));
    }
    ty.bytes_for(n)
        .filter(|&b| b <= i64::MAX as u64)
        .ok_or_else(|| bad(ShapeProblem::ElementCountOverflow))
}
