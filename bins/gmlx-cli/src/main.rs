//! `gmlx`: parses arguments, calls one library function, maps the outcome to an exit code.
//! Exit codes: 0 success; 1 a refusal or failure after the arguments were accepted;
//! 2 a usage error (clap's own code).
use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod adapter_args;
mod distill;
mod model_args;
mod moe_args;
mod perplexity;
mod run;
mod train;

#[derive(Parser)]
#[command(
    name = "gmlx",
    version,
    about = "Run, serve and fine-tune GGUF models on MLX"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the larger variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Report the MLX runtime: version, backend, devices, BLAS, precision and memory.
    Env {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Generate text from a GGUF model (the default model when none is given).
    Run(run::RunArgs),
    /// Serve models over an OpenAI-compatible HTTP API in the foreground (as gmlx-server).
    Serve(gmlx_serve::args::ServeArgs),
    /// Fine-tune LoRA adapters on a quantized GGUF model; writes llama.cpp's adapter format.
    Train(train::TrainArgs),
    /// Distil a teacher's answers about documents into a student's LoRA adapter, so the
    /// student answers without the documents (across tokenizers too).
    Distill(Box<distill::DistillArgs>),
    /// Teacher-forced log-probability of every token of a text, and its perplexity.
    Perplexity(perplexity::PerplexityArgs),
    /// Summarise a GGUF file: version, architecture, metadata, tensors per codec.
    Inspect {
        /// The GGUF file (any shard of a split model).
        file: std::path::PathBuf,
        /// Also list every tensor: name, codec, shape, bytes.
        #[arg(long)]
        tensors: bool,
        /// Print JSON (the same facts; see docs/cli.md).
        #[arg(long)]
        json: bool,
    },
}

/// A failure with its exit code: 2 for usage and file errors caught before any model loads,
/// 1 for everything after.
struct Failure {
    code: u8,
    error: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure {
            code: 1,
            error: e.into(),
        }
    }
}

fn usage(error: impl Into<anyhow::Error>) -> Failure {
    Failure {
        code: 2,
        error: error.into(),
    }
}

fn main() -> ExitCode {
    gmlx_mlx::init();
    let cli = Cli::parse();
    let format = match &cli.command {
        Command::Serve(args) => args.log_format,
        _ => gmlx_serve::logging::LogFormat::Text,
    };
    gmlx_serve::logging::init("gmlx", format);
    if matches!(
        cli.command,
        Command::Run(_) | Command::Perplexity(_) | Command::Train(_) | Command::Distill(_)
    ) {
        // this thread runs the model (a server's engine threads adopt the pool themselves)
        gmlx_mlx::threads::adopt_current_thread();
    }
    let outcome = match cli.command {
        Command::Env { json } => env(json),
        Command::Inspect {
            file,
            tensors,
            json,
        } => inspect(&file, tensors, json),
        Command::Run(args) => run::run(args),
        Command::Perplexity(args) => perplexity::perplexity(args),
        Command::Serve(args) => serve(args),
        Command::Train(args) => train::train(args),
        Command::Distill(args) => distill::distill(*args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) if is_broken_pipe(&f.error) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("gmlx: {:#}", f.error);
            ExitCode::from(f.code)
        }
    }
}

/// `gmlx serve`: the same flags and library call as `gmlx-server`.
fn serve(args: gmlx_serve::args::ServeArgs) -> Result<(), Failure> {
    let config = gmlx_serve::args::config(args).map_err(usage)?;
    Ok(gmlx_serve::run(config)?)
}

fn inspect(path: &std::path::Path, tensors: bool, json: bool) -> Result<(), Failure> {
    let file = gmlx_gguf::GgufFile::open(path).map_err(usage)?;
    let options = gmlx_gguf::inspect::Options {
        tensors,
        ..Default::default()
    };
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &gmlx_gguf::inspect::json(&file, &options))?;
        writeln!(out)?;
    } else {
        write!(out, "{}", gmlx_gguf::inspect::report(&file, &options))?;
    }
    Ok(())
}

fn env(json: bool) -> Result<(), Failure> {
    let environment = gmlx_mlx::report::Environment::read()?;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &environment)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{environment}")?;
    }
    Ok(())
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}
