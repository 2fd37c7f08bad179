//! `gmlx inspect`: a summary of a GGUF file, for people ([`report`]) or programs ([`json`]).

use std::fmt::{self, Write as _};

use crate::file::GgufFile;
use crate::value::{Array, Value};

/// What [`report`] prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Print the per-tensor table (`--tensors`).
    pub tensors: bool,
    /// Array elements shown before `...` (long arrays are abbreviated).
    pub max_array_items: usize,
    /// Characters of a string value shown before `...`.
    pub max_string_chars: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tensors: false,
            max_array_items: 8,
            max_string_chars: 120,
        }
    }
}

/// A summary of `file`, ready to print: file(s), version, architecture, metadata (long arrays
/// and strings abbreviated), tensor count and bytes per codec, totals, and with
/// `opts.tensors` one line per tensor.
pub fn report(file: &GgufFile, opts: &Options) -> String {
    Report { file, opts }.to_string()
}

/// [`report`] as a `Display` value.
pub struct Report<'a> {
    pub file: &'a GgufFile,
    pub opts: &'a Options,
}

fn human_bytes(n: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", U[i])
    }
}

fn short_string(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(max).collect();
        format!("{head:?}... ({n} chars)")
    }
}

fn short_value(v: &Value, opts: &Options) -> String {
    match v {
        Value::String(s) => short_string(s, opts.max_string_chars),
        Value::Array(a) => short_array(a, opts),
        v => v.to_string(),
    }
}

fn short_array(a: &Array, opts: &Options) -> String {
    let mut s = String::from("[");
    let shown = a.len().min(opts.max_array_items);
    for i in 0..shown {
        if i > 0 {
            s.push_str(", ");
        }
        if let Some(v) = a.get(i) {
            let item = match &v {
                Value::String(x) => short_string(x, 40),
                other => short_value(other, opts),
            };
            s.push_str(&item);
        }
    }
    if a.len() > shown {
        let _ = write!(s, ", ... ({} items)", a.len());
    }
    s.push(']');
    s
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file;
        let paths = file.paths();
        for p in &paths {
            writeln!(f, "file:         {}", p.display())?;
        }
        writeln!(f, "GGUF version: {}", file.version())?;
        writeln!(
            f,
            "architecture: {}",
            file.metadata().architecture().unwrap_or("(none)")
        )?;
        writeln!(f, "alignment:    {}", file.alignment())?;
        let total = file.total_tensor_bytes();
        let n_elems: u64 = file.tensors().iter().map(|t| t.n_elements()).sum();
        writeln!(
            f,
            "tensors:      {} ({} elements, {}, {:.2} bits/weight)",
            file.tensors().len(),
            n_elems,
            human_bytes(total),
            if n_elems == 0 {
                0.0
            } else {
                total as f64 * 8.0 / n_elems as f64
            }
        )?;

        writeln!(f, "\nmetadata ({} keys):", file.metadata().len())?;
        for (k, v) in file.metadata().entries() {
            writeln!(
                f,
                "  {k:<40} {:<16} {}",
                v.type_description(),
                short_value(v, self.opts)
            )?;
        }

        writeln!(f, "\ntensors per codec:")?;
        for (ty, n) in file.type_counts() {
            let bytes = file.codec_bytes(ty);
            let note = if ty.can_dequantize() {
                ""
            } else {
                "  (unsupported)"
            };
            writeln!(
                f,
                "  {:<8} {n:>6} tensors {:>12}{note}",
                ty.name(),
                human_bytes(bytes)
            )?;
        }
        writeln!(
            f,
            "  total    {:>6} tensors {:>12}",
            file.tensors().len(),
            human_bytes(total)
        )?;

        if self.opts.tensors {
            writeln!(
                f,
                "\n{:<48} {:<8} {:<28} {:>12} {:>14}",
                "name", "type", "shape (ggml order)", "bytes", "offset"
            )?;
            for t in file.tensors() {
                let dims = t
                    .dims
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(" x ");
                let shard = if paths.len() > 1 {
                    format!(" [shard {}]", t.shard + 1)
                } else {
                    String::new()
                };
                writeln!(
                    f,
                    "{:<48} {:<8} {:<28} {:>12} {:>14}{shard}",
                    t.name,
                    t.ggml_type.name(),
                    dims,
                    t.n_bytes,
                    t.offset
                )?;
            }
        }
        Ok(())
    }
}

/// The same facts as [`report`] as JSON: `files`, `version`, `architecture`, `alignment`,
/// `tensor_count`, `elements`, `tensor_bytes`, `bits_per_weight`, `metadata` (key to
/// `{type, value}`; arrays longer than `opts.max_array_items` give `len` and their first
/// items), `codecs` (per codec: `tensors`, `bytes`, `supported`) and, with `opts.tensors`,
/// `tensors` (name, type, dims in ggml order, bytes, offset, shard).
pub fn json(file: &GgufFile, opts: &Options) -> serde_json::Value {
    use serde_json::json;
    let total = file.total_tensor_bytes();
    let n_elems: u64 = file.tensors().iter().map(|t| t.n_elements()).sum();
    let metadata: serde_json::Map<String, serde_json::Value> = file
        .metadata()
        .entries()
        .iter()
        .map(|(k, v)| {
            let mut entry = json!({ "type": v.type_description() });
            match v {
                Value::Array(a) => {
                    let shown = a.len().min(opts.max_array_items);
                    entry["len"] = json!(a.len());
                    entry["value"] = (0..shown)
                        .filter_map(|i| a.get(i).map(|x| value_json(&x)))
                        .collect();
                    entry["truncated"] = json!(a.len() > shown);
                }
                other => entry["value"] = value_json(other),
            }
            (k.to_owned(), entry)
        })
        .collect();
    let codecs: serde_json::Map<String, serde_json::Value> = file
        .type_counts()
        .into_iter()
        .map(|(ty, n)| {
            let bytes = file.codec_bytes(ty);
            let facts = json!({ "tensors": n, "bytes": bytes, "supported": ty.can_dequantize() });
            (ty.name().to_owned(), facts)
        })
        .collect();
    let mut out = json!({
        "files": file.paths().iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "version": file.version(),
        "architecture": file.metadata().architecture(),
        "alignment": file.alignment(),
        "tensor_count": file.tensors().len(),
        "elements": n_elems,
        "tensor_bytes": total,
        "bits_per_weight": if n_elems == 0 { 0.0 } else { total as f64 * 8.0 / n_elems as f64 },
        "metadata": metadata,
        "codecs": codecs,
    });
    if opts.tensors {
        out["tensors"] = file
            .tensors()
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "type": t.ggml_type.name(),
                    "dims": t.dims,
                    "bytes": t.n_bytes,
                    "offset": t.offset,
                    "shard": t.shard + 1,
                })
            })
            .collect();
    }
    out
}

fn value_json(v: &Value) -> serde_json::Value {
    use serde_json::json;
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F32(x) => json!(x),
        Value::F64(x) => json!(x),
        Value::Bool(x) => json!(x),
        Value::String(x) => json!(x),
        Value::Array(a) => (0..a.len())
            .filter_map(|i| a.get(i).map(|x| value_json(&x)))
            .collect(),
    }
}
