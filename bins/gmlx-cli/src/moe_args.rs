//! `gmlx run`'s flags for MoE models: where routed experts live, and what sees or changes
//! their routing (record, replay, expert mass, the probe).
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use clap::Args;
use gmlx_models::config::FfnSpec;
use gmlx_models::{Model, ModelConfig};
use gmlx_stream::{
    ExpertMass, ExpertProbe, RouteRecorder, RouteReplayer, StreamOptions, StreamedExperts,
};

use crate::Failure;

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
    /// Write each MoE layer's expert choice per position to FILE (JSON) at exit.
    #[arg(long, value_name = "FILE", conflicts_with = "moe_routes_replay")]
    moe_routes_record: Option<PathBuf>,
    /// Use the expert choices FILE recorded (same positions) instead of the router's.
    #[arg(long, value_name = "FILE")]
    moe_routes_replay: Option<PathBuf>,
    /// Keep each token's experts, in descending weight, until their weights reach P of the
    /// total (always the first), rescaled to the original total. P in (0, 1].
    #[arg(long, value_name = "P", value_parser = parse_mass)]
    moe_expert_mass: Option<ExpertMass>,
    /// Count, without changing anything, the experts each token would need and the weight it
    /// would drop at a grid of masses; printed at exit, prefill and decode apart.
    #[arg(long)]
    moe_expert_probe: bool,
}

fn parse_mass(s: &str) -> Result<ExpertMass, String> {
    let p: f32 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    ExpertMass::new(p).map_err(|e| e.to_string())
}

/// The routing hooks installed on a loaded model, for what they say at exit.
pub struct Installed {
    recorder: Option<(Rc<RouteRecorder>, PathBuf)>,
    probe: Option<Rc<ExpertProbe>>,
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

    fn routing_flag(&self) -> Option<&'static str> {
        if self.moe_routes_record.is_some() {
            Some("--moe-routes-record")
        } else if self.moe_routes_replay.is_some() {
            Some("--moe-routes-replay")
        } else if self.moe_expert_mass.is_some() {
            Some("--moe-expert-mass")
        } else if self.moe_expert_probe {
            Some("--moe-expert-probe")
        } else {
            None
        }
    }

    /// Before any weight loads: a routing flag on a model without MoE layers is refused
    /// (named, not ignored), and a replay file must read.
    pub fn check(&self, config: &ModelConfig) -> Result<Option<RouteReplayer>, Failure> {
        if let Some(flag) = self.routing_flag() {
            let moe = config
                .layers
                .iter()
                .any(|l| matches!(l.ffn, FfnSpec::Moe(_)));
            if !moe {
                return Err(anyhow::anyhow!(
                    "{flag}: this {} model has no MoE layers",
                    config.arch
                )
                .into());
            }
        }
        Ok(match &self.moe_routes_replay {
            Some(file) => Some(RouteReplayer::from_file(file).map_err(crate::usage)?),
            None => None,
        })
    }

    /// Installs the hooks on `model`: probe (the router's own choice), replay, mass, record.
    pub fn install(&self, model: &mut Model, replay: Option<RouteReplayer>) -> Installed {
        let probe = self.moe_expert_probe.then(|| Rc::new(ExpertProbe::new()));
        if let Some(p) = &probe {
            model.add_route_hook(p.clone());
        }
        if let Some(r) = replay {
            model.add_route_hook(Rc::new(r));
        }
        if let Some(mass) = self.moe_expert_mass {
            model.add_route_hook(Rc::new(mass));
        }
        let recorder = self.moe_routes_record.as_ref().map(|file| {
            let r = Rc::new(RouteRecorder::new());
            model.add_route_hook(r.clone());
            (r, file.clone())
        });
        Installed { recorder, probe }
    }
}

impl Installed {
    /// Saves the record and prints the probe.
    pub fn finish(&self) -> Result<(), Failure> {
        if let Some((recorder, file)) = &self.recorder {
            recorder.save(Path::new(file))?;
            eprintln!(
                "gmlx: {} routes recorded to {}",
                recorder.routes().len(),
                file.display()
            );
        }
        if let Some(probe) = &self.probe {
            eprint!("gmlx: {probe}");
        }
        Ok(())
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
