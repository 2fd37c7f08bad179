//! One file per `general.architecture`: its tensor table, its config synthesis, its build.
pub mod gpt_oss;
pub mod hy_v4;
pub mod llama;
pub mod qwen3;
pub mod qwen35;
pub mod qwen35moe;
pub mod qwen3moe;
pub mod qwen3next;

use gmlx_gguf::names::Kv;
use gmlx_gguf::GgufFile;

use crate::error::Error;

/// A config key whose value the architecture cannot use, named as the file spells it.
fn bad(file: &GgufFile, key: Kv, reason: String) -> Error {
    Error::BadConfig {
        key: file
            .metadata()
            .resolve(&key)
            .unwrap_or_else(|_| key.template().to_owned()),
        reason,
    }
}
