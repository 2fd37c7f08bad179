//! `gmlx run`'s flags for MoE models: where routed experts live.
use std::sync::Arc;

use clap::Args;
use gmlx_stream::{StreamOptions, StreamedExperts};

#[derive(Args)]
pub struct MoeArgs {
    /// Keep every-token weights resident and read routed experts from the file when the
    /// router picks them, into a bounded arena (models larger than memory).
    #[arg(long)]
    stream_experts: bool,
    /// MiB of arena slots over all MoE layers, with --stream-experts.
    #[arg(long, value_name = "MIB", requires = "stream_experts", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..))]
    expert_arena_mb: u64,
}

impl MoeArgs {
    /// The placement `--stream-experts` asks for.
    pub fn placement(&self) -> Option<Arc<StreamedExperts>> {
        self.stream_experts.then(|| {
            Arc::new(StreamedExperts::new(StreamOptions {
                arena_bytes: self.expert_arena_mb << 20,
                ..StreamOptions::default()
            }))
        })
    }
}

/// What streaming did, for stderr at exit.
pub fn report(placement: Option<&Arc<StreamedExperts>>) -> Option<String> {
    let placement = placement?;
    Some(match placement.report() {
        Some(r) => format!("gmlx: {r}"),
        None => "gmlx: --stream-experts: this model has no routed experts; all of it is resident"
            .to_owned(),
    })
}
