//! Generates a few tokens with the default model (or the GGUF file `GMLX_MODEL` names)
//! through gmlx-models' public API.
use gmlx_models::{default_model, load, GenerateOptions, Generation, LoadOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = match std::env::var_os("GMLX_MODEL") {
        Some(p) => p.into(),
        None => default_model::fetch()?,
    };
    let loaded = load(&path, &LoadOptions::default())?;
    let prompt = loaded
        .tokenizer
        .encode("The capital of France is", true, false)?;
    let options = GenerateOptions {
        max_tokens: 8,
        ..Default::default()
    };
    let mut generation = Generation::new(&loaded.model, &loaded.tokenizer, &prompt, options)?;
    let mut text = String::new();
    for piece in generation.by_ref() {
        text.push_str(&piece?.text);
    }
    println!("{text}");
    eprintln!(
        "{} on {:?}: {} tokens, finish: {}",
        path.display(),
        loaded.device,
        generation.stats().generated_tokens,
        generation.finish_reason().map_or("-", |f| f.as_str())
    );
    Ok(())
}
