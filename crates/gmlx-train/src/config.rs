//! Training settings, validated once before anything loads.
use crate::error::{Error, Result};

/// The projections LoRA can target, by GGUF slot name, with the Hugging Face names accepted
/// as aliases.
pub const KEYS: &[(&str, &str)] = &[
    ("attn_q", "q_proj"),
    ("attn_k", "k_proj"),
    ("attn_v", "v_proj"),
    ("attn_output", "o_proj"),
    ("ffn_gate", "gate_proj"),
    ("ffn_up", "up_proj"),
    ("ffn_down", "down_proj"),
    // gated DeltaNet: the fused q-k-v input, the output gate's input, the output (`attn_qkv`
    // is also attention's fused q-k-v in files converted with `--fuse-qkv`)
    ("attn_qkv", "in_proj_qkv"),
    ("attn_gate", "in_proj_z"),
    ("ssm_out", "out_proj"),
    // the shared expert of Qwen3.5 / Qwen3-Next MoE
    ("ffn_gate_shexp", "shared_expert.gate_proj"),
    ("ffn_up_shexp", "shared_expert.up_proj"),
    ("ffn_down_shexp", "shared_expert.down_proj"),
    // multi-head latent attention (HY4): the low-rank q, the compressed kv with its rope part
    // (`attn_gate` is the output gate, `attn_output` the output); the lightning indexer's
    // projections are left out: its top-k choice passes no gradient to them
    ("attn_q_a", "q_a_proj"),
    ("attn_q_b", "q_b_proj"),
    ("attn_kv_a_mqa", "kv_a_proj_with_mqa"),
    // DeepSeek-V4: the key row (also the value), the grouped output's second half, the
    // pooling compressor (the indexer's compressor is left out, as the indexer is)
    ("attn_kv", "wkv"),
    ("attn_output_b", "wo_b"),
    ("attn_compressor_kv", "compressor.wkv"),
    ("attn_compressor_gate", "compressor.wgate"),
];

/// Where and how big the adapters are.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraConfig {
    /// Rank of every adapter (8).
    pub rank: usize,
    /// LoRA alpha; the scale is `alpha / rank` (16, so scale 2 at rank 8).
    pub alpha: f32,
    /// Dropout on each adapter's input, in `[0, 1)` (0).
    pub dropout: f32,
    /// GGUF slot names of the adapted projections (every one of [`KEYS`] by default; a
    /// model adapts those it has).
    pub keys: Vec<String>,
    /// Adapt only the top N blocks; `None` adapts every block.
    pub num_layers: Option<usize>,
}

impl Default for LoraConfig {
    fn default() -> Self {
        LoraConfig {
            rank: 8,
            alpha: 16.0,
            dropout: 0.0,
            keys: KEYS.iter().map(|(k, _)| (*k).to_owned()).collect(),
            num_layers: None,
        }
    }
}

/// Everything a run needs besides the model and the data.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainConfig {
    pub lora: LoraConfig,
    /// Optimizer steps (100).
    pub iters: usize,
    /// Rows per micro-batch (4).
    pub batch_size: usize,
    /// Rows are cut to this many tokens (2048).
    pub max_seq_length: usize,
    /// Peak learning rate (1e-4), reached after `warmup` steps, then cosine decay to 0.
    pub learning_rate: f32,
    /// Linear warmup steps (`None`: a tenth of `iters`).
    pub warmup: Option<usize>,
    /// AdamW's decoupled weight decay (0.01).
    pub weight_decay: f32,
    /// Micro-batches whose gradients are averaged per step (1).
    pub grad_accum: usize,
    /// Seeds the adapter init, the row order and dropout (0).
    pub seed: u64,
    /// Validate every N steps, and at the end (50; 0: only at the end).
    pub val_every: usize,
    /// Batches of `valid.jsonl` per validation (8).
    pub val_batches: usize,
    /// Print a progress line every N steps (10).
    pub report_every: usize,
    /// Train only on completions and assistant turns.
    pub mask_prompt: bool,
    /// Recompute each block's activations in the backward pass.
    pub grad_checkpoint: bool,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            lora: LoraConfig::default(),
            iters: 100,
            batch_size: 4,
            max_seq_length: 2048,
            learning_rate: 1e-4,
            warmup: None,
            weight_decay: 0.01,
            grad_accum: 1,
            seed: 0,
            val_every: 50,
            val_batches: 8,
            report_every: 10,
            mask_prompt: false,
            grad_checkpoint: false,
        }
    }
}

fn bad(name: &'static str, reason: impl Into<String>) -> Error {
    Error::BadConfig {
        name,
        reason: reason.into(),
    }
}

/// The GGUF slot name for a `--keys` entry (a slot name or its Hugging Face alias).
pub fn canonical_key(key: &str) -> Result<&'static str> {
    KEYS.iter()
        .find(|(slot, alias)| *slot == key || *alias == key)
        .map(|(slot, _)| *slot)
        .ok_or_else(|| Error::UnknownKey {
            key: key.to_owned(),
            known: KEYS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", "),
        })
}

impl TrainConfig {
    /// Checks every setting; keys become GGUF slot names.
    pub fn validate(mut self) -> Result<TrainConfig> {
        let l = &mut self.lora;
        if l.rank == 0 {
            return Err(bad("rank", "must be at least 1"));
        }
        if !l.alpha.is_finite() || l.alpha <= 0.0 {
            return Err(bad("alpha", format!("must be positive, found {}", l.alpha)));
        }
        if !(0.0..1.0).contains(&l.dropout) {
            return Err(bad(
                "dropout",
                format!("must be in [0, 1), found {}", l.dropout),
            ));
        }
        if l.keys.is_empty() {
            return Err(bad("keys", "name at least one projection"));
        }
        let mut keys = Vec::new();
        for k in &l.keys {
            let k = canonical_key(k.trim())?.to_owned();
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        l.keys = keys;
        if l.num_layers == Some(0) {
            return Err(bad("num-layers", "must be at least 1 (or all)"));
        }
        for (name, v) in [
            ("iters", self.iters),
            ("batch-size", self.batch_size),
            ("grad-accum", self.grad_accum),
            ("report-every", self.report_every),
        ] {
            if v == 0 {
                return Err(bad(name, "must be at least 1"));
            }
        }
        if self.max_seq_length < 2 {
            return Err(bad("max-seq-length", "must be at least 2"));
        }
        if !self.learning_rate.is_finite() || self.learning_rate <= 0.0 {
            return Err(bad(
                "learning-rate",
                format!("must be positive, found {}", self.learning_rate),
            ));
        }
        if !self.weight_decay.is_finite() || self.weight_decay < 0.0 {
            return Err(bad("weight-decay", "must be 0 or more"));
        }
        if self.warmup.is_some_and(|w| w > self.iters) {
            return Err(bad("warmup", "cannot exceed --iters"));
        }
        Ok(self)
    }

    /// Warmup steps in effect.
    pub fn warmup_steps(&self) -> usize {
        self.warmup.unwrap_or(self.iters / 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_out_of_range_settings() {
        let with = |f: fn(&mut TrainConfig)| {
            let mut c = TrainConfig::default();
            f(&mut c);
            c.validate()
        };
        assert!(with(|c| c.lora.rank = 0).is_err());
        assert!(with(|c| c.lora.dropout = 1.0).is_err());
        assert!(with(|c| c.lora.dropout = -0.1).is_err());
        assert!(with(|c| c.lora.keys = vec!["wq".into()]).is_err());
        let ok = with(|c| c.lora.keys = vec!["q_proj".into(), "attn_q".into()]).expect("ok");
        assert_eq!(ok.lora.keys, vec!["attn_q"]);
        assert!(with(|c| c.lora.dropout = 0.5).is_ok());
    }
}
