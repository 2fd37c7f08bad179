//! LoRA adapters in llama.cpp's GGUF format, applied live to a loaded model.
//!
//! The file (what llama.cpp's `--lora` loads, see its `src/llama-adapter.cpp`):
//! `general.type = "adapter"`, `adapter.type = "lora"`, `adapter.lora.alpha` (f32), and
//! `general.architecture` of the base model; for each adapted base tensor `T` a pair of F32
//! tensors `T.lora_a` of shape `[rank, in]` and `T.lora_b` of shape `[out, rank]` (GGUF dims
//! `[in, rank]` and `[rank, out]`). The effective scale is llama.cpp's:
//! `alpha / rank × user scale`, or the user scale alone when alpha is 0.
//!
//! Applying never touches the quantized base: each adapted [`Linear`] computes
//! `x·Wᵀ + scale·(x·Aᵀ)·Bᵀ`.
//!
//! ```no_run
//! use gmlx_models::adapter::{self, Adapter};
//! use gmlx_models::{load, LoadOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut loaded = load("SmolLM2-135M-Instruct.Q4_1.gguf", &LoadOptions::default())?;
//! let lora = Adapter::read("adapter.gguf")?;
//! adapter::apply(&mut loaded.model, &lora, 1.0)?;
//! # Ok(())
//! # }
//! ```
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gmlx_gguf::names::Kv;
use gmlx_gguf::{GgufFile, GgufWriter};
use gmlx_mlx::Array;

use crate::blocks::linear::{Linear, Lora};
use crate::model::Model;

/// `adapter.type`: which kind of adapter (llama.cpp: `lora` or `control_vector`).
pub const KEY_ADAPTER_TYPE: &str = "adapter.type";
/// `adapter.lora.alpha`: the LoRA alpha (f32).
pub const KEY_LORA_ALPHA: &str = "adapter.lora.alpha";
/// `general.type` of an adapter file.
pub const GENERAL_TYPE_ADAPTER: &str = "adapter";
/// `adapter.type` of a LoRA adapter.
pub const ADAPTER_TYPE_LORA: &str = "lora";
/// Suffix of the `[rank, in]` half of a pair.
pub const SUFFIX_A: &str = ".lora_a";
/// Suffix of the `[out, rank]` half of a pair.
pub const SUFFIX_B: &str = ".lora_b";

/// Why an adapter file is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdapterError {
    /// The file is not readable GGUF (`path` is the file; the message leaves it to the caller).
    #[error("{source}")]
    Gguf {
        path: PathBuf,
        #[source]
        source: gmlx_gguf::Error,
    },
    /// `general.type` is not `adapter`.
    #[error("not an adapter: general.type is {found:?}, expected \"adapter\"")]
    NotAnAdapter { found: Option<String> },
    /// `adapter.type` is not `lora`.
    #[error("not a LoRA adapter: adapter.type is {found:?}, expected \"lora\"")]
    NotLora { found: Option<String> },
    /// `adapter.lora.alpha` is missing (or not a float).
    #[error("the adapter has no adapter.lora.alpha (f32)")]
    MissingAlpha,
    /// The adapter was trained for another architecture.
    #[error("adapter architecture {adapter:?} does not match the model's {model:?}")]
    ArchMismatch { adapter: String, model: String },
    /// A tensor that is neither `.lora_a` nor `.lora_b`.
    #[error("adapter tensor {name:?} is not a .lora_a or .lora_b tensor")]
    UnexpectedTensor { name: String },
    /// Only one half of a pair is present.
    #[error("adapter target {target}: {missing} is missing (half a pair)")]
    HalfPair {
        target: String,
        missing: &'static str,
    },
    /// The adapter names a base tensor the model does not have.
    #[error("adapter target {target} does not exist in the base model")]
    UnknownTarget { target: String },
    /// The base tensor exists but is not a linear layer gmlx adapts (embeddings, output head).
    #[error("adapter target {target} is not a linear layer gmlx can adapt")]
    UnsupportedTarget { target: String },
    /// Shapes inconsistent within the pair or with the base tensor.
    #[error("adapter target {target}: {reason}")]
    Shape { target: String, reason: String },
    /// The adapter has no tensors at all.
    #[error("the adapter has no LoRA tensors")]
    Empty,
    #[error(transparent)]
    Mlx(#[from] gmlx_mlx::Error),
}

impl From<gmlx_mlx::mlx_rs::error::Exception> for AdapterError {
    fn from(e: gmlx_mlx::mlx_rs::error::Exception) -> Self {
        AdapterError::Mlx(e.into())
    }
}

/// `Result` with [`AdapterError`].
pub type Result<T> = std::result::Result<T, AdapterError>;

/// One adapted base tensor: `a [rank, in]`, `b [out, rank]`, row-major float32.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraPair {
    /// The base tensor's GGUF name (`blk.3.attn_q.weight`).
    pub target: String,
    pub rank: usize,
    pub input: usize,
    pub output: usize,
    pub a: Vec<f32>,
    pub b: Vec<f32>,
}

/// A LoRA adapter: llama.cpp's format, held on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct Adapter {
    /// `general.architecture` of the base model.
    pub arch: String,
    pub alpha: f32,
    /// Sorted by target name.
    pub pairs: Vec<LoraPair>,
}

impl Adapter {
    /// Reads and validates an adapter file (type, alpha, complete pairs, shapes).
    pub fn read(path: impl AsRef<Path>) -> Result<Adapter> {
        let path = path.as_ref();
        let file = GgufFile::open_single(path).map_err(|source| AdapterError::Gguf {
            path: path.to_owned(),
            source,
        })?;
        Adapter::from_gguf(&file).map_err(|e| match e {
            AdapterError::Gguf { source, .. } => AdapterError::Gguf {
                path: path.to_owned(),
                source,
            },
            other => other,
        })
    }

    /// Reads an adapter from an open GGUF file.
    pub fn from_gguf(file: &GgufFile) -> Result<Adapter> {
        let meta = file.metadata();
        let text = |key: &str| match meta.get(key) {
            Some(gmlx_gguf::Value::String(s)) => Some(s.clone()),
            _ => None,
        };
        let general_type = text(Kv::GeneralType.template());
        if general_type.as_deref() != Some(GENERAL_TYPE_ADAPTER) {
            return Err(AdapterError::NotAnAdapter {
                found: general_type,
            });
        }
        let adapter_type = text(KEY_ADAPTER_TYPE);
        if adapter_type.as_deref() != Some(ADAPTER_TYPE_LORA) {
            return Err(AdapterError::NotLora {
                found: adapter_type,
            });
        }
        let alpha = match meta.get(KEY_LORA_ALPHA) {
            Some(gmlx_gguf::Value::F32(a)) => *a,
            Some(gmlx_gguf::Value::F64(a)) => *a as f32,
            _ => return Err(AdapterError::MissingAlpha),
        };
        let arch = text(Kv::GeneralArchitecture.template()).unwrap_or_default();

        let gguf = |source| AdapterError::Gguf {
            path: PathBuf::new(),
            source,
        };
        // target -> (a, b) as (dims, values)
        type Half = Option<(Vec<u64>, Vec<f32>)>;
        let mut halves: BTreeMap<String, (Half, Half)> = BTreeMap::new();
        for info in file.tensors() {
            let name = &info.name;
            let (target, is_a) = if let Some(t) = name.strip_suffix(SUFFIX_A) {
                (t, true)
            } else if let Some(t) = name.strip_suffix(SUFFIX_B) {
                (t, false)
            } else {
                return Err(AdapterError::UnexpectedTensor { name: name.clone() });
            };
            let values = file.dequantize(name).map_err(gguf)?;
            let entry = halves.entry(target.to_owned()).or_default();
            let slot = if is_a { &mut entry.0 } else { &mut entry.1 };
            *slot = Some((info.dims.clone(), values));
        }
        if halves.is_empty() {
            return Err(AdapterError::Empty);
        }
        let mut pairs = Vec::with_capacity(halves.len());
        for (target, (a, b)) in halves {
            let ((a_dims, a), (b_dims, b)) = match (a, b) {
                (Some(a), Some(b)) => (a, b),
                (None, _) => {
                    return Err(AdapterError::HalfPair {
                        target,
                        missing: "lora_a",
                    })
                }
                (_, None) => {
                    return Err(AdapterError::HalfPair {
                        target,
                        missing: "lora_b",
                    })
                }
            };
            // GGUF dims are innermost first: a = [in, rank], b = [rank, out].
            let (input, rank, rank_b, output) = match (a_dims.as_slice(), b_dims.as_slice()) {
                ([i, r], [rb, o]) => (*i as usize, *r as usize, *rb as usize, *o as usize),
                _ => {
                    return Err(AdapterError::Shape {
                        target,
                        reason: format!(
                        "lora_a and lora_b must be matrices, found dims {a_dims:?} and {b_dims:?}"
                    ),
                    })
                }
            };
            if rank != rank_b || rank == 0 {
                return Err(AdapterError::Shape {
                    target,
                    reason: format!(
                        "lora_a has rank {rank} but lora_b has rank {rank_b} (lora_a must be [rank, in], lora_b [out, rank])"
                    ),
                });
            }
            pairs.push(LoraPair {
                target,
                rank,
                input,
                output,
                a,
                b,
            });
        }
        Ok(Adapter { arch, alpha, pairs })
    }

    /// The GGUF writer for this adapter (F32 tensors, pairs in target order).
    pub fn to_writer(&self) -> gmlx_gguf::Result<GgufWriter<'static>> {
        let mut w = GgufWriter::new();
        w.add_kv(Kv::GeneralArchitecture.template(), self.arch.as_str())?;
        w.add_kv(Kv::GeneralType.template(), GENERAL_TYPE_ADAPTER)?;
        w.add_kv(KEY_ADAPTER_TYPE, ADAPTER_TYPE_LORA)?;
        w.add_kv(KEY_LORA_ALPHA, self.alpha)?;
        for p in &self.pairs {
            let (i, r, o) = (p.input as u64, p.rank as u64, p.output as u64);
            w.add_f32(&format!("{}{SUFFIX_A}", p.target), &[i, r], &p.a)?;
            w.add_f32(&format!("{}{SUFFIX_B}", p.target), &[r, o], &p.b)?;
        }
        Ok(w)
    }

    /// The scale llama.cpp uses for a pair of rank `rank`: `alpha / rank × user_scale`, or
    /// `user_scale` when alpha is 0.
    pub fn scale(&self, rank: usize, user_scale: f32) -> f32 {
        if self.alpha == 0.0 {
            user_scale
        } else {
            self.alpha / rank as f32 * user_scale
        }
    }

    /// Checks the adapter against a base model's file before any weight is loaded:
    /// architecture, every target present, shapes. Only decoder-block linear layers are
    /// adaptable.
    pub fn check_base(&self, base: &GgufFile) -> Result<()> {
        let arch = base.architecture().map_err(|source| AdapterError::Gguf {
            path: base
                .paths()
                .first()
                .map(|p| p.to_path_buf())
                .unwrap_or_default(),
            source,
        })?;
        self.check_arch(arch)?;
        for p in &self.pairs {
            let info = base
                .tensors()
                .iter()
                .find(|t| t.name == p.target)
                .ok_or_else(|| AdapterError::UnknownTarget {
                    target: p.target.clone(),
                })?;
            if !is_block_linear(&p.target) {
                return Err(AdapterError::UnsupportedTarget {
                    target: p.target.clone(),
                });
            }
            let dims = (info.row_len() as usize, info.n_rows() as usize);
            check_shape(p, dims.1, dims.0)?;
        }
        Ok(())
    }

    fn check_arch(&self, model: &str) -> Result<()> {
        if self.arch != model {
            return Err(AdapterError::ArchMismatch {
                adapter: self.arch.clone(),
                model: model.to_owned(),
            });
        }
        Ok(())
    }
}

fn is_block_linear(name: &str) -> bool {
    name.starts_with("blk.") && name.ends_with(".weight")
}

fn check_shape(p: &LoraPair, rows: usize, cols: usize) -> Result<()> {
    if p.input != cols || p.output != rows {
        return Err(AdapterError::Shape {
            target: p.target.clone(),
            reason: format!(
                "the base weight is [out {rows}, in {cols}] but the adapter is [out {}, in {}]",
                p.output, p.input
            ),
        });
    }
    Ok(())
}

/// Finds the decoder-block linear layer whose base weight is `name`.
pub fn find_linear<'m>(model: &'m mut Model, name: &str) -> Option<&'m mut Linear> {
    model
        .layers_mut()
        .iter_mut()
        .find_map(|l| l.linear_mut(name))
}

/// Installs `adapter` on `model`, replacing any adapter already there: each target's linear
/// layer then adds `scale·(x·Aᵀ)·Bᵀ` (`scale` from [`Adapter::scale`]). Nothing is installed
/// when any target is refused.
pub fn apply(model: &mut Model, adapter: &Adapter, user_scale: f32) -> Result<()> {
    adapter.check_arch(&model.config().arch.clone())?;
    let mut loras = Vec::with_capacity(adapter.pairs.len());
    for p in &adapter.pairs {
        let Some(linear) = find_linear(model, &p.target) else {
            return Err(AdapterError::UnknownTarget {
                target: p.target.clone(),
            });
        };
        let (rows, cols) = linear.weight.shape();
        check_shape(p, rows as usize, cols as usize)?;
        let (r, i, o) = (p.rank as i32, p.input as i32, p.output as i32);
        let a = Array::from_slice(&p.a, &[r, i]);
        let b = Array::from_slice(&p.b, &[o, r]);
        loras.push(Lora::new(a, b, adapter.scale(p.rank, user_scale)));
    }
    let arrays: Vec<&Array> = loras.iter().flat_map(|l| [&l.a, &l.b]).collect();
    gmlx_mlx::mlx_rs::transforms::eval(arrays)?;
    remove(model);
    for (p, lora) in adapter.pairs.iter().zip(loras) {
        if let Some(linear) = find_linear(model, &p.target) {
            linear.lora = Some(lora);
        }
    }
    Ok(())
}

/// Removes every adapter from `model`.
pub fn remove(model: &mut Model) {
    for layer in model.layers_mut() {
        for linear in layer.linears_mut() {
            linear.lora = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gmlx_gguf::Limits;

    fn sample() -> Adapter {
        Adapter {
            arch: "llama".into(),
            alpha: 16.0,
            pairs: vec![LoraPair {
                target: "blk.0.attn_q.weight".into(),
                rank: 2,
                input: 3,
                output: 4,
                a: (0..6).map(|v| v as f32).collect(),
                b: (0..8).map(|v| v as f32 * 0.5).collect(),
            }],
        }
    }

    fn parse(bytes: Vec<u8>) -> Result<Adapter> {
        let file = GgufFile::from_bytes(bytes, &Limits::default()).expect("gguf");
        Adapter::from_gguf(&file)
    }

    #[test]
    fn round_trips_through_gguf() {
        let a = sample();
        let back = parse(a.to_writer().expect("writer").to_bytes()).expect("read");
        assert_eq!(back, a);
        assert_eq!(a.scale(2, 1.0), 8.0);
        assert_eq!(Adapter { alpha: 0.0, ..a }.scale(2, 0.5), 0.5);
    }

    fn with(edit: impl FnOnce(&mut GgufWriter<'static>), keys: &[(&str, &str)]) -> Vec<u8> {
        let mut w = GgufWriter::new();
        for (k, v) in keys {
            w.add_kv(k, *v).expect("kv");
        }
        edit(&mut w);
        w.to_bytes()
    }

    #[test]
    fn refusals_name_the_problem() {
        let base = [
            ("general.architecture", "llama"),
            ("general.type", "adapter"),
            ("adapter.type", "lora"),
        ];
        let alpha = |w: &mut GgufWriter<'static>| w.add_kv(KEY_LORA_ALPHA, 8.0f32).expect("kv");
        let a = |w: &mut GgufWriter<'static>| {
            w.add_f32("blk.0.attn_q.weight.lora_a", &[3, 2], &[0.0; 6])
                .expect("t")
        };
        let b = |w: &mut GgufWriter<'static>| {
            w.add_f32("blk.0.attn_q.weight.lora_b", &[2, 4], &[0.0; 8])
                .expect("t")
        };
        let err =
            parse(with(|w| alpha(w), &[base[0], ("general.type", "model")])).expect_err("refused");
        assert!(matches!(err, AdapterError::NotAnAdapter { .. }), "{err}");
        let err = parse(with(
            |w| alpha(w),
            &[base[0], base[1], ("adapter.type", "control_vector")],
        ))
        .expect_err("refused");
        assert!(matches!(err, AdapterError::NotLora { .. }), "{err}");
        let err = parse(with(|w| (a(w), b(w)).1, &base)).expect_err("refused");
        assert!(matches!(err, AdapterError::MissingAlpha), "{err}");
        let err = parse(with(|w| (alpha(w), a(w)).1, &base)).expect_err("refused");
        assert!(
            matches!(
                err,
                AdapterError::HalfPair {
                    missing: "lora_b",
                    ..
                }
            ),
            "{err}"
        );
        let err = parse(with(|w| (alpha(w), b(w)).1, &base)).expect_err("refused");
        assert!(
            matches!(
                err,
                AdapterError::HalfPair {
                    missing: "lora_a",
                    ..
                }
            ),
            "{err}"
        );
        let err = parse(with(
            |w| {
                alpha(w);
                a(w);
                w.add_f32("blk.0.attn_q.weight.lora_b", &[3, 4], &[0.0; 12])
                    .expect("t");
            },
            &base,
        ))
        .expect_err("refused");
        assert!(matches!(err, AdapterError::Shape { .. }), "{err}");
        let ok = parse(with(|w| (alpha(w), a(w), b(w)).2, &base)).expect("valid");
        let err = Adapter {
            arch: "qwen3".into(),
            ..ok
        }
        .check_arch("llama")
        .expect_err("refused");
        assert!(err.to_string().contains("does not match"), "{err}");
    }
}
