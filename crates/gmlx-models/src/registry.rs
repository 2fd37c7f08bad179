//! `general.architecture` → architecture: one row per supported value.
use crate::load::LoadOptions;
use gmlx_gguf::GgufFile;

use crate::arch;
use crate::build;
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::model::Model;

/// One supported architecture.
pub struct ArchSpec {
    /// The `general.architecture` value.
    pub name: &'static str,
    /// Reads the metadata into a validated config with its per-layer plan.
    pub synth: fn(&GgufFile) -> Result<ModelConfig>,
    /// Assembles the model from the file and its config.
    pub build: fn(&GgufFile, &ModelConfig, &LoadOptions) -> Result<Model>,
}

pub static ARCHES: &[ArchSpec] = &[
    ArchSpec {
        name: "llama",
        synth: arch::llama::synth,
        build: build::model,
    },
    ArchSpec {
        name: "qwen3",
        synth: arch::qwen3::synth,
        build: build::model,
    },
    ArchSpec {
        name: "gpt-oss",
        synth: arch::gpt_oss::synth,
        build: build::model,
    },
    ArchSpec {
        name: "qwen3moe",
        synth: arch::qwen3moe::synth,
        build: build::model,
    },
    ArchSpec {
        name: "qwen35",
        synth: arch::qwen35::synth,
        build: build::model,
    },
    ArchSpec {
        name: "qwen35moe",
        synth: arch::qwen35moe::synth,
        build: build::model,
    },
    ArchSpec {
        name: "qwen3next",
        synth: arch::qwen3next::synth,
        build: build::model,
    },
    ArchSpec {
        name: "qwen4exp",
        synth: arch::qwen4exp::synth,
        build: build::model,
    },
    ArchSpec {
        name: "deepseek4",
        synth: arch::deepseek4::synth,
        build: build::model,
    },
    ArchSpec {
        name: "hy_v4",
        synth: arch::hy_v4::synth,
        build: build::model,
    },
    ArchSpec {
        name: "glm5-next",
        synth: arch::glm5_next::synth,
        build: build::model,
    },
    ArchSpec {
        name: "kimi-k3",
        synth: arch::kimi_k3::synth,
        build: build::model,
    },
];

impl std::fmt::Debug for ArchSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchSpec")
            .field("name", &self.name)
            .finish()
    }
}

/// The row for `name`, or an error listing what is supported.
pub fn lookup(name: &str) -> Result<&'static ArchSpec> {
    ARCHES
        .iter()
        .find(|a| a.name == name)
        .ok_or_else(|| Error::UnsupportedArch {
            arch: name.to_owned(),
            supported: ARCHES.iter().map(|a| a.name).collect::<Vec<_>>().join(", "),
        })
}
