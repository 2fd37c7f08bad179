//! `gmlx train`: flags → validated config, data and output checked → load → train → adapter.
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Args;
use gmlx_models::LoadOptions;
use gmlx_train::{data, LoraConfig, OutputPlan, TrainConfig};

use crate::model_args::{model_path, open_model, DeviceArg};
use crate::{usage, Failure};

#[derive(Args)]
pub struct TrainArgs {
    /// The GGUF base model, kept quantized; without it, the default model.
    model: Option<PathBuf>,
    /// Folder with train.jsonl (and optionally valid.jsonl): rows of {"text"}, {"messages"}
    /// or {"prompt","completion"}.
    #[arg(long, value_name = "DIR")]
    data: PathBuf,
    /// Where to write the adapter (llama.cpp's LoRA GGUF). An existing folder, or a path
    /// ending in `/`, gets adapter.gguf inside it.
    #[arg(long, value_name = "PATH")]
    adapter_out: PathBuf,
    /// Train only on completions and assistant turns.
    #[arg(long)]
    mask_prompt: bool,
    #[command(flatten)]
    pub lora: LoraArgs,
    /// Where MLX runs.
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    device: DeviceArg,
}

/// What training does, shared by `gmlx train` and `gmlx distill`.
#[derive(Args)]
pub struct LoraArgs {
    /// LoRA rank.
    #[arg(long, default_value_t = 8, allow_negative_numbers = true)]
    rank: i64,
    /// LoRA alpha; the adapter's scale is alpha / rank [default: 2 × rank].
    #[arg(long, conflicts_with = "scale")]
    alpha: Option<f32>,
    /// The adapter's scale (alpha = scale × rank) [default: 2].
    #[arg(long)]
    scale: Option<f32>,
    /// Dropout on each adapter's input, in [0, 1).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    dropout: f32,
    /// Projections to adapt, comma-separated: attn_q, attn_k, attn_v, attn_output,
    /// ffn_gate, ffn_up, ffn_down (or q_proj, k_proj, ...), attn_qkv, attn_gate, ssm_out
    /// (gated DeltaNet), ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp (shared expert),
    /// attn_q_a, attn_q_b, attn_kv_a_mqa (latent attention), attn_kv, attn_output_b,
    /// attn_compressor_kv, attn_compressor_gate (DeepSeek-V4) [default: all; a model adapts
    /// those it has].
    #[arg(long, value_delimiter = ',')]
    keys: Vec<String>,
    /// Adapt the top N blocks, or `all`.
    #[arg(long, default_value = "all")]
    num_layers: String,
    /// Optimizer steps.
    #[arg(long, default_value_t = 100)]
    iters: usize,
    /// Rows per micro-batch.
    #[arg(long, default_value_t = 4)]
    batch_size: usize,
    /// Rows are cut to this many tokens.
    #[arg(long, default_value_t = 2048)]
    max_seq_length: usize,
    /// Peak learning rate (linear warmup, then cosine decay to 0).
    #[arg(long, default_value_t = 1e-4)]
    learning_rate: f32,
    /// Warmup steps [default: iters / 10].
    #[arg(long)]
    warmup: Option<usize>,
    /// AdamW weight decay.
    #[arg(long, default_value_t = 0.01)]
    weight_decay: f32,
    /// Micro-batches per optimizer step (gradients averaged).
    #[arg(long, default_value_t = 1)]
    grad_accum: usize,
    /// Seed of the adapter init, row order and dropout.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Validate every N steps (0: only at the end).
    #[arg(long, default_value_t = 50)]
    val_every: usize,
    /// Batches of valid.jsonl per validation.
    #[arg(long, default_value_t = 8)]
    val_batches: usize,
    /// Print a progress line every N steps.
    #[arg(long, default_value_t = 10)]
    report_every: usize,
    /// Recompute each block's activations in the backward pass (less memory, more compute).
    #[arg(long)]
    grad_checkpoint: bool,
}

pub(crate) static STOP: AtomicBool = AtomicBool::new(false);

pub(crate) extern "C" fn on_interrupt(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
    // A second Ctrl-C ends the process at once.
    // SAFETY: signal() is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
    }
}

/// The validated training config of the flags (`mask_prompt`: only answers are targets).
pub(crate) fn config(args: &LoraArgs, mask_prompt: bool) -> Result<TrainConfig, Failure> {
    let rank = usize::try_from(args.rank)
        .ok()
        .filter(|r| *r > 0)
        .ok_or_else(|| {
            usage(anyhow::anyhow!(
                "--rank: must be at least 1, found {}",
                args.rank
            ))
        })?;
    let alpha = match (args.alpha, args.scale) {
        (Some(a), _) => a,
        (None, Some(s)) => s * rank as f32,
        (None, None) => 2.0 * rank as f32,
    };
    let num_layers = match args.num_layers.as_str() {
        "all" => None,
        n => Some(n.parse::<usize>().map_err(|_| {
            usage(anyhow::anyhow!(
                "--num-layers: expected a count or `all`, found {n:?}"
            ))
        })?),
    };
    let defaults = LoraConfig::default();
    let lora = LoraConfig {
        rank,
        alpha,
        dropout: args.dropout,
        keys: if args.keys.is_empty() {
            defaults.keys
        } else {
            args.keys.clone()
        },
        num_layers,
    };
    TrainConfig {
        lora,
        iters: args.iters,
        batch_size: args.batch_size,
        max_seq_length: args.max_seq_length,
        learning_rate: args.learning_rate,
        warmup: args.warmup,
        weight_decay: args.weight_decay,
        grad_accum: args.grad_accum,
        seed: args.seed,
        val_every: args.val_every,
        val_batches: args.val_batches,
        report_every: args.report_every,
        mask_prompt,
        grad_checkpoint: args.grad_checkpoint,
    }
    .validate()
    .map_err(usage)
}

/// Float32 products stay exact in training unless the user turned TF32 on; a delta-rule scan
/// (gated DeltaNet, KDA) compounds TF32's rounding over every token of a row, so that case gets
/// one notice.
pub(crate) fn tf32_notice(
    precision: gmlx_mlx::precision::Precision,
    config: &gmlx_models::ModelConfig,
) -> Option<String> {
    let recurrent = config.layers.iter().any(|l| {
        matches!(
            l.mixer,
            gmlx_models::config::MixerSpec::GatedDeltaNet(_)
                | gmlx_models::config::MixerSpec::Kda(_)
        )
    });
    (precision.tf32 && recurrent).then(|| {
        format!(
            "gmlx: notice: {} is on, so float32 products on a GPU use TF32 (about 1e-3 relative); \
             the {} model's delta-rule scan compounds that over every token of a row \
             (unset it, or set it to 0, for exact float32)",
            gmlx_mlx::precision::TF32_VAR,
            config.arch
        )
    })
}

pub fn train(args: TrainArgs) -> Result<(), Failure> {
    // Everything the user gave is checked before the base model is fetched or loaded.
    let config = config(&args.lora, args.mask_prompt)?;
    let device = args.device.into();
    let dataset = data::read_dir(&args.data).map_err(usage)?;
    let out = OutputPlan::resolve(&args.adapter_out).map_err(usage)?;
    let path = model_path(args.model.as_deref())?;
    let opened = open_model(&path)?;

    // SAFETY: installs a handler that only stores to an atomic and resets the disposition.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
    eprintln!(
        "gmlx: loading {} ({})",
        path.display(),
        opened.config().arch
    );
    let mut loaded = opened.load(&LoadOptions {
        device,
        ..LoadOptions::default()
    })?;
    if let Some(notice) = tf32_notice(gmlx_mlx::init(), loaded.config()) {
        eprintln!("{notice}");
    }
    eprintln!(
        "gmlx: {:.1} MiB of weights, kept quantized; training {} rows{}",
        loaded.weight_bytes as f64 / (1024.0 * 1024.0),
        dataset.train.len(),
        if dataset.valid.is_empty() {
            String::new()
        } else {
            format!(", validating on {}", dataset.valid.len())
        }
    );
    let trained = gmlx_train::train(
        &mut loaded.model,
        &loaded.tokenizer,
        &dataset,
        &config,
        &mut |p| eprintln!("gmlx: {p}"),
        &STOP,
    );
    write_adapter(trained, &out, &config)
}

/// Writes a finished run's adapter and reports it; an interrupted run exits with 130 and
/// writes nothing.
pub(crate) fn write_adapter(
    trained: gmlx_train::Result<gmlx_train::Trained>,
    out: &OutputPlan,
    config: &TrainConfig,
) -> Result<(), Failure> {
    let trained = trained.map_err(|e| match e {
        gmlx_train::Error::Interrupted { .. } => Failure {
            code: 130,
            error: e.into(),
        },
        e => e.into(),
    })?;
    out.write(&trained.adapter)?;
    eprintln!("gmlx: {}", trained.summary);
    eprintln!(
        "gmlx: wrote {} ({} tensor pairs, rank {}, alpha {})",
        out.file.display(),
        trained.adapter.pairs.len(),
        config.lora.rank,
        config.lora.alpha
    );
    Ok(())
}
