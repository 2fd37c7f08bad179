//! What the engine tests and the `serve` bench share: an engine on the default model and a
//! request that never ends early.
use std::collections::BTreeMap;
use std::sync::Arc;

use gmlx_models::SamplingParams;
use gmlx_serve::engine::ValidRequest;
use gmlx_serve::{Engine, EngineOptions, ReadAhead};
use gmlx_tokenizer::Tokenizer;

/// An engine on the default model, `width` rows wide (and as many waiting).
pub fn engine(width: usize, read_ahead: ReadAhead) -> (Engine, Arc<Tokenizer>) {
    let path = gmlx_models::default_model::fetch().expect("the default model");
    Engine::start(
        &gmlx_serve::ServeConfig::single(&path).models[0],
        EngineOptions {
            batch_width: width,
            queue_cap: width,
            read_ahead,
        },
    )
    .expect("start the engine")
}

/// A request for `max_tokens` after `text` with `sampling`, its end-of-generation tokens biased
/// away so that only its budget (or a stop string) ends it.
pub fn request(
    tokenizer: &Tokenizer,
    id: &str,
    text: &str,
    max_tokens: usize,
    sampling: SamplingParams,
) -> ValidRequest {
    let never_end: BTreeMap<u32, f32> =
        tokenizer.eog_ids().iter().map(|&id| (id, -100.0)).collect();
    ValidRequest {
        id: id.to_owned(),
        prompt: tokenizer.encode(text, true, false).expect("encode"),
        max_tokens,
        sampling: SamplingParams {
            logit_bias: never_end,
            ..sampling
        },
        stop: Vec::new(),
        logprobs: None,
        ignore_eos: false,
        constraint: None,
        n: 1,
        span: tracing::Span::none(),
    }
}
