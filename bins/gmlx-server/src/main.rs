//! `gmlx-server`: args → ServeConfig → `gmlx_serve::run` → exit code.
//! Exit codes: 0 clean shutdown; 1 a failure after the arguments were accepted (a model that
//! does not load, a port in use); 2 a usage or config error.
use std::process::ExitCode;

use clap::Parser;
use gmlx_serve::args;

/// Serve GGUF models over an OpenAI-compatible HTTP API with continuous batching.
#[derive(Parser)]
#[command(name = "gmlx-server", version)]
struct Cli {
    #[command(flatten)]
    args: args::ServeArgs,
}

fn main() -> ExitCode {
    gmlx_mlx::init();
    let args = Cli::parse().args;
    gmlx_serve::logging::init("gmlx-server", args.log_format);
    let config = match args::config(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gmlx-server: {e:#}");
            return ExitCode::from(2);
        }
    };
    match gmlx_serve::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gmlx-server: {e}");
            ExitCode::from(1)
        }
    }
}
