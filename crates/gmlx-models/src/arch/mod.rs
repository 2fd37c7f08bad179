//! One file per `general.architecture`: its tensor table, its config synthesis, its build.
pub mod deepseek4;
pub mod glm5_next;
pub mod gpt_oss;
pub mod hy_v4;
pub mod kimi_k3;
pub mod llama;
pub mod qwen3;
pub mod qwen35;
pub mod qwen35moe;
pub mod qwen3moe;
pub mod qwen3next;
pub mod qwen4exp;

use gmlx_gguf::names::Kv;
use gmlx_gguf::{GgufFile, Value};

use crate::error::{Error, Result};

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

/// A positive count under `key`, as an `i32` for the shapes it sizes.
fn count(file: &GgufFile, key: Kv) -> Result<i32> {
    let v = file.get_u32(&key)?;
    i32::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| bad(file, key, format!("must be a positive count, found {v}")))
}

/// llama.cpp's `llama_expert_gating_func_type` values (0: unset).
const GATING_NONE: u32 = 0;
const GATING_SOFTMAX: u32 = 1;
const GATING_SIGMOID: u32 = 2;
const GATING_SQRT_SOFTPLUS: u32 = 4;

/// A float per block, given once for all of them or as an array (at least one per block);
/// `None` when the file has no such key.
fn per_layer_f32(file: &GgufFile, key: Kv, n_layers: usize) -> Result<Option<Vec<f32>>> {
    let meta = file.metadata();
    match meta.value(&key)? {
        None => Ok(None),
        Some(Value::Array(_)) => {
            let values = meta.get_f32_array(&key)?;
            if values.len() < n_layers {
                return Err(bad(
                    file,
                    key,
                    format!("{} values for {n_layers} blocks", values.len()),
                ));
            }
            Ok(Some(values[..n_layers].to_vec()))
        }
        Some(_) => Ok(Some(vec![file.get_f32(&key)?; n_layers])),
    }
}
