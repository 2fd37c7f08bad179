//! [`GgufWriter`]: write GGUF v3 files (metadata, tensor table, aligned data), for adapters and
//! test fixtures. Files it writes read back identically with this crate and with gguf-py's
//! `GGUFReader`.

use std::borrow::Cow;
use std::collections::HashSet;
use std::io::{self, Write};
use std::path::Path;

use crate::error::{Error, Result, WriterProblem};
use crate::ggml_type::GgmlType;
use crate::reader::{align_up, tensor_bytes, DEFAULT_ALIGNMENT, MAGIC};
use crate::value::{Array, Value};

struct PendingTensor<'a> {
    name: String,
    ty: GgmlType,
    dims: Vec<u64>,
    data: Cow<'a, [u8]>,
}

/// Builds a GGUF v3 file in memory order: metadata in insertion order, then tensors in insertion
/// order, each tensor's data aligned to `general.alignment` (32 unless that key is added).
#[derive(Default)]
pub struct GgufWriter<'a> {
    kvs: Vec<(String, Value)>,
    keys: HashSet<String>,
    tensors: Vec<PendingTensor<'a>>,
    names: HashSet<String>,
    alignment: Option<u64>,
}

fn problem(p: WriterProblem) -> Error {
    Error::Writer { problem: p }
}

impl<'a> GgufWriter<'a> {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a metadata entry. `general.alignment` must be a u32 power of two and sets the
    /// alignment used for the data.
    pub fn add_kv(&mut self, key: &str, value: impl Into<Value>) -> Result<()> {
        let value = value.into();
        if self.keys.contains(key) {
            return Err(problem(WriterProblem::DuplicateKey {
                key: key.to_string(),
            }));
        }
        if key == "general.alignment" {
            match value {
                Value::U32(a) if a.is_power_of_two() => self.alignment = Some(a.into()),
                _ => return Err(problem(WriterProblem::AlignmentType)),
            }
        }
        self.keys.insert(key.to_string());
        self.kvs.push((key.to_string(), value));
        Ok(())
    }

    /// Add a tensor: `dims` in ggml order (`dims[0]` is the row length), `data` exactly the
    /// bytes its type and shape need.
    pub fn add_tensor(
        &mut self,
        name: &str,
        ty: GgmlType,
        dims: &[u64],
        data: impl Into<Cow<'a, [u8]>>,
    ) -> Result<()> {
        let data = data.into();
        if self.names.contains(name) {
            return Err(problem(WriterProblem::DuplicateTensor {
                name: name.to_string(),
            }));
        }
        let expected = tensor_bytes(name, ty, dims).map_err(|e| match e {
            Error::BadShape { problem: p, .. } => problem(WriterProblem::BadShape {
                tensor: name.to_string(),
                problem: p,
            }),
            other => other,
        })?;
        if expected != data.len() as u64 {
            return Err(problem(WriterProblem::DataSize {
                tensor: name.to_string(),
                expected,
                found: data.len() as u64,
            }));
        }
        self.names.insert(name.to_string());
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            ty,
            dims: dims.to_vec(),
            data,
        });
        Ok(())
    }

    /// Add an f32 tensor from values.
    pub fn add_f32(&mut self, name: &str, dims: &[u64], values: &[f32]) -> Result<()> {
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_tensor(name, GgmlType::F32, dims, data)
    }

    fn alignment(&self) -> u64 {
        self.alignment.unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// Serialise the whole file.
    pub fn write<W: Write>(&self, w: &mut W) -> io::Result<()> {
        let align = self.alignment();
        let mut pos: u64 = 0;
        let mut put = |w: &mut W, b: &[u8]| -> io::Result<()> {
            pos += b.len() as u64;
            w.write_all(b)
        };
        put(w, &MAGIC)?;
        put(w, &3u32.to_le_bytes())?;
        put(w, &(self.tensors.len() as u64).to_le_bytes())?;
        put(w, &(self.kvs.len() as u64).to_le_bytes())?;
        let mut buf = Vec::new();
        for (k, v) in &self.kvs {
            buf.clear();
            put_str(&mut buf, k);
            buf.extend_from_slice(&v.value_type().id().to_le_bytes());
            put_value(&mut buf, v);
            put(w, &buf)?;
        }
        let mut offset: u64 = 0;
        for t in &self.tensors {
            buf.clear();
            put_str(&mut buf, &t.name);
            buf.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                buf.extend_from_slice(&d.to_le_bytes());
            }
            buf.extend_from_slice(&t.ty.id().to_le_bytes());
            buf.extend_from_slice(&offset.to_le_bytes());
            put(w, &buf)?;
            offset = align_up(offset + t.data.len() as u64, align).unwrap_or(u64::MAX);
        }
        let zeros = vec![0u8; align as usize];
        let pad = |p: u64| (align_up(p, align).unwrap_or(p) - p) as usize;
        let mut at = pos;
        let p = pad(at);
        w.write_all(&zeros[..p])?;
        at += p as u64;
        for t in &self.tensors {
            w.write_all(&t.data)?;
            at += t.data.len() as u64;
            let p = pad(at);
            w.write_all(&zeros[..p])?;
            at += p as u64;
        }
        w.flush()
    }

    /// Serialise to a byte vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        // Writing to a Vec cannot fail.
        let _ = self.write(&mut v);
        v
    }

    /// Write to a file (created or truncated).
    pub fn write_to_path(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let io_err = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let f = std::fs::File::create(path).map_err(io_err)?;
        let mut w = io::BufWriter::new(f);
        self.write(&mut w).map_err(io_err)
    }
}

fn put_str(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

fn put_value(buf: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => buf.push(*x),
        Value::I8(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => buf.push(u8::from(*x)),
        Value::String(s) => put_str(buf, s),
        Value::U64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::Array(a) => put_array(buf, a),
    }
}

fn put_array(buf: &mut Vec<u8>, a: &Array) {
    buf.extend_from_slice(&a.element_type().id().to_le_bytes());
    buf.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                buf.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => buf.extend_from_slice(v),
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F64(v) => each!(v),
        Array::Bool(v) => buf.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => v.iter().for_each(|s| put_str(buf, s)),
        Array::Array(v) => v.iter().for_each(|inner| put_array(buf, inner)),
    }
}
