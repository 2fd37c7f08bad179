//! The trainable LoRA parameters: which linear layers they adapt and their arrays.
use gmlx_mlx::mlx_rs::random;
use gmlx_mlx::{Array, Dtype};
use gmlx_models::adapter::{self, Adapter, LoraPair};
use gmlx_models::blocks::linear::Lora;
use gmlx_models::Model;

use crate::config::LoraConfig;
use crate::error::{Error, Result};

/// One adapted linear layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Block index.
    pub layer: usize,
    /// The base weight's GGUF name: how the target is found in the block.
    pub name: String,
    /// Output and input features.
    pub rows: i32,
    pub cols: i32,
}

/// The adapters being trained. `params` holds `a` then `b` for each target, in target order:
/// these are the only arrays that get gradients and optimizer state.
#[derive(Debug, Clone)]
pub struct LoraSet {
    pub targets: Vec<Target>,
    pub params: Vec<Array>,
    pub rank: usize,
    pub alpha: f32,
    /// `alpha / rank`.
    pub scale: f32,
}

/// The projection key of a block weight name: `blk.3.attn_q.weight` is `attn_q`.
pub fn slot_key(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("blk.")?;
    let (_, rest) = rest.split_once('.')?;
    rest.strip_suffix(".weight")
}

impl LoraSet {
    /// Selects the targets (the top `num_layers` blocks, the projections in `keys`) and
    /// initialises `a ~ U(-1/√in, 1/√in)`, `b = 0`, so training starts from the base model.
    pub fn new(model: &Model, config: &LoraConfig, seed: u64) -> Result<LoraSet> {
        let n = model.layers().len();
        let first = n - config.num_layers.unwrap_or(n).min(n);
        let mut targets = Vec::new();
        for (li, layer) in model.layers().iter().enumerate().skip(first) {
            for lin in layer.linears() {
                let Some(key) = slot_key(lin.name()) else {
                    continue;
                };
                if config.keys.iter().any(|k| k == key) {
                    let (rows, cols) = lin.weight.shape();
                    targets.push(Target {
                        layer: li,
                        name: lin.name().to_owned(),
                        rows,
                        cols,
                    });
                }
            }
        }
        if targets.is_empty() {
            return Err(Error::NoTargets {
                keys: config.keys.join(","),
            });
        }
        let rank = config.rank as i32;
        let mut params = Vec::with_capacity(targets.len() * 2);
        for (i, t) in targets.iter().enumerate() {
            let key = random::key(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64)?;
            let bound = 1.0 / (t.cols as f32).sqrt();
            params.push(random::uniform::<f32, f32>(
                -bound,
                bound,
                &[rank, t.cols][..],
                &key,
            )?);
            params.push(gmlx_mlx::ops::zeros_dtype(&[t.rows, rank], Dtype::Float32)?);
        }
        gmlx_mlx::mlx_rs::transforms::eval(&params)?;
        Ok(LoraSet {
            targets,
            params,
            rank: config.rank,
            alpha: config.alpha,
            scale: config.alpha / config.rank as f32,
        })
    }

    /// Number of trainable values.
    pub fn n_params(&self) -> usize {
        self.params.iter().map(Array::size).sum()
    }

    /// For each block, the indices of the targets it carries.
    pub fn by_layer(&self, n_layers: usize) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); n_layers];
        for (i, t) in self.targets.iter().enumerate() {
            out[t.layer].push(i);
        }
        out
    }

    /// The adapters as a file-ready [`Adapter`] for the base architecture `arch`.
    pub fn to_adapter(&self, arch: &str) -> Result<Adapter> {
        let mut pairs = Vec::with_capacity(self.targets.len());
        for (i, t) in self.targets.iter().enumerate() {
            let a = self.params[2 * i].as_dtype(Dtype::Float32)?.contiguous()?;
            let b = self.params[2 * i + 1]
                .as_dtype(Dtype::Float32)?
                .contiguous()?;
            gmlx_mlx::mlx_rs::transforms::eval([&a, &b])?;
            pairs.push(LoraPair {
                target: t.name.clone(),
                rank: self.rank,
                input: t.cols as usize,
                output: t.rows as usize,
                a: a.as_slice::<f32>().to_vec(),
                b: b.as_slice::<f32>().to_vec(),
            });
        }
        pairs.sort_by(|x, y| x.target.cmp(&y.target));
        Ok(Adapter {
            arch: arch.to_owned(),
            alpha: self.alpha,
            pairs,
        })
    }

    /// Installs the current parameters on `model` for inference (no dropout).
    pub fn install(&self, model: &mut Model) {
        adapter::remove(model);
        for (i, t) in self.targets.iter().enumerate() {
            if let Some(linear) = model.layers_mut()[t.layer].linear_mut(&t.name) {
                linear.lora = Some(Lora::new(
                    self.params[2 * i].clone(),
                    self.params[2 * i + 1].clone(),
                    self.scale,
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_keys_come_from_block_weight_names() {
        assert_eq!(slot_key("blk.12.attn_q.weight"), Some("attn_q"));
        assert_eq!(slot_key("blk.0.ffn_down.weight"), Some("ffn_down"));
        assert_eq!(slot_key("output.weight"), None);
    }
}
