//! The pre-norm decoder stack most GGUF architectures share: embedding, blocks of attention
//! and MLP with residuals, final norm, output head.
use gmlx_mlx::{Array, Dtype, QuantWeight};

use crate::blocks::attention::Attention;
use crate::blocks::linear::Linear;
use crate::blocks::mlp::SwiGlu;
use crate::blocks::moe::MoeFfn;
use crate::blocks::norm::RmsNorm;
use crate::cache::KvCache;
use crate::error::Result;

/// The feed-forward half of a block.
// One value per layer, built once at load: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Ffn {
    Dense(SwiGlu),
    Moe(Box<MoeFfn>),
}

impl Ffn {
    pub fn forward(&self, x: &Array) -> Result<Array> {
        match self {
            Ffn::Dense(mlp) => mlp.forward(x),
            Ffn::Moe(moe) => moe.forward(x),
        }
    }
}

/// One block: `h = x + attn(norm(x)); out = h + ffn(norm(h))`.
#[derive(Debug, Clone)]
pub struct DecoderLayer {
    pub attn_norm: RmsNorm,
    pub attention: Attention,
    pub ffn_norm: RmsNorm,
    pub ffn: Ffn,
}

impl DecoderLayer {
    /// The layer's linear layers that adapters can target: attention projections, and the
    /// MLP projections of a dense layer (GGUF tensor order).
    pub fn linears(&self) -> Vec<&Linear> {
        let a = &self.attention;
        let mut out = vec![&a.attn_q, &a.attn_k, &a.attn_v, &a.attn_output];
        if let Ffn::Dense(m) = &self.ffn {
            out.extend([&m.ffn_gate, &m.ffn_up, &m.ffn_down]);
        }
        out
    }

    /// Mutable access to the same layers (installing adapters).
    pub fn linears_mut(&mut self) -> Vec<&mut Linear> {
        let a = &mut self.attention;
        let mut out = vec![
            &mut a.attn_q,
            &mut a.attn_k,
            &mut a.attn_v,
            &mut a.attn_output,
        ];
        if let Ffn::Dense(m) = &mut self.ffn {
            out.extend([&mut m.ffn_gate, &mut m.ffn_up, &mut m.ffn_down]);
        }
        out
    }

    pub fn forward(&self, x: &Array, cache: &mut KvCache) -> Result<Array> {
        let h = x.add(&self.attention.forward(&self.attn_norm.forward(x)?, cache)?)?;
        Ok(h.add(&self.ffn.forward(&self.ffn_norm.forward(&h)?)?)?)
    }
}

/// Which positions' logits a forward pass computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// Every position (teacher forcing, parity checks).
    All,
    /// The last position only (prefill and decoding).
    Last,
}

/// Embedding, blocks, final norm and output head.
#[derive(Debug, Clone)]
pub struct Decoder {
    pub token_embd: QuantWeight,
    pub layers: Vec<DecoderLayer>,
    pub output_norm: RmsNorm,
    /// `None` when the output head is tied to the token embedding.
    pub output: Option<QuantWeight>,
    pub dtype: Dtype,
}

impl Decoder {
    /// `tokens [batch, n]` continuing what `caches` (one per layer) hold; returns float32
    /// logits `[batch, n or 1, vocab]`. An inference pass: on the CPU its few-row products
    /// may run on the host kernel, so do not differentiate through it (training has its own
    /// forward).
    pub fn forward(&self, tokens: &Array, caches: &mut [KvCache], logits: Logits) -> Result<Array> {
        let _host = gmlx_mlx::quant::host_products();
        let mut x = self.token_embd.rows(tokens)?.as_dtype(self.dtype)?;
        for (layer, cache) in self.layers.iter().zip(caches.iter_mut()) {
            x = layer.forward(&x, cache)?;
        }
        if logits == Logits::Last {
            let n = x.shape()[1];
            x = gmlx_mlx::slicing::slice(&x, &[0, n - 1, 0], &[x.shape()[0], n, x.shape()[2]])?;
        }
        let x = self.output_norm.forward(&x)?;
        let head = self.output.as_ref().unwrap_or(&self.token_embd);
        Ok(head.matmul(&x)?.as_dtype(Dtype::Float32)?)
    }

    /// Weights that must be evaluated to be resident.
    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = self.token_embd.arrays();
        for l in &self.layers {
            out.push(&l.attn_norm.weight);
            out.push(&l.ffn_norm.weight);
            for norm in [&l.attention.attn_q_norm, &l.attention.attn_k_norm]
                .into_iter()
                .flatten()
            {
                out.push(&norm.weight);
            }
            for w in l.linears() {
                out.extend(w.arrays());
            }
            if let Ffn::Moe(moe) = &l.ffn {
                out.extend(moe.router.ffn_gate_inp.arrays());
                out.extend(moe.router.selection_bias.as_ref());
                out.extend(moe.experts.arrays());
                if let Some(shared) = &moe.shared {
                    for w in [&shared.ffn_gate, &shared.ffn_up, &shared.ffn_down] {
                        out.extend(w.arrays());
                    }
                }
            }
        }
        out.push(&self.output_norm.weight);
        if let Some(o) = &self.output {
            out.extend(o.arrays());
        }
        out
    }
}

impl DecoderLayer {
    /// One token for each of `B` sequences (`x [B, 1, hidden]`, row `b` continuing
    /// `caches[b]`); see [`Attention::forward_rows`].
    pub fn forward_rows(&self, x: &Array, caches: &mut [&mut KvCache]) -> Result<Array> {
        let attn = self
            .attention
            .forward_rows(&self.attn_norm.forward(x)?, caches)?;
        let h = x.add(&attn)?;
        Ok(h.add(&self.ffn.forward(&self.ffn_norm.forward(&h)?)?)?)
    }
}

impl Decoder {
    /// Continuous-batching decode step: `tokens[b]` continues the sequence whose per-layer
    /// caches are `caches[b]`. Every matmul runs once over the `B` rows; only attention is per
    /// row. Returns float32 logits `[B, vocab]`, row `b` equal (to rounding) to decoding that
    /// sequence alone.
    pub fn forward_rows(&self, tokens: &[u32], caches: &mut [&mut [KvCache]]) -> Result<Array> {
        let _host = gmlx_mlx::quant::host_products();
        let batch = tokens.len() as i32;
        let ids = Array::from_slice(tokens, &[batch, 1]);
        let mut x = self.token_embd.rows(&ids)?.as_dtype(self.dtype)?;
        for (l, layer) in self.layers.iter().enumerate() {
            let mut layer_caches: Vec<&mut KvCache> =
                caches.iter_mut().map(|c| &mut c[l]).collect();
            x = layer.forward_rows(&x, &mut layer_caches)?;
        }
        let x = self.output_norm.forward(&x)?;
        let head = self.output.as_ref().unwrap_or(&self.token_embd);
        let logits = head.matmul(&x)?.as_dtype(Dtype::Float32)?;
        let vocab = logits.shape()[2];
        Ok(logits.reshape(&[batch, vocab])?)
    }
}
