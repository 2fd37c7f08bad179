//! `gmlx`: parses arguments, calls one library function, maps the outcome to an exit code.
//! Exit codes: 0 success; 1 a refusal or failure after the arguments were accepted;
//! 2 a usage error (clap's own code).
use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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

#[derive(Subcommand)]
enum Command {
    /// Report the MLX runtime: version, backend, devices, BLAS, precision and memory.
    Env {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    gmlx_mlx::init();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Env { json } => env(json),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gmlx: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn env(json: bool) -> anyhow::Result<()> {
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
