//! Reads an architecture's tensors from the file by name, checking each shape against the
//! config before any byte is converted.
//!
//! The same builder runs twice per load: first as a preflight, where every tensor the plan
//! asks for is only looked up and its shape checked (each problem is recorded, a placeholder
//! returned, nothing read), so one error lists everything missing or misshapen before any
//! byte is read; then for real.
use std::cell::RefCell;
use std::rc::Rc;

use gmlx_gguf::GgufFile;
use gmlx_mlx::{Array, Dtype, QuantWeight};

use crate::blocks::moe::{ExpertPlacement, ExpertStore, ExpertTensors, ResidentExperts};
use crate::blocks::norm::RmsNorm;
use crate::error::{Error, Result, TensorProblem};

pub struct Weights<'f> {
    file: &'f GgufFile,
    dtype: Dtype,
    /// Where routed experts go; resident when `None`.
    placement: Option<&'f dyn ExpertPlacement>,
    /// `Some` in a preflight: what is wrong so far.
    preflight: Option<RefCell<Vec<TensorProblem>>>,
}

impl<'f> Weights<'f> {
    /// Reads tensors for real; routed experts go where `placement` says.
    pub fn new(
        file: &'f GgufFile,
        dtype: Dtype,
        placement: Option<&'f dyn ExpertPlacement>,
    ) -> Weights<'f> {
        Weights {
            file,
            dtype,
            placement,
            preflight: None,
        }
    }

    /// Looks tensors up without reading them.
    pub fn preflight(file: &'f GgufFile, dtype: Dtype) -> Weights<'f> {
        Weights {
            file,
            dtype,
            placement: None,
            preflight: Some(RefCell::new(Vec::new())),
        }
    }

    /// The store of layer `layer`'s routed experts (`experts` of `[ffn, hidden]` gate and up
    /// matrices, `[hidden, ffn]` down ones): resident stacks, or the placement's store.
    ///
    /// A file that stores gate and up fused (`fused_gate_up`, `[2·ffn, hidden]` per expert:
    /// gate rows, then up rows; llama.cpp's converter with `--fuse-gate-up-exps`) is read
    /// resident, split into the two stacks.
    pub fn expert_store(
        &self,
        layer: usize,
        names: [&str; 3],
        fused_gate_up: &str,
        experts: i32,
        (ffn, hidden): (i32, i32),
    ) -> Result<Rc<dyn ExpertStore>> {
        let [gate, up, down] = names;
        let e = experts as u64;
        let (f, h) = (ffn as u64, hidden as u64);
        if self.file.has_tensor(fused_gate_up) {
            if self.placement.is_some() {
                return Err(Error::Experts {
                    layer,
                    source: format!(
                        "{fused_gate_up}: expert streaming does not read fused gate-up experts \
                         yet; load this file without streaming"
                    )
                    .into(),
                });
            }
            let both = self.experts(fused_gate_up, experts, 2 * ffn, hidden)?;
            let (ffn_gate_exps, ffn_up_exps) = if self.preflight.is_some() {
                (Self::placeholder(gate), Self::placeholder(up))
            } else {
                both.split_rows(ffn, gate, up)?
            };
            return Ok(Rc::new(ResidentExperts {
                ffn_gate_exps,
                ffn_up_exps,
                ffn_down_exps: self.experts(down, experts, hidden, ffn)?,
            }));
        }
        let found = (
            self.checked(gate, &[h, f, e])?,
            self.checked(up, &[h, f, e])?,
            self.checked(down, &[f, h, e])?,
        );
        match (self.placement, found) {
            (Some(placement), (Some(gate), Some(up), Some(down))) => placement.store(
                self.file,
                ExpertTensors {
                    layer,
                    gate,
                    up,
                    down,
                },
                self.dtype,
            ),
            _ => Ok(Rc::new(ResidentExperts {
                ffn_gate_exps: self.experts(gate, experts, ffn, hidden)?,
                ffn_up_exps: self.experts(up, experts, ffn, hidden)?,
                ffn_down_exps: self.experts(down, experts, hidden, ffn)?,
            })),
        }
    }

    /// The problems a preflight found (none outside a preflight).
    pub fn problems(self) -> Vec<TensorProblem> {
        self.preflight.map(RefCell::into_inner).unwrap_or_default()
    }

    /// The activation dtype dense weights are stored in.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The tensor `name`, which must have exactly `dims` (GGUF order); `None` in a preflight,
    /// after recording what is wrong.
    fn checked(&self, name: &str, dims: &[u64]) -> Result<Option<&gmlx_gguf::TensorInfo>> {
        let problem = match self.file.tensor(name) {
            Ok(info) if info.dims == dims => {
                return Ok(self.preflight.is_none().then_some(info));
            }
            Ok(info) => TensorProblem::Shape {
                name: name.to_owned(),
                found: info.dims.clone(),
                expected: dims.to_vec(),
            },
            Err(_) => TensorProblem::Missing {
                name: name.to_owned(),
            },
        };
        match &self.preflight {
            Some(problems) => {
                problems.borrow_mut().push(problem);
                Ok(None)
            }
            None => Err(Error::Tensors {
                problems: vec![problem],
            }),
        }
    }

    fn placeholder(name: &str) -> QuantWeight {
        QuantWeight::dense(name, Array::from_f32(0.0))
    }

    /// A `[rows, cols]` matrix (GGUF dims `[cols, rows]`).
    pub fn matrix(&self, name: &str, rows: i32, cols: i32) -> Result<QuantWeight> {
        match self.checked(name, &[cols as u64, rows as u64])? {
            Some(info) => Ok(QuantWeight::from_gguf(self.file, info, self.dtype)?),
            None => Ok(Self::placeholder(name)),
        }
    }

    /// A matrix of `groups` row blocks `[rows, cols]` (GGUF dims `[cols, groups · rows]`), as a
    /// stack of `groups` matrices for block-diagonal products.
    pub fn grouped_matrix(
        &self,
        name: &str,
        groups: i32,
        rows: i32,
        cols: i32,
    ) -> Result<QuantWeight> {
        match self.checked(name, &[cols as u64, (groups * rows) as u64])? {
            Some(info) => {
                Ok(QuantWeight::from_gguf(self.file, info, self.dtype)?.into_groups(groups)?)
            }
            None => Ok(Self::placeholder(name)),
        }
    }

    /// The tensor of the given GGUF dims as rows read from the file's memory map when looked
    /// up (embeddings, routing tables); `None` in a preflight.
    pub fn mapped_rows(&self, name: &str, dims: &[u64]) -> Result<Option<gmlx_gguf::MappedRows>> {
        match self.checked(name, dims)? {
            Some(info) => Ok(Some(gmlx_gguf::MappedRows::open(self.file, info)?)),
            None => Ok(None),
        }
    }

    /// A stack of `experts` matrices `[rows, cols]` (GGUF dims `[cols, rows, experts]`).
    pub fn experts(&self, name: &str, experts: i32, rows: i32, cols: i32) -> Result<QuantWeight> {
        match self.checked(name, &[cols as u64, rows as u64, experts as u64])? {
            Some(info) => Ok(QuantWeight::from_gguf(self.file, info, self.dtype)?),
            None => Ok(Self::placeholder(name)),
        }
    }

    /// A dense array of the given GGUF dims (biases, sinks), in the activation dtype, with
    /// the row-major shape (dims reversed).
    pub fn array(&self, name: &str, dims: &[u64]) -> Result<Array> {
        Ok(self.array_f32(name, dims)?.as_dtype(self.dtype)?)
    }

    /// Like [`Weights::array`], kept in float32 whatever the activation dtype (parameters
    /// whose rounding would compound, such as a recurrent layer's decay).
    pub fn array_f32(&self, name: &str, dims: &[u64]) -> Result<Array> {
        if self.checked(name, dims)?.is_none() {
            return Ok(Array::from_f32(0.0));
        }
        let values = self.file.dequantize(name)?;
        let shape: Vec<i32> = dims.iter().rev().map(|&d| d as i32).collect();
        Ok(Array::from_slice(&values, &shape))
    }

    /// The `[channels, kernel]` taps of a depthwise convolution, stored `[kernel, channels]`
    /// or with unit axes (`[kernel, 1, channels]`, `[kernel, 1, channels, 1]`, as Kimi's
    /// converter writes them).
    pub fn conv_taps(&self, name: &str, kernel: i32, channels: i32) -> Result<Array> {
        let (k, c) = (kernel as u64, channels as u64);
        let layouts: [&[u64]; 3] = [&[k, c], &[k, 1, c], &[k, 1, c, 1]];
        let dims = match self.file.tensor(name) {
            Ok(info) => layouts
                .into_iter()
                .find(|l| info.dims == *l)
                .unwrap_or(layouts[0]),
            Err(_) => layouts[0],
        };
        let a = self.array(name, dims)?;
        if dims.len() > 2 && self.preflight.is_none() {
            Ok(a.reshape(&[channels, kernel])?)
        } else {
            Ok(a)
        }
    }

    /// Per-stream gammas `[streams, hidden]` (float32), stored flat (`[streams · hidden]`) or
    /// as `[hidden, streams]`.
    pub fn stream_gammas(&self, name: &str, streams: i32, hidden: i32) -> Result<Array> {
        let (n, h) = (streams as u64, hidden as u64);
        let grid = [h, n];
        let dims: &[u64] = match self.file.tensor(name) {
            Ok(info) if info.dims == grid => &grid,
            _ => &[n * h],
        };
        let a = self.array_f32(name, dims)?;
        if self.preflight.is_none() {
            Ok(a.reshape(&[streams, hidden])?)
        } else {
            Ok(a)
        }
    }

    /// A `[len]` vector that files store either 1-D or as a one-column matrix (`[len, 1]`,
    /// as the converter writes `ffn_gate_inp_shexp`).
    pub fn vector(&self, name: &str, len: i32) -> Result<Array> {
        let column = [len as u64, 1];
        let dims: &[u64] = match self.file.tensor(name) {
            Ok(info) if info.dims == column => &column,
            _ => &column[..1],
        };
        let a = self.array(name, dims)?;
        if dims.len() == 2 && self.preflight.is_none() {
            Ok(a.reshape(&[len])?)
        } else {
            Ok(a)
        }
    }

    /// Whether the file holds tensor `name`.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.file.has_tensor(name)
    }

    /// Like [`Weights::matrix`], `None` when the file has no such tensor.
    pub fn optional_matrix(&self, name: &str, rows: i32, cols: i32) -> Result<Option<QuantWeight>> {
        if self.file.has_tensor(name) {
            self.matrix(name, rows, cols).map(Some)
        } else {
            Ok(None)
        }
    }

    /// An RMSNorm of `len` features.
    pub fn rms_norm(&self, name: &str, len: i32, eps: f32) -> Result<RmsNorm> {
        let Some(info) = self.checked(name, &[len as u64])? else {
            return Ok(RmsNorm {
                weight: Array::from_f32(0.0),
                eps,
            });
        };
        let w = QuantWeight::from_gguf(self.file, info, self.dtype)?;
        let weight = w.as_dense().cloned().ok_or_else(|| Error::Tensors {
            problems: vec![TensorProblem::Shape {
                name: name.to_owned(),
                found: info.dims.clone(),
                expected: vec![len as u64],
            }],
        })?;
        Ok(RmsNorm { weight, eps })
    }
}
