//! `general.architecture` → architecture: one row per supported value.
use gmlx_gguf::GgufFile;
use gmlx_mlx::Dtype;

use crate::arch;
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::model::Model;

/// One supported architecture.
pub struct ArchSpec {
    /// The `general.architecture` value.
    pub name: &'static str,
    pub synth: fn(&GgufFile) -> Result<ModelConfig>,
    pub build: fn(&GgufFile, Dtype) -> Result<Model>,
}

pub static ARCHES: &[ArchSpec] = &[
    ArchSpec {
        name: "llama",
        synth: arch::llama::synth,
        build: arch::llama::build,
    },
    ArchSpec {
        name: "qwen3",
        synth: arch::qwen3::synth,
        build: arch::qwen3::build,
    },
    ArchSpec {
        name: "gpt-oss",
        synth: arch::gpt_oss::synth,
        build: arch::gpt_oss::build,
    },
    ArchSpec {
        name: "qwen3moe",
        synth: arch::qwen3moe::synth,
        build: arch::qwen3moe::build,
    },
];

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
