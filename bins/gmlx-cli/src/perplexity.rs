//! `gmlx perplexity`: flags → load → score one window of a text → stdout.
use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use gmlx_models::LoadOptions;

use crate::adapter_args::AdapterArgs;
use crate::model_args::{model_path, open_model, DeviceArg, DtypeArg};
use crate::{usage, Failure};

#[derive(Args)]
pub struct PerplexityArgs {
    /// The GGUF model; without it, the default model.
    model: Option<PathBuf>,
    /// The text to score (UTF-8).
    #[arg(short, long, value_name = "TEXT_FILE")]
    file: PathBuf,
    /// Most tokens scored: the first N tokens of the text form one window (BOS first when
    /// the model's metadata asks for one).
    #[arg(long, default_value_t = 512)]
    ctx: usize,
    /// Print the token ids and each next-token log-probability as JSON.
    #[arg(long)]
    json: bool,
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    device: DeviceArg,
    #[arg(long, value_enum, default_value_t = DtypeArg::Float32)]
    dtype: DtypeArg,
    #[command(flatten)]
    adapter: AdapterArgs,
}

pub fn perplexity(args: PerplexityArgs) -> Result<(), Failure> {
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| usage(anyhow::anyhow!("{}: {e}", args.file.display())))?;
    if args.ctx < 2 {
        return Err(usage(anyhow::anyhow!("--ctx must be at least 2")));
    }
    let path = model_path(args.model.as_deref())?;
    let opened = open_model(&path)?;
    let adapter = args.adapter.check(&opened)?;
    let mut loaded = opened.load(&LoadOptions {
        device: args.device.into(),
        dtype: args.dtype.into(),
        ..LoadOptions::default()
    })?;
    if let Some(adapter) = &adapter {
        adapter.apply(&mut loaded)?;
    }
    let mut tokens = loaded.tokenizer.encode(&text, true, false)?;
    tokens.truncate(args.ctx.min(loaded.config().context_length));
    if tokens.len() < 2 {
        return Err(usage(anyhow::anyhow!(
            "{}: the text encodes to {} token(s); at least 2 are needed",
            args.file.display(),
            tokens.len()
        )));
    }
    let scores = gmlx_models::perplexity::score(&loaded.model, &tokens, 512)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let json = serde_json::json!({
            "model": path.display().to_string(),
            "tokens": scores.tokens,
            "logprobs": scores.logprobs,
            "scored": scores.logprobs.len(),
            "mean_nll": scores.mean_nll(),
            "perplexity": scores.perplexity(),
        });
        serde_json::to_writer_pretty(&mut out, &json)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "perplexity {:.4} over {} tokens (mean negative log-likelihood {:.4})",
            scores.perplexity(),
            scores.logprobs.len(),
            scores.mean_nll()
        )?;
    }
    Ok(())
}
