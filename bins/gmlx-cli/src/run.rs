//! `gmlx run`: flags → load → generate or bench → stdout.
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use gmlx_models::{chat, GenerateOptions, Generation, LoadOptions, SamplingParams};

use crate::adapter_args::AdapterArgs;
use crate::model_args::{model_path, open_model, DeviceArg, DtypeArg};
use crate::moe_args::{self, MoeArgs};
use crate::{usage, Failure};

#[derive(Args)]
pub struct RunArgs {
    /// The GGUF model; without it, the default model (SmolLM2-135M-Instruct Q4_1) is fetched
    /// once into the cache.
    model: Option<PathBuf>,
    /// The prompt: a user message rendered with the model's chat template (see --raw).
    #[arg(short, long)]
    prompt: Option<String>,
    /// A system message for the chat template.
    #[arg(long)]
    system: Option<String>,
    /// Feed the prompt as raw text, without the chat template.
    #[arg(long)]
    raw: bool,
    /// Most tokens to generate.
    #[arg(short = 'n', long, default_value_t = 256)]
    max_tokens: usize,
    /// 0 is greedy.
    #[arg(long, visible_alias = "temp", default_value_t = 0.0)]
    temperature: f32,
    /// Keep the k most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    /// Repetition penalty over the last --penalty-last-n tokens (1: off).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    presence_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    frequency_penalty: f32,
    #[arg(long, default_value_t = 64)]
    penalty_last_n: usize,
    /// TOKEN_ID=BIAS, repeatable.
    #[arg(long, value_parser = parse_bias)]
    logit_bias: Vec<(u32, f32)>,
    /// Stop when this text appears (repeatable); it is not printed.
    #[arg(long)]
    stop: Vec<String>,
    /// Makes sampled output repeat exactly.
    #[arg(long)]
    seed: Option<u64>,
    /// Where MLX runs.
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    device: DeviceArg,
    /// The activation dtype.
    #[arg(long, value_enum, default_value_t = DtypeArg::Float32)]
    dtype: DtypeArg,
    /// Print the load plan (architecture, per-layer plan, codecs) without loading weights.
    #[arg(long)]
    report_only: bool,
    /// Benchmark prefill and decode at these prompt lengths, e.g. 128,512.
    #[arg(long, value_delimiter = ',')]
    bench: Vec<usize>,
    /// Tokens decoded per --bench row.
    #[arg(long, default_value_t = 128)]
    bench_decode: usize,
    /// Keep generating past end-of-generation tokens.
    #[arg(long)]
    ignore_eos: bool,
    #[command(flatten)]
    adapter: AdapterArgs,
    #[command(flatten)]
    moe: MoeArgs,
}

fn parse_bias(s: &str) -> Result<(u32, f32), String> {
    let (id, bias) = s.split_once('=').ok_or("expected TOKEN_ID=BIAS")?;
    Ok((
        id.trim()
            .parse()
            .map_err(|_| format!("bad token id {id:?}"))?,
        bias.trim()
            .parse()
            .map_err(|_| format!("bad bias {bias:?}"))?,
    ))
}

pub fn run(args: RunArgs) -> Result<(), Failure> {
    // Everything a user typed is checked before any model is fetched or loaded.
    let (device, dtype) = (args.device.into(), args.dtype.into());
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repetition_penalty: args.repeat_penalty,
        presence_penalty: args.presence_penalty,
        frequency_penalty: args.frequency_penalty,
        penalty_last_n: args.penalty_last_n,
        logit_bias: args.logit_bias.iter().copied().collect(),
        seed: args.seed,
    };
    sampling.validate(usize::MAX).map_err(usage)?;
    if args.prompt.is_none() && args.bench.is_empty() && !args.report_only {
        return Err(usage(anyhow::anyhow!(
            "nothing to do: give --prompt TEXT, --bench LENGTHS or --report-only"
        )));
    }
    let path = model_path(args.model.as_deref())?;
    let opened = open_model(&path)?;
    // An adapter is checked against the base's header (architecture, targets, shapes) before
    // any weight loads.
    let adapter = args.adapter.check(&opened)?;
    if args.report_only {
        print!("{}", opened.plan());
        return Ok(());
    }
    let replay = args.moe.check(opened.config())?;

    eprintln!(
        "gmlx: loading {} ({})",
        path.display(),
        opened.config().arch
    );
    let streamed = args.moe.placement();
    let mut loaded = opened.load(&LoadOptions {
        device,
        dtype,
        experts: streamed
            .clone()
            .map(|s| s as Arc<dyn gmlx_models::blocks::moe::ExpertPlacement>),
    })?;
    if let Some(adapter) = &adapter {
        adapter.apply(&mut loaded)?;
    }
    let hooks = args.moe.install(&mut loaded.model, replay);
    eprintln!(
        "gmlx: loaded in {:.2} s on {:?}: {:.1} MiB of weights in memory",
        loaded.load_time.as_secs_f64(),
        loaded.device,
        loaded.weight_bytes as f64 / (1024.0 * 1024.0)
    );

    if !args.bench.is_empty() {
        let rows = gmlx_models::bench::run(
            &loaded.model,
            &loaded.tokenizer,
            &args.bench,
            args.bench_decode,
            512,
        )?;
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "{:>8} {:>14} {:>8} {:>14}",
            "prompt", "prefill tok/s", "decode", "decode tok/s"
        )?;
        for r in &rows {
            writeln!(
                out,
                "{:>8} {:>14.1} {:>8} {:>14.1}",
                r.prompt_tokens, r.prefill_tok_s, r.decode_tokens, r.decode_tok_s
            )?;
        }
        for r in rows.iter().filter(|r| r.ahead.steps > 0) {
            let per_step = |d: std::time::Duration| d.as_secs_f64() * 1e6 / r.ahead.steps as f64;
            eprintln!(
                "gmlx: prompt {}: each decode step took the host {:.0} us to build, {:.0} us to \
                 submit, and {:.0} us waiting for the token before it",
                r.prompt_tokens,
                per_step(r.ahead.build),
                per_step(r.ahead.submit),
                per_step(r.ahead.wait)
            );
        }
        if let Some(line) = moe_args::report(streamed.as_ref()) {
            eprintln!("{line}");
        }
        return hooks.finish();
    }

    let text = args.prompt.unwrap_or_default();
    let prompt = if args.raw {
        chat::raw_prompt(&loaded.tokenizer, &text)?
    } else {
        chat::user_prompt(&loaded.tokenizer, args.system.as_deref(), &text)?
    };
    let options = GenerateOptions {
        max_tokens: args.max_tokens,
        sampling,
        stop: args.stop,
        ignore_eos: args.ignore_eos,
        ..Default::default()
    };
    let mut generation = Generation::new(&loaded.model, &loaded.tokenizer, &prompt, options)?;
    let mut out = std::io::stdout().lock();
    for piece in generation.by_ref() {
        out.write_all(piece?.text.as_bytes())?;
        out.flush()?;
    }
    writeln!(out)?;
    let s = generation.stats();
    eprintln!(
        "gmlx: prompt {} tokens ({:.1} tok/s), generated {} tokens ({:.1} tok/s), finish: {}",
        s.prompt_tokens,
        s.prompt_tokens as f64 / s.prefill.as_secs_f64().max(1e-9),
        s.generated_tokens,
        s.generated_tokens as f64 / s.decode.as_secs_f64().max(1e-9),
        generation
            .finish_reason()
            .map_or("error", gmlx_models::FinishReason::as_str)
    );
    if let Some(line) = moe_args::report(streamed.as_ref()) {
        eprintln!("{line}");
    }
    hooks.finish()
}
